"""File jobs through attnserve.v1 (``SubmitFileJob``, ``GetFileJob``, ``WatchFileJob``,
``CancelFileJob``, ``GetFileJobResult``): ``client.jobs.submit(path, "de")`` returns at once
with a :class:`FileJob`; its id re-attaches from any later client with the same token, also
after a server restart (the job resumes there)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

from .requests import file_request
from .results import TranslatedFile

if TYPE_CHECKING:
    from . import Client

FINISHED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class FileJob:
    id: str
    status: str  # queued, running, done, failed, cancelled
    filename: str
    done: int  # sentences translated
    total: int  # sentences in the file (0 until the server has read and split all of it)
    remaining_s: float | None  # estimated, while it runs
    error: str
    reused: int  # sentences taken from an interrupted run, not decoded again
    decoded: int  # sentences decoded in its latest run

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


def file_job(msg: pb.FileJob) -> FileJob:
    status = pb.FileJobStatus.Name(msg.status).removeprefix("FILE_JOB_STATUS_").lower()
    left = msg.remaining_seconds if msg.remaining_seconds >= 0 else None
    p = msg.progress
    return FileJob(
        msg.id, status, msg.filename, p.sentences_done, p.sentences_total, left, msg.error,
        msg.sentences_reused, msg.sentences_decoded,
    )  # fmt: skip


class JobClient:
    """``Client.jobs``: a client's file jobs."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def submit(
        self,
        path: str | Path,
        target_language: str,
        source_language: str = "auto",
        model: str = "",
        *,
        glossary_id: str = "",
        timeout: float | None = None,
    ) -> FileJob:
        request = file_request(path, target_language, source_language, model, glossary_id)
        stub = self.client.stub
        return file_job(self.client._call(lambda t: stub.SubmitFileJob(request, timeout=t), timeout))

    def get(self, job_id: str, *, timeout: float | None = None) -> FileJob:
        request = pb.FileJobRequest(id=job_id)
        return file_job(self.client._call(lambda t: self.client.stub.GetFileJob(request, timeout=t), timeout))

    def cancel(self, job_id: str, *, timeout: float | None = None) -> FileJob:
        request = pb.FileJobRequest(id=job_id)
        return file_job(self.client._call(lambda t: self.client.stub.CancelFileJob(request, timeout=t), timeout))

    def watch(self, job_id: str, *, timeout: float | None = None) -> Iterator[FileJob]:
        """The job each time it changes, until it is finished; a server that stops ends the
        stream early (watch again once it is back: the job resumes there)."""
        request = pb.FileJobRequest(id=job_id)
        call, messages = self.client._stream(lambda t: self.client.stub.WatchFileJob(request, timeout=t), timeout)
        try:
            for msg in messages:
                yield file_job(msg)
        finally:
            call.cancel()

    def result(self, job_id: str, *, timeout: float | None = None) -> TranslatedFile:
        """A done job's translated file (FAILED_PRECONDITION before it is done)."""
        request = pb.FileJobRequest(id=job_id)
        call, messages = self.client._stream(lambda t: self.client.stub.GetFileJobResult(request, timeout=t), timeout)
        parts: list[bytes] = []
        try:
            for msg in messages:
                if msg.WhichOneof("event") == "content":
                    parts.append(msg.content)
                elif msg.WhichOneof("event") == "done":
                    d = msg.done
                    return TranslatedFile(
                        b"".join(parts), d.filename, d.media_type, d.model, d.characters, d.sentences,
                        d.source_language, d.target_language, d.detected_language,
                    )  # fmt: skip
        finally:
            call.cancel()
        from . import AttnServeError

        raise AttnServeError(grpc.StatusCode.INTERNAL, "the GetFileJobResult stream ended without its file")
