"""Hugging Face checkpoints as users bring them, beyond the hub's default layouts (untied
embeddings). Random tiny models built here; nothing is downloaded. Each imports to what
transformers runs: same logits, same greedy tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnserve.export.importers import load_hf_translation
from attnserve.models import greedy_decode

transformers.logging.set_verbosity_error()

CODES = ["eng_Latn", "fra_Latn", "deu_Latn"]
TEXTS = ["katori men sa lo", "peto dun vi arel os", "qu ri ka to", "men sa men sa dun"]
SMALL = dict(d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)
SMALL |= dict(encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0)


def _nllb_dir(path: Path, **config) -> transformers.M2M100ForConditionalGeneration:
    """An NLLB-layout directory (``tokenizer.json`` with ``eng_Latn`` codes, ``model.safetensors``)
    holding a random M2M100 of ``config``; every embedding table drawn on its own."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=60, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]))
    tok.add_special_tokens([AddedToken(c, normalized=False, special=True) for c in CODES])
    path.mkdir(parents=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"src_lang": "eng_Latn", "tgt_lang": "fra_Latn"}))
    cfg = transformers.M2M100Config(
        vocab_size=tok.get_vocab_size(with_added_tokens=True), pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, scale_embedding=True, activation_function="relu", **SMALL, **config,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "nllb-untied"
    return path, _nllb_dir(path, tie_word_embeddings=False)


def test_nllb_with_untied_embeddings_translates_as_transformers(untied):
    """``tie_word_embeddings: false``: transformers runs the stored encoder and decoder embeddings
    and ``lm_head``, each its own; the imported model must too (same logits, same greedy tokens)."""
    path, hf = untied
    embeddings = [hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight, hf.lm_head.weight]
    assert not torch.equal(embeddings[0], embeddings[1]) and not torch.equal(embeddings[1], embeddings[2])
    model = load_hf_translation(path).model
    src = torch.tensor([[4, 10, 11, 12, 2], [4, 13, 14, 2, 1]])  # (B, L) right-padded
    mask = src != 1
    with torch.no_grad():
        out = hf.generate(src, attention_mask=mask.long(), max_new_tokens=8, bad_words_ids=[[1]])
        expected = hf(input_ids=src, attention_mask=mask.long(), decoder_input_ids=out).logits  # (B, T, V)
        memory = model.encode(src, mask)
        positions = torch.arange(out.shape[1]).expand_as(out)
        hidden, _ = model.decode(out, positions, torch.ones_like(out, dtype=torch.bool), model.cross_kv(memory), mask)
    torch.testing.assert_close(model.logits(hidden), expected, atol=1e-4, rtol=0)
    rows = [r[1:] for r in out.tolist()]
    rows = [r[: r.index(2) + 1] if 2 in r else r for r in rows]
    assert [h.tokens for h in greedy_decode(model, src, max_new_tokens=8)] == rows
