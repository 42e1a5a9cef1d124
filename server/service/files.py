"""Files through the translation service: one file is one request to the engine.

``FileTranslation.translate(FileRequest, progress)``:

1. the file is read by its format (``server.files``) in a file worker process
   (``files.sandbox``: ``--file-workers``, ``--file-cpu-seconds``, ``--file-memory-bytes``
   and the request's deadline): its text units (paragraphs, slide text, subtitle cues, html
   pages); a zip package's directory is checked before anything is inflated;
2. its characters (the text the model reads, not markup or layout) are checked against
   ``--max-file-chars``, where LibreTranslate charges a file ``bytes / char_limit`` requests:
   the same budget, counted on what is translated;
3. the units go to the translation service as ONE request (``TranslationService.validate``
   with ``file=True``: the file limits in place of the per-request ones, and
   ``--file-timeout-seconds``): every sentence of the file is split, deduplicated and
   decoded together through continuous batching, as a long document is, with
   ``progress(done, total)`` told as engine calls finish. The units are split in pieces of
   whole units that go to the engine as soon as they are split (``sentence_flow``): a
   200-page file's first sentences decode while the rest is split, and its total is 0 (not
   known) until its last piece is split; the sentences, their results and the file are those
   of one split;
4. the translations are written back in a file worker, which reads the file again (a parsed
   file does not pickle: ``files.jobs``) and places each paragraph's translation on its runs
   (``files.run_placement``): by word alignment where the paragraph has words in two runs or more
   and the model has an aligner (their sentences aligned on the work pool as the engine
   decodes the rest, ``run_alignment``), by proportion of words otherwise; the file's CPU
   budget is what its reading left, its deadline the same.

Every door (LibreTranslate's ``/translate_file``, attnserve.v1 ``TranslateFile``, the web
page) calls this, and stores or streams the bytes it returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .. import files
from ..documents import TEXT, PreparedDocument
from ..files import jobs
from ..files.sandbox import FileWorkers, Limits
from ..shared.calls import Call
from ..shared.errors import LimitExceeded, ServingError
from ..translation import DecodeOptions, TranslationResult
from . import alignments, documents, limits
from .requests import AUTO, Deadline, Detection, TranslationRequest, ValidTranslation
from .routing import LanguageNotServed
from .run_alignment import RunAligner
from .sentence_flow import SentenceFlow, split_pieces
from .stored_glossaries import with_stored_glossary
from .translation import TranslationService, bounded

# (sentences done, sentences in the file: 0 until the file is split to its end)
FileProgress = Callable[[int, int], None]


# Greedy, as a text's default; a file returns no scores, so greedy skips the log-softmax per step.
FILE_OPTIONS = DecodeOptions(return_scores=False)


@dataclass(frozen=True)
class FileRequest:
    caller: Call
    filename: str  # its extension picks the format
    content: bytes
    source_language: str  # a code, or "auto"
    target_language: str
    model: str = ""
    deadline: Deadline | None = None
    glossary_id: str = ""  # a stored glossary of the caller's key, read when the file is
    # (or its entries, read once: a file job's, resolved when it was submitted)
    stored_glossary: tuple[tuple[str, str], ...] = ()


@dataclass
class Resume:
    """A file job's sentences across runs: ``known`` (source sentence -> translation) are not
    decoded again; ``learned(pairs)`` hears of every sentence the engine translates;
    ``reused`` and ``decoded`` count the file's sentences of each kind, as it is split."""

    known: Mapping[str, str]
    learned: Callable[[dict[str, str]], None]
    reused: int = 0
    decoded: int = 0
    sources: list[str] = field(default_factory=list)  # the file's sentences split so far

    def add(self, sources: Iterable[str]) -> None:
        """The next sentences of the file, as it is split."""
        for source in sources:
            self.sources.append(source)
            self.reused += source in self.known

    def listener(self, then: documents.Decoded | None) -> documents.Decoded:
        """The decoded callback telling ``learned`` (and ``then``) of the sentences at ``positions``."""

        def decoded(positions: Sequence[int], results: Sequence[TranslationResult]) -> None:
            self.decoded += len(positions)
            self.learned({self.sources[p]: r.hypotheses[0].text for p, r in zip(positions, results)})
            if then is not None:
                then(positions, results)

        return decoded


@dataclass(frozen=True)
class TranslatedFile:
    filename: str  # the request's
    content: bytes
    media_type: str
    model: str
    source_language: str
    target_language: str
    characters: int  # of text translated
    sentences: int
    detected: Detection | None = None


def styled(text: jobs.FileText, valid: ValidTranslation) -> list[tuple[tuple[int, int], ...]] | None:
    """The styled stretches of each paragraph whose runs are placed by alignment, where its
    sentences are segmented as html's are at its elements (``documents.splitter``), so that a
    paragraph is translated and placed alike as .docx, html and markdown."""
    if text.format != TEXT or not valid.model.aligns or len(text.units) != len(text.texts):
        return None
    return [files.styled_spans(unit) for unit in text.units]


class FileTranslation:
    """Files for every door (see the module docstring); one per server, beside the text service."""

    def __init__(self, service: TranslationService) -> None:
        self.service = service
        self.settings = s = service.settings
        self.workers = FileWorkers(s.file_workers, Limits(s.file_cpu_seconds, s.file_memory_bytes))

    def start(self) -> None:
        """A file worker spawned ahead, in the background, as the server starts (``files.sandbox``)."""
        self.workers.start()

    def close(self) -> None:
        self.workers.close()

    def check_size(self, size: int) -> None:
        limit = self.settings.max_file_bytes
        if size > limit:
            raise LimitExceeded(
                f"the file is {size:,} bytes; this server translates files of at most {limit:,} (--max-file-bytes)",
                "max_file_bytes", size, limit,
            )  # fmt: skip

    def check_quota(self, client: str) -> None:
        """A file job's client refused once it has reached its monthly quota (``usage``): its
        characters are known only once the job runs, and counted then."""
        self.service.usage.check(client)

    def check_route(self, source: str, target: str, model: str = "") -> None:
        """A file job's languages checked as it is submitted: a pair no model serves (directly or
        through ``--pivot-language``) is refused then, not run as a job that fails (a named
        model, and a source to detect, are checked when the job runs)."""
        limits.check_language_codes(source, target)
        if model or not (source or target):
            return
        table = self.service.languages.table
        try:
            table.route("" if source == AUTO else source, target)
        except LanguageNotServed:
            if table.pivot_route(source, target, self.settings.pivot_language) is None:
                raise

    def serves(self, source: str, target: str, model: str = "") -> bool:
        """Whether this server's models run a job of these languages (or of that model): servers
        of other model repositories may share its state store, each running the jobs it serves."""
        if model:
            return model in self.service.registry.served()
        try:
            self.check_route(source, target)
        except ServingError:
            return False
        return True

    async def stored_glossary(
        self, caller: Call, glossary_id: str, source: str, target: str, model: str = ""
    ) -> tuple[tuple[str, str], ...]:
        """The entries of the stored glossary ``glossary_id`` of ``caller``'s key, for the
        languages (or model) named: NOT_FOUND for an id the key has not, INVALID_ARGUMENT for a
        glossary of other languages or a source to detect (``stored_glossaries``)."""
        lookup = TranslationRequest(
            caller, (), model=model, source_language=source, target_language=target, glossary_id=glossary_id
        )
        return (await with_stored_glossary(self.service.stored_glossaries, lookup)).stored_glossary

    async def _terms(self, request: FileRequest) -> tuple[tuple[str, str], ...]:
        """The request's stored glossary entries: its ``glossary_id``'s, read now, else those it carries."""
        if not request.glossary_id:
            return request.stored_glossary
        args = (request.source_language, request.target_language, request.model)
        return await self.stored_glossary(request.caller, request.glossary_id, *args)

    async def read(
        self, filename: str, content: bytes, deadline: Deadline | None = None, target_language: str = ""
    ) -> tuple[jobs.FileText, float]:
        """The file's texts, read in a file worker, within the file limits; and the CPU seconds
        its reading left of ``--file-cpu-seconds``. ``target_language``: the request's (which
        segments of an XLIFF file are read depends on it)."""
        files.reader(filename)  # an unsupported type is refused before anything is read
        self.check_size(len(content))
        budget = self.settings.file_cpu_seconds
        args = (filename, content, self.settings.max_file_bytes, self.settings.max_file_chars, target_language)
        done = await self.workers.run(jobs.read_text, args, budget, deadline)
        text: jobs.FileText = done.result
        limit = self.settings.max_file_chars
        if text.characters > limit:
            raise LimitExceeded(
                f"the file holds {text.characters:,} characters of text; this server translates at most "
                f"{limit:,} per file (--max-file-chars)",
                "max_file_chars", text.characters, limit,
            )  # fmt: skip
        return text, max(0.0, budget - done.cpu_seconds)

    async def _split(
        self,
        valid: ValidTranslation,
        text: jobs.FileText,
        flow: SentenceFlow,
        aligner: RunAligner,
        resume: Resume | None,
    ) -> list[PreparedDocument]:
        """The file's documents, split in pieces (``sentence_flow.split_pieces``), each handed to
        ``flow`` (and to ``aligner`` and ``resume``) as soon as it is split."""
        service, pool, prepared = self.service, self.service.pool, []
        place_inline = text.format != TEXT and valid.model.aligns
        pieces = split_pieces(valid, pool, place_inline, styled(text, valid))
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                keep: Iterable[int] = aligner.add(piece.start, piece.prepared, flow.added)
                if place_inline:  # html pages and markdown: every sentence, for its inline markup
                    keep = range(flow.added, flow.added + sum(p.segments for p in piece.prepared))
                if resume is not None:
                    resume.add(s for p in piece.prepared for s in p.sources)
                with_terms = await service.with_surrogates(valid, piece.prepared)
                flow.add(await documents.work_of(with_terms, piece.prepared, pool), keep, piece.last)
                prepared += piece.prepared
                flow.check()
        service.counted(valid, prepared)
        return prepared

    async def _translated(
        self, valid: ValidTranslation, text: jobs.FileText, progress: FileProgress | None, resume: Resume | None
    ) -> tuple[list[TranslationResult], jobs.Preferred | None, int]:
        """The texts' results, where their words go on their runs, and the file's sentences.
        The file is split in pieces that go to the engine as they are split
        (``sentence_flow.split_pieces``, ``SentenceFlow``), so its first sentences decode while the
        rest is split; ``progress(done, total)`` tells 0 for the total until the last piece is in.
        Words go on runs by word alignment for paragraphs with words in two runs or more where
        the model has an aligner, aligned as the engine decodes the rest (``run_alignment``); None:
        by proportion. Html pages (EPUB, .html) and markdown place their inline markup by
        alignment, as ``/translate`` does; every sentence of theirs keeps what alignment reads
        (whether a later piece has inline markup is not known while the first ones decode)."""
        pool = self.service.pool
        aligner = RunAligner(valid, text, pool, self.settings.max_aligned_runs)
        decoded = aligner.decoded if aligner.needed else None
        if resume is not None:
            decoded = resume.listener(decoded)
        done = 0

        def advanced(n: int) -> None:
            nonlocal done
            done = min(flow.total, done + n) if flow.total else done + n
            if progress is not None:
                progress(done, flow.total)

        flow = SentenceFlow(valid, advanced, decoded, resume.known if resume is not None else None)
        try:
            prepared = await self._split(valid, text, flow, aligner, resume)
            if progress is not None:
                progress(done, flow.total)  # the total, known once the last piece is in
            sentences = await flow.results()
            # a resumed job's finished sentences kept no attention: without an aligner graph their
            # markup goes around the whole sentence, as without alignments
            inline = any(s.inline for p in prepared for s in p.document.segments)
            attended = valid.model.aligner is not None or all(r.hypotheses[0].attention is not None for r in sentences)
            aligned = await alignments.align(valid, prepared, sentences, pool) if inline and attended else None
            results = await documents.join(valid, prepared, sentences, aligned, pool)
            return results, await aligner.placement(results), flow.total
        except BaseException:
            await flow.abandon()
            await aligner.cancel()
            raise

    async def translate(
        self, request: FileRequest, progress: FileProgress | None = None, resume: Resume | None = None
    ) -> TranslatedFile:
        """The file translated; its characters of text count in its caller's usage once it is
        written (``usage``), and are refused past the caller's quota once it is read."""
        deadline = limits.time_limit(request.deadline, self.settings.file_timeout_seconds, file=True)
        terms = await self._terms(request)  # before the file is read: an unknown id costs no file worker
        text, cpu_left = await self.read(request.filename, request.content, deadline, request.target_language)
        wanted = TranslationRequest(
            request.caller,
            text.texts,
            model=request.model,
            format=text.format,
            source_language=request.source_language,
            target_language=request.target_language,
            options=FILE_OPTIONS,
            deadline=deadline,
            stored_glossary=terms,
        )
        service = self.service
        with service.usage.charge(request.caller.client, text.characters) as charge:
            async with service.validate(wanted, file=True) as valid:
                translated = self._translated(valid, text, progress, resume)
                results, preferred, total = await bounded(translated, valid.request.deadline)
                service.answered(valid, [max(r.queue_ms for r in results)])  # one item: the file
            written = await self._write(request, [r.hypotheses[0].text for r in results], preferred, cpu_left, valid)
            charge.answered()
        return TranslatedFile(
            request.filename,
            written,
            text.media_type,
            valid.model.name,
            valid.source_language,
            valid.target_language,
            text.characters,
            total,
            valid.detected,
        )

    async def _write(
        self,
        request: FileRequest,
        translations: list[str],
        preferred: jobs.Preferred | None,
        cpu_left: float,
        valid: ValidTranslation,
    ) -> bytes:
        """The file with its translations, written in a file worker within what its reading left."""
        settings = self.settings
        args = (
            request.filename,
            request.content,
            settings.max_file_bytes,
            translations,
            preferred,
            settings.max_aligned_runs,
            request.target_language,  # as read: the same segments of an XLIFF file
        )
        written = await self.workers.run(jobs.write_file, args, cpu_left, valid.request.deadline)
        return written.result
