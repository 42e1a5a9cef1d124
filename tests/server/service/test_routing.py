"""Which model serves a language pair, from what each model declares: the routing policy of
every door (no server needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnserve.contract.manifest import Languages
from attnserve.server.service.routing import (
    LanguageNotServed,
    LanguageTable,
    ModelLanguages,
    declared_languages,
    language_name,
)


def _model(name: str, source: list[str] | None = None, target: list[str] | None = None):
    languages = None if source is None else Languages(source=source, target=target or [])
    return SimpleNamespace(name=name, manifest=SimpleNamespace(languages=languages))


def test_declared_languages_from_the_manifest_or_the_name():
    assert declared_languages(_model("mt", ["en", "fr"], ["de"])) == ModelLanguages("mt", ("en", "fr"), ("de",))
    assert declared_languages(_model("opus-mt-en-de")) == ModelLanguages("opus-mt-en-de", ("en",), ("de",))
    assert declared_languages(_model("opus-mt-en-de", ["fr"], ["es"])).sources == ("fr",)  # declared first
    assert declared_languages(_model("reverser")) == ModelLanguages("reverser", (), ())
    assert declared_languages(_model("half", ["en"], [])) == ModelLanguages("half", (), ())
    nllb = _model("nllb", ["eng_Latn", "zho_Hans", "zho_Hant"], ["deu_Latn", "fra"])
    assert declared_languages(nllb) == ModelLanguages("nllb", ("en", "zh-Hans", "zh-Hant"), ("de", "fr"))
    argos = _model("argos-en-pb", ["pb"], ["zt"])  # Argos' own codes, listed as LibreTranslate lists them
    assert declared_languages(argos) == ModelLanguages("argos-en-pb", ("pt-BR",), ("zh-Hant",))
    both = _model("two-spellings", ["de", "deu_Latn"], ["en"])  # one tag twice: each stays as it is
    assert declared_languages(both).sources == ("de", "deu_Latn")


def test_language_names():
    assert [language_name(c) for c in ("de", "zho_Hant", "qqq")] == ["German", "Chinese (zho_Hant)", "qqq"]


def test_a_pair_goes_to_a_model_made_for_it_then_to_the_first_by_name():
    table = LanguageTable(
        [
            ModelLanguages("z-en-de", ("en",), ("de",)),
            ModelLanguages("a-many", ("en", "fr", "de"), ("de", "fr")),
            ModelLanguages("b-many", ("en",), ("fr", "de")),
            ModelLanguages("plain", (), ()),
        ]
    )
    assert table.pairs[("en", "de")] == "z-en-de" and table.pairs[("fr", "de")] == "a-many"
    assert table.pairs[("en", "fr")] == "a-many"  # two multilingual models: the first by name
    assert ("de", "de") not in table.pairs and ("de", "en") not in table.pairs
    assert [table.route(s, t) for s, t in (("en", "de"), ("", "de"), ("deu", "fr"), ("en", ""))] == [
        "z-en-de", "z-en-de", "a-many", "z-en-de",
    ]  # fmt: skip
    for source, target, code, target_only in (
        ("xx", "de", "xx", False),
        ("de", "de", "", False),
        ("fr", "en", "", True),
    ):
        with pytest.raises(LanguageNotServed) as err:
            table.route(source, target)
        assert (err.value.code, err.value.target_only, err.value.status) == (code, target_only, "INVALID_ARGUMENT")
        assert f"no model serves {source} -> {target}" in str(err.value)
    assert table.codes == ["de", "en", "fr"] and table.targets_of("en") == ["de", "fr"]
    assert table.sources_to("fr") == ["de", "en"]


def test_a_pair_without_a_model_goes_through_the_pivot_when_two_models_reach_and_leave_it():
    table = LanguageTable(
        [
            ModelLanguages("fr-en", ("fr",), ("en",)),
            ModelLanguages("en-de", ("en",), ("de",)),
            ModelLanguages("de-en", ("de",), ("en",)),
            ModelLanguages("m2m", ("en", "es"), ("en", "es")),
        ]
    )
    route = table.pivot_route("fra", "deu", "en")  # codes as a request gives them
    assert (route.source, route.target, route.models, route.pivot) == ("fr", "de", ("fr-en", "en-de"), "en")
    assert table.pivot_route("en", "de", "en") is None  # served directly
    assert table.pivot_route("de", "en", "en") is None  # the pivot is one end
    assert table.pivot_route("de", "fr", "en") is None  # nothing leaves English for French
    assert table.pivot_route("fr", "de", "") is None  # pivoting off
    assert table.pivot_route("xx", "de", "en") is None  # an unknown language: routing's error, not a pivot
    routes = {(r.source, r.target): r for r in table.routes("en")}
    assert routes["fr", "de"].models == ("fr-en", "en-de") and routes["fr", "es"].models == ("fr-en", "m2m")
    assert routes["es", "de"].pivot == "en" and routes["en", "de"].pivot == ""
    assert ("fr", "fr") not in routes and ("de", "fr") not in routes
    assert {(r.source, r.target) for r in table.routes("")} == set(table.pairs)


def _variants() -> LanguageTable:
    """Argos Translate's packages of Portuguese and Chinese: a plain ``pt`` / ``zh`` and ``pb`` / ``zt``."""
    models = [("en-pt", ["pt"]), ("en-pb", ["pb"]), ("en-zh", ["zh"]), ("en-zt", ["zt"]), ("en-de", ["de"])]
    return LanguageTable([declared_languages(_model(f"argos-{name}", ["en"], target)) for name, target in models])


@pytest.mark.parametrize(
    ("target", "model"),
    [
        ("pt-BR", "argos-en-pb"), ("PT-BR", "argos-en-pb"), ("pb", "argos-en-pb"), ("pt-br", "argos-en-pb"),
        ("pt", "argos-en-pt"), ("PT-PT", "argos-en-pt"),
        ("zh-Hant", "argos-en-zt"), ("ZH-HANT", "argos-en-zt"), ("zt", "argos-en-zt"), ("zh-TW", "argos-en-zt"),
        ("zh", "argos-en-zh"), ("ZH-HANS", "argos-en-zh"), ("zho_Hans", "argos-en-zh"),
    ],
)  # fmt: skip
def test_a_region_or_script_goes_to_the_model_made_for_it_and_a_bare_code_to_the_plain_one(target, model):
    table = _variants()
    assert table.codes == ["de", "en", "pt", "pt-BR", "zh", "zh-Hant"]  # LibreTranslate's /languages codes
    assert table.route("en", target) == model


def test_a_variant_is_reached_by_its_bare_language_only_where_it_is_the_only_one():
    table = LanguageTable([declared_languages(_model("argos-en-pb", ["en"], ["pb"])),
                           declared_languages(_model("argos-en-zt", ["en"], ["zt"])),
                           declared_languages(_model("argos-zt-en", ["zt"], ["en"]))])  # fmt: skip
    assert [table.route("en", t) for t in ("pt", "PT-BR", "zh", "ZH-HANT")] == [
        "argos-en-pb", "argos-en-pb", "argos-en-zt", "argos-en-zt",
    ]  # fmt: skip
    assert table.route("ZH", "EN-US") == table.route("zh-TW", "en-GB") == "argos-zt-en"
    for target in ("pt-PT", "zh-Hans"):  # another variant than the one served: not this model
        with pytest.raises(LanguageNotServed, match="served languages: en, pt-BR, zh-Hant"):
            table.route("en", target)


def test_traditional_chinese_never_reaches_a_simplified_model():
    table = LanguageTable([ModelLanguages("opus-mt-en-zh", ("en",), ("zh",))])
    assert table.route("en", "zh-Hans") == "opus-mt-en-zh"
    with pytest.raises(LanguageNotServed, match="no served model knows 'zh-Hant'"):
        table.route("en", "zh-Hant")
