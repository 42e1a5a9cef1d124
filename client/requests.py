"""What the client sends: ``attnserve.v1`` request pieces built from Python arguments, checked
before they go (a negative count is a ValueError naming it, not protobuf's "Value out of range")."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor

from attnserve.protos.attnserve.v1 import inference_pb2 as pb


def text_list(texts: str | Iterable[str]) -> list[str]:
    """A text, or texts in any iterable (a list, a generator), as the list sent; anything else is a
    TypeError naming it (protobuf's own is "bad argument type for built-in operation")."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a str or an iterable of str, got {type(texts).__name__}")
    listed = list(texts)
    for i, text in enumerate(listed):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
    return listed


def image_input(image: bytes | str | Path | np.ndarray) -> pb.ImageInput:
    if isinstance(image, np.ndarray):  # already preprocessed: (C, H, W) or (1, C, H, W) float32
        values = np.ascontiguousarray(image, dtype="<f4")
        tensor = pb.Tensor(shape=list(values.shape), datatype=pb.DATA_TYPE_FP32, raw_contents=values.tobytes())
        return pb.ImageInput(tensor=tensor)
    if isinstance(image, (str, Path)):
        image = Path(image).read_bytes()
    return pb.ImageInput(encoded=bytes(image))


FORMATS = {"text": pb.TEXT_FORMAT_TEXT, "html": pb.TEXT_FORMAT_HTML, "markdown": pb.TEXT_FORMAT_MARKDOWN}
UNSIGNED_MAX = {FieldDescriptor.TYPE_UINT32: 2**32 - 1, FieldDescriptor.TYPE_UINT64: 2**64 - 1}


def file_request(
    path: str | Path, target_language: str, source_language: str, model: str, glossary_id: str = ""
) -> pb.TranslateFileRequest:
    """The file at ``path`` to translate (its name's extension picks the format on the server),
    with the terms of the stored glossary ``glossary_id`` where one is named."""
    path = Path(path)
    return pb.TranslateFileRequest(
        model=model,
        filename=os.fsencode(path.name).decode("utf-8", "replace"),  # a Latin-1 name: text protobuf can send
        content=path.read_bytes(),
        source_language=source_language,
        target_language=target_language,
        glossary_id=glossary_id,
    )


def unsigned_max(message: Any, field: str) -> int | None:
    """The largest value of ``message``'s unsigned integer ``field`` (its smallest is 0); None if
    the field is not unsigned."""
    return UNSIGNED_MAX.get(message.DESCRIPTOR.fields_by_name[field].type)


def check_unsigned(message: Any, **values: Any) -> None:
    """A negative (or too large) int for an unsigned field -> ValueError naming the parameter
    (protobuf's own is a bare "Value out of range: -1")."""
    for name, value in values.items():
        limit = unsigned_max(message, name)
        if limit is not None and isinstance(value, int) and not 0 <= value <= limit:
            raise ValueError(f"{name} must be an integer from 0 to {limit}, got {value}")


def text_format(name: str) -> int:
    """A format name ("text", "html" or "markdown") -> ``TextFormat``."""
    if name not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {name!r}")
    return FORMATS[name]


def glossary_entries(glossary: Mapping[str, str] | None) -> list[pb.GlossaryEntry]:
    """source term -> target term ("" keeps the term) -> ``GlossaryEntry`` messages."""
    return [pb.GlossaryEntry(source=source, target=target) for source, target in (glossary or {}).items()]


def read_glossary(path: str | Path) -> dict[str, str]:
    """A TSV glossary: ``source<TAB>target`` lines, or ``source`` alone to keep the term; blank
    lines, lines starting with ``#`` and a leading byte-order mark skipped. Raises ValueError
    naming the file and line (a malformed line, a source term given twice)."""
    entries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) > 2 or not fields[0].strip():
            raise ValueError(f"{path}, line {number}: expected 'source<TAB>target' or 'source', got {line!r:.80}")
        source = fields[0].strip()
        if source in lines:
            raise ValueError(f"{path}, line {number}: {source!r:.80} is the source term of line {lines[source]} too")
        entries[source], lines[source] = (fields[1].strip() if len(fields) == 2 else ""), number
    return entries


def decoding_options(
    *,
    beam_size: int = 1,
    num_hypotheses: int = 1,
    length_penalty: float | None = None,
    max_new_tokens: int = 0,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float | None = None,
    seed: int | None = None,
    return_scores: bool = False,
    return_token_ids: bool = False,
    source_language: str = "",
    target_language: str = "",
    target_prefix: str = "",
) -> pb.DecodingOptions:
    """Keyword options -> ``DecodingOptions`` (unset optionals stay unset: the server's defaults).
    Languages: the model's codes (``deu_Latn``, ``fra``) or ISO 639-1 (``de``); with no model
    named, the pair picks the model. ``target_prefix``: text every translation starts with.
    A negative count or seed (unsigned fields) is a ValueError naming it."""
    check_unsigned(
        pb.DecodingOptions,
        beam_size=beam_size,
        num_hypotheses=num_hypotheses,
        max_new_tokens=max_new_tokens,
        top_k=top_k,
        seed=seed,
    )
    opts = pb.DecodingOptions(
        source_language=source_language,
        target_language=target_language,
        target_prefix=target_prefix,
        beam_size=beam_size,
        num_hypotheses=num_hypotheses,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        return_scores=return_scores,
        return_token_ids=return_token_ids,
    )
    if length_penalty is not None:
        opts.length_penalty = length_penalty
    if top_p is not None:
        opts.top_p = top_p
    if seed is not None:
        opts.seed = seed
    return opts
