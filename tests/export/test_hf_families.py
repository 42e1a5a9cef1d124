"""`attnserve-export translation --from-hf DIR` on every supported family and layout, verification on.

Each checkpoint (tests/support/hf_checkpoints.py) has the hub's file and special-id layout and
was trained on reverse / copy, so its outputs depend on every source token and position.
The exported directory's tokenizer and language tokens must give transformers' source ids,
and its greedy (onnxruntime) and beam-4 (PyTorch reference of the imported weights)
translations transformers' ``generate`` on 24 texts, for every target language.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from attnserve.contract.languages import LanguageError, plan
from attnserve.contract.manifest import load_manifest
from attnserve.export import cli
from attnserve.export.importers import ImportCheckpointError, load_hf_translation
from attnserve.export.ort_decode import OrtGreedy
from attnserve.models import beam_search
from tests.support import hf_checkpoints

FAMILY = {"opus-mt": "marian", "opus-mt-multi": "marian", "opus-mt-separate": "marian"}
FAMILY |= {"m2m100": "m2m_100", "nllb": "m2m_100"}
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]


@pytest.fixture(scope="session")
def exported(hf_root):
    """kind -> (checkpoint, exported directory), each exported once through the real CLI."""
    return lambda kind: hf_checkpoints.export(kind, hf_root)


def _sources(manifest, tokenizer, texts, source: str, target: str):
    """(B, L) right-padded ids as the server builds them, and the forced output prefix."""
    languages = plan(manifest.family, manifest.languages, tokenizer.token_to_id, source, target)
    rows = [list(languages.source_prefix) + tokenizer.encode(t).ids for t in texts]
    L = max(map(len, rows))
    pad = manifest.tokenizer.pad_id
    return np.array([r + [pad] * (L - len(r)) for r in rows], dtype=np.int64), languages.target_prefix


@pytest.mark.parametrize("kind", hf_checkpoints.KINDS)
def test_exported_translations_match_generate(kind, exported):
    from tokenizers import Tokenizer

    ckpt, out = exported(kind)
    manifest = load_manifest(out)
    report = json.loads((out / "export-report.json").read_text())
    assert report["verification"]["passed"] is True
    assert manifest.family == FAMILY[kind]
    tokenizer = Tokenizer.from_file(str(out / manifest.tokenizer.file))
    texts = hf_checkpoints.test_texts()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    encoder, decoder = (
        ort.InferenceSession(str(out / manifest.graphs[g].file), options, providers=["CPUExecutionProvider"])
        for g in ("encoder", "decoder")
    )
    greedy = OrtGreedy(encoder, decoder, manifest)
    imported = load_hf_translation(ckpt.path).model
    for target in ckpt.targets:
        src, prefix = _sources(manifest, tokenizer, texts, ckpt.source_language, target)
        expected_src = ckpt.encode(texts, target)
        pad, hf_pad = manifest.tokenizer.pad_id, ckpt.model.config.pad_token_id
        assert [[tokenizer.id_to_token(i) for i in row if i != pad] for row in src.tolist()] == [
            [ckpt.source_token(i) for i in row if i != hf_pad] for row in expected_src.input_ids.tolist()
        ], "source tokens differ from the transformers tokenizer's"
        expected = ckpt.generate(texts, target)
        assert len({tuple(r) for r in expected}) >= 20, "the checkpoint's outputs are degenerate: train it longer"
        assert greedy.decode(src, 24, prefix) == expected, f"greedy, target {target!r}"
        beams = beam_search(
            imported,
            torch.from_numpy(src),
            beam_size=4,
            max_new_tokens=24,
            prefix=list(prefix),
            hide_prefix=len(prefix),
        )
        assert [b[0].tokens for b in beams] == ckpt.generate(texts, target, num_beams=4), f"beam 4, {target!r}"
        hidden = len(prefix)  # the language token is not part of the text
        assert [tokenizer.decode(r[hidden:], skip_special_tokens=True) for r in expected] == [
            ckpt.decode(r[hidden:]) for r in expected
        ]


@pytest.mark.parametrize("kind", ["m2m100", "nllb", "opus-mt"])
def test_special_tokens_are_skipped_and_kept_whole_as_transformers_does(kind, exported):
    """Every special token of the checkpoint's tokenizer (start, end, pad, unknown) is left
    out of a decoded text and stays one token when typed, as the transformers tokenizer does;
    a start token missed here would show as "<s>" in a served translation."""
    from tokenizers import Tokenizer

    ckpt, out = exported(kind)
    manifest = load_manifest(out)
    tokenizer = Tokenizer.from_file(str(out / manifest.tokenizer.file))
    reference = ckpt.tokenizer
    specials = sorted({reference.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>", "<unk>")})
    words = tokenizer.encode(hf_checkpoints.test_texts()[0]).ids[:4]
    for special in specials:
        ids = words[:2] + [special] + words[2:]
        assert tokenizer.decode(ids, skip_special_tokens=True) == ckpt.decode(ids), (kind, special)
    typed = "a <s> b </s> c"  # the reference's own language token (M2M100, NLLB) is left out
    expected = reference.convert_tokens_to_ids([*reference.tokenize(typed), "</s>"])
    assert tokenizer.encode(typed).ids == expected, (kind, tokenizer.encode(typed).tokens)


def test_manifest_languages_per_family(exported):
    for kind, source, target, tokens in (
        ("opus-mt", ["en"], ["de"], {}),  # one fixed pair: tokenizer_config.json's source_lang / target_lang
        ("opus-mt-multi", ["en"], ["deu", "fra"], {"fra": ">>fra<<", "deu": ">>deu<<"}),
        ("nllb", ["eng_Latn", "fra_Latn", "deu_Latn"], ["eng_Latn", "fra_Latn", "deu_Latn"], None),
    ):
        manifest = load_manifest(exported(kind)[1])
        languages = manifest.languages
        assert sorted(languages.source) == sorted(source) and sorted(languages.target) == sorted(target)
        assert tokens is None or languages.tokens == tokens
    m2m = load_manifest(exported("m2m100")[1])
    assert len(m2m.languages.target) == 100 and m2m.languages.tokens["fr"] == "__fr__"
    assert (m2m.languages.default_source, m2m.languages.default_target) == ("en", "fr")
    # M2M100 starts from </s>, which must stay choosable; pad is never generated.
    assert m2m.tokenizer.start_id == m2m.tokenizer.eos_id == 2 and m2m.tokenizer.never_generate == [1]
    opus = load_manifest(exported("opus-mt")[1])
    assert opus.tokenizer.start_id == opus.tokenizer.pad_id == opus.config["vocab_size"] - 1
    assert opus.tokenizer.never_generate == [opus.tokenizer.pad_id]


def test_language_errors_name_the_supported_ones(exported):
    manifest = load_manifest(exported("nllb")[1])
    with pytest.raises(LanguageError, match="fra_Latn"):
        plan(manifest.family, manifest.languages, lambda t: 5, "eng_Latn", "ita_Latn")
    manifest = load_manifest(exported("opus-mt-multi")[1])
    with pytest.raises(LanguageError, match="deu, fra"):
        plan(manifest.family, manifest.languages, lambda t: 5, "", "")


def test_inspect_reports_family_languages_vocabulary_and_limits(exported, capsys):
    _, out = exported("nllb")
    assert cli.main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "family m2m_100" in text and "eng_Latn" in text and "vocabulary" in text
    assert cli.main(["inspect", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["family"] == "m2m_100" and "fra_Latn" in summary["languages"]["target"]
    assert summary["vocabulary"]["size"] == summary["config"]["vocab_size"]


def test_from_hf_names_an_unsupported_model_type(exported, tmp_path, capsys):
    ckpt, _ = exported("opus-mt")
    bad = tmp_path / "bart"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "bart"}))
    assert cli.main(["translation", "--from-hf", str(bad), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "model_type is 'bart'" in err and "m2m_100, marian" in err and "Traceback" not in err
    with pytest.raises(ImportCheckpointError, match="reads m2m_100"):
        load_hf_translation(ckpt.path, "m2m_100")
