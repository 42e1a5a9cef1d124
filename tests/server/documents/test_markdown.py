"""``format=markdown`` (issue 34): what is translated, what comes back as sent, and markup placed
by alignment; the bundled translator's tokenizer splits, no model translates."""

from __future__ import annotations

import numpy as np

from attnserve.server.documents import DocumentSplitter
from attnserve.server.documents.alignment import WordAlignment, word_spans

DOCUMENT = """# Monday, *March* 3, 2025

- at 3:45 PM
- more than **1,500 miles**
  1. about 5 miles

> Tuesday, [June 4](https://example.com/june?a=1&b=2 "June") 2024

| day | time |
|-----|------|
| Monday | at `9:30` AM |

Use `code, here` and ![a picture](img.png) \\*not emphasis\\* &amp; <https://example.com/x>.
A second line<br>here.

```python
when = "Monday, March 3, 2025"
```

    indented code, March 3

<div>
html block, March 3
</div>
"""
TRANSLATED = [
    "Monday, March 3, 2025",
    "at 3:45 PM",
    "more than 1,500 miles",  # "**1,500 miles**" is part of the phrase: it stays in the sentence
    "about 5 miles",
    "Tuesday, June 4 2024",
    "day",
    "time",
    "Monday",
    "at  AM",
    "Use  and  *not emphasis* & .",
    "A second linehere.",
]


def test_only_text_is_translated_and_everything_else_comes_back_as_sent(splitter: DocumentSplitter):
    prepared = splitter.split(DOCUMENT, "markdown", place_inline=True)
    texts = [s.text for s in prepared.document.segments]
    assert [t.replace("\n", " ") for t in texts] == TRANSLATED
    # identity round trip: every construct, byte for byte
    assert prepared.document.join(texts) == DOCUMENT
    # a "translation" in capitals shows what was translated: nothing of code, targets, html blocks
    # (cut at the inline markup, as for a model without its aligner: it stays in place)
    cut = splitter.split(DOCUMENT, "markdown")
    shouted = cut.document.join([s.text.upper() for s in cut.document.segments])
    for kept in (
        "# ",
        "- ",
        "  1. ",
        "> ",
        "|-----|------|",
        "`9:30`",
        "`code, here`",
        '](https://example.com/june?a=1&b=2 "June")',
        "![a picture](img.png)",
        "<https://example.com/x>",
        "\\*NOT EMPHASIS\\*",  # escapes keep their spelling
        "&amp;",
        '```python\nwhen = "Monday, March 3, 2025"\n```',
        "    indented code, March 3",
        "<div>\nhtml block, March 3\n</div>",
        "<br>",
    ):
        assert kept in shouted, kept
    assert "| MONDAY | AT `9:30` AM |" in shouted and "# MONDAY, *MARCH* 3, 2025" in shouted
    assert "[JUNE 4](https://example.com/june?a=1&b=2" in shouted  # link text translated, target not


def test_link_text_moves_with_its_words_and_its_target_is_untouched(splitter: DocumentSplitter):
    prepared = splitter.split("on [January 10](https://x.org/a_b?q=January), 2025", "markdown", place_inline=True)
    (segment,) = prepared.document.segments
    assert segment.text == "on January 10, 2025"
    target = "am 10. Januar 2025"
    spans = tuple(word_spans(segment.text)), tuple(word_spans(target))
    a = WordAlignment(segment.text, target, ((0, 0), (2, 1), (1, 2), (3, 3)), *spans, np.zeros((4, 4)))
    assert prepared.document.join([target], [a]) == "am [10. Januar](https://x.org/a_b?q=January) 2025"


def test_emphasis_moves_with_its_word(splitter: DocumentSplitter):
    prepared = splitter.split("Monday, *March* 3, 2025\n\nMonday, **March 3**, 2025", "markdown", place_inline=True)
    target = "Montag, 3. März 2025"
    source = "Monday, March 3, 2025"
    spans = tuple(word_spans(source)), tuple(word_spans(target))
    a = WordAlignment(source, target, ((0, 0), (2, 1), (1, 2), (3, 3)), *spans, np.zeros((4, 4)))
    assert prepared.document.join([target, target], [a, a]) == "Montag, 3. *März* 2025\n\nMontag, **3. März** 2025"
    # cut at the markup when there is no alignment to place it by (a model without its aligner)
    cut = splitter.split("Monday, *March* 3, 2025", "markdown")
    assert [s.text for s in cut.document.segments] == ["Monday,", "March", "3, 2025"]


def test_a_task_lists_boxes_come_back_as_sent_not_escaped(splitter: DocumentSplitter):
    # GitHub draws "- [ ]" as a checkbox; translated as text, "\[ \]" would be a literal "[ ]"
    document = "- [ ] write the report\n- [x] send *the* invoice\n\n[ ] not in a list\n"
    prepared = splitter.split(document, "markdown")
    texts = [s.text for s in prepared.document.segments]
    assert texts == ["write the report", "send", "the", "invoice", "[ ] not in a list"]
    assert prepared.document.join(texts) == document
    shouted = prepared.document.join([t.upper() for t in texts])
    assert shouted == "- [ ] WRITE THE REPORT\n- [x] SEND *THE* INVOICE\n\n\\[ \\] NOT IN A LIST\n"
