"""Languages per request, served: the exported opus-mt, multilingual opus-mt, M2M100 and NLLB
directories (tests/support/hf_checkpoints.py, trained on reverse / copy) behind the real server.

Served greedy and beam-4 translations must be transformers' ``generate`` on 24 texts for
every target language (the language token chosen from ``target_language``, hidden from
the text); ``target_prefix`` forces the start; an empty model name with a language pair
picks the model that serves it (``service.routing``'s policy); bad languages get
INVALID_ARGUMENT naming what is served.
"""

from __future__ import annotations

import json
import shutil

import grpc
import pytest

from attnserve.client import AttnServeError, decoding_options
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from tests.support import hf_checkpoints

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
KINDS = hf_checkpoints.KINDS


@pytest.fixture(scope="module")
def repo(hf_root, tmp_path_factory):
    repo = tmp_path_factory.mktemp("languages-repo")
    for kind in KINDS:
        _, out = hf_checkpoints.export(kind, hf_root)
        shutil.copytree(out, repo / kind)
    return repo


@pytest.fixture(scope="module")
def server(serve, repo):
    with serve(repo) as handle:
        yield handle


def _hidden(ckpt) -> int:
    return 1 if ckpt.kind in ("m2m100", "nllb") else 0


@pytest.mark.parametrize("kind", KINDS)
def test_served_greedy_and_beam4_match_generate(kind, server, hf_root):
    ckpt = hf_checkpoints.build(kind, hf_root)
    texts = hf_checkpoints.test_texts()
    hidden = _hidden(ckpt)
    with server.client() as client:
        for target in ckpt.targets:
            for beam in (1, 4):
                expected = ckpt.generate(texts, target, num_beams=beam)
                got = client.translate(
                    texts, kind, target_language=target, beam_size=beam, max_new_tokens=24, return_token_ids=True
                )
                assert [t.hypotheses[0].token_ids for t in got] == [row[hidden:] for row in expected], (target, beam)
                assert [t.text for t in got] == [ckpt.decode(row[hidden:]) for row in expected]


def test_iso_codes_map_to_the_models_codes_and_the_reply_names_them(server, hf_root):
    ckpt = hf_checkpoints.build("nllb", hf_root)
    texts = hf_checkpoints.test_texts()[:4]
    with server.client() as client:
        reply = client.stub.Translate(
            pb.TranslateRequest(
                model="nllb",
                texts=texts,
                options=decoding_options(source_language="en", target_language="de", return_token_ids=True),
            )
        )
    assert (reply.source_language, reply.target_language) == ("eng_Latn", "deu_Latn")
    expected = ckpt.generate(texts, "deu_Latn")
    assert [list(t.hypotheses[0].token_ids) for t in reply.translations] == [row[1:] for row in expected]


def test_target_prefix_is_forced_and_kept_in_the_text(server, hf_root):
    import torch

    ckpt = hf_checkpoints.build("opus-mt", hf_root)
    texts = hf_checkpoints.test_texts()[:6]
    with server.client() as client:
        plain = [t.text for t in client.translate(texts, "opus-mt")]
        prefix = "zo"
        forced = client.translate(texts, "opus-mt", target_prefix=prefix, return_token_ids=True)
    ids = ckpt.tokenizer(text_target=prefix, add_special_tokens=False).input_ids
    start = ckpt.model.config.decoder_start_token_id
    batch = ckpt.encode(texts)
    with torch.no_grad():
        out = ckpt.model.generate(
            **batch,
            decoder_input_ids=torch.tensor([[start, *ids]] * len(texts)),
            max_new_tokens=24 - len(ids),
            bad_words_ids=[[ckpt.model.config.pad_token_id]],
        )
    eos = ckpt.model.config.eos_token_id
    expected = [row[1 : row.index(eos, 1) + 1] if eos in row[1:] else row[1:] for row in out.tolist()]
    assert [t.hypotheses[0].token_ids for t in forced] == expected
    assert all(t.text.startswith(prefix) for t in forced) and [t.text for t in forced] != plain


def test_unsupported_language_is_invalid_argument_naming_the_served_ones(server):
    with server.client() as client:
        with pytest.raises(AttnServeError) as err:
            client.translate(["ka"], "opus-mt-multi", target_language="ita")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "deu, fra" in err.value.details
        with pytest.raises(AttnServeError) as err:
            client.translate(["ka"], "m2m100", source_language="xx", target_language="fr")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "af, am" in err.value.details
        with pytest.raises(AttnServeError) as err:
            client.translate(["ka"], source_language="en", target_language="tlh")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "no model serves en -> tlh" in err.value.details


def test_a_pair_several_models_serve_goes_to_the_first_by_name(server):
    """Three multilingual models serve en -> fr here: routing's policy picks the first by name."""
    with server.client() as client:
        options = decoding_options(source_language="en", target_language="fr")
        reply = client.stub.Translate(pb.TranslateRequest(texts=["ka"], options=options))
    assert reply.model == "m2m100" and reply.target_language == "fr"


def test_model_info_lists_languages_and_family(server):
    with server.client() as client:
        models = {m.name: m for m in client.list_models()}
    assert models["nllb"].family == "m2m_100" and "fra_Latn" in models["nllb"].target_languages
    assert models["opus-mt"].family == "marian"
    assert (models["opus-mt"].source_languages, models["opus-mt"].target_languages) == (["en"], ["de"])
    assert models["opus-mt-multi"].target_languages == ["deu", "fra"]


def test_a_language_pair_picks_the_model(serve, hf_root, tmp_path):
    """opus-mt-en-de and opus-mt-en-fr in one repository serve both pairs through one call shape."""
    ckpt, out = hf_checkpoints.export("opus-mt", hf_root)
    fr_dir = tmp_path / "hf-en-fr"
    shutil.copytree(ckpt.path, fr_dir)
    config = json.loads((fr_dir / "tokenizer_config.json").read_text())
    (fr_dir / "tokenizer_config.json").write_text(json.dumps(config | {"target_lang": "fr"}))
    from attnserve.export import cli

    repo = tmp_path / "repo"
    shutil.copytree(out, repo / "opus-mt-en-de")
    flags = ["--name", "opus-mt-en-fr", "--no-verify", "--threads", "1"]
    assert cli.main(["translation", "--from-hf", str(fr_dir), "--out", str(repo / "opus-mt-en-fr"), *flags]) == 0
    # the exported manifest of the first copy is named "opus-mt": rename it as the repository does
    manifest = json.loads((repo / "opus-mt-en-de" / "model.json").read_text())
    (repo / "opus-mt-en-de" / "model.json").write_text(json.dumps(manifest | {"name": "opus-mt-en-de"}))
    texts = hf_checkpoints.test_texts()[:3]
    with serve(repo) as server, server.client() as client:
        for target, name in (("de", "opus-mt-en-de"), ("fr", "opus-mt-en-fr"), ("fra", "opus-mt-en-fr")):
            reply = client.stub.Translate(
                pb.TranslateRequest(
                    texts=texts,
                    options=decoding_options(source_language="en", target_language=target),
                )
            )
            assert reply.model == name and reply.target_language == target[:2]
        with pytest.raises(AttnServeError) as err:
            client.translate(texts, source_language="de", target_language="en")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "none translates into en" in err.value.details


def test_client_cli_language_flags(server, hf_root, capsys):
    from attnserve.client.cli import main

    ckpt = hf_checkpoints.build("nllb", hf_root)
    text = hf_checkpoints.test_texts()[0]
    argv = ["--address", server.address, "--retries", "0", "translate", "--model", "nllb"]
    assert main([*argv, "--source-language", "en", "--target-language", "de", text]) == 0
    assert capsys.readouterr().out.strip() == ckpt.decode(ckpt.generate([text], "deu_Latn")[0][1:])
    assert main([*argv, "--to", "de", "--from", "en", "--timeout", "30", text]) == 0  # the short forms
    assert capsys.readouterr().out.strip() == ckpt.decode(ckpt.generate([text], "deu_Latn")[0][1:])
    assert main([*argv, "--target-language", "ita", text]) == 1
    assert "target language 'ita' is not served" in capsys.readouterr().err


def test_stream_hides_the_language_token(server, hf_root):
    ckpt = hf_checkpoints.build("m2m100", hf_root)
    text = hf_checkpoints.test_texts()[1]
    with server.client() as client:
        chunks = list(client.translate_stream(text, "m2m100", source_language="en", target_language="de"))
    assert "".join(c.delta for c in chunks) == ckpt.decode(ckpt.generate([text], "de")[0][1:])
    assert chunks[-1].finish_reason == "eos"
