"""CTranslate2's model.bin, read without CTranslate2: every binary version's layout, dtypes and their
dequantization, aliases, and damaged files refused with the byte where they end. Files are written
here byte by byte, as ``specs/model_spec.py`` and older CTranslate2 versions wrote them."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from attnserve.contract.languages import LanguageError, plan
from attnserve.contract.manifest import Languages
from attnserve.export.importers import ImportCheckpointError
from attnserve.export.importers.ctranslate2_bin import CT2Model, read_model_bin, read_vocabulary

DTYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4, "uint16": 5}  # uint16: bfloat16 bits


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<H", len(raw) + 1) + raw + b"\0"


def model_bin(variables: dict[str, np.ndarray], aliases: dict[str, str], version: int = 6) -> bytes:
    """``ModelSpec._serialize`` (version >= 4: dtype ids; 3: item sizes; 1: no spec name, no aliases)."""
    out = struct.pack("<I", version)
    if version >= 2:
        out += _string("TransformerSpec") + struct.pack("<I", 7)
    out += struct.pack("<I", len(variables))
    for name, value in variables.items():
        out += _string(name) + struct.pack("<B", value.ndim) + b"".join(struct.pack("<I", d) for d in value.shape)
        if version >= 4:
            out += struct.pack("<BI", DTYPE_IDS[value.dtype.name], value.nbytes)
        else:
            out += struct.pack("<BI", value.itemsize, value.size)
        out += value.tobytes()
    if version >= 3:
        out += struct.pack("<I", len(aliases))
        out += b"".join(_string(a) + _string(t) for a, t in aliases.items())
    return out


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 4)).astype(np.float32)
    scale = (127 / np.abs(w).max(axis=1)).astype(np.float32)
    return {
        "decoder/embeddings/weight": np.rint(w * scale[:, None]).astype(np.int8),
        "decoder/embeddings/weight_scale": scale,
        "encoder/half": w.astype(np.float16),
        "encoder/pre_norm": np.array(1, np.int8),
    }


@pytest.mark.parametrize("version", [4, 5, 6])
def test_variables_aliases_and_dequantization(version, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(model_bin(_weights(), {"decoder/projection/weight": "decoder/embeddings/weight"}, version))
    got_version, spec, revision, variables = read_model_bin(path)
    assert (got_version, spec, revision) == (version, "TransformerSpec", 7)
    model = CT2Model(tmp_path, version, spec, revision, variables)
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]
    assert variables["decoder/projection/weight_scale"] is variables["decoder/embeddings/weight_scale"]
    w = _weights()
    expected = w["decoder/embeddings/weight"] / w["decoder/embeddings/weight_scale"][:, None]
    np.testing.assert_array_equal(model.weight("decoder/projection/weight"), expected.astype(np.float32))
    assert model.weight("encoder/half").dtype == np.float32
    assert model.attribute("encoder/pre_norm") == 1
    with pytest.raises(ImportCheckpointError, match=r"'encoder/half' has shape \(3, 4\), expected \(4, 3\)"):
        model.weight("encoder/half", (4, 3))


def test_older_layouts_bfloat16_and_int16_without_a_scale(tmp_path):
    path = tmp_path / "model.bin"
    legacy = {"w": np.array([[1000, -2000]], np.int16), "b": np.array([0.5, -1.0], np.float32)}
    path.write_bytes(model_bin(legacy, {}, version=3))  # item sizes instead of dtype ids
    model = CT2Model(tmp_path, *read_model_bin(path))
    np.testing.assert_allclose(model.weight("w"), [[1.0, -2.0]])  # CTranslate2's global int16 scale, 1000
    bf16 = (np.array([1.5, -2.25], np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bfloat16's bits
    path.write_bytes(model_bin({"x": bf16}, {}))
    np.testing.assert_array_equal(CT2Model(tmp_path, *read_model_bin(path)).weight("x"), [1.5, -2.25])


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-7], "incomplete (truncated?)"),
        (lambda b: b[:3], "binary version of 4 bytes at byte 0"),
        (lambda b: struct.pack("<I", 99) + b[4:], "binary version 99"),
        (lambda b: b + b"extra", "5 bytes after the last entry"),
    ],
)
def test_damaged_files_are_refused_with_where(damage, message, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(damage(model_bin(_weights(), {"a": "encoder/half"})))
    with pytest.raises(ImportCheckpointError, match=re.escape(message)):
        read_model_bin(path)


def test_vocabularies_json_and_the_older_text_files(tmp_path):
    (tmp_path / "shared_vocabulary.json").write_text('["<unk>", "a b", "\\u2581x"]')
    (tmp_path / "source_vocabulary.txt").write_text("<unk>\n<s>\n▁y\n")
    assert read_vocabulary(tmp_path, "shared") == ["<unk>", "a b", "▁x"]
    assert read_vocabulary(tmp_path, "source") == ["<unk>", "<s>", "▁y"]
    assert read_vocabulary(tmp_path, "target") is None


def test_an_argos_target_prefix_is_forced_first_and_the_source_gets_nothing():
    languages = Languages(source=["en"], target=["de"], tokens={"de": "__de__"}, default_source="en")
    ids = {"__de__": 7}.get
    assert plan("argos", languages, ids, "en", "de").target_prefix == (7,)
    assert plan("argos", languages, ids, "", "").source_prefix == ()  # the defaults: en -> de
    with pytest.raises(LanguageError, match="not served by this model: one of de"):
        plan("argos", languages, ids, "en", "fr")
