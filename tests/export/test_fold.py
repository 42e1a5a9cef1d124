"""Folding the q/k/v bias Adds into MultiHeadAttention's bias input: fewer nodes, same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from attnserve.export.fold import fold_attention_bias
from attnserve.export.graphs import example_translation_inputs, export_decoder, export_encoder, export_vit
from attnserve.export.precision import TOLERANCES, quantize_int8
from attnserve.models import TranslationConfig, TranslationTransformer, VisionTransformer, ViTConfig

TINY_MT = TranslationConfig(
    vocab_size=97, d_model=32, num_heads=4, encoder_layers=2, decoder_layers=3, ffn_dim=64, dropout=0.0
)
TINY_VIT = ViTConfig(image_size=32, patch_size=8, in_channels=3, num_classes=7, dim=32, depth=2, num_heads=4)


def _mha(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in proto.graph.node if n.op_type == "MultiHeadAttention"]


def _bias_adds_before_attention(proto: onnx.ModelProto) -> int:
    """Adds of an initializer to a MatMul output whose result is split into an attention node's q, k, v."""
    producer = {o: n for n in proto.graph.node for o in n.output}
    inits = {i.name for i in proto.graph.initializer}
    found = 0
    for mha in _mha(proto):
        split = producer.get(mha.input[0])
        add = producer.get(split.input[0]) if split is not None and split.op_type == "Split" else None
        if add is not None and add.op_type == "Add" and any(i in inits for i in add.input):
            found += 1
    return found


def _session(proto: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = TranslationTransformer(TINY_MT).eval()
    root = tmp_path_factory.mktemp("fold")
    return model, export_encoder(model, root / "encoder.onnx"), export_decoder(model, root / "decoder.onnx")


def test_exported_self_attention_takes_its_bias_and_no_add_is_left(exported):
    _, enc, dec = exported
    for proto, self_attention in ((enc, TINY_MT.encoder_layers), (dec, TINY_MT.decoder_layers)):
        assert _bias_adds_before_attention(proto) == 0
        with_bias = [n for n in _mha(proto) if len(n.input) > 3 and n.input[3]]
        assert len(with_bias) == self_attention  # every packed q/k/v projection; cross-attention's q is not packed
        inits = {i.name: i for i in proto.graph.initializer}
        assert all(list(inits[n.input[3]].dims) == [3 * TINY_MT.d_model] for n in with_bias)
        onnx.checker.check_model(proto)


def _unfold(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The graph as the exporter wrote it: the bias moved back out into an Add before the Split."""
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    producer = {o: n for n in proto.graph.node for o in n.output}
    nodes = list(proto.graph.node)
    for mha in _mha(proto):
        if len(mha.input) > 3 and mha.input[3]:
            split = producer[mha.input[0]]
            biased = split.input[0] + "_biased"
            nodes.insert(nodes.index(split), onnx.helper.make_node("Add", [split.input[0], mha.input[3]], [biased]))
            split.input[0] = biased
            mha.input[3] = ""
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return proto


def test_folding_gives_the_same_outputs_and_removes_one_add_per_layer(exported):
    model, enc, dec = exported
    enc_args, dec_args = example_translation_inputs(model, batch=3, src_len=6, past_len=4, new_len=1)
    for proto, args, layers in ((enc, enc_args, TINY_MT.encoder_layers), (dec, dec_args, TINY_MT.decoder_layers)):
        unfolded = _unfold(proto)
        assert _bias_adds_before_attention(unfolded) == layers
        feeds = {i.name: a.numpy() for i, a in zip(_session(proto).get_inputs(), args)}
        before = _session(unfolded).run(None, feeds)
        assert fold_attention_bias(unfolded) == layers
        assert len(unfolded.graph.node) == len(proto.graph.node)
        after = _session(unfolded).run(None, feeds)
        assert max(float(np.abs(a - b).max()) for a, b in zip(after, before)) <= TOLERANCES["fp32"].atol


def test_an_add_with_another_consumer_is_left_alone(exported):
    _, _, dec = exported
    unfolded = _unfold(dec)
    add = next(n for n in unfolded.graph.node if n.op_type == "Add" and n.output[0].endswith("_biased"))
    unfolded.graph.output.append(onnx.helper.make_tensor_value_info(add.output[0], onnx.TensorProto.FLOAT, None))
    assert fold_attention_bias(unfolded) == TINY_MT.decoder_layers - 1  # the exposed one stays


def test_int8_keeps_the_folded_bias(exported):
    _, _, dec = exported
    quantized = quantize_int8(dec)
    assert _bias_adds_before_attention(quantized) == 0
    assert len([n for n in _mha(quantized) if len(n.input) > 3 and n.input[3]]) == TINY_MT.decoder_layers


def test_vit_export_folds_too(tmp_path):
    torch.manual_seed(0)
    vit = VisionTransformer(TINY_VIT).eval()
    proto = export_vit(vit, tmp_path / "model.onnx")
    assert _bias_adds_before_attention(proto) == 0
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        reference = vit(x).numpy()
    assert float(np.abs(_session(proto).run(None, {"pixels": x.numpy()})[0] - reference).max()) < 1e-4
