"""An exact-match cache of sentence translations, shared by every door: a document's sentences
seen in an earlier request, a resubmitted file and UI strings sent again come back without a
decode.

It sits in front of the one engine call of the translation service (``sentences``' whole calls of
a request's distinct sentences), below every door: attnserve.v1, KServe v2 (gRPC, REST), Triton's
generate, LibreTranslate and the file routes and jobs all go through it. A sentence repeated
within one request is decoded once before it reaches the cache (``documents._distinct``; a file's
sentences, split in pieces, in ``sentence_flow``).

The key is everything the engine is given for the sentence, so a hit is what a decode would
return: the model (name and version: the sha256 of its ``model.json``, which holds every file's),
the language pair, the sentence's source token ids (its language token included), the
effective ``max_new_tokens`` and every field of its ``DecodeOptions`` (beam size, length
penalty, the glossary's terms and their surrogates, the target prefix, what the result keeps,
...), read from the dataclass's fields, so an option added later is part of the key without an
edit here (``tests/server/service/test_translation_cache.py`` checks both).

- **Greedy and beam search only.** Sampling requests are never looked up nor stored: their
  output is meant to differ from call to call.
- **What a request keeps is kept.** A request for word alignments or inline-markup placement
  keeps each step's cross-attention (or the encoder's output) in its results; the cache holds
  those arrays with the entry, their bytes counted, under the key of those options, so a
  resubmitted file with styled paragraphs hits too. Scores (log-probability, score) are part of
  every hypothesis. A hit reports 0 ms of queue, encode and decode time.
- **Bounded in bytes, LRU** (``--translation-cache-mb``; 0 turns it off): each entry counts its
  key, its hypotheses (text, token ids, scores) and arrays as Python holds them; the least
  recently used entries go first. One cache per server process (``--workers N``: N caches).
- **A reload empties it for the model** (``forget``, from the repository's reload and unload),
  and sentences still decoding on the old version are answered but not kept; the version in the
  key already keeps an old version's entries from ever being served.
- Not cached: streams (they decode token by token for the client) and the glossary's surrogate
  probes (``surrogates.py`` keeps its own).

Metrics: ``attnserve_translation_cache_hits_total{model}``, ``..._misses_total{model}`` (per
distinct sentence looked up), ``attnserve_translation_cache_bytes{model}``,
``attnserve_translation_cache_evictions_total{model}``.
"""

from __future__ import annotations

import dataclasses
import sys
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge

from attnserve.contract.deadline import Deadline

from ..translation import Hypothesis, TranslationResult
from ..translation.prepared import Prepared


class ValidTranslation(Protocol):
    """What the cache reads of the service's validated request (``requests.ValidTranslation``,
    which holds the cache: a Protocol here keeps that module free of this one)."""

    model: Any  # the LoadedModel: its name and fingerprint (the version)
    source_language: str
    target_language: str
    cache: TranslationCache | None


MB = 1 << 20
# What Python spends on an entry beyond the objects counted one by one: the key's tuple, the entry
# and the OrderedDict's slot and link (about 260 bytes with tracemalloc on CPython 3.11).
ENTRY_OVERHEAD = 320
Decode = Callable[..., Awaitable[list[TranslationResult]]]  # engine.translate(prepared, deadline=...)
Stored = tuple[int, Any, tuple]  # (source tokens, memory or None, hypotheses as compact tuples)


def field_values(obj: Any) -> tuple:
    """Every field of the dataclass ``obj``, in declaration order (not its ``==``, which would
    leave out a field declared ``compare=False``)."""
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


def deep_bytes(value: Any, seen: set[int] | None = None) -> int:
    """What ``value`` holds in memory, following tuples, sets and dataclasses (an option's glossary
    terms); each object once."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        size += sum(deep_bytes(v, seen) for v in value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        size += deep_bytes(field_values(value), seen)
    return size


def _kept(a: np.ndarray | None) -> np.ndarray | None:
    """The array as the entry keeps it: its own data (a view of a batch's buffer would keep the
    whole buffer alive), read-only, since it is shared with the result it came with and every hit."""
    if a is None:
        return None
    if not a.flags.owndata:
        a = a.copy()
    a.setflags(write=False)
    return a


def _store(result: TranslationResult) -> tuple[Stored, int]:
    """``result`` as the cache keeps it (token ids as int32 arrays) and its bytes."""
    hypotheses, size = [], 0
    for h in result.hypotheses:
        ids, written, attention = array("i", h.token_ids), array("i", h.written_ids), _kept(h.attention)
        kept = (h.text, ids, h.logprob, h.score, h.finish_reason, written, attention)
        hypotheses.append(kept)
        size += sys.getsizeof(kept) + sys.getsizeof(h.text) + sys.getsizeof(ids) + sys.getsizeof(written)
        size += 2 * sys.getsizeof(h.logprob) + (0 if attention is None else sys.getsizeof(attention))
    memory = _kept(result.memory)
    stored = (result.source_tokens, memory, tuple(hypotheses))
    size += sys.getsizeof(stored) + sys.getsizeof(stored[2]) + (0 if memory is None else sys.getsizeof(memory))
    return stored, size


def _result(stored: Stored) -> TranslationResult:
    """A hit as the engine would have returned it, with no time spent."""
    source_tokens, memory, hypotheses = stored
    rebuilt = [Hypothesis(t, ids.tolist(), lp, s, f, w.tolist(), att) for t, ids, lp, s, f, w, att in hypotheses]
    return TranslationResult(rebuilt, source_tokens, 0.0, 0.0, 0.0, 0.0, memory)


@dataclasses.dataclass
class _Entry:
    model: str
    size: int
    stored: Stored


class TranslationCache:
    """Sentence translations by what the engine is given for them, LRU within ``max_bytes``
    (0: off); see the module docstring. Used on the event loop only."""

    def __init__(self, max_bytes: int, registry: CollectorRegistry | None = None) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._model_bytes: dict[str, int] = {}
        self._forgotten: dict[str, int] = {}  # model -> how often forgotten: a decode begun before is not kept
        r = registry if registry is not None else CollectorRegistry()
        self.hits = Counter("attnserve_translation_cache_hits", "sentences served by the cache", ["model"], registry=r)
        self.misses = Counter(
            "attnserve_translation_cache_misses", "sentences looked up and decoded", ["model"], registry=r
        )
        self.evictions = Counter(
            "attnserve_translation_cache_evictions", "entries dropped to stay within the bytes", ["model"], registry=r
        )
        self.bytes_gauge = Gauge("attnserve_translation_cache_bytes", "bytes the cache holds", ["model"], registry=r)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def keys_of(self, valid: ValidTranslation, prepared: Prepared) -> list[tuple]:
        """One key per text of ``prepared`` (see the module docstring): its every field."""
        model = valid.model
        head = (model.name, model.fingerprint, valid.source_language, valid.target_language)
        head += (prepared.max_new_tokens, field_values(prepared.options))
        return [(*head, array("i", source).tobytes()) for source in prepared.sources]

    async def translate(
        self, valid: ValidTranslation, prepared: Prepared, decode: Decode, deadline: Deadline | None
    ) -> list[TranslationResult]:
        """``decode(prepared, deadline=deadline)``'s results, the texts found here taken from the
        cache and only the others decoded (and kept)."""
        if not self.enabled or prepared.options.sampling:
            return await decode(prepared, deadline=deadline)
        model = valid.model.name
        keys = self.keys_of(valid, prepared)
        found: list[TranslationResult | None] = [self.get(key) for key in keys]
        misses = [i for i, result in enumerate(found) if result is None]
        self.hits.labels(model).inc(len(keys) - len(misses))
        self.misses.labels(model).inc(len(misses))
        if misses:
            todo = dataclasses.replace(prepared, sources=[prepared.sources[i] for i in misses])
            epoch = self._forgotten.get(model, 0)
            decoded = await decode(todo, deadline=deadline)
            keep = self._forgotten.get(model, 0) == epoch  # not a version a reload retired meanwhile
            options_size = deep_bytes(keys[0][-2])  # the key's options, counted with every entry
            for i, result in zip(misses, decoded):
                if keep:
                    self.put(keys[i], model, result, options_size + sys.getsizeof(keys[i][-1]))
                found[i] = result
        return found  # type: ignore[return-value]

    def get(self, key: tuple) -> TranslationResult | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return _result(entry.stored)

    def put(self, key: tuple, model: str, result: TranslationResult, key_bytes: int = 0) -> None:
        """Keep ``result`` under ``key``; the least recently used entries go to make room (one
        larger than the whole cache is not kept)."""
        stored, size = _store(result)
        size += key_bytes + ENTRY_OVERHEAD
        if size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = _Entry(model, size, stored)
        self._add(model, size)
        while self.bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._add(old.model, -old.size)
            self.evictions.labels(old.model).inc()

    def forget(self, model: str) -> int:
        """Drop every entry of ``model`` (a reload or unload); returns how many."""
        self._forgotten[model] = self._forgotten.get(model, 0) + 1
        gone = [key for key, entry in self._entries.items() if entry.model == model]
        for key in gone:
            self._add(model, -self._entries.pop(key).size)
        return len(gone)

    def model_bytes(self, model: str) -> int:
        return self._model_bytes.get(model, 0)

    def _add(self, model: str, size: int) -> None:
        self.bytes += size
        self._model_bytes[model] = self._model_bytes.get(model, 0) + size
        self.bytes_gauge.labels(model).set(self._model_bytes[model])


async def translate(
    valid: ValidTranslation, prepared: Prepared, decode: Decode, deadline: Deadline | None
) -> Sequence[TranslationResult]:
    """The engine call of a checked request's sentences, through the request's cache where it has one."""
    cache = valid.cache
    if cache is None:
        return await decode(prepared, deadline=deadline)
    return await cache.translate(valid, prepared, decode, deadline)
