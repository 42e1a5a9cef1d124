"""The engine feeds ``screen_vocab`` (export/screen_vocab.py) only on steps whose logits nothing
but the argmax reads: the bundled trained translator's greedy tokens are the unscreened decoder's;
beam search, scores and glossary terms never screen (their results unchanged); a decoder without
the input, or one screened for other never-generated ids, decodes as always."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.export.modeldir import seal
from attnserve.export.screen_vocab import screen_decoder
from attnserve.export.zoo import REPO
from attnserve.server.translation import DecodeOptions, TranslationEngine, load_translation_sessions
from attnserve.server.translation.constraints import GuidedSearch
from attnserve.server.translation.search import Argmax, BeamSearch, SingleSearch
from attnserve.server.translation.sessions import screens_for

from .conftest import random_texts, translate_together

BUNDLED = REPO / "translator-en-de"
TEXTS = [
    "Monday, March 3, 2025",
    "at 3:45 PM",
    "more than 1,500 miles",
    "on the 21st of June",
    "between 7 and 9 o'clock",
    "12.5 kg",
    "$ 1,250,000",
    "the weather is nice today",  # not the model's domain: flatter rows
    "from 8:00 to 17:30 on weekdays",
    "no later than Friday, December 19",
]


@pytest.fixture(scope="module")
def screened_dir(tmp_path_factory) -> Path:
    """The bundled translator with its decoder screened, re-sealed."""
    out = tmp_path_factory.mktemp("screened") / "translator-en-de"
    shutil.copytree(BUNDLED, out)
    manifest = screen_decoder(out, load_manifest(out))
    assert manifest.extra["screen_vocab"]["never_ids"] == [0, 1]
    seal(out, manifest)
    return out


def engine_of(path: Path, manifest=None) -> TranslationEngine:
    manifest = manifest or load_manifest(path)
    encoder, decoder = load_translation_sessions(path, manifest, intra_op_threads=1)
    return TranslationEngine(path, manifest, encoder, decoder)


def watch_screened_steps(engine: TranslationEngine) -> list[bool]:
    """Per decoder step, whether the decoder screened it: it returned each row's argmax
    (``screen_ids``) and (B, 1) logits, the best logit, instead of the (B, V) projection."""
    runner, seen = engine._scheduler.runner, []
    step = runner.step

    def spy(cache, input_ids):
        logits = step(cache, input_ids)
        ids = runner.screen_ids
        seen.append(ids is not None)
        if ids is not None:
            assert logits.shape == (len(ids), 1) and ids.dtype == np.int64
        return logits

    runner.step = spy
    return seen


def results(path: Path, *calls, manifest=None) -> tuple[list, list[int]]:
    engine = engine_of(path, manifest)
    seen = watch_screened_steps(engine)
    out = translate_together(engine, *calls)
    return [[(h.token_ids, h.logprob, h.score) for h in r.hypotheses] for call in out for r in call], seen


def test_greedy_tokens_of_the_screened_decoder_are_the_unscreened_ones(screened_dir):
    greedy = DecodeOptions(return_scores=False)
    expected, full_steps = results(BUNDLED, (TEXTS, greedy))
    got, steps = results(screened_dir, (TEXTS, greedy))
    assert [[h[0] for h in r] for r in got] == [[h[0] for h in r] for r in expected]
    assert steps and all(steps)  # every step screened
    assert not any(full_steps)  # the bundled decoder has no screen: full logits on every step


@pytest.mark.parametrize(
    "options",
    [
        DecodeOptions(beam_size=4, num_hypotheses=2),
        DecodeOptions(return_scores=True),
        DecodeOptions(return_scores=False, temperature=1.0, top_k=5, seed=3),
    ],
    ids=["beam", "scores", "sampling"],
)
def test_steps_that_read_more_than_the_argmax_are_never_screened(screened_dir, options):
    expected, _ = results(BUNDLED, (TEXTS[:4], options))
    got, steps = results(screened_dir, (TEXTS[:4], options))
    assert got == expected  # tokens, log-probabilities and scores
    assert not any(steps)


def test_a_greedy_row_next_to_a_beam_search_is_not_screened_while_it_runs(screened_dir):
    calls = ((TEXTS[4:], DecodeOptions(return_scores=False)), (TEXTS[:2], DecodeOptions(beam_size=3)))
    expected, _ = results(BUNDLED, *calls)
    got, _ = results(screened_dir, *calls)
    assert got == expected


def test_a_left_padded_decoder_is_fed_the_flag_too(tiny_left_padded, tmp_path):
    """The left-padded layout runs through ``session.run`` feeds, not the in-place binding."""
    out = tmp_path / "tiny-left-padded"
    shutil.copytree(tiny_left_padded.path, out)
    seal(out, screen_decoder(out, load_manifest(out)))
    texts, greedy = random_texts(6, seed=5), DecodeOptions(return_scores=False, max_new_tokens=12)
    expected, _ = results(tiny_left_padded.path, (texts, greedy))
    got, steps = results(out, (texts, greedy))
    assert [[h[0] for h in r] for r in got] == [[h[0] for h in r] for r in expected]
    assert steps and all(steps)


def test_a_decoder_screened_for_other_ids_is_never_told_to_screen(screened_dir):
    manifest = load_manifest(screened_dir)
    record = {**manifest.extra["screen_vocab"], "never_ids": [0]}  # the engine also masks id 1
    other = dataclasses.replace(manifest, extra={**manifest.extra, "screen_vocab": record})
    _, steps = results(screened_dir, (TEXTS[:3], DecodeOptions(return_scores=False)), manifest=other)
    assert steps and not any(steps)


def test_only_a_record_of_exactly_the_never_generated_ids_screens():
    assert screens_for({"never_ids": [1, 0]}, [0, 1])
    assert not screens_for({"never_ids": [0]}, [0, 1])
    assert not screens_for(None, [0, 1]) and not screens_for({"never_ids": "0,1"}, [0, 1])


def test_only_greedy_without_scores_or_terms_reads_nothing_but_the_argmax():
    assert SingleSearch(Argmax(), eos_id=2, max_new_tokens=8, scores=False).argmax_only
    assert not SingleSearch(Argmax(), eos_id=2, max_new_tokens=8, scores=True).argmax_only
    assert not GuidedSearch(Argmax(), 2, 8, constraints=(), scores=False).argmax_only  # terms read the row's logits
    assert not BeamSearch(4, 8, 1.0, 1, 2).argmax_only
