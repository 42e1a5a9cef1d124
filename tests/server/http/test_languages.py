"""Which model serves a language pair, from what each model declares (no server needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from attnserve.server.http.languages import LanguageTable, ModelLanguages, declared_languages


def _model(tmp_path, name: str, raw_languages=None, parsed=None, manifest_has_field: bool = False):
    (tmp_path / name).mkdir()
    doc = {"name": name} if raw_languages is None else {"name": name, "languages": raw_languages}
    (tmp_path / name / "model.json").write_text(json.dumps(doc))
    manifest = SimpleNamespace(languages=parsed) if manifest_has_field else SimpleNamespace()
    return SimpleNamespace(name=name, manifest=manifest, model_dir=tmp_path / name)


def test_declared_languages_from_model_json_the_parsed_manifest_or_the_name(tmp_path):
    raw = _model(tmp_path, "mt", {"source": ["en", "fr"], "target": "de"})
    assert declared_languages(raw) == ModelLanguages("mt", ("en", "fr"), ("de",))
    parsed = SimpleNamespace(source=["es"], target=["en", "pt"], tokens={})
    assert declared_languages(_model(tmp_path, "nllb", None, parsed, True)).targets == ("en", "pt")
    assert declared_languages(_model(tmp_path, "opus-mt-en-de")) == ModelLanguages("opus-mt-en-de", ("en",), ("de",))
    assert declared_languages(_model(tmp_path, "tc-big-en-de", None, None, True)).sources == ("en",)
    assert declared_languages(_model(tmp_path, "reverser")) == ModelLanguages("reverser", (), ())
    assert declared_languages(_model(tmp_path, "half", {"source": ["en"], "target": []})).sources == ()


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
    assert table.multilingual("a-many") and not table.multilingual("z-en-de")
