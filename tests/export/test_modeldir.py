"""Model directories: what the export writes is what the server's manifest loader accepts."""

from __future__ import annotations

import onnx
import pytest
import torch

from attnserve.contract.manifest import ManifestError, load_manifest
from attnserve.export.modeldir import ExportError, placeholder_tokenizer, write_translation_dir, write_vit_dir
from attnserve.models import TranslationConfig, TranslationTransformer, VisionTransformer, ViTConfig

TINY_MT = TranslationConfig(
    vocab_size=60, d_model=32, num_heads=4, encoder_layers=1, decoder_layers=2, ffn_dim=64, dropout=0.0
)


def test_translation_dir_round_trips_through_the_manifest_loader(tmp_path):
    torch.manual_seed(0)
    model = TranslationTransformer(TINY_MT)
    out = tmp_path / "mt"
    written = write_translation_dir(model, out, placeholder_tokenizer(60), name="mt", max_source_len=32)
    loaded = load_manifest(out)
    assert loaded == written
    assert sorted(loaded.files) == ["aligner.onnx", "decoder.onnx", "encoder.onnx", "tokenizer.json"]
    # the decoder writes its cache in place (GroupQueryAttention): per-row lengths, no self_mask
    assert loaded.kv_cache == "in-place" and loaded.decoder_io().in_place
    assert loaded.graphs["decoder"].inputs[:3] == ["input_ids", "positions", "src_mask"]
    assert loaded.graphs["decoder"].inputs[-2:] == ["seqlens_k", "total_sequence_length"]
    # each layer's GroupQueryAttention reads its packed q/k/v projection whole: no Split between
    decoder = onnx.load(str(out / "decoder.onnx"))
    gqa = [n for n in decoder.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == TINY_MT.decoder_layers and all(list(n.input[1:3]) == ["", ""] for n in gqa)
    assert not [n for n in decoder.graph.node if n.op_type == "Split"]
    assert loaded.limits == {"max_source_len": 32, "max_target_len": TINY_MT.max_positions}
    assert loaded.tokenizer.eos_id == TINY_MT.eos_id
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary directory left behind"


def test_vit_dir_and_tampering_is_detected(tmp_path):
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=16, patch_size=8, in_channels=1, num_classes=3, dim=16, depth=1, num_heads=2)
    out = tmp_path / "vit"
    write_vit_dir(VisionTransformer(cfg), out, name="vit", labels=["a", "b", "c"])
    manifest = load_manifest(out)
    assert manifest.labels == ["a", "b", "c"] and manifest.preprocessing.channels == 1
    with open(out / "model.onnx", "r+b") as fh:  # flip one byte of the graph
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ManifestError, match="model.onnx.*sha256"):
        load_manifest(out)


def test_refuses_non_empty_out_and_leaves_it_untouched(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    cfg = ViTConfig(image_size=16, patch_size=8, num_classes=2, dim=16, depth=1, num_heads=2)
    with pytest.raises(ExportError, match="not empty"):
        write_vit_dir(VisionTransformer(cfg), out, name="vit")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    with pytest.raises(ExportError, match="2 classes"):
        write_vit_dir(VisionTransformer(cfg), tmp_path / "new", name="vit", labels=["x"])
    assert not (tmp_path / "new").exists()


def test_placeholder_tokenizer_speaks_ids():
    tok = placeholder_tokenizer(50)
    assert tok.encode("t5 t17").ids == [5, 17, 2]
    assert tok.decode([5, 17, 2], skip_special_tokens=True) == "t5 t17"
    # M2M100's layout (decoding starts from </s>): every special at the model's id, none past the vocabulary
    m2m = placeholder_tokenizer(50, pad_id=1, bos_id=2, eos_id=2, unk_id=3)
    assert m2m.get_vocab_size(with_added_tokens=True) == 50
    assert [m2m.token_to_id(t) for t in ("<pad>", "</s>", "<unk>", "<s>")] == [1, 2, 3, None]
    assert m2m.encode("t5 t17").ids == [5, 17, 2]
