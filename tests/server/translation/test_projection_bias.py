"""A decoder whose logits bias is folded into its vocabulary projection (export/projection_bias.py)
translates as the one it was made from: the same greedy tokens, and the same beam hypotheses
with the same scores, rows ending at many different steps."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from attnserve.export.modeldir import seal
from attnserve.export.projection_bias import fold_decoder_bias
from attnserve.server.translation import DecodeOptions

from .conftest import TinyModel, random_texts, translate_once


@pytest.fixture(scope="module")
def folded(tiny, tmp_path_factory) -> TinyModel:
    out = tmp_path_factory.mktemp("folded") / "tiny-mt"
    shutil.copytree(tiny.path, out)
    assert fold_decoder_bias(out, tiny.manifest) == 1
    manifest = seal(out, tiny.manifest)
    return TinyModel(tiny.model, out, manifest, tiny.tokenizer)


@pytest.mark.parametrize(
    "options",
    [DecodeOptions(return_scores=True), DecodeOptions(beam_size=4, num_hypotheses=2)],
    ids=["greedy", "beam"],
)
def test_the_folded_decoder_translates_as_the_original(tiny, folded, options):
    texts = random_texts(12, seed=5)
    expected = translate_once(tiny.engine(), texts, options)
    got = translate_once(folded.engine(), texts, options)
    lengths = {len(r.hypotheses[0].token_ids) for r in expected}
    assert len(lengths) > 1  # rows end at different steps
    for want, have in zip(expected, got, strict=True):
        assert [h.token_ids for h in have.hypotheses] == [h.token_ids for h in want.hypotheses]
        np.testing.assert_allclose(
            [h.logprob for h in have.hypotheses], [h.logprob for h in want.hypotheses], rtol=1e-5, atol=1e-5
        )
