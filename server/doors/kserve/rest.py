"""KServe v2 REST bodies <-> the protocol-neutral requests and responses of ``infer``.

A request body is a JSON object, optionally followed by binary tensor data (Triton's
binary-data extension): the header ``Inference-Header-Content-Length`` says how many
leading bytes are JSON; each input with the parameter ``binary_data_size`` takes that
many of the following bytes, in input order (numbers little-endian, BYTES elements
length-prefixed, as in ``tensors``). JSON carries an ``IMAGE`` element as its base64 text (a
``data:image/...;base64,`` URL too), as KServe's examples and tritonclient (which sends only UTF-8
text in JSON) do; binary data carries its bytes. A reply carries an output as binary data when the
request asks for it (output parameter ``binary_data``, or request parameter
``binary_data_output`` for every output), else as a flat JSON ``data`` list.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from ...shared.errors import InvalidRequest, NotEnabled, echo
from .infer import IMAGE, InferRequest, InferResponse, RequestedOutput
from .shared_memory import uses_shared_memory
from .tensors import BYTES, from_raw, from_values, to_raw, to_values

HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_SIZE = "binary_data_size"
BINARY_OUTPUT = "binary_data"
BINARY_OUTPUTS = "binary_data_output"


def json_size(body: bytes, header_length: str | None) -> int:
    """The size of ``body``'s JSON part (all of it without the binary-data header; a header that
    is not a size is left to :func:`parse_infer` to refuse)."""
    try:
        return min(int(header_length), len(body)) if header_length is not None else len(body)
    except ValueError:
        return len(body)


def _json_header(body: bytes, header_length: str | None) -> Any:
    size = len(body)
    if header_length is not None:
        try:
            size = int(header_length)
        except ValueError:
            raise InvalidRequest(f"{HEADER_LENGTH}: not a number: {echo(header_length)}") from None
        if not 0 < size <= len(body):
            raise InvalidRequest(f"{HEADER_LENGTH} is {size} but the body has {len(body)} bytes")
    try:
        return json.loads(body[:size]), size
    except RecursionError:
        raise InvalidRequest("request JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None


def _flatten(data: Any, where: str) -> list[Any]:
    """A nested JSON list of values, row-major (nesting is allowed, not required)."""
    if not isinstance(data, list):
        raise InvalidRequest(f"{where}: data must be a list, got {type(data).__name__}")
    out, stack = [], [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where} must be a JSON object, got {type(value).__name__}")
    bad = next((k for k, v in value.items() if not isinstance(v, (bool, int, float, str))), None)
    if bad is not None:
        raise InvalidRequest(f"{where}.{bad}: parameters are booleans, numbers or strings")
    return value


def _field(item: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = item.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidRequest(f"{where}.{key}: expected {kind.__name__}, got {echo(value)}")
    return value


def _no_shared_memory(parameters: Mapping[str, Any], where: str) -> None:
    if uses_shared_memory(parameters):
        raise NotEnabled(f"{where}: system shared memory is served on the KServe gRPC door only (--shared-memory)")


# ASCII whitespace, deleted in one copy: split() made an object of every word, and 64 MB of
# two-letter words took 2 GB
_WRAPPING = str.maketrans("", "", " \t\n\r\v\f")


def _image_bytes(value: Any, where: str) -> Any:
    """An image's base64 text (whitespace, as ``base64`` wraps it, ignored) -> its bytes; a value
    that is not a string is left for the tensor's own check."""
    if not isinstance(value, str):
        return value
    text = value.partition("base64,")[2] if value.startswith("data:") else value
    try:
        return base64.b64decode(text.translate(_WRAPPING), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(
            f"{where}: not base64 ({echo(value, 40)}); an image in JSON data is its base64 text, "
            f"or send its bytes as binary data ({BINARY_SIZE})"
        ) from None


def parse_infer(body: bytes, header_length: str | None, model_name: str, version: str = "") -> InferRequest:
    doc, size = _json_header(body, header_length)
    if not isinstance(doc, dict):
        raise InvalidRequest("the request body must be a JSON object with 'inputs'")
    inputs_doc = doc.get("inputs")
    if not isinstance(inputs_doc, list):
        raise InvalidRequest("'inputs' must be a list of tensors")
    binary, offset = memoryview(body)[size:], 0
    inputs = []
    for i, item in enumerate(inputs_doc):
        where = f"inputs[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be a JSON object")
        name = _field(item, "name", str, where)
        datatype = _field(item, "datatype", str, where)
        shape = _field(item, "shape", list, where)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise InvalidRequest(f"{where}.shape must be a list of integers, got {echo(shape)}")
        parameters = dict(_object(item.get("parameters"), f"{where}.parameters"))
        _no_shared_memory(parameters, where)
        if BINARY_SIZE in parameters:
            length = parameters.pop(BINARY_SIZE)
            if isinstance(length, bool) or not isinstance(length, int) or length < 0:
                raise InvalidRequest(f"{where}.parameters.{BINARY_SIZE} must be an integer >= 0, got {echo(length)}")
            if "data" in item:
                raise InvalidRequest(f"{where}: send either data or {BINARY_SIZE}, not both")
            if offset + length > len(binary):
                raise InvalidRequest(
                    f"{where}: {BINARY_SIZE} {length} but only {len(binary) - offset} bytes of binary data remain"
                )
            inputs.append(from_raw(name, datatype, shape, binary[offset : offset + length], parameters))
            offset += length
        else:
            if "data" not in item:
                raise InvalidRequest(f"{where} ({name}) has neither data nor {BINARY_SIZE}")
            values = _flatten(item["data"], where)
            if name == IMAGE and datatype == BYTES:
                values = [_image_bytes(v, f"{where} ({IMAGE}) element {j}") for j, v in enumerate(values)]
            inputs.append(from_values(name, datatype, shape, values, parameters))
    if offset != len(binary):
        raise InvalidRequest(f"{len(binary) - offset} bytes of binary data after the JSON belong to no input")
    outputs_doc = doc.get("outputs") or []
    if not isinstance(outputs_doc, list):
        raise InvalidRequest("'outputs' must be a list")
    outputs = []
    for i, item in enumerate(outputs_doc):
        if not isinstance(item, dict):
            raise InvalidRequest(f"outputs[{i}] must be a JSON object")
        name = _field(item, "name", str, f"outputs[{i}]")
        parameters = _object(item.get("parameters"), f"outputs[{i}].parameters")
        _no_shared_memory(parameters, f"outputs[{i}]")
        outputs.append(RequestedOutput(name, parameters))
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidRequest(f"id must be a string, got {echo(request_id)}")
    parameters = _object(doc.get("parameters"), "parameters")
    return InferRequest(model_name, version, request_id, inputs, outputs, parameters)


def render_infer(response: InferResponse, request: InferRequest) -> tuple[bytes, int | None]:
    """(body, JSON header length when binary data follows it, else None)."""
    binary_default = request.parameters.get(BINARY_OUTPUTS) is True
    asked = {o.name: o.parameters.get(BINARY_OUTPUT) for o in request.outputs}
    outputs, chunks = [], []
    for tensor in response.outputs:
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        binary = asked.get(tensor.name)
        if binary if isinstance(binary, bool) else binary_default:
            raw = to_raw(tensor)
            entry["parameters"] = {BINARY_SIZE: len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = to_values(tensor)
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        doc["id"] = response.id
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs
    head = json.dumps(doc, ensure_ascii=False).encode()
    if chunks:
        return head + b"".join(chunks), len(head)
    return head, None
