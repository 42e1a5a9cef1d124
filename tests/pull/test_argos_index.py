"""The Argos index as ``pull`` reads it: every pair among a language list that the index offers
(LibreTranslate's --load-only), the newest version of each, relative links read against the
index's location, and a bad index or an unknown language refused with a message naming it."""

from __future__ import annotations

import json

import pytest

from attnserve.export.pull import argos_index
from attnserve.export.pull.errors import PullError


def entry(source, target, version="1.0", **extra):
    name = f"translate-{source}_{target}-{version.replace('.', '_')}.argosmodel"
    return {"package_version": version, "argos_version": "1.9.0", "from_code": source, "to_code": target,
            "from_name": source.upper(), "to_name": target.upper(), "links": [name],
            "code": f"translate-{source}_{target}", **extra}  # fmt: skip


def write_index(tmp_path, entries):
    path = tmp_path / "index.json"
    path.write_text(json.dumps(entries))
    return path


def test_a_language_list_selects_every_offered_pair_among_them(tmp_path):
    entries = [entry("en", "de"), entry("de", "en"), entry("en", "fr"), entry("fr", "en"), entry("en", "es"),
               entry("de", "en", "1.9"), {"type": "sbd", "from_codes": ["en"], "links": ["x"]}]  # fmt: skip
    packages = argos_index.read_index(str(write_index(tmp_path, entries)))
    chosen = argos_index.select(packages, ["en", "de", "fr"])
    assert [p.pair for p in chosen] == ["en-de", "en-fr", "de-en", "fr-en"]  # no de-fr: the server pivots
    assert next(p for p in chosen if p.pair == "de-en").version == "1.9"
    assert chosen[0].links == (str(tmp_path / "translate-en_de-1_0.argosmodel"),)
    assert chosen[0].model_name == "argos-en-de"


def test_a_language_the_index_lacks_is_named(tmp_path):
    packages = argos_index.read_index(str(write_index(tmp_path, [entry("en", "de")])))
    with pytest.raises(PullError, match="no package for xx; it offers de, en"):
        argos_index.select(packages, ["en", "xx"])
    with pytest.raises(PullError, match="no de -> fr package; it offers en-de"):
        argos_index.find_pair(packages, "de-fr")
    assert argos_index.find_pair(packages, "EN-DE").pair == "en-de"  # as users type it


def test_relative_links_of_a_url_index_and_checksums(tmp_path):
    index = "http://mirror.example/argos/index.json"
    package = argos_index._package(index, 0, entry("en", "de", sha256="sha256:" + "a" * 64))
    assert package.links == ("http://mirror.example/argos/translate-en_de-1_0.argosmodel",)
    assert package.sha256 == "a" * 64


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"en": 1}', "expected a JSON list"),
        (json.dumps([entry("en", "de", links=[])]), "no usable translation package"),
        (json.dumps([entry("en", "d e")]), "no usable translation package"),
    ],
)
def test_a_bad_index_is_refused_with_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "index.json"
    path.write_text(content)
    with pytest.raises(PullError, match=message):
        argos_index.read_index(str(path))


def test_a_broken_entry_is_skipped_with_a_warning_and_the_others_stay_usable(tmp_path, caplog):
    """The public index is one file for every user: one malformed entry must not stop every pull."""
    broken = [entry("en", "de", links=[]), entry("en", "d e"), entry("en", "it", sha256="xyz")]
    packages = argos_index.read_index(str(write_index(tmp_path, [*broken, entry("en", "fr")])))
    assert [p.pair for p in packages] == ["en-fr"]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "has no links" in warned and "is not a language code" in warned and "is not hex" in warned


def test_the_index_location_flag_env_default(monkeypatch):
    monkeypatch.delenv(argos_index.INDEX_ENV, raising=False)
    assert argos_index.index_location(None) == argos_index.DEFAULT_INDEX
    monkeypatch.setenv(argos_index.INDEX_ENV, "/srv/argos")
    assert argos_index.index_location(None) == "/srv/argos"
    assert argos_index.index_location("http://x/index.json") == "http://x/index.json"


def test_language_lists(tmp_path):
    assert argos_index.parse_languages(" en, de,en,fr ") == ["en", "de", "fr"]
    assert argos_index.parse_languages("EN,De") == ["en", "de"]
    with pytest.raises(PullError, match="is not a language code"):
        argos_index.parse_languages("en,Deutsch!")


def test_region_and_script_codes_select_argos_pb_and_zt(tmp_path):
    """Argos Translate's own codes: ``pb`` Brazilian Portuguese, ``zt`` traditional Chinese."""
    pairs = [("en", "pt"), ("en", "pb"), ("pb", "en"), ("en", "zh"), ("zh", "en"), ("en", "zt"), ("zt", "en")]
    packages = argos_index.read_index(str(write_index(tmp_path, [entry(s, t) for s, t in pairs])))
    chosen = argos_index.select(packages, argos_index.parse_languages("pt-BR,zh-Hant,en-US"))
    assert [p.pair for p in chosen] == ["pb-en", "zt-en", "en-pb", "en-zt"]
    chosen = argos_index.select(packages, argos_index.parse_languages("EN-GB,zh-Hans,pt,pt-PT"))
    assert [p.pair for p in chosen] == ["en-zh", "en-pt", "zh-en"]  # the plain packages; pt-PT is pt
    with pytest.raises(PullError, match="no package for zh-tw"):  # no traditional Chinese in this index
        argos_index.select(argos_index.read_index(str(write_index(tmp_path, [entry("en", "zh")]))), ["en", "zh-tw"])
