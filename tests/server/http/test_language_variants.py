"""Region- and script-qualified codes through the doors users call: word reversers declaring Argos
Translate's own codes (``pb`` Brazilian Portuguese, ``zt`` traditional Chinese) beside a plain
``pt`` and ``zh``, served. LibreTranslate's client sees them as upstream lists them (``pt-BR``,
``zh-Hant``) and DeepL's client names them as DeepL does (``PT-BR``, ``ZH-HANT``, ``EN-US``); each
request reaches the model made for its variant, which the per-model request metrics tell."""

from __future__ import annotations

import json
import shutil

import deepl
import pytest

from tests.support.server import post_json as post

libretranslatepy = pytest.importorskip("libretranslatepy")

MODELS = {
    "rev-en-pt": ("en", "pt"),
    "rev-en-pb": ("en", "pb"),
    "rev-en-zh": ("en", "zh"),
    "rev-en-zt": ("en", "zt"),
    "rev-zt-en": ("zt", "en"),
}


@pytest.fixture(scope="module")
def server(serve, reverser_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("variants-repo")
    for name, (source, target) in MODELS.items():
        shutil.copytree(reverser_dir, root / name)
        manifest = json.loads((root / name / "model.json").read_text())
        manifest |= {"name": name, "languages": {"source": [source], "target": [target]}}
        (root / name / "model.json").write_text(json.dumps(manifest))
    with serve(root, http_port=0, language_detection="off") as handle:
        yield handle


def answered_by(server, method: str, send) -> str:
    """The one model that answered ``send()``, from the per-model request counts."""

    def counts():
        return {m: server.metric("attnserve_requests_total", model=m, method=method, status="OK") for m in MODELS}

    before = counts()
    send()
    after = counts()
    (model,) = [m for m in MODELS if after[m] != before[m]]
    return model


def test_libretranslate_lists_argos_codes_as_upstream_does(server):
    listed = libretranslatepy.LibreTranslateAPI(f"http://{server.http_address}").languages()
    assert [lang["code"] for lang in listed] == ["en", "pt", "pt-BR", "zh", "zh-Hant"]
    names = [lang["name"] for lang in listed]
    assert names == ["English", "Portuguese", "Portuguese (Brazil)", "Chinese", "Chinese (traditional)"]
    english = next(lang for lang in listed if lang["code"] == "en")
    assert english["targets"] == ["pt", "pt-BR", "zh", "zh-Hant"]


@pytest.mark.parametrize(
    ("target", "model"),
    [("pt-BR", "rev-en-pb"), ("pb", "rev-en-pb"), ("pt", "rev-en-pt"),
     ("zh-Hant", "rev-en-zt"), ("zt", "rev-en-zt"), ("zh", "rev-en-zh"), ("zh-Hans", "rev-en-zh")],
)  # fmt: skip
def test_libretranslate_codes_reach_the_model_of_their_variant(server, target, model):
    def send():
        status, reply = post(server, "/translate", {"q": "t5 t9 t17", "source": "en", "target": target})
        assert (status, reply) == (200, {"translatedText": "t17 t9 t5"})

    assert answered_by(server, "libretranslate.translate", send) == model


@pytest.mark.parametrize(
    ("source", "target", "model"),
    [("EN", "PT-BR", "rev-en-pb"), ("EN", "PT-PT", "rev-en-pt"), ("EN", "ZH-HANT", "rev-en-zt"),
     ("EN", "ZH-HANS", "rev-en-zh"), ("EN", "ZH", "rev-en-zh"), ("ZH", "EN-US", "rev-zt-en")],
)  # fmt: skip
def test_deepl_variants_reach_the_model_of_their_variant(server, source, target, model):
    translator = deepl.Translator("any", server_url=f"http://{server.http_address}")
    results = []

    def send():
        results.append(translator.translate_text("t5 t9 t17", source_lang=source, target_lang=target))

    assert answered_by(server, "deepl.translate", send) == model
    assert results[0].text == "t17 t9 t5" and results[0].detected_source_lang == source


def test_deepl_lists_the_variants_served(server):
    translator = deepl.Translator("any", server_url=f"http://{server.http_address}")
    assert [(lang.code, lang.name) for lang in translator.get_target_languages()] == [
        ("EN-GB", "English (British)"), ("EN-US", "English (American)"),
        ("PT-BR", "Portuguese (Brazilian)"), ("PT-PT", "Portuguese (European)"),
        ("ZH", "Chinese (simplified)"), ("ZH-HANS", "Chinese (simplified)"), ("ZH-HANT", "Chinese (traditional)"),
    ]  # fmt: skip
    assert [lang.code for lang in translator.get_source_languages()] == ["EN", "ZH"]
