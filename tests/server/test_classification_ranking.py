"""top_indices: the k most probable labels exactly as a stable full sort ranks them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnserve.server.images.classifier import top_indices


@settings(max_examples=300, deadline=None)
@given(
    arrays(np.float32, st.integers(1, 40), elements=st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0, np.nan])),
    st.integers(1, 45),
)
def test_top_indices_equal_the_stable_sort(probs, k):
    """Ties (lower index first) and NaN placed as ``argsort(-probs, kind="stable")[:k]`` places them."""
    np.testing.assert_array_equal(top_indices(probs, k), np.argsort(-probs, kind="stable")[:k])


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, st.integers(2, 40), elements=st.sampled_from([0.0, 0.125, 0.5, 1.0, np.nan])))
def test_the_most_probable_label_alone_is_the_stable_sort_s_first(probs):
    """k = 1 (every KServe request and top_k 1): ties and NaN as the full sort places them."""
    np.testing.assert_array_equal(top_indices(probs, 1), np.argsort(-probs, kind="stable")[:1])
