"""Triton's gRPC messages <-> the protocol-neutral requests and responses of ``infer``.

Inputs arrive in ``raw_input_contents`` (one entry per input not in shared memory, in order:
what tritonclient and perf_analyzer send), each in its typed ``contents``, or in a registered
shared memory region (``shared_memory``: read in place); outputs leave in
``raw_output_contents`` (tritonclient reads numbers only from there), or are written into the
region a requested output names, their entry left empty (Triton's layout: one entry per output).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

from ...shared.errors import InvalidRequest, echo
from .infer import CLASSIFICATION, InferRequest, InferResponse, RequestedOutput
from .shared_memory import SystemSharedMemory, uses_shared_memory, without_shared_memory
from .tensors import BYTES, Tensor, from_raw, from_values, to_raw

OutputTargets = dict[str, memoryview]  # output name -> the shared memory its bytes go to
_OFF = SystemSharedMemory(enabled=False)  # what a caller without regions gets: shared memory refused

# datatype -> the InferTensorContents field its typed values travel in (FP16 has none: raw only)
CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    BYTES: "bytes_contents",
}


def parameters_of(params: Mapping[str, gs.InferParameter], where: str) -> dict[str, Any]:
    if not params:  # most tensors and requests carry none
        return {}
    out = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which is None:
            raise InvalidRequest(f"{where} parameter {echo(key)} has no value")
        out[key] = getattr(param, which)
    return out


def _parameter(value: Any) -> gs.InferParameter:
    if isinstance(value, bool):
        return gs.InferParameter(bool_param=value)
    if isinstance(value, int):
        return gs.InferParameter(int64_param=value)
    if isinstance(value, float):
        return gs.InferParameter(double_param=value)
    return gs.InferParameter(string_param=str(value))


def _input(
    t: gs.ModelInferRequest.InferInputTensor, parameters: dict[str, Any], raw: bytes | None, regions: SystemSharedMemory
) -> Tensor:
    name = t.name or "(unnamed)"
    if uses_shared_memory(parameters):
        if t.HasField("contents") and t.contents.ByteSize():
            raise InvalidRequest(f"input {name}: set either contents or a shared memory region, not both")
        data = regions.view(f"input {name}", parameters).toreadonly()
        return from_raw(name, t.datatype, list(t.shape), data, without_shared_memory(parameters))
    if raw is not None:
        if t.HasField("contents") and t.contents.ByteSize():
            raise InvalidRequest(f"input {name}: set either contents or raw_input_contents, not both")
        return from_raw(name, t.datatype, list(t.shape), raw, parameters)
    field = CONTENTS.get(t.datatype)
    if field is None:
        raise InvalidRequest(f"input {name}: {t.datatype or 'no datatype'} values must travel in raw_input_contents")
    filled = [f.name for f, _ in t.contents.ListFields() if f.name != field]
    if filled:
        raise InvalidRequest(f"input {name}: {t.datatype} values go in contents.{field}, not {filled[0]}")
    return from_values(name, t.datatype, list(t.shape), list(getattr(t.contents, field)), parameters)


def _output(
    o: gs.ModelInferRequest.InferRequestedOutputTensor, regions: SystemSharedMemory, targets: OutputTargets
) -> RequestedOutput:
    where = f"output {o.name or '(unnamed)'}"
    parameters = parameters_of(o.parameters, where)
    if not uses_shared_memory(parameters):
        return RequestedOutput(o.name, parameters)
    if CLASSIFICATION in parameters:
        raise InvalidRequest(f"{where}: set either {CLASSIFICATION} or a shared memory region, not both")
    targets[o.name] = regions.view(where, parameters)
    return RequestedOutput(o.name, without_shared_memory(parameters))


def infer_request(
    request: gs.ModelInferRequest, lifted: list[memoryview] | None = None, regions: SystemSharedMemory = _OFF
) -> tuple[InferRequest, OutputTargets]:
    """The request, and where its outputs in shared memory go. ``lifted``: the raw inputs read
    from the received bytes in place of the message's (``grpc_wire``); ``regions``: the
    server's registered shared memory."""
    raw: list[bytes] | list[memoryview] = lifted or list(request.raw_input_contents)
    parameters = [parameters_of(t.parameters, f"input {t.name or '(unnamed)'}") for t in request.inputs]
    in_shm = [uses_shared_memory(p) for p in parameters]
    if raw and len(raw) != in_shm.count(False):
        raise InvalidRequest(
            f"raw_input_contents has {len(raw)} entries for {in_shm.count(False)} inputs not in shared memory: "
            "send one per input, in order"
        )
    entries = iter(raw)
    inputs = [
        _input(t, p, None if shm or not raw else next(entries), regions)
        for t, p, shm in zip(request.inputs, parameters, in_shm)
    ]
    targets: OutputTargets = {}
    outputs = [_output(o, regions, targets) for o in request.outputs]
    wanted = InferRequest(
        request.model_name,
        request.model_version,
        request.id,
        inputs,
        outputs,
        parameters_of(request.parameters, "request"),
    )
    return wanted, targets


def _write(tensor: Tensor, target: memoryview) -> None:
    data = to_raw(tensor)
    if len(data) > len(target):
        raise InvalidRequest(
            f"output {tensor.name}: its {len(data)} bytes do not fit the {len(target)} bytes of "
            "shared_memory_byte_size: register and name a larger region"
        )
    target[: len(data)] = data


def infer_response(response: InferResponse, targets: OutputTargets | None = None) -> gs.ModelInferResponse:
    """The reply; an output with a target in ``targets`` is written there, its raw entry empty."""
    reply = gs.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    for key, value in response.parameters.items():
        reply.parameters[key].CopyFrom(_parameter(value))
    for tensor in response.outputs:
        reply.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
        target = targets.get(tensor.name) if targets else None
        if target is None:
            reply.raw_output_contents.append(to_raw(tensor))
        else:
            _write(tensor, target)
            reply.raw_output_contents.append(b"")
    return reply
