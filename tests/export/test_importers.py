"""Hugging Face importers: every checkpoint is built here from a random init (nothing is downloaded).

A MarianMT directory in the opus-mt layout is made from a random ``MarianMTModel``, two
small sentencepiece models trained on generated sentences and a shared ``vocab.json``;
a ViT directory from a random ``ViTForImageClassification``. The imported models must
give transformers' logits (1e-4), tokens and tokenisation, in PyTorch and as exported
ONNX run by onnxruntime.
"""

from __future__ import annotations

import importlib
import io
import json
import random
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import sentencepiece as spm
import torch
import transformers
from sentencepiece import sentencepiece_model_pb2
from tokenizers import Tokenizer

from attnserve.contract.manifest import load_manifest
from attnserve.export.importers import load_hf_vit, load_marian, to_marian
from attnserve.export.importers.marian import state_from_marian
from attnserve.export.modeldir import ExportError, write_translation_dir, write_vit_dir
from attnserve.models import create_model, greedy_decode, preset_config
from attnserve.models.translation import TranslationTransformer

transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's nag

# Two made-up languages with different alphabets: target-only characters ("ß", "ö", "z")
# are unknown to source.spm but are entries of the shared vocab.json.
SOURCE_SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "pe", "dun", "vi", "ar", "el", "os", "th", "qu", "é"]
TARGET_SYLLABLES = ["ba", "ku", "ni", "hund", "ße", "zo", "ei", "sch", "ach", "ung", "ö", "ri", "to"]
TEXTS = [
    "Katori men sa lo.",
    "Ka.",
    "Peto dun vi arel os qu ri?",
    "  Dun   viar\tthos  ",  # whitespace is collapsed as sentencepiece does
    "Ka 你好 to 😀 ri!",  # characters no piece covers: one <unk> per run
    "Ich bin ein Hund, kaß zo.",  # target-only characters, alone (their vocab id) and in runs (<unk>)
    "ﬁ Ｋａｔｏ 42 </s> é",  # NFKC folding; a literal special token
]
MAX_NEW = 10


def _sentences(rng: random.Random, syllables: list[str], n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(2, 9))]
        out.append(" ".join(words).capitalize() + rng.choice([".", ",", "!", "?", " 42."]))
    return out


def _train_spm(texts: list[str]) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=90,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def _randomize(model: torch.nn.Module, seed: int, embed_std: float = 0.3) -> None:
    """Weights large enough that logits differ by far more than float error (HF's init is std 0.02)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # the fixed sinusoidal table
                continue
            if "norm" in name:
                p.copy_(float(name.endswith("weight")) + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias") or p.dim() == 1:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            elif "shared" in name or "embed_tokens" in name:
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
        for name, buf in model.named_buffers():
            if name in ("final_logits_bias", "logits_bias"):
                buf.copy_(0.1 * torch.randn(buf.shape, generator=g))


def _make_marian_dir(path: Path, tie: bool = True):
    """An opus-mt style directory; returns (transformers model, MarianTokenizer)."""
    rng = random.Random(0)
    source = _train_spm(_sentences(rng, SOURCE_SYLLABLES, 300))
    target = _train_spm(_sentences(rng, TARGET_SYLLABLES, 300))
    vocab = {"</s>": 0, "<unk>": 1}  # opus-mt: the union of both models' pieces, <pad> last
    for blob in (source, target):
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(blob)
        for piece in proto.pieces:
            if piece.type == piece.NORMAL:
                vocab.setdefault(piece.piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    path.mkdir(parents=True)
    (path / "source.spm").write_bytes(source)
    (path / "target.spm").write_bytes(target)
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    V = len(vocab)
    config = transformers.MarianConfig(
        vocab_size=V,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        tie_word_embeddings=tie,
        pad_token_id=V - 1,
        decoder_start_token_id=V - 1,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(config).eval()
    _randomize(hf, seed=1)
    hf.generation_config.max_length = 40  # -> max_target_len 39 (max_length counts the start token)
    hf.save_pretrained(path)
    tokenizer = transformers.MarianTokenizer(
        str(path / "source.spm"), str(path / "target.spm"), str(path / "vocab.json")
    )
    tokenizer.save_pretrained(path)
    return hf, tokenizer


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "opus-mt-xx-yy"
    hf, tokenizer = _make_marian_dir(path)
    return path, hf, tokenizer


def _generate(hf, tokenizer, texts: list[str]) -> tuple[dict, torch.Tensor]:
    """transformers' greedy search under our decoding rules.

    ``bad_words_ids=[[pad]]`` is opus-mt's own setting (pad, which is also the start
    token, is never generated; our decoders ban pad and start); ``forced_eos_token_id``
    is off because ours never forces an end token; ``max_new_tokens`` counts generated
    tokens as our ``max_new_tokens`` does.
    """
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    out = hf.generate(
        **batch,
        num_beams=1,
        do_sample=False,
        max_new_tokens=MAX_NEW,
        bad_words_ids=[[hf.config.pad_token_id]],
        forced_eos_token_id=None,
    )
    return batch, out


def _strip(row: list[int], eos: int) -> list[int]:
    """A generate() row without its start token, cut after the first end token."""
    row = row[1:]
    return row[: row.index(eos) + 1] if eos in row else row


def test_tokenizer_matches_marian_tokenizer(marian):
    path, _, reference = marian
    tokenizer = Tokenizer.from_str(load_marian(path).tokenizer.to_str())  # as the server loads tokenizer.json
    for text in TEXTS + _sentences(random.Random(5), SOURCE_SYLLABLES + TARGET_SYLLABLES + ["xyz"], 100):
        assert tokenizer.encode(text).ids == reference(text).input_ids, text
    assert reference(TEXTS[4]).input_ids.count(reference.unk_token_id) == 2  # the test does test unknowns
    rng = random.Random(6)
    V = reference.vocab_size
    for _ in range(300):  # any target ids, specials included
        ids = [rng.randrange(V) for _ in range(rng.randint(0, 12))]
        assert tokenizer.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True)


def test_marian_logits_match_transformers(marian):
    path, hf, tokenizer = marian
    imported = load_marian(path)
    model, cfg = imported.model, imported.model.cfg
    assert (cfg.activation, cfg.position_layout, cfg.norm_first) == ("swish", "split", False)
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id) == (cfg.vocab_size - 1, cfg.vocab_size - 1, 0, 1)
    assert cfg.share_embeddings and cfg.tie_output
    assert imported.name == "opus-mt-xx-yy"
    assert imported.limits == {"max_source_len": 64, "max_target_len": 39}  # 512 capped at max_positions
    # Marian's table (numpy float64, then float32) and ours agree to float precision.
    torch.testing.assert_close(model.positions.table, hf.model.encoder.embed_positions.weight, atol=1e-7, rtol=0)
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(2, cfg.vocab_size - 1, (len(TEXTS), 9), generator=g)  # (B, S)
    tgt[:, 0] = cfg.bos_id
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=tgt).logits  # (B, S, V)
        actual = model(batch.input_ids, tgt)  # (B, S, V)
    assert expected.abs().max() > 1.0
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_marian_greedy_matches_generate(marian, tie, tmp_path):
    path, hf, tokenizer = marian
    if not tie:  # own lm_head (transformers 5 then keeps three separate embeddings)
        path = tmp_path / "untied"
        hf, tokenizer = _make_marian_dir(path, tie=False)
    imported = load_marian(path)
    assert imported.model.cfg.tie_output is tie
    batch, out = _generate(hf, tokenizer, TEXTS)
    ours = greedy_decode(imported.model, batch.input_ids, max_new_tokens=MAX_NEW)
    eos = hf.config.eos_token_id
    assert [h.tokens for h in ours] == [_strip(row, eos) for row in out.tolist()]
    if not tie:  # an untied head does not just repeat its input token: the check sees varied tokens
        assert len({t for h in ours for t in h.tokens}) > 3


@pytest.mark.parametrize("generation_file", [False, True], ids=["config-only", "generation-config-too"])
def test_marian_target_limit_is_the_one_transformers_generates_to(marian, tmp_path, generation_file):
    """Older opus-mt checkpoints state ``max_length`` in config.json and have no generation_config.json;
    transformers then generates up to config.json's, and to generation_config.json's where that file is."""
    import shutil

    path, _, _ = marian
    old = tmp_path / "old"
    shutil.copytree(path, old)
    config = json.loads((old / "config.json").read_text())
    config["max_length"] = 30
    (old / "config.json").write_text(json.dumps(config))
    if not generation_file:
        (old / "generation_config.json").unlink()
    expected = transformers.MarianMTModel.from_pretrained(old).generation_config.max_length
    assert expected == (40 if generation_file else 30)
    assert load_marian(old).limits["max_target_len"] == expected - 1  # max_length counts the start token


def test_marian_reads_pytorch_model_bin_with_stored_positions(marian, tmp_path):
    """Older opus-mt checkpoints: pytorch_model.bin, position tables stored (and checked)."""
    import shutil

    from safetensors.torch import load_file

    path, hf, _ = marian
    old = tmp_path / "old"
    shutil.copytree(path, old)
    state = load_file(str(old / "model.safetensors"))
    for side in ("encoder", "decoder"):
        state[f"model.{side}.embed_positions.weight"] = hf.model.encoder.embed_positions.weight.detach().clone()
    (old / "model.safetensors").unlink()
    torch.save(state, old / "pytorch_model.bin")
    expected = load_marian(path).model.state_dict()
    for name, tensor in load_marian(old).model.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], atol=0, rtol=0)
    state["model.decoder.embed_positions.weight"][3, 0] += 0.5  # not the sinusoidal table any more
    torch.save(state, old / "pytorch_model.bin")
    with pytest.raises(ExportError, match="decoder.embed_positions.weight' is not Marian's sinusoidal table"):
        load_marian(old)


def _ort_session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def test_imported_marian_exports_to_onnx_that_matches_transformers(marian, tmp_path):
    """The exported encoder/decoder, stepped with a KV cache, give transformers' logits and tokens."""
    path, hf, _ = marian
    imported = load_marian(path)
    cfg = imported.model.cfg
    out = tmp_path / "repo" / imported.name
    write_translation_dir(imported.model, out, imported.tokenizer, name=imported.name, **imported.limits)
    manifest = load_manifest(out)
    tokenizer = Tokenizer.from_file(str(out / manifest.tokenizer.file))
    encoded = [tokenizer.encode(t).ids for t in TEXTS]
    L = max(map(len, encoded))
    src = np.array([ids + [cfg.pad_id] * (L - len(ids)) for ids in encoded], dtype=np.int64)  # (B, L)
    src_mask = (src != cfg.pad_id).astype(np.int32)  # (B, L)
    with torch.no_grad():
        generated = hf.generate(
            input_ids=torch.from_numpy(src),
            attention_mask=torch.from_numpy(src_mask),
            max_new_tokens=MAX_NEW,
            bad_words_ids=[[cfg.pad_id]],
            forced_eos_token_id=None,
        )  # (B, 1 + T)
        expected = hf(
            input_ids=torch.from_numpy(src), attention_mask=torch.from_numpy(src_mask), decoder_input_ids=generated
        ).logits.numpy()  # (B, 1 + T, V)
    encoder, decoder = _ort_session(out / "encoder.onnx"), _ort_session(out / "decoder.onnx")
    memory, *cross = encoder.run(None, {"src_ids": src, "src_mask": src_mask})
    B, H, D, n = len(TEXTS), cfg.num_heads, cfg.d_model // cfg.num_heads, cfg.decoder_layers
    assert manifest.kv_cache == "in-place"  # one buffer per layer and kind, each row's tokens at 0..step - 1
    past = [np.zeros((B, H, generated.shape[1], D), np.float32) for _ in range(2 * n)]
    tokens: list[list[int]] = [[] for _ in range(B)]
    for step in range(generated.shape[1]):  # teacher-forced on transformers' own tokens
        feeds = {
            "input_ids": generated[:, step : step + 1].numpy(),
            "positions": np.full((B, 1), step, dtype=np.int64),
            "src_mask": src_mask,
            "seqlens_k": np.full(B, step, dtype=np.int32),
            "total_sequence_length": np.array(step + 1, dtype=np.int32),
        }
        feeds |= {f"past_{kind}_{i}": past[2 * i + j] for i in range(n) for j, kind in enumerate(("key", "value"))}
        feeds |= {f"cross_{kind}_{i}": cross[2 * i + j] for i in range(n) for j, kind in enumerate(("key", "value"))}
        logits, *past = decoder.run(None, feeds)  # (B, V)
        np.testing.assert_allclose(logits, expected[:, step], atol=1e-4, rtol=0)
        logits[:, [cfg.pad_id, cfg.bos_id]] = -np.inf
        for b in range(B):
            if not tokens[b] or tokens[b][-1] != cfg.eos_id:
                tokens[b].append(int(logits[b].argmax()))
    eos = cfg.eos_id
    assert [t[:MAX_NEW] for t in tokens] == [_strip(row, eos) for row in generated.tolist()]
    assert tokenizer.decode(tokens[0], skip_special_tokens=True) == transformers.MarianTokenizer.from_pretrained(
        path
    ).decode(tokens[0], skip_special_tokens=True)


def test_to_marian_runs_our_weights_in_transformers():
    model = create_model("mt-tiny", dropout=0.0).eval()  # bos 1 != pad 0: both are banned
    _randomize(model, seed=2)
    marian = to_marian(model)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 1000, (2, 7), generator=g)  # (B, L)
    src[1, 5:] = model.cfg.pad_id
    tgt = torch.randint(4, 1000, (2, 5), generator=g)  # (B, S)
    tgt[:, 0] = model.cfg.bos_id
    with torch.no_grad():
        expected = model(src, tgt)  # (B, S, V)
        actual = marian(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
        generated = marian.generate(input_ids=src, attention_mask=src != 0, max_new_tokens=MAX_NEW)
    assert expected.abs().max() > 1.0
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)
    eos = model.cfg.eos_id
    hyps = greedy_decode(model, src, max_new_tokens=MAX_NEW)
    assert [h.tokens for h in hyps] == [_strip(row, eos) for row in generated.tolist()]
    # and back: the two name tables are inverse
    state, cfg = state_from_marian(dict(marian.state_dict()), model.cfg, Path("to_marian"))
    back = TranslationTransformer(cfg)
    back.load_state_dict(state, strict=False)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, atol=0, rtol=0)


@pytest.mark.parametrize(
    "override, option",
    [({"norm_first": True}, "norm_first"), ({"position_layout": "interleaved"}, "position_layout")],
)
def test_to_marian_names_what_marian_cannot_express(override, option):
    model = TranslationTransformer(preset_config("mt-tiny", vocab_size=50, **override))
    with pytest.raises(ValueError, match=option):
        to_marian(model)


# --- ViT -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_vit(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "vit-tiny-test"
    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,  # not a round ratio: mlp_ratio must still give exactly 37
        layer_norm_eps=1e-12,
        id2label={0: "cat", 1: "dog", 2: "fox", 3: "owl", 4: "yak"},
    )
    torch.manual_seed(0)
    hf = transformers.ViTForImageClassification(config).eval()
    _randomize(hf, seed=3)
    hf.save_pretrained(path)
    processor = transformers.ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.25, 0.3], resample=3
    )
    processor.save_pretrained(path)
    return path, hf


def test_hf_vit_logits_match_transformers_in_pytorch_and_onnx(hf_vit, tmp_path):
    path, hf = hf_vit
    imported = load_hf_vit(path)
    cfg = imported.model.cfg
    assert int(cfg.dim * cfg.mlp_ratio) == 37 and cfg.layer_norm_eps == 1e-12
    assert imported.labels == ["cat", "dog", "fox", "owl", "yak"]
    assert imported.preprocessing == {
        "image_size": 32,
        "channels": 3,
        "mean": [0.4, 0.5, 0.6],
        "std": [0.2, 0.25, 0.3],
        "resample": "bicubic",
    }
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))  # (B, C, H, W)
    with torch.no_grad():
        expected = hf(pixel_values=pixels).logits  # (B, 5)
        actual = imported.model(pixels)
    assert expected.abs().max() > 1.0
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)
    out = tmp_path / imported.name
    write_vit_dir(imported.model, out, name=imported.name, labels=imported.labels, preprocessing=imported.preprocessing)
    assert load_manifest(out).preprocessing.resample == "bicubic"
    (onnx_logits,) = _ort_session(out / "model.onnx").run(None, {"pixels": pixels.numpy()})
    np.testing.assert_allclose(onnx_logits, expected.numpy(), atol=1e-4, rtol=0)


# --- errors a user would see -----------------------------------------------------------------------


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_errors_name_the_file_and_the_field(marian, hf_vit, tmp_path):
    import shutil

    with pytest.raises(ExportError, match="not a directory"):
        load_marian(tmp_path / "nowhere")
    with pytest.raises(ExportError, match=r"config.json: model_type is 'vit', expected 'marian'"):
        load_marian(hf_vit[0])
    vit = tmp_path / "vit"
    shutil.copytree(hf_vit[0], vit)
    _edit_json(vit / "config.json", hidden_act="gelu_new")
    with pytest.raises(ExportError, match=r"config.json: hidden_act: 'gelu_new' is not supported"):
        load_hf_vit(vit)
    _edit_json(vit / "config.json", hidden_act="gelu")
    _edit_json(vit / "preprocessor_config.json", do_center_crop=True)
    with pytest.raises(ExportError, match=r"preprocessor_config.json: do_center_crop"):
        load_hf_vit(vit)
    (vit / "model.safetensors").unlink()
    with pytest.raises(ExportError, match="no weights found"):
        load_hf_vit(vit)
    mt = tmp_path / "mt"
    shutil.copytree(marian[0], mt)
    _edit_json(mt / "config.json", decoder_attention_heads=2)
    with pytest.raises(ExportError, match=r"config.json: decoder_attention_heads: must equal"):
        load_marian(mt)
    (mt / "target.spm").unlink()
    with pytest.raises(ExportError, match=r"target.spm: file not found"):
        load_marian(mt)


def test_optional_packages_are_imported_lazily(monkeypatch, marian):
    """``import attnserve.export.importers`` needs neither; using them without says what to install."""
    for name in ("transformers", "sentencepiece", "sentencepiece.sentencepiece_model_pb2"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    for name in [m for m in sys.modules if m.startswith("attnserve.export.importers")]:
        monkeypatch.delitem(sys.modules, name)  # imported afresh below, restored afterwards
    importers = importlib.import_module("attnserve.export.importers")

    with pytest.raises(ExportError, match=r"pip install 'attnserve\[import\]'"):
        importers.load_marian(marian[0])
    with pytest.raises(ExportError, match=r"pip install 'attnserve\[import\]'"):
        importers.to_marian(create_model("mt-tiny"))


def test_cli_exports_the_opus_mt_layout_with_verification(marian, tmp_path, capsys):
    """pad is the last id, as in every opus-mt model: the CLI writes a verified directory
    (the reference inputs used to be drawn from ``specials..vocab_size``, an empty range here)."""
    from attnserve.export import cli

    path, hf, _ = marian
    out = tmp_path / "opus-mt"
    assert cli.main(["translation", "--from-marian", str(path), "--out", str(out), "--threads", "1"]) == 0
    manifest = load_manifest(out)
    assert manifest.tokenizer.pad_id == hf.config.vocab_size - 1
    report = json.loads((out / "export-report.json").read_text())
    assert report["verification"]["passed"] is True
    assert "greedy decode tokens" in {c["name"] for c in report["verification"]["checks"]}


def test_to_m2m100_runs_our_weights_in_transformers():
    """The M2M100-shaped preset (the decode benchmark's) as M2M100ForConditionalGeneration: same logits, same tokens."""
    from attnserve.export.importers import to_m2m100

    torch.manual_seed(0)
    small = dict(vocab_size=300, d_model=32, num_heads=4, ffn_dim=64, encoder_layers=1, decoder_layers=2)
    model = create_model("m2m100-small", dropout=0.0, **small).eval()
    _randomize(model, seed=3)
    hf = to_m2m100(model)
    src = torch.randint(4, 300, (3, 8))  # (B, L)
    src[:, -1] = model.cfg.eos_id
    src[2, 5:] = model.cfg.pad_id
    src[2, 4] = model.cfg.eos_id
    mask = (src != model.cfg.pad_id).long()
    with torch.no_grad():
        out = hf.generate(src, attention_mask=mask, max_new_tokens=MAX_NEW)
        expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=out).logits  # (B, T, V)
        memory = model.encode(src, mask.bool())
        positions = torch.arange(out.shape[1]).expand_as(out)
        hidden, _ = model.decode(
            out, positions, torch.ones_like(out, dtype=torch.bool), model.cross_kv(memory), mask.bool()
        )
    torch.testing.assert_close(model.logits(hidden), expected, atol=1e-4, rtol=0)
    eos = model.cfg.eos_id
    assert [h.tokens for h in greedy_decode(model, src, max_new_tokens=MAX_NEW)] == [
        _strip(row, eos) for row in out.tolist()
    ]
    with pytest.raises(ValueError, match="norm_first"):
        to_m2m100(create_model("mt-tiny"))
