"""Local stand-ins of the servers ``attnserve-export pull`` downloads from, each a small
``http.server`` in a thread on 127.0.0.1 port 0:

- :class:`HubStandIn`: the Hugging Face Hub's file endpoints in the URL layout huggingface_hub
  uses (set ``HF_ENDPOINT`` to its ``url``): ``/api/models/{id}[/revision/{rev}]`` (model info
  with ``sha`` and ``siblings``), ``/api/models/{id}/tree/{rev}`` (files with git blob ids and,
  for weights, LFS sha256), ``/{id}/resolve/{rev}/{file}`` (HEAD and GET with ``X-Repo-Commit``,
  ``ETag``, ``Content-Length``, ``Range``); a file in ``stalled`` sends half its bytes, then waits
  (a slow link);
  ``without`` leaves out ``/tree`` (404) or the model info's ``siblings``, as some mirrors do;
- :class:`FileStandIn`: static files (an Argos index and its packages) with failures on demand:
  a 404, or a body cut short after N bytes on its first request (the connection closes), and a
  record of the ``Range`` headers it was sent.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import urllib.parse
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin", ".model", ".spm")


class _Server:
    handler: type[http.server.BaseHTTPRequestHandler]

    def __init__(self) -> None:
        outer = self

        class Handler(self.handler):  # type: ignore[name-defined,misc]
            stand_in = outer

            def log_message(self, *args) -> None:  # quiet test output
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _send_file(handler, data: bytes, headers: dict[str, str], cut_after: int | None = None) -> None:
    """``data`` with Range support; ``cut_after``: send only that many bytes, then close."""
    start, status = 0, 200
    match = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range") or "")
    if match:
        start, status = int(match.group(1)), 206
        if start >= len(data):
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{len(data)}")
            handler.end_headers()
            return
    body = data[start:]
    handler.send_response(status)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Accept-Ranges", "bytes")
    if status == 206:
        handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
    handler.end_headers()
    if handler.command == "HEAD":
        return
    if cut_after is not None:
        handler.wfile.write(body[:cut_after])
        handler.wfile.flush()
        handler.close_connection = True
        return
    handler.wfile.write(body)


def _send_stalled(handler, data: bytes, released: threading.Event, headers: dict[str, str]) -> None:
    """Half of ``data``, then nothing until ``released`` (at most STALL_S), then the rest: a slow link."""
    handler.send_response(200)
    for key, value in {**headers, "Content-Length": str(len(data))}.items():
        handler.send_header(key, value)
    handler.end_headers()
    try:
        handler.wfile.write(data[: len(data) // 2])
        handler.wfile.flush()
        released.wait(STALL_S)
        handler.wfile.write(data[len(data) // 2 :])
    except OSError:  # the client gave up
        handler.close_connection = True


STALL_S = 20.0


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _HubHandler(http.server.BaseHTTPRequestHandler):
    stand_in: HubStandIn

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        hub = self.stand_in
        path = urllib.parse.urlsplit(self.path).path
        hub.requests.append((self.command, path, self.headers.get("Range")))
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
            blobs = "blobs=true" in urllib.parse.urlsplit(self.path).query.lower()
            return self._json(hub.info(m.group(1), blobs=blobs))
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path):
            return self._json(None if "tree" in hub.without else hub.tree(m.group(1)))
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            repo_id, filename = m.group(1), urllib.parse.unquote(m.group(3))
            files = hub.files(repo_id)
            if files is None or filename not in files:
                return self._missing("EntryNotFound" if files is not None else "RepoNotFound")
            data = files[filename]
            etag = hashlib.sha256(data).hexdigest() if filename.endswith(LFS_SUFFIXES) else git_blob_id(data)
            headers = {"X-Repo-Commit": hub.commit(repo_id), "ETag": f'"{etag}"'}
            if self.command == "GET" and (repo_id, filename) in hub.stalled:
                return _send_stalled(self, data, hub.released, headers)
            return _send_file(self, data, {**headers, "Content-Type": "application/octet-stream"})
        return self._missing("RepoNotFound")

    def _json(self, payload) -> None:
        if payload is None:
            return self._missing("RepoNotFound")
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _missing(self, code: str) -> None:
        body = json.dumps({"error": f"{code}: not on this stand-in"}).encode()
        self.send_response(404)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class HubStandIn(_Server):
    """Serves ``repos``: Hub id -> a local folder whose files the repository holds."""

    handler = _HubHandler

    def __init__(self, repos: dict[str, Path]) -> None:
        self.repos = {repo_id: Path(folder) for repo_id, folder in repos.items()}
        self.corrupt: set[tuple[str, str]] = set()  # (repo id, file): its tree checksum lies
        self.stalled: set[tuple[str, str]] = set()  # (repo id, file): half its bytes, then a wait
        self.released = threading.Event()  # ends the stalled downloads' wait
        self.without: set[str] = set()  # "tree": /tree answers 404; "siblings": the model info lists no files
        super().__init__()

    def close(self) -> None:
        self.released.set()
        super().close()

    def files(self, repo_id: str) -> dict[str, bytes] | None:
        folder = self.repos.get(repo_id)
        if folder is None:
            return None
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    def commit(self, repo_id: str) -> str:
        digest = hashlib.sha1(repo_id.encode())
        for name, data in sorted(self.files(repo_id).items()):
            digest.update(name.encode() + hashlib.sha1(data).digest())
        return digest.hexdigest()

    def info(self, repo_id: str, blobs: bool = False):
        files = self.files(repo_id)
        if files is None:
            return None
        entries = {e["path"]: e for e in self.tree(repo_id)}
        siblings = [{"rfilename": name} for name in files] if "siblings" not in self.without else []
        if blobs:  # ?blobs=true (files_metadata): each sibling's size, git blob id and LFS sha256, as /tree's
            for sibling in siblings:
                entry = entries[sibling["rfilename"]]
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if "lfs" in entry:
                    sibling["lfs"] = {"sha256": entry["lfs"]["oid"], "size": entry["size"], "pointerSize": 134}
        return {"id": repo_id, "modelId": repo_id, "sha": self.commit(repo_id), "siblings": siblings, "private": False}

    def tree(self, repo_id: str):
        files = self.files(repo_id)
        if files is None:
            return None
        entries = []
        for name, data in files.items():
            entry = {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
            if name.endswith(LFS_SUFFIXES):
                sha = hashlib.sha256(data).hexdigest()
                if (repo_id, name) in self.corrupt:
                    sha = "0" * 64
                entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
            entries.append(entry)
        return entries


class _FileHandler(http.server.BaseHTTPRequestHandler):
    stand_in: FileStandIn

    def do_GET(self) -> None:
        files = self.stand_in
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        files.requests.append(("GET", path, self.headers.get("Range")))
        target = (files.root / path).resolve()
        if path in files.missing or not target.is_file() or files.root.resolve() not in target.parents:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        cut = files.cut_once.pop(path, None)
        _send_file(self, target.read_bytes(), {"Content-Type": "application/octet-stream"}, cut_after=cut)


class FileStandIn(_Server):
    """Serves the files under ``root``; ``missing`` paths answer 404; ``cut_once[path] = n`` sends
    only n bytes of that file's next response and closes the connection."""

    handler = _FileHandler

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.missing: set[str] = set()
        self.cut_once: dict[str, int] = {}
        super().__init__()
