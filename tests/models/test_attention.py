"""The attention module: backends agree, masks mean what they say, the laws hold."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.models import Attention, attention_backend, causal_mask, combine_masks, current_backend
from attnserve.models.attention import math_attention


def _run(attn: Attention, backend: str, *args, **kwargs):
    with attention_backend(backend), torch.no_grad():
        return attn(*args, **kwargs)


@pytest.mark.parametrize("case", ["self", "causal", "padded", "causal_padded_cache", "cross"])
def test_math_and_sdpa_agree(case):
    B, S, C, H = 3, 5, 32, 4
    cross = case == "cross"
    attn = Attention(C, H, cross=cross).eval()
    x = torch.randn(B, S, C)
    kwargs = {}
    if case in ("padded", "causal_padded_cache", "cross"):
        L = S + 3 if case == "causal_padded_cache" else (9 if cross else S)
        mask = torch.ones(B, L, dtype=torch.bool)
        mask[0, :2] = False  # left padding, as in the server's cache
        mask[2, -1] = False
        kwargs["key_padding_mask"] = mask
    if case.startswith("causal"):
        kwargs["causal"] = True
    if case == "causal_padded_cache":
        kwargs["past"] = (torch.randn(B, H, 3, C // H), torch.randn(B, H, 3, C // H))
    if cross:
        kwargs["kv"] = attn.project_kv(torch.randn(B, 9, C))
    out_math, cache_math = _run(attn, "math", x, **kwargs)
    out_sdpa, cache_sdpa = _run(attn, "sdpa", x, **kwargs)
    torch.testing.assert_close(out_math, out_sdpa, atol=1e-5, rtol=1e-5)
    if case == "causal_padded_cache":
        assert cache_math[0].shape == (B, H, 8, C // H)
        torch.testing.assert_close(cache_math[0], cache_sdpa[0])


def test_masked_keys_do_not_matter():
    """Changing a masked-out key or value leaves the output unchanged."""
    q, k, v = torch.randn(3, 2, 1, 4, 8).unbind(0)
    k = torch.randn(2, 4, 6, 8)
    v = torch.randn(2, 4, 6, 8)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[:, 3] = False
    full = combine_masks(mask, False, 1, 6)
    out = math_attention(q, k, v, full)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3] += 100.0
    v2[:, :, 3] -= 50.0
    torch.testing.assert_close(math_attention(q, k2, v2, full), out)


def test_causal_mask_offsets_by_cache_length():
    m = causal_mask(2, 5)  # two new queries after three cached slots
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_backend_selection_is_scoped():
    assert current_backend() == "sdpa"
    with attention_backend("math"):
        assert current_backend() == "math"
    assert current_backend() == "sdpa"
    with pytest.raises(ValueError, match="unknown attention backend"):
        with attention_backend("flash"):
            pass


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    S=st.integers(1, 6),
    L=st.integers(1, 7),
    backend=st.sampled_from(["math", "sdpa"]),
)
def test_permutation_laws(seed, S, L, backend):
    """Equivariant to a permutation of queries; invariant to a joint permutation of keys,
    values and their mask."""
    g = torch.Generator().manual_seed(seed)
    B, H, D = 2, 2, 4
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, H, L, D, generator=g)
    v = torch.randn(B, H, L, D, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.3
    mask[:, 0] = True  # every query sees at least one key
    full = combine_masks(mask, False, S, L)

    def attend(q, k, v, m):
        with attention_backend(backend):
            if backend == "math":
                return math_attention(q, k, v, m)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)

    out = attend(q, k, v, full)
    pq = torch.randperm(S, generator=g)
    torch.testing.assert_close(attend(q[:, :, pq], k, v, full), out[:, :, pq], atol=1e-5, rtol=1e-5)
    pk = torch.randperm(L, generator=g)
    permuted_mask = combine_masks(mask[:, pk], False, S, L)
    torch.testing.assert_close(attend(q, k[:, :, pk], v[:, :, pk], permuted_mask), out, atol=1e-5, rtol=1e-5)


def test_module_forward_permutation_law_through_projections():
    """The same laws hold for the whole module (projections included), for cross-attention."""
    attn = Attention(16, 2, cross=True).eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    with torch.no_grad():
        out, _ = attn(x, kv=attn.project_kv(memory), key_padding_mask=mask)
        perm = torch.tensor([4, 2, 0, 3, 1])
        out_perm, _ = attn(x, kv=attn.project_kv(memory[:, perm]), key_padding_mask=mask[:, perm])
    torch.testing.assert_close(out_perm, out, atol=1e-5, rtol=1e-5)


def test_bad_construction_and_calls_raise():
    with pytest.raises(ValueError, match="not divisible"):
        Attention(30, 4)
    attn = Attention(16, 2, cross=True)
    with pytest.raises(TypeError, match="needs kv"):
        attn(torch.randn(1, 2, 16))
    with pytest.raises(ValueError, match="covers 3 keys"):
        Attention(16, 2)(torch.randn(1, 2, 16), key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
