"""The export form of the attention op: one node per attention call, and the graphs match PyTorch."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from attnserve.contract.graph_io import DecoderIO
from attnserve.export.graphs import (
    DecoderGraph,
    EncoderGraph,
    count_attention_nodes,
    example_translation_inputs,
    export_decoder,
    export_encoder,
    export_vit,
)
from attnserve.models import TranslationConfig, TranslationTransformer, VisionTransformer, ViTConfig

TINY_MT = TranslationConfig(
    vocab_size=97, d_model=32, num_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=64, dropout=0.0
)
TINY_VIT = ViTConfig(image_size=32, patch_size=8, in_channels=3, num_classes=7, dim=32, depth=3, num_heads=4)
OP = {"fused": "com.microsoft::MultiHeadAttention", "onnx": "ai.onnx::Attention"}


def _session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _max_diff(outputs, reference):
    return max(float(np.abs(o - r.numpy()).max()) for o, r in zip(outputs, reference))


@pytest.fixture(scope="module")
def translator():
    torch.manual_seed(0)
    return TranslationTransformer(TINY_MT).eval()


@pytest.mark.parametrize("target", ["fused", "onnx", "decomposed"])
def test_translator_graphs_have_one_node_per_attention_and_match(translator, target, tmp_path):
    enc = export_encoder(translator, tmp_path / "encoder.onnx", target)
    dec = export_decoder(translator, tmp_path / "decoder.onnx", target)
    onnx.checker.check_model(enc, full_check=True)
    if target == "decomposed":
        assert count_attention_nodes(enc) == {} and count_attention_nodes(dec) == {}
    else:
        assert count_attention_nodes(enc) == {OP[target]: TINY_MT.encoder_layers}
        assert count_attention_nodes(dec) == {OP[target]: 2 * TINY_MT.decoder_layers}  # self + cross
    enc_s, dec_s = _session(tmp_path / "encoder.onnx"), _session(tmp_path / "decoder.onnx")
    names = [i.name for i in dec_s.get_inputs()]
    assert names == DecoderIO.standard(TINY_MT.decoder_layers).inputs
    for batch, src_len, past, new in [(2, 7, 0, 1), (3, 5, 4, 1), (1, 9, 6, 3)]:
        enc_args, dec_args = example_translation_inputs(translator, batch, src_len, past, new)
        with torch.no_grad():
            enc_ref, dec_ref = EncoderGraph(translator)(*enc_args), DecoderGraph(translator)(*dec_args)
        enc_out = enc_s.run(None, {"src_ids": enc_args[0].numpy(), "src_mask": enc_args[1].numpy()})
        dec_out = dec_s.run(None, {n: a.numpy() for n, a in zip(names, dec_args)})
        assert _max_diff(enc_out, enc_ref) < 1e-4
        assert _max_diff(dec_out, dec_ref) < 1e-4
        assert dec_out[1].shape[2] == past + new  # present = past + new


def test_vit_graph_has_one_node_per_block_and_matches(tmp_path):
    torch.manual_seed(0)
    vit = VisionTransformer(TINY_VIT).eval()
    proto = export_vit(vit, tmp_path / "model.onnx")
    assert count_attention_nodes(proto) == {OP["fused"]: TINY_VIT.depth}
    sess = _session(tmp_path / "model.onnx")
    for batch in (1, 5):
        x = torch.randn(batch, 3, 32, 32)
        with torch.no_grad():
            assert _max_diff(sess.run(None, {"pixels": x.numpy()}), [vit(x)]) < 1e-4


def test_graph_bytes_do_not_depend_on_where_the_export_ran(tmp_path):
    """The same weights give the same file (and sha256 in model.json) in any checkout or output folder."""
    torch.manual_seed(0)
    vit = VisionTransformer(TINY_VIT).eval()
    a = tmp_path / "a" / "model.onnx"
    b = tmp_path / "some" / "much" / "longer" / "folder" / "model.onnx"
    for path in (a, b):
        path.parent.mkdir(parents=True)
        export_vit(vit, path)
    assert a.read_bytes() == b.read_bytes()
    proto = onnx.load(str(a))
    assert not [n.name for n in proto.graph.node if len(n.metadata_props)]  # no stack traces naming our files
    assert b"models/vit.py" not in a.read_bytes()  # the exporter's stack traces name the checkout's files


def _attention_query_lengths(proto: onnx.ModelProto) -> list[int]:
    inferred = onnx.shape_inference.infer_shapes(proto)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info}
    return [dims[n.input[0]][1] for n in inferred.graph.node if n.op_type == "MultiHeadAttention"]


def test_token_pruning_shrinks_the_exported_graph(tmp_path):
    torch.manual_seed(0)
    cfg = dataclasses.replace(TINY_VIT, keep_rate=0.5, prune_layers=(0, 1))
    vit = VisionTransformer(cfg).eval()
    proto = export_vit(vit, tmp_path / "pruned.onnx")
    assert count_attention_nodes(proto) == {OP["fused"]: cfg.depth}
    assert _attention_query_lengths(proto) == [17, 9, 5]  # 16 patches -> 8 -> 4, plus the class token
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert _max_diff(_session(tmp_path / "pruned.onnx").run(None, {"pixels": x.numpy()}), [vit(x)]) < 1e-4
