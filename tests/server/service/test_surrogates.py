"""Surrogates of glossary terms on the bundled translator: which renderings are sane, which
targets are foreign to the model, and how a sentence's terms are written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.contract.target_text import target_side
from attnserve.server.service import surrogates
from attnserve.server.service.glossary import compile_glossary
from attnserve.server.shared.errors import InvalidRequest
from attnserve.server.translation import DecodeOptions, Hypothesis, TranslationEngine, load_translation_sessions

COMMITTED = Path(__file__).resolve().parents[3] / "models" / "repo" / "translator-en-de"


@pytest.fixture(scope="module")
def bundled():
    """The bundled translator's engine, running on its own event loop."""
    manifest = load_manifest(COMMITTED)
    encoder, decoder = load_translation_sessions(COMMITTED, manifest, intra_op_threads=1)
    engine = TranslationEngine(COMMITTED, manifest, encoder, decoder)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(engine.start())
    yield engine, loop
    loop.run_until_complete(engine.stop(1.0))
    loop.close()


def ids(engine: TranslationEngine, text: str) -> tuple[int, ...]:
    return tuple(target_side(engine.tokenizer).encode(text, add_special_tokens=False).ids)


def test_renderings_that_are_not_sane_short_words_are_not_used(bundled):
    engine, _ = bundled
    tok, eos = engine.tokenizer, engine.spec.eos_id

    def rendered(text: str, finish: str = "eos", source: str = "March") -> tuple[int, ...] | None:
        tokens = [*ids(engine, text), eos] if finish == "eos" else list(ids(engine, text))
        return surrogates.rendering(tok, source, Hypothesis(text, tokens, 0.0, 0.0, finish), 2)

    assert rendered("März") == ids(engine, "März")
    assert rendered("März.") == ids(engine, "März")  # punctuation the source term lacks: off
    assert rendered("FebruarFebruarte") is None  # a stutter
    assert rendered("März", finish="length") is None  # not finished
    assert rendered("der dritte Monat des Jahres im Kalender") is None  # longer than 2 x 2 + 2 tokens
    assert rendered(".") is None


def test_a_surrogate_is_written_in_the_term_s_place_and_the_target_swapped_in(bundled):
    engine, _ = bundled
    glossary = compile_glossary((("Monday", ""),), engine.tokenizer, str.strip)
    term = glossary.terms["Monday"]
    own = ids(engine, "Montag")
    written = surrogates.with_surrogate(engine.tokenizer, term, own)
    assert (written.initial, written.spaced) == (own, ids(engine, " Montag"))
    assert written.target_tokens == (term.spaced, term.initial) and written.target == "Monday"
    assert surrogates.with_surrogate(engine.tokenizer, term, ids(engine, "Monday")) is term  # it spells the target


def test_only_targets_foreign_to_the_model_get_a_surrogate_once_per_model(bundled):
    engine, loop = bundled
    entries = (("March", "MÄRZ"), ("Monday", ""), ("Friday", "Freitag"), ("July", "Heumond"))
    glossary = compile_glossary(entries, engine.tokenizer, str.strip)
    sentences = ["Monday, March 3, 2025", "next Friday at 6:00 PM", "on the 4th of July"]
    bound = loop.run_until_complete(surrogates.bind(engine, glossary, sentences, DecodeOptions()))
    assert {s: t.surrogate for s, t in bound.surrogates.items()} == {
        "March": "März",
        "Monday": "Montag",
        "July": "Juli",
    }
    (march, monday) = (c.term for c in bound.constraints(sentences[0]))
    assert {march.target, monday.target} == {"MÄRZ", "Monday"}
    (friday,) = bound.constraints(sentences[1])
    assert friday.term.target_tokens is None  # the model's own word: written as it is
    generated = engine.tokens_generated_total
    again = loop.run_until_complete(surrogates.bind(engine, glossary, sentences, DecodeOptions()))
    assert again.surrogates == bound.surrogates and engine.tokens_generated_total == generated  # decided once


def test_terms_whose_surrogates_could_pay_for_each_other_are_written_as_their_targets(bundled):
    engine, _ = bundled
    glossary = compile_glossary((("Monday", ""), ("Mon", "MONTAG")), engine.tokenizer, str.strip)
    own = ids(engine, "Montag")  # both written as the model's "Montag": one span, two targets
    bound = glossary.with_surrogates(
        {s: surrogates.with_surrogate(engine.tokenizer, t, own) for s, t in glossary.terms.items()}
    )
    assert all(c.term.target_tokens is not None for c in bound.constraints("Monday"))
    assert {c.term.target for c in bound.constraints("Monday or Mon")} == {"Monday", "MONTAG"}
    assert all(c.term.target_tokens is None for c in bound.constraints("Monday or Mon"))


def test_the_length_budget_covers_the_longer_of_surrogate_and_target(bundled):
    engine, loop = bundled
    glossary = compile_glossary((("March", "MÄRZ"),), engine.tokenizer, str.strip)
    bound = loop.run_until_complete(surrogates.bind(engine, glossary, ["March"], DecodeOptions()))
    (c,) = bound.constraints("March")
    assert len(c.term.spaced) == 1 and len(c.term.target_tokens[0]) == 4
    assert bound.options("March", DecodeOptions(), 4).constraints
    with pytest.raises(InvalidRequest, match="'March'.*max_new_tokens"):
        bound.options("March", DecodeOptions(), 3)
