"""Hugging Face checkpoints as users bring them, beyond the hub's default layouts: untied
embeddings, directories cloned without git-lfs, weights that do not fit ``config.json``, odd
``config.json`` values. Random tiny models built here; nothing is downloaded.

Each either imports to what transformers runs (same logits, same greedy tokens) or is refused
by the CLI in one line naming the file, with exit code 1 and no traceback.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnserve.export import cli
from attnserve.export.importers import load_hf_translation
from attnserve.models import greedy_decode
from tests.support import hf_checkpoints

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


def _refused(tmp_path: Path, directory: Path, capsys) -> str:
    out = tmp_path / "out"
    code = cli.main(["translation", "--from-hf", str(directory), "--out", str(out), "--no-verify"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and not out.exists(), err
    lines = [line for line in err.splitlines() if line.startswith("attnserve-export: error:")]
    assert len(lines) == 1 and err.strip().endswith(lines[0]), err
    return lines[0]


POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 1234567\n".format("ab" * 32)


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_a_directory_cloned_without_git_lfs_is_named_as_such(untied, tmp_path, capsys, name):
    """`git clone` of a hub repository without git-lfs leaves pointer files where the weights and
    tokenizer are: the error says so and what fetches them, not a parser's complaint."""
    clone = tmp_path / "clone"
    shutil.copytree(untied[0], clone)
    (clone / name).write_text(POINTER)
    line = _refused(tmp_path, clone, capsys)
    assert f"{clone / name}: a Git LFS pointer" in line and "git lfs pull" in line


def test_weights_that_do_not_fit_config_json_are_one_line(untied, tmp_path, capsys):
    edited = tmp_path / "edited"
    shutil.copytree(untied[0], edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps(config | {"d_model": 64}))
    line = _refused(tmp_path, edited, capsys)
    assert f"{edited}: weights do not fit config.json" in line


def test_a_model_type_that_is_not_a_string_is_refused_in_one_line(tmp_path, capsys):
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"model_type": ["marian"]}))
    line = _refused(tmp_path, odd, capsys)
    assert "model_type is" in line and "m2m_100, marian" in line


def test_an_nllb_without_tokenizer_json_names_that_file(untied, tmp_path, capsys):
    """NLLB ships tokenizer.json (read) and sentencepiece.bpe.model (not read): without the first
    the error names it, not M2M100's vocab.json, which no NLLB repository has."""
    nllb = tmp_path / "nllb"
    shutil.copytree(untied[0], nllb)
    (nllb / "tokenizer.json").unlink()
    (nllb / "sentencepiece.bpe.model").write_bytes(b"")
    (nllb / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
    line = _refused(tmp_path, nllb, capsys)
    assert f"{nllb / 'tokenizer.json'}: file not found" in line


@pytest.mark.parametrize("name", ["source.spm", "target.spm"])
def test_an_empty_sentencepiece_model_is_refused(hf_root, tmp_path, capsys, name):
    """A zero-byte .spm (a copy cut short, a disk that was full) parses as a model of no pieces: it
    must be refused, not imported into a tokenizer that makes every text one <unk>."""
    damaged = tmp_path / "opus-mt-en-de"
    shutil.copytree(hf_checkpoints.build("opus-mt", hf_root).path, damaged)
    (damaged / name).write_bytes(b"")
    line = _refused(tmp_path, damaged, capsys)
    assert f"{damaged / name}: not a sentencepiece model (no pieces: empty or cut short?)" in line


def test_an_older_m2m100_takes_its_forced_language_from_config_json(hf_root, tmp_path):
    """A fine-tune saved before generation_config.json existed keeps forced_bos_token_id in config.json,
    which transformers' generate then forces first: the import's default target is that language."""
    ckpt = hf_checkpoints.build("m2m100", hf_root)
    older = tmp_path / "m2m100-en-de"
    shutil.copytree(ckpt.path, older)
    (older / "generation_config.json").unlink()
    tok_cfg = json.loads((older / "tokenizer_config.json").read_text())
    (older / "tokenizer_config.json").write_text(json.dumps(tok_cfg | {"tgt_lang": None}))
    config = json.loads((older / "config.json").read_text())
    forced = ckpt.tokenizer.get_lang_id("de")
    (older / "config.json").write_text(json.dumps(config | {"forced_bos_token_id": forced}))
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(older)  # what generate forces
    assert model.generation_config.forced_bos_token_id == forced
    assert load_hf_translation(older).languages["default_target"] == "de"
