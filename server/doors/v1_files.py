"""attnserve.v1's files: a ``TranslateFileRequest`` decoded into the service's ``FileRequest``,
and a translated file (``TranslateFile``'s, or a done job's for ``GetFileJobResult``) encoded as
its chunks and then its summary, ``FileDone``, which names and counts both alike; a job's record
as ``FileJob``."""

from __future__ import annotations

from collections.abc import Iterator

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

from ..service.downloads import translated_filename
from ..service.files import FileRequest, TranslatedFile
from ..service.job_records import remaining_s
from ..service.requests import Deadline
from ..service.vocabulary import Job
from ..shared.calls import Call

FILE_CHUNK_BYTES = 1 << 20  # a translated file goes out in messages of at most this many bytes


def file_request(request: pb.TranslateFileRequest, call: Call, deadline: Deadline | None = None) -> FileRequest:
    return FileRequest(
        call,
        request.filename,
        request.content,
        request.source_language,
        request.target_language,
        model=request.model,
        deadline=deadline,
        glossary_id=request.glossary_id,
    )


def _chunks(content: bytes, done: pb.FileDone) -> Iterator[pb.TranslateFileChunk]:
    """A file's bytes in chunks of at most FILE_CHUNK_BYTES, then its summary."""
    for at in range(0, len(content), FILE_CHUNK_BYTES):
        yield pb.TranslateFileChunk(content=content[at : at + FILE_CHUNK_BYTES])
    yield pb.TranslateFileChunk(done=done)


def file_chunks(done: TranslatedFile, target: str = "") -> Iterator[pb.TranslateFileChunk]:
    """The file in chunks, then its summary, named as :func:`job_result_chunks` names it (``target``: the request's)."""
    summary = pb.FileDone(
        model=done.model,
        filename=translated_filename(done.filename, target or done.target_language),
        media_type=done.media_type,
        size_bytes=len(done.content),
        characters=done.characters,
        sentences=done.sentences,
        source_language=done.source_language,
        target_language=done.target_language,
        detected_language=done.detected.language if done.detected else "",
    )
    return _chunks(done.content, summary)


def file_job(job: Job) -> pb.FileJob:
    left = remaining_s(job)
    return pb.FileJob(
        id=job.id,
        status=getattr(pb, f"FILE_JOB_STATUS_{job.status.upper()}"),
        filename=job.filename,
        progress=pb.FileProgress(sentences_done=job.done, sentences_total=job.total),
        remaining_seconds=-1.0 if left is None else left,
        error=job.error,
        sentences_reused=job.reused,
        sentences_decoded=job.decoded,
        created_unix=job.created,
        expires_unix=job.expires,
    )


def job_result_chunks(job: Job, content: bytes) -> Iterator[pb.TranslateFileChunk]:
    """A done job's file in chunks, then its summary, named report.de.docx as the HTTP job result
    names it: a client that writes it under that name does not write over the file it sent."""
    summary = pb.FileDone(
        model=job.model,
        filename=translated_filename(job.filename, job.target),
        media_type=job.media_type,
        size_bytes=len(content),
        characters=job.characters,
        sentences=job.total,
        source_language=job.source_language,
        target_language=job.target,
        detected_language=job.detected,
    )
    return _chunks(content, summary)
