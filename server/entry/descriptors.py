"""The descriptor pool gRPC reflection answers from (grpcurl, grpc_cli, Postman discover the services with it).

The process's default pool holds attnserve.v1, health and reflection as generated, but KServe's
service only under its vendored package, ``attnserve.triton`` (protos/attnserve/triton/
grpc_service.proto explains why), while the server registers it as
``inference.GRPCInferenceService``: a client that asks reflection for that name would find no
descriptor. :func:`reflection_pool` builds a private pool with the files of every served
service, the vendored pair renamed back to Triton's package ``inference`` and file names
(``grpc_service.proto``, ``model_config.proto``), which describes exactly the messages on the
wire (names are not part of the wire format). The pool is private, so the ``inference``
messages that tritonclient registers in the default pool never collide with these.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.descriptor_pool import DescriptorPool

VENDORED_PACKAGE = "attnserve.triton"
TRITON_PACKAGE = "inference"
_VENDORED_DIR = "attnserve/triton/"


def reflection_pool(files: Iterable[FileDescriptor]) -> DescriptorPool:
    """A new pool holding ``files`` and their imports, the vendored Triton files under Triton's names."""
    pool = DescriptorPool()
    added: set[str] = set()

    def add(file: FileDescriptor) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.Add(_as_triton(proto) if proto.package == VENDORED_PACKAGE else proto)
        added.add(file.name)

    for file in files:
        add(file)
    return pool


def _as_triton(proto: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """A vendored file as Triton ships it: package ``inference``, its type references and file names too."""
    proto.name = proto.name.removeprefix(_VENDORED_DIR)
    proto.package = TRITON_PACKAGE
    deps = [d.removeprefix(_VENDORED_DIR) for d in proto.dependency]
    del proto.dependency[:]
    proto.dependency.extend(deps)
    for message in proto.message_type:
        _rename_message(message)
    for field in proto.extension:
        _rename_field(field)
    for service in proto.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type)
            method.output_type = _renamed(method.output_type)
    return proto


def _rename_message(message: descriptor_pb2.DescriptorProto) -> None:
    for field in (*message.field, *message.extension):
        _rename_field(field)
    for nested in message.nested_type:
        _rename_message(nested)


def _rename_field(field: descriptor_pb2.FieldDescriptorProto) -> None:
    if field.HasField("type_name"):  # message and enum fields only: a scalar's stays unset
        field.type_name = _renamed(field.type_name)
    if field.HasField("extendee"):
        field.extendee = _renamed(field.extendee)


def _renamed(type_name: str) -> str:
    """``.attnserve.triton.X`` -> ``.inference.X``; any other name as it is."""
    prefix = f".{VENDORED_PACKAGE}."
    return f".{TRITON_PACKAGE}.{type_name.removeprefix(prefix)}" if type_name.startswith(prefix) else type_name
