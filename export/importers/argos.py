"""Argos Translate packages (LibreTranslate's models) -> :class:`TranslationTransformer`.

A package is a zip (``.argosmodel``) of one directory, or that directory unpacked (what
Argos installs into ``~/.local/share/argos-translate/packages``)::

    metadata.json         from_code, to_code, package_version, target_prefix (optional), type
    model/                a CTranslate2 TransformerSpec model: model.bin, config.json, vocabularies
    sentencepiece.model   or bpe.model: the tokenizer (argos_tokenizer)
    stanza/ ... README.md sentence splitting and docs (not needed: the server splits sentences)

:func:`load_argos` reads one (a zip is extracted to a temporary directory and removed after)
and, when the ``ctranslate2`` package is installed, checks the import against CTranslate2
itself: the greedy tokens of both on :data:`CHECK_SENTENCES` must be equal
(:func:`compare_with_ctranslate2`). A ``target_prefix`` (multilingual packages' target
language token) becomes ``model.json``'s language token, forced first in every output and
hidden from the text, as Argos does (family ``argos``, :mod:`attnserve.contract.languages`).
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from attnserve.models import greedy_decode

from .argos_tokenizer import argos_tokenizer, tokenizer_file, unknown_tokens
from .ctranslate2_bin import read_ct2_model
from .ctranslate2_transformer import Vocabulary, transformer_from_ct2
from .hf_files import ImportCheckpointError, read_json
from .hf_translation import ImportedTranslator

log = logging.getLogger(__name__)

PACKAGE_SUFFIX = ".argosmodel"
FAMILY = "argos"
CHECK_SENTENCES = (
    "Hello, how are you?",
    "The weather is nice today.",
    "I would like to order two coffees, please.",
    "Where is the train station?",
    "This is a test of the translation system.",
)
CHECK_MAX_TOKENS = 64
MAX_UNPACKED_BYTES = 8 << 30  # a zip that claims more than this when unpacked is refused (a zip bomb)


def argos_packages(folder: Path | str) -> list[Path]:
    """The packages in ``folder``: unpacked package directories (with ``metadata.json``) and
    ``.argosmodel`` files, sorted by name. Other entries are ignored."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ImportCheckpointError(f"{folder}: not a directory")
    found = [
        p
        for p in folder.iterdir()
        if (p.is_dir() and (p / "metadata.json").is_file()) or (p.is_file() and p.name.endswith(PACKAGE_SUFFIX))
    ]
    return sorted(found, key=lambda p: p.name)


def package_type(path: Path | str) -> str | None:
    """``metadata.json``'s ``type`` of a package without unpacking it ("translate" when unset);
    None when it cannot be read (a damaged package: importing it says why)."""
    meta = package_metadata(path)
    return meta.get("type", "translate") if meta is not None else None


def package_metadata(path: Path | str) -> dict[str, Any] | None:
    """A package's ``metadata.json`` without unpacking it; None when it cannot be read."""
    path = Path(path)
    try:
        if path.is_dir():
            text = (path / "metadata.json").read_text(encoding="utf-8")
        else:
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if PurePosixPath(n).name == "metadata.json"]
                text = archive.read(min(names, key=len)).decode("utf-8") if names else ""
        meta = json.loads(text)
    except (OSError, ValueError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


@contextmanager
def open_package(path: Path | str) -> Iterator[Path]:
    """The package directory of ``path``: itself, or a zip's one directory extracted to a temporary one."""
    path = Path(path)
    if path.is_dir():
        if not (path / "metadata.json").is_file():
            raise ImportCheckpointError(f"{path}: no metadata.json (not an Argos Translate package)")
        yield path
        return
    if not path.is_file():
        raise ImportCheckpointError(f"{path}: no such file or directory")
    tmp = Path(tempfile.mkdtemp(prefix="attnserve-argos-"))
    try:
        yield _extract(path, tmp)
    except ImportCheckpointError as exc:
        # a file of the package is named inside the package the user gave, not in a folder gone after
        raise ImportCheckpointError(str(exc).replace(str(tmp), str(path))) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(path: Path, into: Path) -> Path:
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
                raise ImportCheckpointError(f"{path}: unpacks to more than {MAX_UNPACKED_BYTES >> 30} GiB, refused")
            for m in members:
                name = PurePosixPath(m.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise ImportCheckpointError(f"{path}: member {m.filename!r} would be written outside the package")
            archive.extractall(into)
    except zipfile.BadZipFile as exc:
        raise ImportCheckpointError(f"{path}: not a valid .argosmodel (a zip archive): {exc}") from None
    except (OSError, EOFError, zipfile.LargeZipFile) as exc:  # a truncated member, a CRC error, a full disk
        raise ImportCheckpointError(f"{path}: cannot be unpacked ({exc})") from None
    if (into / "metadata.json").is_file():
        return into
    dirs = sorted(p.name for p in into.iterdir() if p.is_dir() and (p / "metadata.json").is_file())
    if len(dirs) > 1:  # Argos would install them all; one package is one model here
        raise ImportCheckpointError(
            f"{path}: holds {len(dirs)} packages ({', '.join(dirs)}); unpack it and give the folder"
        )
    if not dirs:
        raise ImportCheckpointError(f"{path}: no metadata.json in the archive (not an Argos Translate package)")
    return into / dirs[0]


def read_metadata(package: Path) -> dict[str, Any]:
    path = package / "metadata.json"
    meta = read_json(path)
    kind = meta.get("type", "translate")
    if kind != "translate":
        raise ImportCheckpointError(f"{path}: type is {kind!r}; only translation packages ('translate') are imported")
    for key in ("from_code", "to_code"):
        code = meta.get(key)
        if not isinstance(code, str) or not re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*", code):
            raise ImportCheckpointError(f"{path}: {key} is {code!r}, not a language code")
    prefix = meta.get("target_prefix", "")
    if not isinstance(prefix, str):
        raise ImportCheckpointError(f"{path}: target_prefix must be a string")
    return meta


def package_name(meta: dict[str, Any]) -> str:
    """``argos-<from>-<to>``: the model's name in a repository."""
    return f"argos-{meta['from_code']}-{meta['to_code']}".lower().replace("_", "-")


def load_argos(path: Path | str, *, compare: bool = True) -> ImportedTranslator:
    """Import an Argos Translate package: a ``.argosmodel`` file or an unpacked package directory.

    ``compare``: check the greedy tokens against CTranslate2's when it is installed (the result
    is in ``checks``); a difference raises ImportCheckpointError.
    """
    with open_package(path) as package:
        meta = read_metadata(package)
        ct2, source_vocab, target_vocab = read_ct2_model(package / "model")
        prefix = meta.get("target_prefix") or ""
        if prefix and prefix not in target_vocab:
            raise ImportCheckpointError(
                f"{package / 'metadata.json'}: target_prefix {prefix!r} is not in the target vocabulary"
            )
        tokenizer_path = tokenizer_file(package)
        unknown = unknown_tokens(tokenizer_path, source_vocab)
        model, vocab = transformer_from_ct2(ct2, source_vocab, target_vocab, unknown)
        tokenizer = argos_tokenizer(tokenizer_path, vocab, [prefix] if prefix else [])
        source, target = meta["from_code"], meta["to_code"]
        languages: dict[str, Any] = {"source": [source], "target": [target]}
        languages |= {"default_source": source, "default_target": target}
        if prefix:
            languages["tokens"] = {target: prefix}
        imported = ImportedTranslator(model, tokenizer, package_name(meta), {}, family=FAMILY, languages=languages)
        imported.details = {
            "package_version": str(meta.get("package_version", "")),
            "tokenizer": tokenizer_path.name,
            "source_eos": vocab.source_eos is not None,  # CTranslate2's add_source_eos
            "ctranslate2": {"spec": ct2.spec, "revision": ct2.revision, "binary_version": ct2.binary_version},
            "weights": sorted({str(v.dtype) for v in ct2.variables.values() if v.ndim == 2}),
        }
        if compare:
            imported.checks.append(compare_with_ctranslate2(package / "model", imported, vocab, prefix))
    return imported


def compare_with_ctranslate2(
    model_dir: Path,
    imported: ImportedTranslator,
    vocab: Vocabulary,
    prefix: str = "",
    sentences: tuple[str, ...] = CHECK_SENTENCES,
    compute_type: str = "float32",
) -> dict[str, Any]:
    """Greedy decoding of ``sentences`` by CTranslate2 (``compute_type``) and by the imported model on
    the same source tokens; raises ImportCheckpointError when they differ. Returns the check's record
    (``passed`` None: skipped, CTranslate2 is not installed)."""
    name = "greedy tokens equal CTranslate2's"
    try:
        ctranslate2 = importlib.import_module("ctranslate2")
    except ImportError:
        return {"name": name, "passed": None, "detail": "skipped: the ctranslate2 package is not installed"}
    token_of = {i: t for t, i in vocab.ids.items()}
    tok = imported.tokenizer
    ids = [tok.encode(s).ids for s in sentences]  # with the start / end tokens CTranslate2 adds itself
    ct2_tokens = [[token_of[i] for i in tok.encode(s, add_special_tokens=False).ids] for s in sentences]
    try:
        translator = ctranslate2.Translator(
            str(model_dir), device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=1
        )
        results = translator.translate_batch(
            ct2_tokens,
            target_prefix=[[prefix]] * len(sentences) if prefix else None,
            beam_size=1,
            max_decoding_length=CHECK_MAX_TOKENS,
            min_decoding_length=0,  # the end may come first, as the imported model decodes (Argos: 1)
        )
    except (RuntimeError, ValueError) as exc:  # e.g. a model newer than the installed CTranslate2
        log.warning("%s: CTranslate2 cannot run this model, not compared: %s", model_dir, exc)
        return {"name": name, "passed": None, "detail": f"skipped: CTranslate2 cannot run the model ({exc})"}
    prefix_ids = [vocab.ids[prefix]] if prefix else []
    model, equal, excused, differ = imported.model, 0, [], []
    for sentence, row, result in zip(sentences, ids, results, strict=True):
        src = torch.tensor([row])  # (1, L)
        hyp = greedy_decode(model, src, max_new_tokens=CHECK_MAX_TOKENS, prefix=prefix_ids)[0]
        ours = [token_of[i] for i in hyp.tokens if i != model.cfg.eos_id]
        theirs = list(result.hypotheses[0])
        if ours == theirs:
            equal += 1
        elif (reason := _excuse(model, src, ours, theirs, vocab)) is not None:
            excused.append(reason)
        else:
            differ.append((sentence, ours, theirs))
    if differ:
        sentence, ours, theirs = differ[0]
        raise ImportCheckpointError(
            f"{model_dir}: the import's greedy tokens differ from CTranslate2's on {len(differ)} of "
            f"{len(sentences)} sentences, e.g. {sentence!r}: {ours[:12]} vs {theirs[:12]}"
        )
    detail = f"{equal}/{len(sentences)} sentences equal, CTranslate2 {compute_type}"
    detail += f"; {len(excused)} part ways where {', '.join(sorted(set(excused)))}" if excused else ""
    if not equal:  # nothing was compared to the end: reported, not passed
        return {"name": name, "passed": None, "detail": detail}
    return {"name": name, "passed": True, "detail": detail}


TIE = 1e-4  # log-probabilities this close are a tie that float rounding may break either way


def _excuse(model, src: torch.Tensor, ours: list[str], theirs: list[str], vocab: Vocabulary) -> str | None:
    """Why two greedy outputs may part ways without either being wrong, or None: at the first
    difference CTranslate2 chose a token attnserve never generates (pad, the start token), or the
    two tokens were tied within :data:`TIE`."""
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    cfg = model.cfg
    choice = {"ours": vocab.ids[ours[k]] if k < len(ours) else cfg.eos_id}
    choice["theirs"] = vocab.ids[theirs[k]] if k < len(theirs) else cfg.eos_id
    if choice["theirs"] in cfg.never_generate:
        return f"CTranslate2 chose {theirs[k]!r}, which attnserve never generates"
    tgt = torch.tensor([[cfg.bos_id] + [vocab.ids[t] for t in ours[:k]]])  # (1, k + 1)
    with torch.no_grad():
        logp = model(src, tgt)[0, -1].log_softmax(-1)  # (V,)
    if float(logp[choice["ours"]] - logp[choice["theirs"]]) < TIE:
        return "the two tokens were tied"
    return None
