"""Bad input: one line on stderr, exit 1 (or 2 for usage), nothing half-written left behind."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from .conftest import error_lines, leftovers


def _assert_one_line_error(run, code: int, *fragments: str) -> None:
    assert run.code == code, run.err
    errors = error_lines(run)
    assert len(errors) == 1 and run.err.rstrip().endswith(errors[0]), run.err
    for fragment in fragments:
        assert fragment in errors[0]


def _nothing_written(out) -> None:
    assert not out.exists()
    if out.parent.exists():
        assert not leftovers(out.parent)


def test_missing_checkpoint(cli, tmp_path, checkpoints):
    out = tmp_path / "out"
    run = cli(
        "translation",
        "--checkpoint",
        tmp_path / "nope.safetensors",
        "--tokenizer",
        checkpoints["tokenizer"],
        "--out",
        out,
    )
    _assert_one_line_error(run, 1, "nope.safetensors", "not found")
    _nothing_written(out)


def test_checkpoint_of_the_wrong_kind(cli, tmp_path, checkpoints):
    out = tmp_path / "out"
    run = cli("translation", "--checkpoint", checkpoints["vit"], "--tokenizer", checkpoints["tokenizer"], "--out", out)
    _assert_one_line_error(run, 1, "is a vit checkpoint", "attnserve-export vit")
    _nothing_written(out)


def test_not_a_checkpoint(cli, tmp_path):
    bogus = tmp_path / "model.safetensors"
    bogus.write_bytes(b"definitely not safetensors")
    out = tmp_path / "out"
    _assert_one_line_error(cli("vit", "--checkpoint", bogus, "--out", out), 1, "not a safetensors checkpoint")
    _nothing_written(out)


def test_config_that_does_not_match_the_weights(cli, tmp_path, checkpoints):
    with safe_open(str(checkpoints["vit"]), framework="pt") as fh:
        meta = fh.metadata()
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    config = json.loads(meta["attnserve.config"])
    meta["attnserve.config"] = json.dumps({**config, "dim": 48, "num_heads": 4})  # the weights are dim 32
    mismatched = tmp_path / "mismatched.safetensors"
    save_file(tensors, str(mismatched), metadata=meta)
    out = tmp_path / "out"
    _assert_one_line_error(cli("vit", "--checkpoint", mismatched, "--out", out), 1, "do not match the config")
    _nothing_written(out)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("labels.json", '["cat", "dog"]'),
        # a JSON list is read as JSON whatever the file's name: over several lines it is not 4 odd names
        ("labels.txt", '[\n  "cat",\n  "dog"\n]\n'),
    ],
)
def test_labels_that_do_not_match_the_classes(cli, tmp_path, checkpoints, name, text):
    labels = tmp_path / name
    labels.write_text(text)
    out = tmp_path / "out"
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--labels", labels, "--out", out)
    _assert_one_line_error(run, 1, "2 labels for a model with 5 classes")
    _nothing_written(out)


def test_checkpoint_without_tokenizer(cli, tmp_path, checkpoints):
    out = tmp_path / "out"
    run = cli("translation", "--checkpoint", checkpoints["translation"], "--out", out)
    _assert_one_line_error(run, 1, "--tokenizer", "found")  # points at the tokenizer.json beside it
    _nothing_written(out)


@pytest.mark.parametrize(
    ("ids", "fragment"),
    [
        # opus-mt's layout (</s> 0, <unk> 1) on a model whose end token is 2: every source would end wrong
        (
            dict(pad_id=5, bos_id=4, eos_id=0, unk_id=1),
            "ends a text with id 0 ('</s>'), but this model's end token is id 2",
        ),
        # the right end token, another pad: the padding would be read as text
        (dict(pad_id=1, bos_id=0, eos_id=2, unk_id=3), "<pad> is id 1, but this model's pad token is id 0"),
    ],
)
def test_tokenizer_of_another_model(cli, tmp_path, checkpoints, ids, fragment):
    from tokenizers import Tokenizer

    from attnserve.export.modeldir import placeholder_tokenizer

    vocab = Tokenizer.from_file(str(checkpoints["tokenizer"])).get_vocab_size(with_added_tokens=True)
    other = tmp_path / "other-tokenizer.json"
    placeholder_tokenizer(vocab, **ids).save(str(other))  # the model's vocabulary size, other special ids
    out = tmp_path / "out"
    run = cli("translation", "--checkpoint", checkpoints["translation"], "--tokenizer", other, "--out", out)
    _assert_one_line_error(run, 1, fragment, "the tokenizer the model was trained with")
    _nothing_written(out)


def test_unwritable_out(cli, tmp_path, checkpoints):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--out", blocker / "model")
    _assert_one_line_error(run, 1, "cannot write to")
    assert blocker.read_text() == "not a directory"


def test_existing_non_empty_out_needs_force(cli, tmp_path, checkpoints):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--out", out)
    _assert_one_line_error(run, 1, "not empty", "--force")
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and not leftovers(tmp_path)


@pytest.mark.parametrize("given", [".", "../here", "sub/.."])
def test_out_naming_the_current_directory_is_refused_before_the_export(cli, tmp_path, checkpoints, monkeypatch, given):
    here = tmp_path / "here"
    (here / "sub").mkdir(parents=True)
    (here / "sub" / "keep.txt").write_text("mine")
    monkeypatch.chdir(here)
    if given == ".":  # an empty current directory: the export would remove it from under the shell
        (here / "sub" / "keep.txt").unlink()
        (here / "sub").rmdir()
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--out", given, "--force")
    _assert_one_line_error(run, 1, f"--out {given}", "current directory")
    assert here.is_dir() and not leftovers(here) and not leftovers(tmp_path)
    if given != ".":
        assert (here / "sub" / "keep.txt").read_text() == "mine"


def test_out_that_is_a_symbolic_link_is_refused_before_the_export(cli, tmp_path, checkpoints):
    """The new directory would replace the link, which rmtree cannot remove: a traceback once the
    export had run. Refused first, the link and what it points to as they were."""
    real = tmp_path / "shared" / "vit"
    real.mkdir(parents=True)
    (real / "keep.txt").write_text("mine")
    link = tmp_path / "repo" / "vit"
    link.parent.mkdir()
    link.symlink_to(real)
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--out", link, "--force")
    _assert_one_line_error(run, 1, f"--out {link} is a symbolic link", str(real))
    assert link.is_symlink() and (real / "keep.txt").read_text() == "mine"
    assert not leftovers(link.parent) and not leftovers(real.parent)


def test_force_never_replaces_a_model_repository(cli, tmp_path, checkpoints):
    """--out naming the repository instead of a model's folder in it (as the --from-argos folder form
    takes it): --force would delete every model there. Refused, the models kept."""
    repo = tmp_path / "model-repo"
    (repo / "opus-mt-en-de").mkdir(parents=True)
    (repo / "opus-mt-en-de" / "model.json").write_text("{}")
    for force in (["--force"], []):  # without it too: --force is not the way out
        run = cli("vit", "--checkpoint", checkpoints["vit"], "--out", repo, *force)
        _assert_one_line_error(run, 1, f"--out {repo} holds model directories (opus-mt-en-de)", f"{repo}/NAME")
    assert (repo / "opus-mt-en-de" / "model.json").read_text() == "{}" and not leftovers(tmp_path)


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["translation", "--preset", "vit-tiny"], 1, "export it with `attnserve-export vit`"),
        (["vit", "--preset", "vit-huge"], 1, "unknown preset 'vit-huge'; vit presets: vit-b16, vit-s16, vit-tiny"),
        (["vit", "--preset", "vit-tiny", "--keep-rate", "1.5"], 1, "--keep-rate must be in (0, 1]"),
        (["translation", "--preset", "mt-tiny", "--attention", "onnx", "--opset", "20"], 1, "needs --opset 23"),
        (["translation", "--preset", "mt-tiny", "--max-source-len", "9999"], 1, "--max-source-len 9999 outside"),
        (["translation", "--preset", "mt-tiny", "--max-source-len", "0"], 1, "--max-source-len 0 outside"),
        (["translation", "--preset", "mt-tiny", "--max-target-len", "0"], 1, "--max-target-len 0 outside"),
        (["translation", "--preset", "mt-tiny", "--source-language", "en"], 1, "go together: give both"),
        (["translation", "--preset", "mt-tiny", "--source-language", "e n", "--target-language", "de"], 1, "not a"),
        (["vit", "--preset", "vit-tiny", "--precision", "int4"], 2, "invalid choice: 'int4'"),
        (["vit", "--preset", "vit-tiny", "--threads", "-3"], 2, "-3: 0 (every core) or a positive count"),
        (["vit", "--preset", "vit-tiny", "--name", ""], 1, "a model name is not empty"),
        (["vit", "--preset", "vit-tiny", "--name", "my model/v1"], 1, "has no '/'"),
        (["vit", "--preset", "vit-tiny", "--checkpoint", "x.safetensors"], 2, "not allowed with argument"),
    ],
)
def test_bad_options(cli, tmp_path, args, code, fragment):
    out = tmp_path / "out"
    run = cli(*args, "--out", out)
    assert run.code == code
    assert fragment in run.err and "Traceback" not in run.err
    _nothing_written(out)


def test_verify_of_a_directory_without_model_json(cli, tmp_path):
    _assert_one_line_error(cli("verify", tmp_path), 1, "model.json", "not found: not a model directory")
    _assert_one_line_error(cli("inspect", tmp_path), 1, "model.json", "not found: not a model directory")


def test_hugging_face_checkpoints_given_the_wrong_way(cli, tmp_path):
    """A hub model.safetensors as --checkpoint, and a ViT folder as --from-hf: the error says what to run."""
    from safetensors.torch import save_file

    hub = tmp_path / "vit-hub"
    hub.mkdir()
    save_file({"w": __import__("torch").zeros(2)}, str(hub / "model.safetensors"))
    (hub / "config.json").write_text(json.dumps({"model_type": "vit"}))
    out = tmp_path / "out"
    run = cli("vit", "--checkpoint", hub / "model.safetensors", "--out", out)
    _assert_one_line_error(run, 1, "not an attnserve checkpoint", "--from-hf-vit DIR")
    run = cli("translation", "--from-hf", hub, "--out", out)
    _assert_one_line_error(run, 1, "model_type is 'vit'", "attnserve-export vit --from-hf-vit DIR")
    (hub / "config.json").write_text("{}")
    _assert_one_line_error(cli("translation", "--from-hf", hub, "--out", out), 1, "has no model_type")
    _nothing_written(out)


def test_the_cache_layout_defaults_to_in_place_but_for_cuda_at_fp32(tmp_path):
    """CUDA's GroupQueryAttention has fp16 and bf16 kernels only: an fp32 export for CUDA is
    left-padded unless --kv-cache says otherwise, an fp16 one in place."""
    from attnserve.contract.kinds import IN_PLACE, LEFT_PADDED
    from attnserve.export.options import ExportOptions

    assert ExportOptions(out=tmp_path).cache_layout == IN_PLACE
    assert ExportOptions(out=tmp_path, device="cuda").cache_layout == LEFT_PADDED
    assert ExportOptions(out=tmp_path, device="cuda", precision="fp16").cache_layout == IN_PLACE
    assert ExportOptions(out=tmp_path, device="cuda", kv_cache=IN_PLACE).cache_layout == IN_PLACE
    assert ExportOptions(out=tmp_path, attention="decomposed").cache_layout == LEFT_PADDED
