"""The committed models, exported to ONNX, reach their bars through onnxruntime (subsets, fast),
and the committed model directories (``models/repo``, what ``make serve`` serves) are exactly
that export of the committed weights."""

from __future__ import annotations

import pytest

pytest.importorskip("babel")
pytest.importorskip("sacrebleu")
pytest.importorskip("sklearn")

from attnserve.contract.manifest import load_manifest  # noqa: E402
from attnserve.export.evaluate import OnnxTranslator, evaluate_digits, evaluate_translation  # noqa: E402
from attnserve.export.zoo import NAMES, REPO, ZOO, build_repo, is_current, main  # noqa: E402

EXAMPLES = ZOO.parent.parent / "examples"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("model-repo")
    assert build_repo(out) == list(NAMES)
    return out


def test_repo_is_built_once_and_validates(repo):
    assert build_repo(repo) == []  # up to date: nothing re-exported
    assert all(is_current(repo / name, name) for name in NAMES)
    mt, digits = load_manifest(repo / "translator-en-de"), load_manifest(repo / "digits-vit")
    assert mt.limits == {"max_source_len": 64, "max_target_len": 64}
    assert digits.labels == [str(i) for i in range(10)] and digits.preprocessing.invert


def _onnx_content(path):
    """What a runtime executes: the graph (nodes, initialisers, inputs/outputs) and the opsets,
    without the producer's name and version."""
    import onnx

    model = onnx.load(str(path))
    return model.graph.SerializeToString(deterministic=True), sorted((o.domain, o.version) for o in model.opset_import)


def _manifest_without_onnx_hashes(model_dir):
    """model.json with the .onnx files' sha256 and size left out (they change with the producer version)."""
    import json

    data = json.loads((model_dir / "model.json").read_text())
    data["files"] = {name: entry for name, entry in data["files"].items() if not name.endswith(".onnx")}
    return data


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_model_directories_are_the_export_of_the_committed_weights(repo, name):
    """``make serve`` serves models/repo without PyTorch: it must be what the export of
    models/zoo gives today (regenerate with ``make models`` after retraining)."""
    committed, exported = REPO / name, repo / name
    hint = f"models/repo/{name} is stale: run `make models` and commit it"
    assert is_current(committed, name), hint  # model.json hashes match its files and the committed weights
    assert sorted(p.name for p in committed.iterdir()) == sorted(p.name for p in exported.iterdir()), hint
    assert _manifest_without_onnx_hashes(committed) == _manifest_without_onnx_hashes(exported), hint
    for path in exported.iterdir():
        if path.suffix == ".onnx":
            assert _onnx_content(committed / path.name) == _onnx_content(path), f"{path.name}: {hint}"
        elif path.name != "model.json":
            assert (committed / path.name).read_bytes() == path.read_bytes(), f"{path.name}: {hint}"


def test_zoo_cli_reports_each_model_and_refuses_unknown_names(repo, capsys):
    assert main(["--out", str(repo)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{repo / name}: up to date" for name in NAMES]
    assert main(["--out", str(repo), "translator-fr"]) == 2
    assert "unknown zoo model 'translator-fr'; available: translator-en-de, digits-vit" in capsys.readouterr().err


def test_translator_reaches_the_bar_through_onnx(repo):
    metrics = evaluate_translation(repo / "translator-en-de", limit=200)
    # The bar (the committed model measures 99.45% on all 2,000 held-out pairs, MODEL_CARD.md).
    assert metrics["exact_match"] >= 0.95, metrics["errors"][:5]
    assert metrics["chrf"] >= 95


def test_translator_on_everyday_spellings_of_held_out_pairs():
    """The held-out variant set (the held-out pairs re-spelt: lower/Title/UPPER case, runs of
    spaces, no space after a comma, pm/p.m./P.M., a trailing . ! ?) through the committed ONNX
    graphs: 99.40% of all 1,990 (MODEL_CARD.md; the previous weights, trained on the generator's
    spelling only, 22.21%); the first 300 must stay at 97% or better, as the held-out pairs do."""
    metrics = evaluate_translation(REPO / "translator-en-de", limit=300, variants=True)
    assert metrics["n"] == 300 and metrics["exact_match"] >= 0.97, metrics["errors"][:5]
    plain = evaluate_translation(REPO / "translator-en-de", limit=300)
    assert metrics["exact_match"] >= plain["exact_match"] - 0.02  # a spelling costs (almost) nothing


def test_translator_on_ascii_hyphens_and_unhyphenated_number_words():
    """The held-out hyphen variants (`9:00 AM - 5:30 PM`, `Mar 3-7, 2025`, `forty two`): 97.62%
    of all 378 through the committed graphs (MODEL_CARD.md; the weights before hyphens were
    trained: 25.13%, dropping the units digit of `thirty three euros`)."""
    metrics = evaluate_translation(REPO / "translator-en-de", variants="hyphen")
    assert metrics["n"] == 378 and metrics["exact_match"] >= 0.95, metrics["errors"][:5]


def test_the_readme_examples_translate(repo):
    lines = (EXAMPLES / "sentences.tsv").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t") for line in lines if line and not line.startswith("#")]
    outputs = OnnxTranslator(repo / "translator-en-de").translate([en for en, _ in pairs])
    # 15 of the 16 come out exactly: "for the third time" is a held-out source, never trained,
    # and misses (MODEL_CARD.md, known limits)
    assert sum(out == de for out, (_, de) in zip(outputs, pairs)) >= 0.9 * len(pairs), list(zip(outputs, pairs))


def test_digits_reach_the_bar_through_onnx_with_the_servers_preprocessing(repo):
    # all 360 held-out UCI digits: measured 99.44% (the first release: 99.17%; MODEL_CARD.md)
    assert evaluate_digits(repo / "digits-vit", repeats=1)["accuracy"] >= 0.99


def test_digits_drawn_typed_and_in_either_polarity_are_recognised():
    """The held-out robustness set (pen-drawn digits of their own seed, digits in fonts never
    trained on, dark on light and light on dark, 28 to 128 px canvases), each sent as a PNG
    through the server's preprocessing and the committed model.onnx; the issue's bar is 95%."""
    from attnserve.export.evaluate import evaluate_digits_robustness

    metrics = evaluate_digits_robustness(REPO / "digits-vit")
    # measured: 98.17% (589 of 600), every kind 97-99% (the first release: 21.5%; MODEL_CARD.md)
    assert metrics["accuracy"] >= 0.95, metrics
    assert min(v for k, v in metrics.items() if "/" in k) >= 0.93, metrics  # no polarity or kind left behind


def test_the_example_pngs_are_recognised(repo):
    import numpy as np

    from attnserve.export.evaluate import session
    from attnserve.server.images.preprocess import preprocess_image

    manifest = load_manifest(repo / "digits-vit")
    files = sorted((EXAMPLES / "digits").glob("*.png"))
    assert len(files) >= 10
    pixels = np.stack([preprocess_image(f.read_bytes(), manifest.preprocessing) for f in files])
    logits = session(repo / "digits-vit" / "model.onnx").run(None, {"pixels": pixels})[0]
    predicted = [manifest.labels[i] for i in logits.argmax(-1)]
    assert predicted == [f.name.split("-")[1].split(".")[0] for f in files]
