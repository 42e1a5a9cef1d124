"""XLIFF files without a model (``server/files/xliff.py``): XLIFF 1.2 and 2.1 sources translated into
their targets (created where missing, the target language set), inline elements kept around the
words they wrap, ``translate="no"`` and finished segments left as they were, the file's encoding
kept. The "translation" swaps the case of every letter outside the markup the html mode keeps."""

from __future__ import annotations

import re

import pytest
from lxml import etree

from attnserve.server import files
from attnserve.server.files import FileRefused, TooManyCharacters
from tests.support import localization_files as xliff

LIMIT = 1 << 20
V1 = "{urn:oasis:names:tc:xliff:document:1.2}"
V2 = "{urn:oasis:names:tc:xliff:document:2.0}"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
UNITS_12 = """      <trans-unit id="1">
        <source>Click <g id="1">Save</g> to keep<x id="2"/> your work &amp; more.</source>
      </trans-unit>
      <trans-unit id="2" translate="no">
        <source>ACME Cloud</source>
      </trans-unit>
      <trans-unit id="3">
        <source>Hello {0}</source>
        <target state="final">Hallo {0}</target>
      </trans-unit>
      <trans-unit id="4">
        <source>Open <ph id="1">%s</ph> now.</source>
        <target state="needs-translation"/>
      </trans-unit>"""
UNITS_21 = """  <unit id="u1">
   <segment state="initial"><source>Press <pc id="1" dataRefStart="d1">Save</pc> now<ph id="2"/>.</source></segment>
   <segment state="final"><source>Done.</source><target>Fertig.</target></segment>
  </unit>
  <unit id="u2" translate="no"><segment><source>Do not translate.</source></segment></unit>"""


def swapped(extracted: files.Extracted) -> bytes:
    outside = re.compile(r"(<[^>]*>)|([^<]+)")
    return extracted.write([outside.sub(lambda m: m.group(1) or m.group(2).swapcase(), t) for t in extracted.texts])


def content(element: etree._Element) -> str:
    """The element's content as written, namespaces left out."""
    inner = etree.tostring(element, encoding="unicode", with_tail=False)
    inner = re.sub(r' xmlns(:\w+)?="[^"]*"', "", inner)
    return inner[inner.index(">") + 1 : inner.rindex("<")]


def test_xliff_12_targets_are_filled_with_inline_tags_kept_and_skipped_units_left_alone():
    data = xliff.xliff12(UNITS_12)
    extracted = files.read("app.xlf", data, LIMIT, target_language="de")
    assert len(extracted.texts) == 3  # not the translate="no" unit
    # billed as counted against --max-file-chars: the words, not the inline tags nor &amp;'s escape
    assert extracted.characters < sum(map(len, extracted.texts))
    files.read("app.xlf", data, LIMIT, max_chars=extracted.characters, target_language="de")
    with pytest.raises(files.TooManyCharacters):
        files.read("app.xlf", data, LIMIT, max_chars=extracted.characters - 1, target_language="de")
    out = etree.fromstring(swapped(extracted))
    assert out.find(f"{V1}file").get("target-language") == "de"
    units = {u.get("id"): u for u in out.iter(f"{V1}trans-unit")}
    first = units["1"].find(f"{V1}target")
    assert content(first) == 'cLICK <g id="1">sAVE</g> TO KEEP<x id="2"/> YOUR WORK &amp; MORE.'
    assert first.get(XML_LANG) == "de" and first.getprevious().tag == f"{V1}source"
    assert units["2"].find(f"{V1}target") is None
    # a finished target of another language is translated again, as DeepL does: the file is now German
    assert content(units["3"].find(f"{V1}target")) == "hELLO {0}"
    assert content(units["4"].find(f"{V1}target")) == 'oPEN <ph id="1">%s</ph> NOW.'
    assert [content(u.find(f"{V1}source")) for u in units.values()] == [
        content(u.find(f"{V1}source")) for u in etree.fromstring(data).iter(f"{V1}trans-unit")
    ]


def test_xliff_12_into_its_own_target_language_keeps_the_finished_units():
    extracted = files.read("app.xliff", xliff.xliff12(UNITS_12, "de-DE"), LIMIT, target_language="DE")
    assert len(extracted.texts) == 2
    out = etree.fromstring(swapped(extracted))
    units = {u.get("id"): u for u in out.iter(f"{V1}trans-unit")}
    assert content(units["3"].find(f"{V1}target")) == "Hallo {0}"
    assert units["3"].find(f"{V1}target").get("state") == "final"
    assert out.find(f"{V1}file").get("target-language") == "de"


def test_xliff_12_segmented_units_keep_their_segments_in_the_target():
    # Okapi, memoQ and Trados segment a unit in <seg-source>; the target holds one <mrk> per
    # segment (empty, or missing entirely), which the tool reads back by its mid
    units = """      <trans-unit id="1">
        <source>Save it. Click <g id="1">Close</g>.</source>
        <seg-source><mrk mtype="seg" mid="1">Save it.</mrk> <mrk mtype="seg" mid="2">Click <g id="1">Close</g>.</mrk>
        </seg-source>
        <target><mrk mtype="seg" mid="1"/> <mrk mtype="seg" mid="2"/></target>
      </trans-unit>
      <trans-unit id="2">
        <source>Open it. Read it.</source>
        <seg-source><mrk mtype="seg" mid="3">Open it.</mrk> <mrk mtype="seg" mid="4">Read it.</mrk></seg-source>
      </trans-unit>"""
    extracted = files.read("app.xlf", xliff.xliff12(units), LIMIT, target_language="de")
    assert extracted.texts == ("Save it.", "Click <b id=0>Close</b>.", "Open it.", "Read it.")
    out = etree.fromstring(swapped(extracted))
    first, second = (u.find(f"{V1}target") for u in out.iter(f"{V1}trans-unit"))
    assert (
        content(first)
        == '<mrk mtype="seg" mid="1">sAVE IT.</mrk> <mrk mtype="seg" mid="2">cLICK <g id="1">cLOSE</g>.</mrk>'
    )
    assert content(second) == '<mrk mtype="seg" mid="3">oPEN IT.</mrk> <mrk mtype="seg" mid="4">rEAD IT.</mrk>'
    assert [(t.get("state"), t.get(XML_LANG)) for t in (first, second)] == [("translated", "de")] * 2
    assert [m.get("state") for m in out.iter(f"{V1}mrk")] == [None] * 8


def test_xliff_21_segments_in_state_initial_are_translated_and_the_file_keeps_its_encoding():
    data = xliff.xliff21(UNITS_21).decode().replace('encoding="UTF-8"', 'encoding="UTF-16"').encode("utf-16")
    extracted = files.read("app.xlf", data, LIMIT, target_language="de")
    assert len(extracted.texts) == 1
    written = swapped(extracted)
    assert written.startswith(b"\xff\xfe") or written.startswith(b"\xfe\xff")  # UTF-16, as sent
    out = etree.fromstring(written)
    assert out.get("trgLang") == "de" and out.nsmap[None] == V2[1:-1]
    first, finished, _ = out.iter(f"{V2}segment")
    assert content(first.find(f"{V2}target")) == 'pRESS <pc id="1" dataRefStart="d1">sAVE</pc> NOW<ph id="2"/>.'
    assert first.get("state") == "translated"
    assert content(finished.find(f"{V2}target")) == "Fertig." and finished.get("state") == "final"
    skipped = out.find(f"{V2}file/{V2}unit[@id='u2']/{V2}segment")
    assert skipped.find(f"{V2}target") is None


def test_xliff_21_into_another_language_translates_every_segment_and_sets_trgLang():
    extracted = files.read("app.xlf", xliff.xliff21(UNITS_21, "fr"), LIMIT, target_language="EN-GB")
    out = etree.fromstring(swapped(extracted))
    assert out.get("trgLang") == "en-GB"
    assert [content(t) for t in out.iter(f"{V2}target")][1] == "dONE."


def test_bad_xliff_files_are_refused():
    with pytest.raises(FileRefused, match="not a valid XLIFF file"):
        files.read("a.xlf", b"<xliff><file>", LIMIT)
    with pytest.raises(FileRefused, match="XLIFF 1.2 or 2.x"):
        files.read("a.xlf", b'<xliff xmlns="urn:example"/>', LIMIT)
    done = xliff.xliff21(
        '<unit id="u"><segment state="final"><source>Done.</source><target>Fertig.</target></segment></unit>'
    )
    with pytest.raises(FileRefused, match="no text to translate"):  # every segment finished, in German
        files.read("a.xlf", done, LIMIT, target_language="de-DE")
    with pytest.raises(TooManyCharacters):
        files.read("a.xlf", xliff.xliff12(UNITS_12), LIMIT, max_chars=20, target_language="de")
    laughs = (
        b'<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        + xliff.xliff12('<trans-unit id="1"><source>&b;</source></trans-unit>').split(b"?>", 1)[1]
    )
    with pytest.raises(FileRefused):  # entities are not expanded: no text to translate
        files.read("a.xlf", laughs, LIMIT, target_language="de")
