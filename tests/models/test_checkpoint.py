"""Checkpoints are self-describing and round-trip exactly."""

from __future__ import annotations

import pytest
import torch

from attnserve.models import CheckpointError, load_checkpoint, read_checkpoint_metadata, save_checkpoint


def test_translator_round_trip_keeps_tied_weights_tied(tiny_translator, tmp_path):
    path = save_checkpoint(tiny_translator, tmp_path / "mt.safetensors", extra={"bleu": 12.5})
    model, extra = load_checkpoint(path)
    assert extra == {"bleu": 12.5}
    assert model.lm_head.weight is model.tgt_embed.weight is model.src_embed.weight
    src, tgt = torch.randint(4, 97, (2, 5)), torch.randint(4, 97, (2, 3))
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), tiny_translator(src, tgt))


def test_vit_round_trip_with_an_override(tiny_vit, tmp_path):
    path = save_checkpoint(tiny_vit, tmp_path / "vit.safetensors")
    kind, config, _ = read_checkpoint_metadata(path)
    assert kind == "vit" and config["dim"] == 32
    model, _ = load_checkpoint(path, keep_rate=0.5)
    assert model.cfg.keep_rate == 0.5
    x = torch.randn(2, 3, 32, 32)
    same, _ = load_checkpoint(path)
    with torch.no_grad():
        torch.testing.assert_close(same(x), tiny_vit(x))


def test_bad_checkpoints_raise_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="not a safetensors checkpoint"):
        load_checkpoint(junk)


def test_fp16_storage_halves_the_file_and_loads_back_as_fp32(tiny_translator, tmp_path):
    full = save_checkpoint(tiny_translator, tmp_path / "fp32.safetensors")
    half = save_checkpoint(tiny_translator, tmp_path / "fp16.safetensors", storage_dtype=torch.float16)
    assert half.stat().st_size < 0.6 * full.stat().st_size
    loaded, _ = load_checkpoint(half)
    for (name, original), (_, back) in zip(tiny_translator.state_dict().items(), loaded.state_dict().items()):
        assert back.dtype == original.dtype, name
        torch.testing.assert_close(back, original.to(torch.float16).to(original.dtype), rtol=0, atol=0)
    assert loaded.lm_head.weight is loaded.tgt_embed.weight is loaded.src_embed.weight
