"""Glossaries on a SentencePiece model: the tiny opus-mt checkpoint trained in the test
(``tests/support/hf_checkpoints.py``: Marian's layout, task: reverse the words' pieces), served.

Its word marker (``▁``) starts a word anywhere, so a term has one form; the terms must come out
verbatim, greedy and beam 4, and the texts without a term exactly as without a glossary."""

from __future__ import annotations

import shutil

import pytest

from tests.support import hf_checkpoints

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
KIND = "opus-mt"


@pytest.fixture(scope="module")
def server(serve, hf_root, tmp_path_factory):
    repo = tmp_path_factory.mktemp("glossary-marian-repo")
    _, out = hf_checkpoints.export(KIND, hf_root)
    shutil.copytree(out, repo / KIND)
    with serve(repo) as handle:
        yield handle


@pytest.mark.parametrize("beam_size", [1, 4])
def test_terms_verbatim_on_a_sentencepiece_model(server, beam_size):
    texts = hf_checkpoints.test_texts()
    term = texts[0].split()[0]  # a word of the first text, and of any other text that has it
    glossary = {term: "zoka"}
    keep = [texts[1].split()[-1]]
    with server.client() as client:
        plain = [t.text for t in client.translate(texts, KIND, beam_size=beam_size, max_new_tokens=24)]
        got = client.translate(texts, KIND, beam_size=beam_size, max_new_tokens=24, glossary=glossary, keep=keep)
    for text, before, after in zip(texts, plain, [t.text for t in got]):
        words = text.split()
        if term in words:  # verbatim, once per occurrence (the model may glue a piece after it)
            assert after.count("zoka") >= words.count(term), (text, after)
        if keep[0] in words:
            assert after.count(keep[0]) >= words.count(keep[0]), (text, after)
        if term not in words and keep[0] not in words:
            assert after == before
