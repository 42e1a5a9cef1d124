"""What KServe v2 / Triton clients ask about the server and its models, as Triton's messages.

Both transports answer from these: gRPC sends the messages, REST sends :func:`to_json` of
them (proto field names, 64-bit integers as JSON numbers, as Triton's REST API does).
The model config carries what perf_analyzer reads: ``max_batch_size`` 0 (the first
dimension of every tensor is the request's own batch, ``-1``, and the server batches
requests itself: dynamic batching for images, continuous batching for texts; perf_analyzer
refuses a per-item shape of ``[]``, which ``max_batch_size`` > 0 with ``TEXT [-1]`` would
need), inputs with ``optional`` (a classifier takes IMAGE or PIXELS), and
``model_transaction_policy.decoupled`` for translation (ModelStreamInfer sends deltas).
The per-request item limit is the config parameter ``max_items_per_request``; a translator's
character limits are ``max_text_chars`` and ``max_request_chars``.
"""

from __future__ import annotations

from importlib import metadata as dist_metadata
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from attnserve.contract.kinds import TRANSLATION
from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
from attnserve.protos.attnserve.triton import model_config_pb2 as mc

from ...service.models import ModelView, Served
from ...shared.calls import ModelStats
from ...shared.config import Settings
from ...shared.errors import InvalidRequest
from .infer import IMAGE, PIXELS, PROBABILITIES, TEXT, TRANSLATION_OUT, VERSION

SERVER_NAME = "attnserve"
# Triton's extension names for what this server implements (model_repository: the index;
# load and unload only with --enable-admin).
EXTENSIONS = ("classification", "model_configuration", "binary_tensor_data", "parameters", "statistics")
EXTENSIONS_ADMIN = ("model_repository",)
PLATFORM, BACKEND = "onnxruntime_onnx", "onnxruntime"
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def server_version() -> str:
    try:
        return dist_metadata.version("attnserve")
    except dist_metadata.PackageNotFoundError:
        return "0"


def server_metadata(settings: Settings, *, shared_memory: bool = False) -> gs.ServerMetadataResponse:
    """``shared_memory``: the door serves Triton's system shared memory (gRPC with --shared-memory system)."""
    extensions = [*EXTENSIONS, *(EXTENSIONS_ADMIN if settings.enable_admin else ())]
    extensions += ["system_shared_memory"] if shared_memory else []
    return gs.ServerMetadataResponse(name=SERVER_NAME, version=server_version(), extensions=extensions)


_Spec = tuple[str, str, list[int]]  # (name, datatype, shape)


def _tensors(
    model: Served,
) -> tuple[list[tuple[str, str, list[int]]], list[tuple[str, str, list[int]]]]:
    """(inputs, outputs) as (name, datatype, shape); -1 is the request's batch of texts or images."""
    if model.kind == TRANSLATION:
        return [(TEXT, "BYTES", [-1])], [(TRANSLATION_OUT, "BYTES", [-1])]
    prep = model.manifest.preprocessing
    pixels = [-1, prep.channels, prep.image_size, prep.image_size]
    labels = len(model.manifest.labels or [])
    return [(IMAGE, "BYTES", [-1]), (PIXELS, "FP32", pixels)], [(PROBABILITIES, "FP32", [-1, labels])]


def model_metadata(model: Served) -> gs.ModelMetadataResponse:
    inputs, outputs = _tensors(model)
    meta = gs.ModelMetadataResponse.TensorMetadata
    return gs.ModelMetadataResponse(
        name=model.name,
        versions=[VERSION],
        platform=PLATFORM,
        inputs=[meta(name=n, datatype=d, shape=s) for n, d, s in inputs],
        outputs=[meta(name=n, datatype=d, shape=s) for n, d, s in outputs],
    )


def _data_type(datatype: str) -> int:
    return mc.DataType.Value("TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}")


def model_config(model: Served, settings: Settings) -> mc.ModelConfig:
    inputs, outputs = _tensors(model)
    m = model.manifest
    config = mc.ModelConfig(
        name=model.name,
        platform=PLATFORM,
        backend=BACKEND,
        max_batch_size=0,  # see the module docstring
        input=[
            mc.ModelInput(name=n, data_type=_data_type(d), dims=s, optional=model.kind != TRANSLATION)
            for n, d, s in inputs
        ],
        output=[mc.ModelOutput(name=n, data_type=_data_type(d), dims=s) for n, d, s in outputs],
        instance_group=[
            mc.ModelInstanceGroup(
                count=1,
                kind=mc.ModelInstanceGroup.KIND_GPU if model.provider == "cuda" else mc.ModelInstanceGroup.KIND_CPU,
            )
        ],
        parameters={
            key: mc.ModelParameter(string_value=str(value))
            for key, value in {
                "kind": model.kind,
                "provider": model.provider,
                "precision": m.precision,
                "attention": m.attention,
                "attnserve_version": m.attnserve_version,
                "max_items_per_request": settings.max_texts_per_request
                if model.kind == TRANSLATION
                else settings.max_images_per_request,
            }.items()
        },
    )
    if model.kind == TRANSLATION:
        config.model_transaction_policy.decoupled = True  # ModelStreamInfer: one response per piece
        for key in ("max_text_chars", "max_request_chars"):  # documents: limits in characters
            config.parameters[key].string_value = str(getattr(settings, key))
    else:
        batching = config.dynamic_batching
        batching.max_queue_delay_microseconds = int(settings.max_queue_delay_ms * 1000)
        batching.default_queue_policy.max_queue_size = settings.max_queue_size
    return config


def _duration(d: Any) -> gs.StatisticDuration:
    return gs.StatisticDuration(count=d.count, ns=d.ns)


def model_statistics(name: str, executions: int, stats: ModelStats | None) -> gs.ModelStatistics:
    """``executions``: :meth:`ModelView.executions` (onnxruntime batches or decoder steps)."""
    stats = stats or ModelStats()
    return gs.ModelStatistics(
        name=name,
        version=VERSION,
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=executions,
        inference_stats=gs.InferStatistics(
            success=_duration(stats.success), fail=_duration(stats.fail), queue=_duration(stats.queue)
        ),
    )


def repository_index(models: ModelView, ready_only: bool) -> gs.RepositoryIndexResponse:
    """An entry for every model of the repository: READY (loaded), LOADING or UNAVAILABLE with the
    reason (failed, unloaded, or lazily served and not loaded now: the residency's state)."""
    rows: dict[str, tuple[str, str]] = {}
    for name, failed in models.failed.items():
        rows[name] = ("UNAVAILABLE", failed.public_reason)
    for name in models.index:
        rows[name] = models.state(name)
    for name in models.models:
        rows[name] = ("READY", "")
    index = gs.RepositoryIndexResponse()
    for name, (where, reason) in sorted(rows.items()):
        if ready_only and where != "READY":
            continue
        index.models.add(name=name, version=VERSION, state=where, reason=reason)
    return index


def check_repository_parameters(parameters: dict[str, Any]) -> None:
    """Load and unload take no overrides: no ``config`` or ``file:`` (models come from the repository
    directory, checked against their model.json); ``unload_dependents`` means nothing without ensembles."""
    unknown = sorted(set(parameters) - {"unload_dependents"})
    if unknown:
        raise InvalidRequest(
            f"unsupported parameter(s) {', '.join(unknown)}: models load from their repository directory as exported"
        )


def to_json(message: Message) -> dict[str, Any]:
    """A message as Triton's REST API writes it: proto field names, every field, 64-bit integers as numbers."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _numbers(message, data)
    return data


def _numbers(message: Message, data: dict[str, Any]) -> None:
    """protobuf's JSON writes 64-bit integers as strings; turn them back into numbers, in place."""
    for fd in message.DESCRIPTOR.fields:
        if fd.name not in data:
            continue
        value = getattr(message, fd.name)
        if fd.type in _INT64:
            data[fd.name] = [int(v) for v in value] if _repeated(fd) else int(value)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                entry_value = fd.message_type.fields_by_name["value"]
                if entry_value.type == FieldDescriptor.TYPE_MESSAGE:
                    for key, item in value.items():
                        _numbers(item, data[fd.name][str(key)])
                elif entry_value.type in _INT64:
                    data[fd.name] = {k: int(v) for k, v in data[fd.name].items()}
            elif _repeated(fd):
                for item, item_data in zip(value, data[fd.name]):
                    _numbers(item, item_data)
            else:
                _numbers(value, data[fd.name])


def _repeated(fd: FieldDescriptor) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)  # protobuf >= 6.30; ``label`` is deprecated there
    return bool(is_repeated) if is_repeated is not None else fd.label == FieldDescriptor.LABEL_REPEATED
