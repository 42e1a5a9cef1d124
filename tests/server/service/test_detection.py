"""Language detection among the served languages: the built-in detector (script, then py3langid)
on the hand-labelled set of benchmarks/data, the script rules, and the choice of detector."""

from __future__ import annotations

import pytest

from attnserve.benchmarks.detect import LANGUAGES, read_labelled
from attnserve.server.service.detection import LangidDetector, LinguaDetector, make_detector
from attnserve.server.service.scripts import same_script
from attnserve.server.shared.config import ConfigError


@pytest.fixture(scope="module")
def langid() -> LangidDetector:
    return LangidDetector()


def _short_accuracy(detector, languages: list[str]) -> float:
    items = [x for x in read_labelled() if x.kind == "short" and x.language in languages]
    assert len(items) >= 30 * len(languages)
    right = sum(detector.detect(x.text, languages)[0].language == x.language for x in items)
    return right / len(items)


def test_one_to_three_words_are_named_among_the_bundled_translators_languages(langid):
    assert _short_accuracy(langid, ["en", "de"]) >= 0.95


def test_one_to_three_words_are_named_among_eleven_served_languages(langid):
    """The issue's bar, 85% of 1-3 word inputs; measured 91% (benchmarks/README.md, "detect")."""
    assert _short_accuracy(langid, list(LANGUAGES)) >= 0.85


def test_sentences_and_paragraphs_are_named(langid):
    items = [x for x in read_labelled() if x.kind != "short"]
    wrong = [x for x in items if langid.detect(x.text, list(LANGUAGES))[0].language != x.language]
    assert len(wrong) <= len(items) // 50, wrong


def test_confidences_rank_only_the_given_languages(langid):
    found = langid.detect("Wir wohnen gern in diesem Haus am Fluss", ["en", "de", "fr", "nl"])
    assert found[0].language == "de" and found[0].confidence > 50
    assert {d.language for d in found} <= {"en", "de", "fr", "nl"}
    assert [d.confidence for d in found] == sorted((d.confidence for d in found), reverse=True)
    assert 99 <= sum(d.confidence for d in found) <= 101 and all(0 < d.confidence <= 100 for d in found)


def test_the_script_names_the_language_a_statistical_guess_would_miss(langid):
    served = ["en", "de", "fr", "ru", "zh", "ja", "ar"]
    assert same_script("Привет", served) == ["ru"]
    assert same_script("駅はどこですか", served) == ["ja"]  # kana among Han: Japanese
    assert same_script("火车站", served) == ["zh", "ja"]  # Han alone: either, the detector decides
    assert same_script("fresa", served) == ["en", "de", "fr"]
    assert same_script("12345 !", served) == served  # no letters: every language stays in
    assert same_script("Привет", ["en", "de"]) == ["en", "de"]  # no served language writes it
    assert [d.language for d in langid.detect("Привет", served)] == ["ru"]


def test_served_codes_with_regions_are_detected_by_their_language(langid):
    found = langid.detect("Obrigado pelo seu pedido, a encomenda chega amanhã", ["en", "pt-BR", "es"])
    assert found[0].language == "pt-BR"


def test_the_setting_picks_the_detector():
    assert make_detector("off") is None
    assert isinstance(make_detector("langid"), LangidDetector)
    try:
        import lingua  # noqa: F401
    except ImportError:
        assert isinstance(make_detector("auto"), LangidDetector)
        with pytest.raises(ConfigError, match=r"pip install 'attnserve\[detect\]'"):
            make_detector("lingua")
    else:
        assert isinstance(make_detector("lingua"), LinguaDetector)
        assert isinstance(make_detector("auto"), LinguaDetector)


def test_a_language_not_served_is_answered_among_the_served_ones_at_a_low_confidence(langid):
    """Among en, de and fr alone, Italian read as English at 92%, Dutch as English; LibreTranslate
    answers confidence 0 for a language it does not serve. The ranking stays the served one's."""
    served = ["en", "de", "fr"]
    for text in ("Ciao come stai oggi", "Dziękuję bardzo za pomoc", "Obrigado pelo seu pedido", "Hoe gaat het met je?"):
        found = langid.detect(text, served)
        assert found and {d.language for d in found} <= set(served)
        assert found[0].confidence < 50, (text, found)
    # a variety of a served language is that language: Han the whole model reads as Cantonese
    found = langid.detect("你好世界", ["en", "zh", "ja"])[0]
    assert found.language == "zh" and found.confidence > 90


def test_a_word_the_model_has_no_evidence_for_ties_at_confidence_0(langid):
    """ "Hi" and "ok" hold no n-gram py3langid weighs: every served language at 50%, and the
    alphabetically first (German) was named as if detected."""
    for text in ("Hi", "ok", "no", "x"):
        found = langid.detect(text, ["en", "de"])
        assert {d.language for d in found} == {"en", "de"} and all(d.confidence == 0 for d in found), (text, found)
    assert langid.detect("nein", ["en", "de"])[0].confidence > 50  # a word it knows still counts


def test_lingua_answers_a_language_not_served_at_a_low_confidence_too():
    pytest.importorskip("lingua")
    lingua = LinguaDetector()
    for text in ("Dziękuję bardzo za pomoc", "Hoe gaat het met je?"):  # French at 99.9%, English
        found = lingua.detect(text, ["en", "de", "fr"])
        assert found and found[0].confidence < 50, (text, found)
    assert lingua.detect("Wir wohnen gern in diesem Haus", ["en", "de", "fr"])[0].confidence > 90
