"""A tiny random translator exported once for the whole folder, and helpers to run engines on it.

The end token gets a logit bias so beam search finishes at many different steps; greedy
rows get different ``max_new_tokens`` in the tests so they leave the batch at different
steps too.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from attnserve.contract.kinds import IN_PLACE, LEFT_PADDED
from attnserve.contract.manifest import Manifest, load_manifest
from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
from attnserve.models import TranslationConfig, TranslationTransformer, greedy_decode
from attnserve.server.service.limits import prepare
from attnserve.server.translation import EngineSettings, TranslationEngine, load_translation_sessions
from tests.support.sessions import BindingSpy

TINY = TranslationConfig(
    vocab_size=64,
    d_model=32,
    num_heads=4,
    encoder_layers=2,
    decoder_layers=2,
    ffn_dim=64,
    dropout=0.0,
    final_logits_bias=True,
    max_positions=64,
)
MAX_SOURCE_LEN, MAX_TARGET_LEN = 24, 40


@dataclass
class TinyModel:
    model: TranslationTransformer
    path: Path
    manifest: Manifest
    tokenizer: Tokenizer

    def engine(self, settings: EngineSettings | None = None, decoder=None) -> TranslationEngine:
        encoder, default_decoder = load_translation_sessions(self.path, self.manifest, intra_op_threads=1)
        return TranslationEngine(self.path, self.manifest, encoder, decoder or default_decoder, settings)


def _tiny(tmp_path_factory, kv_cache: str) -> TinyModel:
    torch.manual_seed(0)
    model = TranslationTransformer(TINY).eval()
    with torch.no_grad():
        model.logits_bias[TINY.eos_id] = 2.0
    path = tmp_path_factory.mktemp("engine") / f"tiny-mt-{kv_cache}"
    write_translation_dir(
        model,
        path,
        placeholder_tokenizer(TINY.vocab_size),
        name="tiny-mt",
        max_source_len=MAX_SOURCE_LEN,
        max_target_len=MAX_TARGET_LEN,
        kv_cache=kv_cache,
    )
    return TinyModel(model, path, load_manifest(path), Tokenizer.from_file(str(path / "tokenizer.json")))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> TinyModel:
    """The tiny translator as attnserve-export writes it now: its cache written in place."""
    return _tiny(tmp_path_factory, IN_PLACE)


@pytest.fixture(scope="session")
def tiny_left_padded(tmp_path_factory) -> TinyModel:
    """The same weights in the layout of directories exported before the in-place cache."""
    return _tiny(tmp_path_factory, LEFT_PADDED)


@pytest.fixture(params=[IN_PLACE, LEFT_PADDED])
def tiny_any(request) -> TinyModel:
    """The tiny translator in each cache layout the server loads."""
    return request.getfixturevalue("tiny" if request.param == IN_PLACE else "tiny_left_padded")


def random_texts(n: int, seed: int = 0, max_len: int = MAX_SOURCE_LEN - 1) -> list[str]:
    """Texts of the placeholder tokenizer's words ``t4``..``t63``, 1..max_len words long."""
    rng = random.Random(seed)
    return [
        " ".join(f"t{rng.randrange(4, TINY.vocab_size)}" for _ in range(rng.randrange(1, max_len + 1)))
        for _ in range(n)
    ]


def run(coro):
    """Run a coroutine on a fresh event loop (the suite has no asyncio plugin)."""
    return asyncio.run(coro)


def translate_once(engine, texts, options):
    """Start ``engine``, translate ``texts`` in one call, stop it: the results."""
    (results,) = translate_together(engine, (texts, options))
    return results


def translate_together(engine, *calls):
    """Start ``engine``, make every ``(texts, options)`` call at once (they share the decode
    batch), stop it: each call's results, in order."""

    async def main():
        await engine.start()
        try:
            return await asyncio.gather(
                *(engine.translate(prepare(engine, texts, options)) for texts, options in calls)
            )
        finally:
            await engine.stop(1.0)

    return run(main())


class SessionWrapper:
    """An onnxruntime session that records the shape of each run's first input and can be slowed
    down, or fail once: on the first run whose batch has ``fail_at_rows`` rows, whose first input's
    shape ``fail_when`` accepts, or on the next run after ``fail_next`` is set."""

    def __init__(
        self,
        session,
        delay_s: float = 0.0,
        fail_at_rows: int | None = None,
        fail_when: Callable[[tuple[int, ...]], bool] | None = None,
    ) -> None:
        self.session, self.delay_s, self.fail_at_rows, self.fail_when = session, delay_s, fail_at_rows, fail_when
        self.fail_next = False
        self.calls = 0
        self.shapes: list[tuple[int, ...]] = []

    def run(self, output_names, feeds, *args, **kwargs):
        self._call(next(iter(feeds.values())).shape)
        return self.session.run(output_names, feeds, *args, **kwargs)

    def io_binding(self):
        return BindingSpy(self.session.io_binding())

    def run_with_iobinding(self, binding, *args, **kwargs):
        """An in-place decoder's step (its inputs bound once, :class:`BindingSpy`)."""
        self._call(binding.first_shape)
        return self.session.run_with_iobinding(binding.binding, *args, **kwargs)

    def _call(self, shape: tuple[int, ...]) -> None:
        self.calls += 1
        self.shapes.append(shape)
        if (
            self.fail_next
            or (self.fail_at_rows is not None and shape[0] == self.fail_at_rows)
            or (self.fail_when is not None and self.fail_when(shape))
        ):
            self.fail_at_rows, self.fail_when, self.fail_next = None, None, False
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : injected failure")
        if self.delay_s:
            time.sleep(self.delay_s)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.fixture(scope="session")
def long_text(tiny) -> str:
    """A text whose greedy translation never ends early: it runs to max_new_tokens."""
    for text in random_texts(40, seed=99):
        src = torch.tensor([tiny.tokenizer.encode(text).ids])
        if greedy_decode(tiny.model, src, MAX_TARGET_LEN)[0].finish == "length":
            return text
    raise AssertionError("no long-running text among 40")


def record_encoder_batches(engine) -> list[int]:
    """Spy on the encoder calls of the step boundaries: how many texts each one encoded (in one or
    more runs of like source lengths)."""
    scheduler, sizes = engine._scheduler, []
    run_encoder = scheduler.runner.encode

    def spy(jobs):
        sizes.append(len(jobs))
        return run_encoder(jobs)

    scheduler.runner.encode = spy
    return sizes
