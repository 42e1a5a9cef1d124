"""Which model serves a language pair, from what each model declares (no server needed)."""

from __future__ import annotations

from types import SimpleNamespace

from attnserve.contract.manifest import Languages
from attnserve.server.doors.http.languages import LanguageTable, ModelLanguages, declared_languages, language_name


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
    assert declared_languages(nllb) == ModelLanguages("nllb", ("en", "zho_Hans", "zho_Hant"), ("de", "fr"))


def test_language_names():
    assert [language_name(c) for c in ("de", "zho_Hant", "qqq")] == ["German", "Chinese (zho_Hant)", "qqq"]


def test_the_table_routes_each_pair_to_the_first_model_by_name():
    table = LanguageTable(
        [
            ModelLanguages("z-en-de", ("en",), ("de",)),
            ModelLanguages("a-many", ("en", "fr", "de"), ("de", "fr")),
            ModelLanguages("plain", (), ()),
        ]
    )
    assert table.model_for("en", "de") == "a-many" and table.model_for("fr", "de") == "a-many"
    assert table.model_for("de", "de") is None and table.model_for("de", "en") is None
    assert table.codes == ["de", "en", "fr"] and table.targets_of("en") == ["de", "fr"]
    assert table.sources_to("fr") == ["de", "en"]
