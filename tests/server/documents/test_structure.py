"""Structure first: whatever a model answers, a markdown document keeps every line, code span,
code block, link target, emphasis pair and block, and an html document every tag, balanced.

Adversarial "translations" (empty, the source itself, repeated, reordered, marker-like text such as
``**``, a backtick, ``[](``, ``<b>``, newlines, very long) are fed through the document layer the
service uses (``DocumentSplitter.split`` -> ``Document.join``) with and without word alignments
(random links: what an aligner of a confused model might say), so no model is needed; the bundled
translator's tokenizer splits. The structure is read back with the same parsers the formats are
read with (markdown-it, the html tokenizer) and compared with the source's.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from attnserve.server.documents import DocumentSplitter
from attnserve.server.documents.alignment import WordAlignment, word_spans
from attnserve.server.documents.markup import INLINE, VOID_ELEMENTS, tokens

README = Path(__file__).resolve().parents[3] / "README.md"
PARSER = MarkdownIt("commonmark").enable("table").enable("strikethrough")

MARKDOWN = [
    # neighbouring code spans, wrapped sentences, emphasis and links across line breaks
    "Run `ARGS=` `make serve` to start it, or `make test`\n"
    'with **the whole\nsuite** and [the docs](docs/cli.md "CLI") on\n'
    "a *second* line.\n",
    "# Monday, *March* 3, 2025\n\n"
    "- at 3:45 PM, with `code` and **bold** text\n"
    "- more than **1,500 miles**\n"
    "  and a continuation line\n"
    "  1. about 5 miles\n\n"
    '> Tuesday, [June 4](https://example.com/june?a=1&b=2 "June") 2024\n'
    "> and a quoted second line with ~~old~~ words.\n\n"
    "| day | time |\n|-----|------|\n| Monday | at `9:30` AM |\n| *Tuesday* | [at noon](x.md) |\n\n"
    "Use `code, here` and ![a picture](img.png) \\*not emphasis\\* &amp; <https://example.com/x>.\n"
    "A second line<br>here, and a hard break  \nafter it.\n\n"
    '```python\nwhen = "Monday, March 3, 2025"\n```\n\n'
    "    indented code, March 3\n\n"
    "<div>\nhtml block, March 3\n</div>\n",
    "Setext heading with `code`\n==========================\n\n"
    "1. First *item* that wraps\n   onto a second line.\n2. Second [link](a.md) item.\n\n"
    "Paragraph with __strong__ and _em_ and ***both*** and `a` `b` `c` spans.\n",
]
HTML = [
    '<p>Monday, <b>March</b> 3, 2025 at <i>3:45 PM</i> and <a href="x.html">the docs</a>.</p>\n'
    "<ul><li>first <code>make</code> item</li><li>second <em>item</em></li></ul>\n"
    "<p>A sentence that wraps\nonto a <strong>second</strong> line.<br>After a break.</p>\n"
    "<pre>line one\nline <b>two</b></pre>\n<table><tr><td>a <b>cell</b></td><td>another</td></tr></table>",
    '<h1>Title <span class="x">with span</span></h1><p>Text &amp; more &copy; <img src="a.png"> end.</p>'
    '<p><b>bold <i>nested</i> words</b> and <a href="#y">a link</a>, then <sub>sub</sub>.</p>',
]
MARKERS = ["**", "*", "_", "`", "``", "[](", "](x)", "[", "]", "<b>", "</b>", "<", ">", "&amp;", "&", "\\",
           "# ", "- ", "1. ", "> ", "|", "~~", "---", "===", "\n", "  \n", "<!--", "-->"]  # fmt: skip
WORDS = ["Montag", "März", "3.", "2025", "um", "15:45", "Uhr", "der", "die", "und"]


@pytest.fixture(scope="module")
def prepared(splitter: DocumentSplitter):
    """Every corpus document split both ways: cut at its markup, and with markup placed by alignment."""
    docs = {("markdown", k): text for k, text in enumerate([*MARKDOWN, README.read_text()])}
    docs.update({("html", k): text for k, text in enumerate(HTML)})
    return {
        (fmt, k, place): splitter.split(text, fmt, place_inline=place)
        for (fmt, k), text in docs.items()
        for place in (False, True)
    }


KINDS = ("empty", "source", "reordered", "repeated", "long", "upper", "markers", "glued", "symbols")


def translation(kind: str, source: str, rng: random.Random) -> str:
    """What a confused model might answer for ``source``, stripped as the service hands it over."""
    words = source.split()
    if kind == "empty":
        return ""
    if kind == "source":
        return source
    if kind == "reordered":
        return " ".join(reversed(words))
    if kind == "repeated":
        return " ".join([source] * rng.randint(2, 4))
    if kind == "long":
        return " ".join(WORDS * 40)
    if kind == "upper":
        return source.upper()
    if kind in ("markers", "glued"):
        picked = rng.choices(MARKERS + WORDS, k=rng.randint(0, 12))
        return (" " if kind == "markers" else "").join(picked).strip()
    return "".join(rng.choices("ab *_`[]()<>!&#|\\~\n-=1.", k=rng.randint(0, 30))).strip()


@st.composite
def answers(draw, document):
    """(translations, alignments) for every segment: each segment's kind of answer cycles through a
    drawn list, its text and its alignment's links (or no alignment at all) come from a drawn seed,
    so a failure shrinks to a short list of kinds, fast even on a README of 300 segments."""
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=6), label="kinds")
    rng = random.Random(draw(st.integers(0, 2**32), label="seed"))
    segments = document.segments
    texts = [translation(kinds[i % len(kinds)], s.text, rng) for i, s in enumerate(segments)]
    if not draw(st.booleans(), label="aligned"):
        return texts, None
    alignments = []
    for segment, text in zip(segments, texts):
        source_spans, target_spans = word_spans(segment.text), word_spans(text)
        count = rng.randint(0, 12) if source_spans and target_spans else 0
        links = [(rng.randrange(len(source_spans)), rng.randrange(len(target_spans))) for _ in range(count)]
        weights = np.zeros((len(target_spans), len(source_spans)))
        alignments.append(
            WordAlignment(segment.text, text, tuple(links), tuple(source_spans), tuple(target_spans), weights)
        )
    return texts, alignments


# ----------------------------------------------------------------------------- markdown


def _inline_children(text: str):
    for token in PARSER.parse(text):
        if token.type == "inline":
            yield token.children or []


def markdown_structure(text: str) -> dict:
    blocks = [
        (t.type, t.tag, t.markup if t.type in ("bullet_list_open", "ordered_list_open", "list_item_open") else "")
        for t in PARSER.parse(text)
        if t.type != "inline"
    ]
    verbatim = Counter(
        (t.type, t.content) for t in PARSER.parse(text) if t.type in ("fence", "code_block", "html_block")
    )
    code, targets, emphasis = Counter(), Counter(), Counter()
    for children in _inline_children(text):
        for child in children:
            if child.type == "code_inline":
                code[(child.markup, child.content)] += 1
            elif child.type in ("link_open", "image"):
                targets[(child.type, child.attrGet("href") or child.attrGet("src"))] += 1
            elif child.type in ("em_open", "strong_open", "s_open"):
                emphasis[child.type] += 1
    return {"blocks": blocks, "verbatim": verbatim, "code": code, "targets": targets, "emphasis": emphasis}


def empty_wrappers(text: str) -> list[str]:
    """Emphasis and links around nothing (``****``, ``[](x)``) in ``text``."""
    out = []
    for children in _inline_children(text):
        for k, child in enumerate(children):
            if not child.type.endswith("_open") or child.markup == "autolink":
                continue
            depth, shown = 0, False
            for inner in children[k:]:
                depth += inner.nesting
                shown |= inner.type in ("code_inline", "image", "html_inline") or bool(inner.content.strip())
                if depth == 0:
                    break
            if not shown:
                out.append(child.type)
    return out


def check_markdown(source: str, output: str) -> None:
    assert output.count("\n") == source.count("\n"), "lines were added or lost"
    want, got = markdown_structure(source), markdown_structure(output)
    for key in want:
        assert got[key] == want[key], key
    assert not empty_wrappers(output), "emphasis or a link around nothing"


@pytest.mark.parametrize("k", range(len(MARKDOWN)))
@pytest.mark.parametrize("place", [False, True], ids=["cut", "placed"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_markdown_keeps_its_structure_whatever_the_translation(prepared, k, place, data):
    document = prepared[("markdown", k, place)].document
    texts, alignments = data.draw(answers(document))
    check_markdown(document.source, document.join(texts, alignments))


@pytest.mark.parametrize("place", [False, True], ids=["cut", "placed"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_readme_keeps_its_structure_whatever_the_translation(prepared, place, data):
    """The issue's document: this README, 168 lines when it was filed, every one of them back."""
    document = prepared[("markdown", len(MARKDOWN), place)].document
    texts, alignments = data.draw(answers(document))
    check_markdown(document.source, document.join(texts, alignments))


def test_the_corpus_is_what_the_checks_expect(prepared):
    """The checks can fail: a glued pair of code spans, a lost line, an empty link are each caught."""
    source = MARKDOWN[0]
    with pytest.raises(AssertionError, match="code"):
        check_markdown(source, source.replace("`ARGS=` `make serve`", "`ARGS=``make serve` "))
    with pytest.raises(AssertionError, match="lines"):
        check_markdown(source, source.replace("whole\nsuite", "whole suite"))
    with pytest.raises(AssertionError, match="around nothing"):
        check_markdown(source, source.replace("[the docs]", "[]"))
    assert markdown_structure(source)["code"][("`", "ARGS=")] == 1
    assert prepared[("markdown", len(MARKDOWN), True)].document.source == README.read_text()


# --------------------------------------------------------------------------------- html


def html_tags(text: str) -> Counter:
    return Counter(text[s:e] for kind, s, e, *_ in tokens(text) if kind in ("start", "end", "void", "other"))


def unbalanced(text: str) -> list[str]:
    """Inline tags of ``text`` closed out of order or never closed."""
    stack, out = [], []
    for kind, _, _, tag, _, _ in tokens(text):
        if tag not in INLINE or tag in VOID_ELEMENTS:
            continue
        if kind == "start":
            stack.append(tag)
        elif kind == "end":
            if stack and stack[-1] == tag:
                stack.pop()
            else:
                out.append(f"</{tag}>")
    return out + stack


@pytest.mark.parametrize("k", range(len(HTML)))
@pytest.mark.parametrize("place", [False, True], ids=["cut", "placed"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_html_keeps_every_tag_balanced_whatever_the_translation(prepared, k, place, data):
    document = prepared[("html", k, place)].document
    texts, alignments = data.draw(answers(document))
    output = document.join(texts, alignments)
    assert html_tags(output) == html_tags(document.source)
    assert not unbalanced(output)
    assert output.count("\n") == document.source.count("\n")


# ----------------------------------------------------------------- the cases, one by one


def aligned(segment, target: str, links) -> WordAlignment:
    source_spans, target_spans = tuple(word_spans(segment.text)), tuple(word_spans(target))
    weights = np.zeros((len(target_spans), len(source_spans)))
    return WordAlignment(segment.text, target, tuple(links), source_spans, target_spans, weights)


def test_neighbouring_code_spans_placed_together_stay_apart(splitter: DocumentSplitter):
    source = 'settings go after `ARGS=`, e.g. `make serve ARGS="--port 50052"`).'
    (segment,) = splitter.split(source, "markdown", place_inline=True).document.segments
    target = "Einstellungen kommen danach"  # no word of it linked: both code spans land at its end
    out = splitter.split(source, "markdown", place_inline=True).document.join([target], [aligned(segment, target, [])])
    assert "`ARGS=` `make serve" in out and "``" not in out
    check_markdown(source, out)


def test_a_wrapped_sentence_keeps_its_lines_and_quote_markers(splitter: DocumentSplitter):
    source = "> Tuesday, [June 4](https://x.org/june) 2024 and a quoted\n> second line with **bold** words.\n"
    prepared = splitter.split(source, "markdown", place_inline=True)
    out = prepared.document.join(["Dienstag, 4. Juni 2024 und eine zitierte zweite Zeile mit fetten Wörtern."])
    assert out.count("\n") == 2 and out.splitlines()[1].startswith("> ")
    check_markdown(source, out)


def test_an_empty_or_markup_only_translation_leaves_the_sentence_as_sent(splitter: DocumentSplitter):
    source = "More than **1,500 miles** and [the docs](docs/cli.md).\n"
    for place in (False, True):
        document = splitter.split(source, "markdown", place_inline=place).document
        for answer in ("", "** [](", "`"):
            assert document.join([answer] * len(document.segments)) == source


def test_markdown_the_model_writes_is_shown_not_obeyed(splitter: DocumentSplitter):
    document = splitter.split("Monday, March 3, 2025\n", "markdown").document
    assert document.join(["- 2 * 3 = `6` [x](y)!"]) == "\\- 2 \\* 3 = \\`6\\` \\[x\\](y)\\!\n"
    assert document.join(["Montag\n# 3. März"]) == "Montag # 3. März\n"  # the model's newline is a space


def test_a_hard_break_stays_at_its_line_end(splitter: DocumentSplitter):
    source = "at 3:45 PM on Monday  \nand at 9:30 AM on Tuesday\n"
    for place in (False, True):
        document = splitter.split(source, "markdown", place_inline=place).document
        out = document.join(["um 15:45 Uhr am Montag und um 9:30 Uhr am Dienstag"] * len(document.segments))
        assert out.splitlines()[0].endswith("  ")  # a translated first line, its break after it
        check_markdown(source, out)


def test_the_readme_on_the_bundled_translator_comes_back_line_for_line(serve, translator_repo):
    """The bundled translator answers free text with nonsense (its domain is dates and numbers):
    the README, translated, has every line, code span, link target and emphasis pair."""
    source = README.read_text()
    with serve(translator_repo) as server, server.client(timeout=120.0) as client:
        (translated,) = client.translate(source, "translator-en-de", format="markdown")
    output = translated.text
    assert output != source and output.count("\n") == source.count("\n")
    check_markdown(source, output)
