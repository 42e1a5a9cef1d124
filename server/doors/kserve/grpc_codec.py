"""Triton's gRPC messages <-> the protocol-neutral requests and responses of ``infer``.

Inputs arrive either all in ``raw_input_contents`` (one entry per input, in order: what
tritonclient and perf_analyzer send) or each in its typed ``contents``; outputs always
leave in ``raw_output_contents`` (tritonclient reads numbers only from there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

from ...shared.errors import InvalidRequest, echo
from .infer import InferRequest, InferResponse, RequestedOutput
from .tensors import BYTES, Tensor, from_raw, from_values, to_raw

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


def _input(t: gs.ModelInferRequest.InferInputTensor, raw: bytes | None) -> Tensor:
    name = t.name or "(unnamed)"
    parameters = parameters_of(t.parameters, f"input {name}")
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


def infer_request(request: gs.ModelInferRequest, lifted: list[memoryview] | None = None) -> InferRequest:
    """``lifted``: the raw inputs read from the received bytes in place of the message's (``grpc_wire``)."""
    raw: list[bytes] | list[memoryview] = lifted or list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise InvalidRequest(
            f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs: send one per input, in order"
        )
    inputs = [_input(t, raw[i] if raw else None) for i, t in enumerate(request.inputs)]
    outputs = [
        RequestedOutput(o.name, parameters_of(o.parameters, f"output {o.name or '(unnamed)'}")) for o in request.outputs
    ]
    return InferRequest(
        request.model_name,
        request.model_version,
        request.id,
        inputs,
        outputs,
        parameters_of(request.parameters, "request"),
    )


def infer_response(response: InferResponse) -> gs.ModelInferResponse:
    reply = gs.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    for key, value in response.parameters.items():
        reply.parameters[key].CopyFrom(_parameter(value))
    for tensor in response.outputs:
        reply.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
        reply.raw_output_contents.append(to_raw(tensor))
    return reply
