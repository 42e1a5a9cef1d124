"""What a file job's record says to its clients, and what a finished run writes into it: one
place for the fields every door reports of a job (HTTP's JSON, attnserve.v1's ``FileJob`` and
``FileDone``, DeepL's document status), so that a job reports its file as ``TranslateFile``
reports the same file: the model the router chose where it named none, the target language its
model translated into where it named none, the source language detected where it sent ``auto``."""

from __future__ import annotations

import time
from typing import Any

from ..files.job_store import Job
from .files import Resume, TranslatedFile

PACE_S = 0.5  # at least, of a run's decoding before its pace says how long the rest takes


def remaining_s(job: Job, now: float | None = None) -> float | None:
    """The estimated seconds left of a running job: its pace this run over the sentences left.
    The pace is that of the sentences the engine translated since this run's first were recorded
    (``paced``), which a claim sets back: neither a resumed job's earlier runs nor this run's
    first moments (the file read and split, a model loaded, the engine's first batch, which would
    make 5 sentences in a second read as 10 minutes left) are its pace, nor is its first
    ``PACE_S`` (a batch or two: a resumed run's first new sentences come few among its reused
    ones: 12 in a fraction of a second read as 85 s left when 5 were). None until it is known."""
    if job.status != "running" or not job.paced or job.decoded <= job.paced_decoded or not job.total:
        return None
    elapsed = (now or time.time()) - job.paced
    if elapsed < PACE_S:
        return None
    return max(0.0, elapsed / (job.decoded - job.paced_decoded) * (job.total - job.done))


def view(job: Job) -> dict[str, Any]:
    """What a client is told of a job (the HTTP door's JSON; gRPC's ``FileJob`` has the same fields)."""
    return {
        "id": job.id,
        "status": job.status,
        "filename": job.filename,
        "source": job.source_language,
        "target": job.target,
        "model": job.model,  # once done, the model that translated it (the router's where it named none)
        "done": job.done,
        "total": job.total,
        "reused": job.reused,
        "decoded": job.decoded,
        "remaining_s": remaining_s(job),
        "error": job.error,
        "glossary_id": job.glossary_id,
        "created": job.created,
        "expires": job.expires,
    }


def finished(job: Job, translated: TranslatedFile, resume: Resume, retention_s: float) -> dict[str, Any]:
    """The record's changes once ``job`` is translated: done, with its counts (sentences, and the
    characters of text translated, as TranslateFile counts them) and its file, and the model
    and languages its translation used where the job left them to the server (``translated``'s,
    as TranslateFile reports them: for a file of several languages, the one detected for its
    texts together). A finished job is never claimed again, so its model may name the one used.
    A job that ran past its expiry is kept ``retention_s`` from its end (:func:`kept`)."""
    return dict(
        status="done",
        expires=kept(job, retention_s),
        done=translated.sentences,
        total=translated.sentences,
        reused=resume.reused,
        decoded=resume.decoded,
        media_type=translated.media_type,
        bytes=job.bytes + len(translated.content),
        model=job.model or translated.model,  # none named: the model the router chose
        target=job.target or translated.target_language,  # none named: the one used names the file
        detected=translated.detected.language if translated.detected else "",
        characters=translated.characters,
    )


def kept(job: Job, retention_s: float) -> float:
    """When ``job``, ending now, expires: as set at its submission, or ``retention_s`` from now where
    it ran past that (the store never deletes a running job), so its result can still be fetched."""
    return max(job.expires, time.time() + retention_s)
