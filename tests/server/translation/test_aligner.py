"""The word aligner reads the encoder output the engine kept from decoding (issue 35's cost of
aligning a file): the engine returns each text's encoder output when asked, the aligner fed it
gives PyTorch's cross-attention, and a directory whose aligner encodes the source itself (as
those exported before) still loads, verifies and aligns alike."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from attnserve.contract.graph_io import AlignerIO
from attnserve.contract.manifest import load_manifest, sha256_file
from attnserve.export.graphs import export_onnx
from attnserve.export.verify import structure_checks
from attnserve.server.shared.onnx_sessions import create_session
from attnserve.server.translation import DecodeOptions
from attnserve.server.translation.aligner import Aligner, alignment_layer

from .conftest import random_texts, translate_once, translate_together


def _session(path):
    return create_session(path, "cpu", 1)


def _aligner(tiny, directory=None) -> Aligner:
    directory = directory or tiny.path
    manifest = load_manifest(directory)
    return Aligner(_session(directory / "aligner.onnx"), manifest, _session(directory / "encoder.onnx"))


def _ids(tiny, text: str) -> list[int]:
    return tiny.tokenizer.encode(text).ids


@torch.no_grad()
def _torch_memory(tiny, ids: list[int]) -> np.ndarray:
    src = torch.tensor([ids])
    return tiny.model.encode(src, torch.ones_like(src, dtype=torch.bool))[0].numpy()  # (L, C)


def test_the_engine_keeps_each_texts_encoder_output_only_when_asked(tiny_any):
    texts = random_texts(12, seed=3)  # 1..23 tokens: several encoder runs, rows padded in each
    kept = translate_once(tiny_any.engine(), texts, DecodeOptions(return_memory=True, max_new_tokens=6))
    for text, result in zip(texts, kept):
        ids = _ids(tiny_any, text)
        assert result.memory is not None and result.memory.shape == (len(ids), tiny_any.model.cfg.d_model)
        np.testing.assert_allclose(result.memory, _torch_memory(tiny_any, ids), atol=1e-4)
    plain = translate_once(tiny_any.engine(), texts, DecodeOptions(max_new_tokens=6))
    assert all(r.memory is None for r in plain)
    assert [r.hypotheses[0].token_ids for r in plain] == [r.hypotheses[0].token_ids for r in kept]


def test_calls_with_and_without_kept_output_share_an_encoder_run(tiny):
    texts = random_texts(8, seed=5)
    kept, plain = translate_together(
        tiny.engine(),
        (texts[:4], DecodeOptions(return_memory=True, max_new_tokens=4)),
        (texts[4:], DecodeOptions(max_new_tokens=4)),
    )
    assert all(r.memory is None for r in plain)
    for text, result in zip(texts[:4], kept):
        np.testing.assert_allclose(result.memory, _torch_memory(tiny, _ids(tiny, text)), atol=1e-4)


@torch.no_grad()
def test_the_aligner_fed_the_kept_output_gives_pytorchs_attention(tiny):
    aligner, layer = _aligner(tiny), alignment_layer(tiny.manifest)
    texts = random_texts(20, seed=7)
    results = translate_once(tiny.engine(), texts, DecodeOptions(return_memory=True, max_new_tokens=9))
    pairs = []
    for text, result in zip(texts, results):
        inputs = aligner.decoder_inputs((), result.hypotheses[0].token_ids)
        pairs.append((_ids(tiny, text), inputs, result.memory))
    kept = aligner.attention(pairs)
    encoded_again = aligner.attention([(s, t, None) for s, t, _ in pairs])
    for (src, tgt, _), a, b in zip(pairs, kept, encoded_again):
        s, t = torch.tensor([src]), torch.tensor([tgt])
        weights = tiny.model.cross_attention(
            s, torch.ones_like(s, dtype=torch.bool), t, torch.ones_like(t, dtype=torch.bool)
        )
        expected = weights[0, layer].mean(dim=0).numpy()  # (T, S)
        assert a.shape == expected.shape == (len(tgt), len(src))
        np.testing.assert_allclose(a, expected, atol=1e-5)
        np.testing.assert_allclose(b, a, atol=1e-6)
    src, tgt, memory = pairs[0]
    (mismatched,) = aligner.attention([([*src, 5], tgt, memory)])  # a memory of other source ids: encoded again
    (expected,) = aligner.attention([([*src, 5], tgt, None)])
    np.testing.assert_allclose(mismatched, expected, atol=1e-6)


class _EncodingAligner(torch.nn.Module):
    """The aligner as directories exported before it took the encoder's output have it."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids, src_mask, tgt_ids, tgt_mask):
        return self.model.cross_attention(src_ids, src_mask.bool(), tgt_ids, tgt_mask.bool())


def test_a_directory_whose_aligner_encodes_the_source_loads_verifies_and_aligns_alike(tiny, tmp_path):
    old = tmp_path / "tiny-mt"
    shutil.copytree(tiny.path, old)
    io = AlignerIO.encoding()
    B, L, T = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("tgt_len")
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    tgt = torch.tensor([[1, 11, 12], [1, 13, 0]])
    args = (src, (src != 0).to(torch.int32), tgt, (tgt != 0).to(torch.int32))
    shapes = ({0: B, 1: L}, {0: B, 1: L}, {0: B, 1: T}, {0: B, 1: T})
    export_onnx(_EncodingAligner(tiny.model), args, io.inputs, io.outputs, shapes, old / "aligner.onnx")
    manifest = json.loads((old / "model.json").read_text())
    manifest["graphs"]["aligner"]["inputs"] = io.inputs
    path = old / "aligner.onnx"
    manifest["files"]["aligner.onnx"] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    (old / "model.json").write_text(json.dumps(manifest))

    loaded = load_manifest(old)  # the contract takes either form
    assert loaded.aligner_io().encodes and not tiny.manifest.aligner_io().encodes
    checks = {c.name: c for c in structure_checks(old, loaded)}
    assert checks["attention nodes aligner.onnx"].passed, checks["attention nodes aligner.onnx"].detail
    before, now = _aligner(tiny, old), _aligner(tiny)
    assert before.io.encodes and not now.io.encodes  # the older graph encodes; the newer reads the memory
    texts = random_texts(6, seed=11)
    pairs = [(_ids(tiny, text), [1, *_ids(tiny, text)[:3]], None) for text in texts]
    for a, b in zip(before.attention(pairs), now.attention(pairs)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_the_aligner_stops_at_the_layer_it_reads_and_refuses_a_later_one(tiny, tmp_path):
    layer = alignment_layer(tiny.manifest)
    assert _session(tiny.path / "aligner.onnx").get_outputs()[0].shape[1] == layer + 1  # no layer after it
    later = tmp_path / "tiny-mt"
    shutil.copytree(tiny.path, later)
    manifest = json.loads((later / "model.json").read_text())
    manifest["extra"]["alignment"] = {"layer": layer + 1}  # a layer the exported aligner does not compute
    (later / "model.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="re-export"):
        _aligner(tiny, later)
