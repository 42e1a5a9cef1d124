"""format=html: markup, attributes and entities come back as sent; text nodes are translated."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnserve.server.documents.markup import MarkupRules, html_runs, tokens


def _html(splitter, text: str, rules: MarkupRules | None = None) -> str:
    doc = splitter.split(text, "html", markup=rules or MarkupRules()).document
    return doc.join([f"[{s.text}]" for s in doc.segments])


XML = MarkupRules(xml=True)


def test_tags_attributes_and_entities_are_kept_exactly(splitter):
    text = "<p class=x data-n='1' >Tom &amp; Jerry&nbsp;<b>at <i title=\"t\">3:45 PM</i></b> &#169; 2025</p>"
    assert _html(splitter, text) == (
        "<p class=x data-n='1' >[Tom &amp; Jerry]&nbsp;<b>[at] <i title=\"t\">[3:45 PM]</i></b> [&#169; 2025]</p>"
    )


def test_entities_inside_a_sentence_are_decoded_for_the_model_and_spelled_as_sent(splitter):
    prepared = splitter.split("<p>It costs &euro;1,234.50 &amp; more.</p>", "html")
    assert prepared.sources == ("It costs €1,234.50 & more.",)
    assert prepared.document.join(["Es kostet 1.234,50 € & mehr <sic>."]) == (
        "<p>Es kostet 1.234,50 &euro; &amp; mehr &lt;sic&gt;.</p>"
    )


def test_block_tags_end_sentences_and_inline_tags_between_words_stay_in_place(splitter):
    text = "<ul><li>in the 1980s</li><li>on <a href='/x'>Monday morning</a>, at 9</li></ul>line<br>next"
    assert _html(splitter, text) == (
        "<ul><li>[in the 1980s]</li><li>[on] <a href='/x'>[Monday morning]</a>, [at 9]</li></ul>[line]<br>[next]"
    )


def test_tags_inside_a_word_move_to_the_ends_of_the_translation(splitter):
    prepared = splitter.split("<p>H<sub>2</sub>O at 9. Next one.</p>", "html")
    assert prepared.sources == ("H2O at 9.", "Next one.")
    assert prepared.document.join(["A.", "B."]) == "<p><sub>A.</sub> B.</p>"


def test_script_style_and_translate_no_are_not_translated(splitter):
    text = (
        "<style>p { content: 'at 9' }</style><script>let s = 'Monday';</script>"
        "<div translate=no>Monday <div>nested</div> still</div>"
        '<p>Visit <span translate="no">ACME Corp</span> on Monday.</p>'
    )
    prepared = splitter.split(text, "html")
    assert prepared.sources == ("Visit", "on Monday.")
    assert _html(splitter, text) == text.replace("Visit", "[Visit]").replace("on Monday.", "[on Monday.]")


def test_newlines_are_spaces_except_in_pre(splitter):
    text = "<p>at 3:45\n   PM today</p><pre>line one\n  line two</pre>"
    prepared = splitter.split(text, "html")
    assert prepared.sources == ("at 3:45 PM today", "line one", "line two")
    assert _html(splitter, text) == "<p>[at 3:45\n   PM today]</p><pre>[line one]\n  [line two]</pre>"


def test_comments_doctype_and_broken_markup_are_kept(splitter):
    text = "<!DOCTYPE html><!-- at 9 --><p>at <!-- x -->9</p></> & <3 <p"
    doc = splitter.split(text, "html").document
    assert doc.join([s.text for s in doc.segments]) == text
    assert "at 9" not in [s.text for s in doc.segments]


_HTML_PIECES = [
    *"ab Z9.,!? \n&<>;\"'",
    "<p>",
    "</p>",
    "<b>",
    "</b>",
    "<i class=x>",
    "</i>",
    "<br>",
    "<br/>",
    "&amp;",
    "&nbsp;",
    "&#169;",
    "&#x20AC;",
    "&bogus;",
    "&amp",
    "<!-- c -->",
    "<script>x<y</script>",
    "<style>",
    "</style>",
    "<span translate=no>",
    "</span>",
    "<pre>",
    "</pre>",
    "Mr. Smith at 9. ",
    "&NotEqualTilde;",
    "<!DOCTYPE html>",
    "<![CDATA[x]]>",
    "</>",
    "<?pi?>",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=120), st.lists(st.sampled_from(_HTML_PIECES), max_size=60).map("".join)))
def test_join_of_the_untouched_segments_is_the_input(text, splitter, tight):
    for s in (splitter, tight):
        prepared = s.split(text, "html")
        assert prepared.document.join([seg.text for seg in prepared.document.segments]) == text
        assert all(len(ids) <= s.budget.max_tokens for ids in prepared.ids)


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(["a ", "b", "<b>", "</b>", "<br>", "<!-- c -->", "H<sub>2</sub>O "]), max_size=40)
)
def test_the_anchors_inside_a_span_are_those_a_scan_finds(pieces):
    """``Run.anchors_inside`` bisects (issue 32: scanning every anchor for each of 9,000
    segments of ``"<b>a " * 9000`` took 7 s); it must find exactly what a scan finds."""
    for run in html_runs("".join(pieces)):
        for start in range(len(run.plain) + 1):
            for end in range(start, len(run.plain) + 1):
                scanned = [a for a in run.anchors if start < a.position < end]
                assert run.anchors_inside(start, end) == scanned


def test_xml_splits_at_its_outline_and_keeps_tags_inside_running_text(splitter):
    """DeepL's structured content: the elements that hold text (title, par) are sentences of
    their own, whatever their names; a tag inside running text (``<key>``, ``<Term>``) is markup
    of its sentence; html names mean nothing there (``<p>`` inside text is inline)."""
    text = (
        "<document>\n <meta>\n  <title>A document's title</title>\n </meta>\n <content>\n"
        "  <par>This is the first sentence. Followed by a second one.</par>\n"
        "  <par>Press <key>Enter</key> to <Term>go on</Term>, <p>then</p> stop.</par>\n </content>\n</document>"
    )
    assert _html(splitter, text, XML) == (
        "<document>\n <meta>\n  <title>[A document's title]</title>\n </meta>\n <content>\n"
        "  <par>[This is the first sentence.] [Followed by a second one.]</par>\n"
        "  <par>[Press] <key>[Enter]</key> [to] <Term>[go on]</Term>, <p>[then]</p> [stop.]</par>\n"
        " </content>\n</document>"
    )  # each piece between words is cut, as html's inline tags are where the model has no aligner
    sources = splitter.split(text, "html", markup=XML).sources
    assert "Press Enter to go on, then stop." not in sources  # cut at its markup, but one run:
    assert [r.plain for r in html_runs(text, XML) if r.plain.strip()] == [
        "A document's title",
        "This is the first sentence. Followed by a second one.",
        "Press Enter to go on, then stop.",
    ]


def test_splitting_and_non_splitting_tags_and_outline_detection_off():
    def runs(text: str, **rules) -> list[str]:
        return [r.plain for r in html_runs(text, MarkupRules(**rules)) if r.plain.strip()]

    assert runs("<span>at 9</span><span>at 10</span>", splitting_tags=frozenset({"span"})) == ["at 9", "at 10"]
    assert runs("<p>at <key>9</key></p>", non_splitting_tags=frozenset({"KEY"})) == ["at 9"]  # html: any case
    assert runs("<p>at <key>9</key></p>") == ["at ", "9"]  # html splits at a tag it does not know
    text = "<doc><par>at 9</par><par>at 10</par></doc>"
    assert runs(text, xml=True) == ["at 9", "at 10"]
    assert runs(text, xml=True, outline_detection=False) == ["at 9at 10"]  # only splitting_tags split
    assert runs(text, xml=True, outline_detection=False, splitting_tags=frozenset({"par"})) == ["at 9", "at 10"]
    assert runs(text, xml=True, outline_detection=False, splitting_tags=frozenset({"Par"})) == ["at 9at 10"]
    assert runs("<Par>at 9</Par>x", xml=True, splitting_tags=frozenset({"Par"})) == ["at 9", "x"]


def test_ignored_elements_are_kept_as_sent_and_one_anchor_inside_a_sentence(splitter):
    ignore = frozenset({"x", "link"})
    text = "<par>Open <x a='1'>Set <x>tings</x> &amp; more</x> now <link>at 9</link>.</par><x>Monday</x>"
    rules = MarkupRules(xml=True, ignore_tags=ignore)
    assert _html(splitter, text, rules) == (
        "<par>[Open] <x a='1'>Set <x>tings</x> &amp; more</x> [now] <link>at 9</link>.</par><x>Monday</x>"
    )
    assert [(r.plain, len(r.anchors)) for r in html_runs(text, rules) if r.plain.strip()] == [("Open  now .", 2)]
    # html: <X> is the x ignored; a tag html does not know ends the run, as translate="no" on it does
    html = "<p>Open <X>Settings</X> now, <code>at 9</code>.</p>"
    rules = MarkupRules(ignore_tags=frozenset({"x", "code"}))
    assert _html(splitter, html, rules) == "<p>[Open] <X>Settings</X> [now,] <code>at 9</code>.</p>"
    xml = MarkupRules(xml=True, ignore_tags=frozenset({"x"}))  # xml: <X> is another tag
    assert "Settings" in splitter.split("<p>Open <X>Settings</X></p>", "html", markup=xml).sources


_XML_PIECES = [
    *"ab Z9.,!? \n&<>;",
    "<par>",
    "</par>",
    "<Key a='1'>",
    "</Key>",
    "<key>",
    "</key>",
    "<x>",
    "</x>",
    "<x/>",
    "<w:t>",
    "</w:t>",
    "<b>",
    "</b>",
    "<link>",
    "</link>",
    "<link>Friday</link>",
    "&amp;",
    "<!-- c -->",
    "<![CDATA[x]]>",
    "<?xml version='1.0'?>",
    "Mr. Smith at 9. ",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.sampled_from(_XML_PIECES), max_size=60),
    outline=st.booleans(),
    split=st.sets(st.sampled_from(["par", "Key", "b"]), max_size=2),
)
def test_xml_with_rules_joins_back_to_the_input(pieces, outline, split, splitter):
    text = "".join(pieces)
    rules = MarkupRules(
        xml=True,
        ignore_tags=frozenset({"x", "link"}),
        splitting_tags=frozenset(split),
        non_splitting_tags=frozenset({"key"} - split),
        outline_detection=outline,
    )
    prepared = splitter.split(text, "html", markup=rules)
    assert prepared.document.join([seg.text for seg in prepared.document.segments]) == text
    # an ignored element's content is never a source, where each <link> begins one: after a stray
    # "<a" it does not ("<a<link>" is one tag, named "a<link", as an HTML 5 tokenizer reads it)
    if sum(kind == "start" and tag == "link" for kind, _, _, tag, *_ in tokens(text)) == text.count("<link>"):
        assert not any("Friday" in s for s in prepared.sources)
