"""The translation Transformer: the cache law, per-row positions, masks, configs."""

from __future__ import annotations

import pytest
import torch

from attnserve.models import TranslationConfig, sinusoidal_table
from attnserve.models.positions import SinusoidalPositions


def _full_logits(model, src, tgt):
    with torch.no_grad():
        return model(src, tgt)  # (B, S, V)


def _encode(model, src):
    src_mask = src != model.cfg.pad_id
    memory = model.encode(src, src_mask)
    return model.cross_kv(memory), src_mask


@pytest.mark.parametrize("chunks", [[1, 1, 1, 1, 1], [3, 2], [2, 1, 2]])
def test_cache_law_incremental_equals_full_prefix(tiny_translator, chunks):
    """Decoding chunk by chunk with the cache (P = 0 first, then P > 0) gives the logits
    of decoding the whole prefix at once."""
    model = tiny_translator
    src = torch.randint(4, 97, (2, 6))
    src[1, 4:] = model.cfg.pad_id
    tgt = torch.randint(4, 97, (2, sum(chunks)))
    tgt[:, 0] = model.cfg.bos_id
    expected = _full_logits(model, src, tgt)
    with torch.no_grad():
        cross, src_mask = _encode(model, src)
        past, start, got = None, 0, []
        for n in chunks:
            ids = tgt[:, start : start + n]
            pos = torch.arange(start, start + n).expand(2, -1)
            mask = torch.ones(2, start + n, dtype=torch.bool)
            hidden, past = model.decode(ids, pos, mask, cross, src_mask, past, use_cache=True)
            got.append(model.logits(hidden))
            start += n
    torch.testing.assert_close(torch.cat(got, dim=1), expected, atol=1e-4, rtol=1e-4)


def test_left_padded_rows_at_different_steps_share_a_batch(tiny_translator):
    """Row 1 is two steps behind row 0: its cache is left-padded and masked, its positions
    are its own; both rows get the logits they would get alone."""
    model = tiny_translator
    src = torch.randint(4, 97, (2, 5))
    tgt0 = torch.tensor([[1, 10, 11, 12]])
    tgt1 = torch.tensor([[1, 20]])
    alone0 = _full_logits(model, src[:1], tgt0)[:, -1]
    alone1 = _full_logits(model, src[1:], tgt1)[:, -1]
    with torch.no_grad():
        cross, src_mask = _encode(model, src)
        # Prefill: row 0 has 3 tokens, row 1 has 1, left-padded to 3.
        ids = torch.tensor([[1, 10, 11], [0, 0, 1]])
        pos = torch.tensor([[0, 1, 2], [0, 0, 0]])
        mask = torch.tensor([[True, True, True], [False, False, True]])
        _, past = model.decode(ids, pos, mask, cross, src_mask, None, use_cache=True)
        # One step together: row 0 at position 3, row 1 at position 1.
        ids = torch.tensor([[12], [20]])
        pos = torch.tensor([[3], [1]])
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        hidden, _ = model.decode(ids, pos, mask, cross, src_mask, past, use_cache=True)
        logits = model.logits(hidden[:, -1])
    torch.testing.assert_close(logits[0], alone0[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[1], alone1[0], atol=1e-4, rtol=1e-4)


def test_source_padding_does_not_change_the_translation(tiny_translator):
    model = tiny_translator
    src = torch.randint(4, 97, (1, 5))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    tgt = torch.tensor([[1, 5, 6]])
    torch.testing.assert_close(_full_logits(model, padded, tgt), _full_logits(model, src, tgt), atol=1e-5, rtol=1e-5)


def test_sinusoidal_table_matches_the_paper():
    table = sinusoidal_table(50, 16)
    pos, i = 7, 3
    angle = torch.tensor(pos / 10000 ** (2 * i / 16), dtype=torch.float64)
    assert table[pos, 2 * i].item() == pytest.approx(torch.sin(angle).item(), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(torch.cos(angle).item(), abs=1e-6)
    split = sinusoidal_table(50, 16, "split")
    assert split[pos, i].item() == pytest.approx(torch.sin(angle).item(), abs=1e-6)
    assert split[pos, 8 + i].item() == pytest.approx(torch.cos(angle).item(), abs=1e-6)


def test_positions_are_per_row():
    pe = SinusoidalPositions(20, 8)
    out = pe(torch.tensor([[0, 1], [5, 6]]))
    torch.testing.assert_close(out[1, 0], pe.table[5])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("share", [False, True])
def test_variants_train_and_respect_options(norm_first, share):
    cfg = TranslationConfig(
        vocab_size=50,
        d_model=16,
        num_heads=2,
        encoder_layers=1,
        decoder_layers=1,
        ffn_dim=32,
        norm_first=norm_first,
        share_embeddings=share,
        tie_output=share,
        activation="gelu",
        final_logits_bias=True,
        dropout=0.0,
    )
    from attnserve.models import TranslationTransformer

    model = TranslationTransformer(cfg)
    assert (model.src_embed is model.tgt_embed) == share
    assert (model.lm_head.weight is model.tgt_embed.weight) == share
    src, tgt = torch.randint(4, 50, (2, 4)), torch.randint(4, 50, (2, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(src, tgt).flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="activation"):
        TranslationConfig(activation="tanh")
    with pytest.raises(ValueError, match="eos_id"):
        TranslationConfig(vocab_size=2, pad_id=0, bos_id=1, eos_id=2, unk_id=0)


def test_cross_attention_weights_are_what_the_decoder_attends_with(tiny_translator):
    """The aligner's weights (issue 34), row by row: distributions over the unpadded source whose
    weighted values give each layer's cross-attention output, and padding of the target or the
    source does not change them."""
    model = tiny_translator
    src = torch.randint(4, 97, (2, 6))
    src[1, 4:] = model.cfg.pad_id
    tgt = torch.randint(4, 97, (2, 5))
    tgt[:, 0] = model.cfg.bos_id
    src_mask, tgt_mask = src != model.cfg.pad_id, torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        weights = model.cross_attention(src, src_mask, tgt, tgt_mask)  # (B, N, H, T, L)
        assert weights.shape == (2, 2, 4, 5, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 4, 5))
        assert float(weights[1, ..., 4:].abs().max()) == 0.0  # nothing on source padding
        # layer 0's weights against its cross-attention output, from the layer's own input
        layer = model.decoder_layers[0]
        positions = torch.arange(5).expand(2, -1)
        x = model._embed(model.tgt_embed, tgt, positions)
        x, _ = layer.res1(x, lambda h: layer.self_attn(h, key_padding_mask=tgt_mask, causal=True))
        h = layer.res2.norm(x) if layer.res2.norm_first else x
        k, v = model.cross_kv(model.encode(src, src_mask))[0]
        attended = (weights[:, 0] @ v).transpose(1, 2).reshape(2, 5, -1)  # (B, T, C)
        expected = layer.cross_attn(h, key_padding_mask=src_mask, kv=(k, v))[0]
        torch.testing.assert_close(layer.cross_attn.proj(attended), expected, atol=1e-5, rtol=1e-5)
        # a shorter target (right padding) does not change the rows it has
        short = model.cross_attention(src, src_mask, tgt[:, :3], tgt_mask[:, :3])
        torch.testing.assert_close(short, weights[..., :3, :], atol=1e-5, rtol=1e-5)


def _small(**overrides) -> TranslationConfig:
    base = dict(vocab_size=50, d_model=32, num_heads=4, encoder_layers=1, decoder_layers=1, ffn_dim=64, dropout=0.0)
    return TranslationConfig(**(base | overrides))


def test_learned_positions_are_a_saved_parameter_that_the_model_reads():
    """position_layout "learned" (CTranslate2's stored tables): a (N, C) parameter in the state dict;
    the sinusoid layouts stay fixed buffers, never saved."""
    from attnserve.models import TranslationTransformer

    learned = TranslationTransformer(_small(position_layout="learned", max_positions=16)).eval()
    assert learned.state_dict()["positions.table"].shape == (16, 32)
    assert "positions.table" not in TranslationTransformer(_small()).state_dict()
    src, tgt = torch.randint(4, 50, (1, 5)), torch.randint(4, 50, (1, 4))
    before = _full_logits(learned, src, tgt)
    with torch.no_grad():
        learned.positions.table.normal_()
    assert not torch.allclose(before, _full_logits(learned, src, tgt))
    with pytest.raises(ValueError, match="sinusoidal layout"):
        sinusoidal_table(4, 8, "learned")


def test_pre_norm_without_final_norms_and_the_tanh_gelu():
    from attnserve.models import TranslationTransformer

    torch.manual_seed(0)
    with_norms = TranslationTransformer(_small(norm_first=True)).eval()
    without = TranslationTransformer(_small(norm_first=True, final_norm=False)).eval()
    assert isinstance(without.encoder_norm, torch.nn.Identity) and isinstance(without.decoder_norm, torch.nn.Identity)
    without.load_state_dict(with_norms.state_dict(), strict=False)
    src = torch.randint(4, 50, (1, 5))
    memory = without.encode(src, src != 0)
    hidden = with_norms.encoder_layers[0](with_norms._embed(with_norms.src_embed, src, torch.arange(5)[None]), src != 0)
    torch.testing.assert_close(memory, hidden)  # the last layer's output, not normalised
    gelu = TranslationTransformer(_small(activation="gelu_tanh")).encoder_layers[0].ffn.act
    x = torch.linspace(-3, 3, 7)
    torch.testing.assert_close(gelu(x), torch.nn.functional.gelu(x, approximate="tanh"))
