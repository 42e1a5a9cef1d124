"""A Hugging Face Hub model, downloaded with ``huggingface_hub`` for the importers.

Only the files an importer reads are fetched (config, one weight format, tokenizer and image
processor files), into huggingface_hub's own cache, so its settings hold: ``HF_HOME`` /
``HF_HUB_CACHE``, ``HF_ENDPOINT`` (a mirror or a local stand-in), ``HF_TOKEN`` (gated and private
models) and ``HF_HUB_OFFLINE=1`` (the cache alone). huggingface_hub resumes interrupted files and
shows the byte bars on a terminal; the files come down one after the other in the main thread, so
Ctrl-C and SIGTERM stop the pull at once. After the download each file is checked against the Hub's
own checksum (the sha256 of an LFS file, the git blob id of a small one) when the Hub can be asked:
``/tree``, else the model info's siblings (a mirror that serves only ``/api/models/{id}`` and ``/resolve/``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import sys
import urllib.parse
from pathlib import Path

from .download import sha256_of
from .errors import PullError

log = logging.getLogger(__name__)

# What export/importers read (hf_files.WEIGHT_FILES, the Marian / M2M100 / NLLB tokenizers, ViT's
# preprocessor): never the TensorFlow, Flax or Rust weights a repository also holds.
READ_FILES = [
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "target_vocab.json",
    "*.spm",
    "sentencepiece.bpe.model",
]
SAFETENSORS = ["model.safetensors", "model-*.safetensors", "model.safetensors.index.json"]
PYTORCH_BIN = ["pytorch_model.bin", "pytorch_model-*.bin", "pytorch_model.bin.index.json"]


def split_id(name: str) -> tuple[str, str | None]:
    """``org/model``, ``org/model@revision`` or the model's page on the Hub
    (``https://huggingface.co/org/model[/tree/revision]``) -> (repo id, revision)."""
    text = name.strip().removeprefix("hf:")
    if "://" in text or text.lower().startswith(tuple(f"{host}/" for host in HUB_HOSTS)):
        return _from_url(name, text)
    repo_id, _, revision = text.partition("@")
    parts = repo_id.rstrip("/").split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise PullError(f"{name}: a Hugging Face Hub id is 'organisation/model' (e.g. Helsinki-NLP/opus-mt-en-de)")
    return "/".join(parts), revision or None


HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")


def _from_url(name: str, text: str) -> tuple[str, str | None]:
    """A model's URL on the Hub (or on the HF_ENDPOINT mirror) -> (repo id, revision)."""
    url = urllib.parse.urlsplit(text if "://" in text else f"https://{text}")
    mirror = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or "").hostname
    if url.hostname not in (*HUB_HOSTS, mirror):
        raise PullError(
            f"{name}: not a Hugging Face Hub URL; name the model as organisation/model "
            "(for a mirror, set HF_ENDPOINT to it)"
        )
    segments = [urllib.parse.unquote(s) for s in url.path.split("/") if s]
    if segments[:1] in (["datasets"], ["spaces"]):
        raise PullError(f"{name}: a Hub {segments[0][:-1]}, not a model; pull takes models (organisation/model)")
    rest = segments[2:]
    revision = rest[1] if len(rest) >= 2 and rest[0] in ("tree", "blob", "resolve") else None
    if len(segments) < 2 or (rest and revision is None):
        shown = "/".join(segments[:2]) if len(segments) >= 2 else "organisation/model"
        raise PullError(
            f"{name}: a model's Hub URL is https://huggingface.co/organisation/model[/tree/revision]; "
            f"name it as {shown}"
        )
    return split_id("/".join(segments[:2]) + (f"@{revision}" if revision else ""))


def weight_patterns(files: list[str]) -> list[str]:
    """One weight format: safetensors when the repository has it, else PyTorch's pickles."""
    has_safetensors = any(fnmatch.fnmatch(f, p) for f in files for p in SAFETENSORS)
    return READ_FILES + (SAFETENSORS if has_safetensors else PYTORCH_BIN)


def download_snapshot(name: str, *, cache_dir: Path | None = None) -> Path:
    """The Hub model ``name`` (``org/model[@revision]``) -> its local snapshot folder."""
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hub_errors

    repo_id, revision = split_id(name)
    endpoint = os.environ.get("HF_ENDPOINT") or None  # read now: huggingface_hub reads it once, at import
    api = HfApi(endpoint=endpoint)
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
    except hub_errors.OfflineModeIsEnabled:
        return _cached_snapshot(name, cache_dir)
    except Exception as exc:  # noqa: BLE001 - huggingface_hub's HTTP and connection errors, one line each
        raise PullError(f"{name}: {_reason(exc)}") from None
    files = [s.rfilename for s in info.siblings or []] or _tree_files(api, repo_id, revision, name)
    patterns = weight_patterns(files)
    wanted = [f for f in files if any(fnmatch.fnmatch(f, p) for p in patterns)]
    if not wanted:
        raise PullError(f"{name}: holds none of the files an importer reads (config.json, weights, tokenizer)")
    path = _download_files(name, wanted, cache_dir=cache_dir, endpoint=endpoint)
    check_snapshot(api, repo_id, path, name, info)
    return path


def _tree_files(api, repo_id: str, revision: str | None, name: str) -> list[str]:
    """The repository's files from ``/tree`` where the model info lists none (a mirror that leaves
    ``siblings`` out); neither: an error saying so, not 'holds none of the files'."""
    from huggingface_hub import RepoFile

    try:
        entries = api.list_repo_tree(repo_id, revision=revision, recursive=True)
        return [e.path for e in entries if isinstance(e, RepoFile)]
    except Exception as exc:  # noqa: BLE001 - huggingface_hub's HTTP and connection errors
        raise PullError(
            f"{name}: the Hub at {api.endpoint} lists no files of it: its model info has no 'siblings' "
            f"and /api/models/{repo_id}/tree answers {_reason(exc)}"
        ) from None


def _download_files(name: str, files: list[str], *, cache_dir: Path | None, endpoint: str | None) -> Path:
    """``files`` into huggingface_hub's cache, one after the other in this thread: Ctrl-C and SIGTERM
    stop a download at once, where snapshot_download's worker threads would finish theirs first."""
    from huggingface_hub import hf_hub_download

    repo_id, revision = split_id(name)
    snapshots = set()
    for file in sorted(files, key=lambda f: f != "config.json"):  # config.json first: it names the importer
        try:
            local = hf_hub_download(repo_id, file, revision=revision, cache_dir=cache_dir, endpoint=endpoint)
        except Exception as exc:  # noqa: BLE001 - huggingface_hub's HTTP and connection errors
            raise PullError(f"{name}: {file}: {_reason(exc)}") from None
        snapshots.add(Path(local).parents[len(Path(file).parts) - 1])
        if file == "config.json":
            check_importable(name, Path(local).parent)
    if len(snapshots) != 1:  # a commit pushed while the files came down: they are of two revisions
        raise PullError(f"{name}: the repository changed during the download; pull it again")
    return snapshots.pop()


def check_importable(name: str, snapshot: Path) -> None:
    """config.json's ``model_type`` is one an importer reads; else the pull stops before the weights
    (gigabytes, for a model that would be refused once they were down)."""
    from attnserve.export.importers import TRANSLATION_IMPORTERS

    importable = sorted([*TRANSLATION_IMPORTERS, "vit"])
    kind = model_type(snapshot)
    if kind not in importable:
        found = f"model_type is {kind!r}" if kind is not None else "has no model_type"
        raise PullError(f"{name}: config.json: {found}; pull imports {', '.join(importable)} (nothing more downloaded)")


def _cached_snapshot(name: str, cache_dir: Path | None) -> Path:
    """``HF_HUB_OFFLINE``: the snapshot an earlier pull left in the cache (either weight format)."""
    from huggingface_hub import errors as hub_errors
    from huggingface_hub import snapshot_download

    repo_id, revision = split_id(name)
    for patterns in (READ_FILES + SAFETENSORS, READ_FILES + PYTORCH_BIN):
        try:
            return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns, cache_dir=cache_dir))
        except hub_errors.LocalEntryNotFoundError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - huggingface_hub's errors
            raise PullError(f"{name}: {_reason(exc)}") from None
    raise PullError(f"{name}: not in the Hugging Face cache and HF_HUB_OFFLINE is set ({_reason(error)})")


def check_snapshot(api, repo_id: str, snapshot: Path, name: str, info=None) -> None:
    """Every downloaded file against the Hub's checksum; a mismatch is an error naming the file."""
    expected = expected_checksums(api, repo_id, snapshot.name, info)
    if not expected:
        print(
            f"  {name}: files not checked: the Hub at {api.endpoint} gives no checksums "
            "(neither /tree nor the model info's siblings)",
            file=sys.stderr,
        )
    checked = 0
    for path in sorted(p for p in snapshot.rglob("*") if p.is_file()):
        relative = path.relative_to(snapshot).as_posix()
        if relative not in expected:
            continue
        kind, digest = expected[relative]
        found = sha256_of(path) if kind == "sha256" else git_blob_id(path)
        if found != digest:  # out of the cache too, so the next pull downloads it again
            path.resolve().unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            raise PullError(f"{name}: {relative}: checksum mismatch ({kind} {found}, the Hub says {digest})")
        checked += 1
    log.info("%s: %d file(s) match the Hub's checksums", name, checked)


def expected_checksums(api, repo_id: str, commit: str, info=None) -> dict[str, tuple[str, str]]:
    """path -> (kind, digest) at ``commit``: from ``/tree``, else (a mirror that serves only
    ``/api/models/{id}`` and ``/resolve/``) the siblings of the model info when it is of that commit."""
    try:
        entries = [(e.path, getattr(e, "lfs", None), getattr(e, "blob_id", None)) for e in
                   api.list_repo_tree(repo_id, revision=commit, recursive=True)]  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - huggingface_hub's HTTP and connection errors
        log.info("%s: /tree unanswered (%s); checksums from the model info", repo_id, _reason(exc))
        same = info is not None and getattr(info, "sha", None) in (None, commit)
        entries = [(s.rfilename, s.lfs, s.blob_id) for s in info.siblings or []] if same else []
    expected = {}
    for path, lfs, blob_id in entries:
        if lfs is not None:
            expected[path] = ("sha256", lfs.sha256)
        elif blob_id:
            expected[path] = ("git", blob_id)
    return expected


def git_blob_id(path: Path) -> str:
    """git's object id of a file (the Hub's ``oid`` of a file kept outside LFS)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def model_type(snapshot: Path) -> str | None:
    """config.json's ``model_type`` (decides the importer, as ``--from-hf`` / ``--from-hf-vit`` do)."""
    import json

    try:
        return json.loads((snapshot / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def _reason(exc: Exception) -> str:
    """huggingface_hub's error as one line (its messages can span several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) < 400 else text[:400] + "..."
