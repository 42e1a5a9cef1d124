"""model.json as the one contract between export and server: the graph input/output names
are the contract's for the kind and layer count, and a directory that says otherwise is
refused with a ManifestError naming the file and the field."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnserve.contract.graph_io import AlignerIO, ClassifierIO, DecoderIO, EncoderIO, expected_io
from attnserve.contract.manifest import (
    GraphSpec,
    Manifest,
    ManifestError,
    Preprocessing,
    TokenizerSpec,
    file_entries,
    load_manifest,
    write_manifest,
)

LAYERS = 2


def _translation_dir(out: Path, layers: int = LAYERS) -> Path:
    out.mkdir(parents=True)
    for name in ("encoder.onnx", "decoder.onnx", "tokenizer.json"):
        (out / name).write_bytes(b"placeholder " + name.encode())
    enc, dec = EncoderIO.standard(layers), DecoderIO.standard(layers)
    manifest = Manifest(
        name="mt",
        kind="translation",
        attention="fused",
        precision="fp32",
        opset=23,
        config={"decoder_layers": layers, "num_heads": 4, "d_model": 32},
        graphs={
            "encoder": GraphSpec("encoder.onnx", enc.inputs, enc.outputs),
            "decoder": GraphSpec("decoder.onnx", dec.inputs, dec.outputs),
        },
        files=file_entries(out, ["encoder.onnx", "decoder.onnx", "tokenizer.json"]),
        tokenizer=TokenizerSpec("tokenizer.json", 0, 1, 2, 3),
        limits={"max_source_len": 8, "max_target_len": 8},
    )
    write_manifest(out, manifest)
    return out


def _vit_dir(out: Path) -> Path:
    out.mkdir(parents=True)
    (out / "model.onnx").write_bytes(b"placeholder")
    io = ClassifierIO.standard()
    manifest = Manifest(
        name="vit",
        kind="image-classification",
        attention="fused",
        precision="fp32",
        opset=23,
        config={},
        graphs={"model": GraphSpec("model.onnx", io.inputs, io.outputs)},
        files=file_entries(out, ["model.onnx"]),
        labels=["a", "b"],
        preprocessing=Preprocessing(8, 1, [0.5], [0.5]),
    )
    write_manifest(out, manifest)
    return out


def _edit(model_dir: Path, edit) -> None:
    data = json.loads((model_dir / "model.json").read_text())
    edit(data)
    (model_dir / "model.json").write_text(json.dumps(data))


def test_the_names_read_back_from_the_manifest_are_the_contracts(tmp_path):
    manifest = load_manifest(_translation_dir(tmp_path / "mt"))
    enc, dec = manifest.encoder_io(), manifest.decoder_io()
    assert enc == EncoderIO.standard(LAYERS) and dec == DecoderIO.standard(LAYERS)
    assert enc.cross == ("cross_key_0", "cross_value_0", "cross_key_1", "cross_value_1") == dec.cross
    assert dec.past == ("past_key_0", "past_value_0", "past_key_1", "past_value_1")
    assert (dec.logits, dec.present[-1]) == ("logits", "present_value_1")
    # the aligner (issue 34) is optional: checked where a directory lists it
    assert expected_io("translation", manifest.config) == {
        "encoder": enc,
        "decoder": dec,
        "aligner": AlignerIO.standard(),
    }
    assert load_manifest(_vit_dir(tmp_path / "vit")).classifier_io() == ClassifierIO("pixels", "logits")


def _rename_output(data):
    data["graphs"]["encoder"]["outputs"][1] = "cross_k_0"


def _more_layers(data):
    data["config"]["decoder_layers"] = 3


def _drop_layers(data):
    del data["config"]["decoder_layers"]


def _image_input(data):
    data["graphs"]["model"]["inputs"] = ["image"]


def _crop_rgb(data):
    data["preprocessing"].update(channels=3, mean=[0.5] * 3, std=[0.5] * 3, crop_to_ink=True)


@pytest.mark.parametrize(
    "make, edit, field, message",
    [
        (_translation_dir, _rename_output, "graphs.encoder.outputs", "name 1 is 'cross_k_0', expected 'cross_key_0'"),
        (
            _translation_dir,
            _more_layers,
            "graphs.encoder.outputs",
            "5 names, expected 7 (the contract for the encoder graph with 3 decoder layers)",
        ),
        (_translation_dir, _drop_layers, "config.decoder_layers", "missing"),
        (_vit_dir, _image_input, "graphs.model.inputs", "name 0 is 'image', expected 'pixels'"),
        (_vit_dir, _crop_rgb, "preprocessing.auto_invert/crop_to_ink", "need channels 1 (grayscale)"),
    ],
)
def test_names_unlike_the_contract_are_refused_naming_file_and_field(tmp_path, make, edit, field, message):
    model_dir = make(tmp_path / "model")
    _edit(model_dir, edit)
    with pytest.raises(ManifestError) as err:
        load_manifest(model_dir)
    assert err.value.field == field and err.value.path == str(model_dir / "model.json")
    assert message in str(err.value)


def test_the_contract_imports_neither_torch_nor_server_nor_export():
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        for name in ("torch", "onnx", "attnserve.server", "attnserve.export", "attnserve.models"):
            sys.modules[name] = None  # importing any of them now raises ImportError
        import attnserve.contract as pkg
        for info in pkgutil.walk_packages(pkg.__path__, "attnserve.contract."):
            importlib.import_module(info.name)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_export_never_imports_the_server():
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        sys.modules["attnserve.server"] = None
        import attnserve.export as pkg
        for info in pkgutil.walk_packages(pkg.__path__, "attnserve.export."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        print(len([m for m in sys.modules if m.startswith("attnserve.export.")]))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 10
