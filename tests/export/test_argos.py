"""Argos Translate packages (`--from-argos`): CTranslate2 models read from model.bin, checked against
CTranslate2 itself.

The packages (tests/support/argos_packages.py) are made by CTranslate2's converter and spec classes
from models trained to reverse their input, in three shapes (post-norm Marian, pre-norm OpenNMT-py
with a target prefix, BPE with separate vocabularies and learned positions), float32 and int8.
The import's tokens and greedy translations must be Argos Translate's (CTranslate2 as the oracle).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from attnserve.export import cli
from attnserve.export.importers import ImportCheckpointError, argos_packages, load_argos
from attnserve.export.importers.ctranslate2_bin import read_ct2_model
from attnserve.models import greedy_decode
from tests.support import argos_packages as ap
from tests.support import hf_checkpoints

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
TEXTS = hf_checkpoints.test_texts()


@pytest.fixture(scope="session")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("argos-packages")
    return lambda kind, quantization="float32": ap.build(kind, quantization, root)


def translate(imported, texts: list[str], prefix: str = "") -> list[str]:
    """The imported PyTorch model's greedy translations, the target prefix forced and hidden."""
    tok = imported.tokenizer
    forced = [tok.token_to_id(prefix)] if prefix else []
    out = []
    for text in texts:
        src = torch.tensor([tok.encode(text).ids])  # (1, L)
        hyp = greedy_decode(imported.model, src, 40, prefix=forced, hide_prefix=len(forced))[0]
        out.append(tok.decode(hyp.tokens[len(forced) :]))
    return out


def ct2_name(token: str) -> str:
    """A BPE tokenizer entry as the CTranslate2 vocabulary spells it (``ab</w>`` -> ``ab``, ``ab`` -> ``ab@@``)."""
    return token.removesuffix("</w>") if token.endswith("</w>") else token + "@@"


@pytest.mark.parametrize("quantization", ap.QUANTIZATIONS)
@pytest.mark.parametrize("kind", ap.KINDS)
def test_import_translates_as_argos_and_ctranslate2_do(kind, quantization, packages, tmp_path):
    package = packages(kind, quantization)
    source = package.zip(tmp_path / f"{kind}.argosmodel") if kind == "marian" else package.path
    imported = load_argos(source)
    assert imported.checks[0]["passed"] is True  # the import's own check against CTranslate2
    assert imported.name == "argos-en-de" and imported.family == "argos"
    bpe = kind == "bpe"
    for text in TEXTS:  # the source tokens are Argos's, looked up as CTranslate2 does
        ids = imported.tokenizer.encode(text, add_special_tokens=False).ids
        tokens = [imported.tokenizer.id_to_token(i) for i in ids]
        assert ([ct2_name(t) for t in tokens] if bpe else tokens) == ap.argos_tokenize(package, text)
    prefix = package.meta.get("target_prefix", "")
    ours = translate(imported, TEXTS, prefix)
    # int8 weights dequantized are exactly CTranslate2's with compute_type float32
    assert ours == ap.argos_translate(package, TEXTS, compute_type="float32")
    assert len(set(ours)) >= 20  # trained: the outputs follow the inputs
    if quantization == "int8":  # CTranslate2's own int8 GEMMs (quantized activations) agree almost always
        agree = sum(a == b for a, b in zip(ours, ap.argos_translate(package, TEXTS), strict=True))
        assert agree >= 20, agree


def test_model_bin_int8_weights_dequantize_to_the_float32_ones(packages):
    f32, _, _ = read_ct2_model(packages("marian", "float32").model_dir)
    i8, _, vocab = read_ct2_model(packages("marian", "int8").model_dir)
    name = "decoder/layer_0/ffn/linear_0/weight"
    assert i8.variables[name].dtype == np.int8 and i8.variables[f"{name}_scale"].shape == (128,)
    scale = i8.variables[f"{name}_scale"][:, None]
    assert np.all(np.abs(i8.weight(name) - f32.weight(name)) <= 0.5 / scale + 1e-7)
    # the output projection is stored once, as an alias of the decoder embedding (tied)
    assert i8.variables["decoder/projection/weight"] is i8.variables["decoder/embeddings/weight"]
    assert len(vocab) == 59


def test_argos_packages_lists_package_files_and_directories(packages, tmp_path):
    packages("marian").zip(tmp_path / "a.argosmodel")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metadata.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not a package")
    (tmp_path / "empty").mkdir()
    assert [p.name for p in argos_packages(tmp_path)] == ["a.argosmodel", "b"]


def _stub_packages(folder: Path, *names_and_meta: tuple[str, dict]) -> None:
    """Package directories holding only metadata.json: enough for the folder export to list them."""
    for name, meta in names_and_meta:
        (folder / name).mkdir(parents=True)
        (folder / name / "metadata.json").write_text(json.dumps({"type": "translate", **meta}))


def test_ctrl_c_in_a_folder_export_names_the_packages_already_written(cli, tmp_path, monkeypatch):
    from attnserve.export import argos_folder

    folder, repo = tmp_path / "packages", tmp_path / "repo"
    pair = {"package_version": "1.0"}
    _stub_packages(folder, ("en_de", {**pair, "from_code": "en", "to_code": "de"}))
    _stub_packages(folder, ("en_fr", {**pair, "from_code": "en", "to_code": "fr"}))

    def export(package, options, repository, skip=None):
        if package.name == "en_fr":
            raise KeyboardInterrupt  # Ctrl-C during the second package
        (repository / "argos-en-de").mkdir(parents=True)
        (repository / "argos-en-de" / "model.json").write_text("{}")
        return "argos-en-de"

    monkeypatch.setattr(argos_folder, "export_argos_package", export)
    run = cli("translation", "--from-argos", folder, "--out", repo)
    assert run.code == 130
    assert "nothing was written" not in run.err, run.err
    assert "interrupted during en_fr: nothing of it was written" in run.err
    assert f"exported before it, in {repo}: argos-en-de" in run.err
    assert sorted(p.name for p in repo.iterdir()) == ["argos-en-de"]


def test_a_folder_holding_two_versions_of_a_pair_exports_the_newest(cli, tmp_path, monkeypatch):
    from attnserve.export import argos_folder

    folder, repo = tmp_path / "mirror", tmp_path / "repo"
    en_de = {"from_code": "en", "to_code": "de"}
    _stub_packages(folder, ("translate-en_de-1_10", {**en_de, "package_version": "1.10"}))
    _stub_packages(folder, ("translate-en_de-1_9", {**en_de, "package_version": "1.9"}))
    _stub_packages(folder, ("translate-en_fr-1_0", {"from_code": "en", "to_code": "fr", "package_version": "1.0"}))
    exported = []

    def export(package, options, repository, skip=None):
        exported.append(package.name)
        return "argos-" + package.name.split("-")[1].replace("_", "-")

    monkeypatch.setattr(argos_folder, "export_argos_package", export)
    run = cli("translation", "--from-argos", folder, "--out", repo)
    assert run.code == 0, run.err
    assert sorted(exported) == ["translate-en_de-1_10", "translate-en_fr-1_0"]
    assert "translate-en_de-1_9: argos-en-de version 1.9, translate-en_de-1_10 is 1.10; left out" in run.err
    assert "2 of 2 packages exported" in run.out


def _corrupt(kind: str, package: ap.Package, tmp_path: Path) -> tuple[Path, str]:
    """A broken copy of ``package`` and what the refusal must say."""
    if kind == "bad-zip":
        bad = tmp_path / "bad.argosmodel"
        bad.write_bytes(b"PK\x03\x04 not really a zip")
        return bad, "not a valid .argosmodel"
    bad = tmp_path / kind
    shutil.copytree(package.path, bad)
    if kind == "truncated-model":
        data = (bad / "model" / "model.bin").read_bytes()
        (bad / "model" / "model.bin").write_bytes(data[: len(data) // 2])
        return bad, "incomplete (truncated?)"
    if kind == "zip-without-tokenizer":  # named by the file the user gave, not a temporary folder
        (bad / "sentencepiece.model").unlink()
        zipped = ap.Package(package.kind, bad, {}).zip(tmp_path / "no-tokenizer.argosmodel")
        return zipped, f"{zipped}/{bad.name}: no sentencepiece.model or bpe.model"
    if kind == "lfs-pointer":  # a package kept in a git repository cloned without git-lfs
        (bad / "model" / "model.bin").write_text("version https://git-lfs.github.com/spec/v1\nsize 9\n")
        return bad, "model.bin: a Git LFS pointer, not the file itself (cloned without git-lfs?)"
    if kind == "newer-ctranslate2":  # binary version 7: a model.bin a later CTranslate2 writes
        data = (bad / "model" / "model.bin").read_bytes()
        (bad / "model" / "model.bin").write_bytes((7).to_bytes(4, "little") + data[4:])
        return bad, "binary version 7, written by a newer CTranslate2"
    if kind == "two-packages":  # Argos installs every package of a zip; one model is one package here
        twice = tmp_path / "twice"
        for name in ("first", "second"):
            shutil.copytree(package.path, twice / name)
        archive = shutil.make_archive(str(tmp_path / "two"), "zip", twice)
        return Path(archive), "holds 2 packages (first, second); unpack it and give the folder"
    (bad / "metadata.json").unlink()
    return ap.Package(package.kind, bad, {}).zip(tmp_path / "no-metadata.argosmodel"), "no metadata.json"


CORRUPT = ["bad-zip", "truncated-model", "no-metadata", "zip-without-tokenizer", "lfs-pointer", "newer-ctranslate2"]


@pytest.mark.parametrize("kind", [*CORRUPT, "two-packages"])
def test_a_corrupt_package_is_refused_clearly_and_writes_nothing(kind, packages, tmp_path, capsys):
    bad, message = _corrupt(kind, packages("onmt"), tmp_path)
    out = tmp_path / "out"
    assert cli.main(["translation", "--from-argos", str(bad), "--out", str(out), "--threads", "1"]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "attnserve-argos-" not in err
    assert not out.exists() and not list(tmp_path.glob(".out.partial-*"))


def test_unsupported_features_are_refused_by_name(packages, tmp_path):
    root = packages("onmt").path.parent

    def alibi(spec):
        spec.decoder.alibi = True

    with pytest.raises(ImportCheckpointError, match=r"ALiBi attention biases \(decoder/alibi\)"):
        load_argos(ap.onmt_variant(root, "alibi", alibi).path, compare=False)

    def norms(spec):
        for side in (spec.encoder, spec.decoder):
            side.layernorm_embedding.gamma = np.ones(64, np.float32)
            side.layernorm_embedding.beta = np.zeros(64, np.float32)

    variant = ap.onmt_variant(root, "layernorm-embedding", norms, layernorm_embedding=True)
    named = (
        r"does not support: a layer norm on the embeddings \(layernorm_embedding\) in decoder/layernorm_embedding/beta"
    )
    with pytest.raises(ImportCheckpointError, match=named):
        load_argos(variant.path, compare=False)

    def relative(spec):  # OpenNMT-py's max_relative_positions: 4, which Argos training configs may set
        for side in (spec.encoder, spec.decoder):
            for layer in side.layer:
                layer.self_attention.relative_position_keys = np.zeros((9, 16), np.float32)
                layer.self_attention.relative_position_values = np.zeros((9, 16), np.float32)

    variant = ap.onmt_variant(root, "relative-positions", relative, with_relative_position=True)
    named = r"does not support: relative positions \(OpenNMT-py's max_relative_positions > 0\) in decoder/layer_0/"
    with pytest.raises(ImportCheckpointError, match=named):
        load_argos(variant.path, compare=False)


@pytest.mark.slow
def test_cli_exports_one_package_whose_onnx_graphs_translate_as_argos(packages, tmp_path):
    """The BPE package (learned positions, separate vocabularies, untied projection) through the real
    CLI: exported, verified, and onnxruntime's greedy translations are CTranslate2's."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from attnserve.contract.manifest import load_manifest
    from attnserve.export.ort_decode import OrtGreedy

    package, out = packages("bpe", "int8"), tmp_path / "bpe"
    assert cli.main(["translation", "--from-argos", str(package.path), "--out", str(out), "--threads", "1"]) == 0
    manifest = load_manifest(out)
    assert manifest.config["position_layout"] == "learned" and manifest.family == "argos"
    assert json.loads((out / "export-report.json").read_text())["verification"]["passed"] is True
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    encoder, decoder = (
        ort.InferenceSession(str(out / manifest.graphs[g].file), options, providers=["CPUExecutionProvider"])
        for g in ("encoder", "decoder")
    )
    tokenizer = Tokenizer.from_file(str(out / manifest.tokenizer.file))
    rows = [tokenizer.encode(t).ids for t in TEXTS]
    L = max(map(len, rows))
    src = np.array([r + [manifest.tokenizer.pad_id] * (L - len(r)) for r in rows], dtype=np.int64)
    outputs = OrtGreedy(encoder, decoder, manifest).decode(src, 40)
    translations = [tokenizer.decode(r, skip_special_tokens=True) for r in outputs]
    assert translations == ap.argos_translate(package, TEXTS, compute_type="float32")


def test_a_bpe_tokenizer_splits_punctuation_off_words_and_rejoins_it(tmp_path):
    """bpe.model (subword-nmt codes): words and punctuation apart, ``@@`` pieces within a word; the
    output joins pieces and puts punctuation back against the word before it."""
    from attnserve.export.importers.argos_tokenizer import argos_tokenizer, unknown_tokens
    from attnserve.export.importers.ctranslate2_transformer import Vocabulary

    codes = tmp_path / "bpe.model"
    codes.write_text("#version: 0.2\nh e\nl l\nhe ll\no</w> ,\nw o\n")
    tokens = ["<unk>", "<blank>", "<s>", "</s>", "hell@@", "o", "w@@", "o@@", "r@@", "l@@", "d", ",", "!", "("]
    unknown = unknown_tokens(codes, tokens)  # intermediate merges the vocabulary lacks
    assert "he@@" in unknown and "wo@@" in unknown and "hell@@" not in unknown
    ids = {t: i for i, t in enumerate([*tokens, *unknown])}
    vocab = Vocabulary(
        ids, set(tokens), set(unknown), len(ids), 1, 2, 3, 0, None, None,
        {"unk": "<unk>", "eos": "</s>", "pad": "<blank>", "bos": "<s>"},
    )  # fmt: skip
    tok = argos_tokenizer(codes, vocab, [])
    encoded = tok.encode("hello, (world)!", add_special_tokens=False).ids
    names = [t for i in encoded for t, j in ids.items() if i == j]
    # "wo@@" is a merge's piece the vocabulary lacks: its own id, read as <unk> (CTranslate2 does too)
    assert names == ["hell@@", "o", ",", "(", "wo@@", "r@@", "l@@", "d", "<unk>", "!"]
    assert (
        tok.decode([ids[t] for t in ["hell@@", "o", ",", "(", "w@@", "o@@", "r@@", "l@@", "d", "!"]])
        == "hello, (world!"
    )
