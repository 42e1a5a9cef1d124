"""English PDFs translated into Chinese, Japanese, Korean and Urdu, without a model: a stand-in
translation drawn in the block's box and read back with PDFium. A reader sees every character in
a font that has it (no .notdef box), a long translation wrapped onto several lines at a readable
size (Chinese and Japanese between characters, never a line opening with 。 or ，; Korean at its
spaces), and PDFium's text of the result is the translation. Droid Sans Fallback has no Latin
letters or digits: where no font here has all of a translation (WenQuanYi Micro Hei has), its
"Python" and "2025" are runs in the block's font, each whole on its line beside the CJK runs."""

from __future__ import annotations

import ctypes
import io
import logging
import os
import re

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest
from fontTools.ttLib import TTFont
from fpdf import FPDF

from attnserve.benchmarks.pdfs import A4
from attnserve.server import files
from attnserve.server.files import pdf_fonts
from attnserve.server.files.pdf_blocks import text_of
from tests.support.pdf_pages import drawn_characters, pages, within

LIMIT = 1 << 20
ENGLISH = (
    "The new version of Python came out in March 2025 after a long wait of about a year. It is faster, "
    "it starts sooner and it reports errors more clearly. Most programs run on it without changes."
)
CHINESE = (
    "新版本的Python于2025年3月发布，此前等待了大约一年。它更快，启动更早，报告错误也更清楚。"
    "大多数程序无需修改即可在其上运行，用户说：「这是很好的消息。」（见发布说明。）"
)
JAPANESE = (
    "新しいバージョンのPythonは、約一年の長い待ち時間の後、2025年3月に公開されました。より速く、"
    "起動も早く、エラーもより明確に報告します。ほとんどのプログラムは変更なしで動きます。「素晴らしい」と利用者は言った。"
)
KOREAN = (
    "새로운 버전의 Python은 약 1년의 긴 기다림 끝에 2025년 3월에 나왔습니다. 더 빠르고, 더 일찍 시작하며, "
    "오류를 더 명확하게 보고합니다. 대부분의 프로그램은 변경 없이 실행됩니다."
)
URDU = (
    "پائتھون کا نیا ورژن تقریباً ایک سال کے انتظار کے بعد مارچ 2025 میں آیا۔ یہ زیادہ تیز ہے اور غلطیاں واضح بتاتا ہے۔"
)
SIZE = 12
CLOSING, OPENING = "。，、」）：", "「（"
CJK = pytest.mark.skipif(
    not any(os.path.exists(p) for p in pdf_fonts.CJK_FONTS), reason="no CJK font here (Debian's fonts-droid-fallback)"
)
URDU_FONT = pytest.mark.skipif(
    not any(os.path.exists(p) for p in pdf_fonts.ARABIC_FONTS), reason="no Urdu font here (Debian's fonts-hosny-amiri)"
)


def translated(translation: str, width: float = 250) -> tuple[bytes, tuple[float, float, float, float]]:
    """(the English paragraph in a bordered box ``width`` wide, no room around it, translated into
    ``translation``; the box)."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=SIZE)
    pdf.set_xy(56, 100)
    pdf.multi_cell(width, 1.3 * SIZE, ENGLISH)
    pdf.rect(55, 99, width + 2, pdf.get_y() - 98)
    rect = (56, A4[1] - pdf.get_y(), 56 + width, A4[1] - 100)
    return files.read("a.pdf", bytes(pdf.output()), LIMIT).write([translation]), rect


def font_program(font) -> bytes:
    """The font file PDFium draws a font with (its own for a standard font)."""
    size = ctypes.c_size_t()
    pdfium_c.FPDFFont_GetFontData(font, None, 0, size)
    buffer = (ctypes.c_uint8 * size.value)()
    pdfium_c.FPDFFont_GetFontData(font, buffer, size.value, size)
    return bytes(buffer)


def undrawable(data: bytes) -> list[str]:
    """Characters of the page's text objects that the object's font has no glyph for (a .notdef
    box or another letter on the page): an embedded font's by its program's Unicode map, a
    standard font's outside its encoding (WinAnsi)."""
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    textpage = page.get_textpage()
    lacking = []
    for obj in page.get_objects(max_depth=1):
        if obj.type != pdfium_c.FPDF_PAGEOBJ_TEXT:
            continue
        font = pdfium_c.FPDFTextObj_GetFont(obj.raw)
        text = [ch for ch in text_of(obj.raw, textpage.raw) if not ch.isspace()]
        if not pdfium_c.FPDFFont_GetIsEmbedded(font):
            lacking += [ch for ch in text if not ch.encode("cp1252", "ignore")]
            continue
        cmap = TTFont(io.BytesIO(font_program(font)), fontNumber=0).getBestCmap()
        lacking += [ch for ch in text if cmap.get(ord(ch), ".notdef") == ".notdef"]
    textpage.close()
    page.close()
    doc.close()
    return lacking


def lines_of(data: bytes) -> list[str]:
    """The page's lines as PDFium reads them, each the text objects on one baseline (a line of a
    translation no one font has is several, one a run of one font)."""
    return pages(data)[0].text.split("\r\n")


def assert_few_runs(data: bytes, translation: str) -> None:
    """One text object a line, and two more at most for each Latin word or number in it (a run in
    another font where the line's font has no Latin letters or digits), not one a character."""
    latin = len(re.findall(r"[!-~]+", translation))
    assert len(pages(data)[0].texts) <= len(lines_of(data)) + 2 * latin, pages(data)[0].texts


def assert_wrapped_in_the_box(data: bytes, rect) -> None:
    texts = pages(data)[0].texts
    assert len(lines_of(data)) > 2, [t.text for t in texts]  # wrapped onto several lines
    assert all(within(t.bounds, rect, 2.0) for t in texts), (rect, texts)
    assert all(t.size >= 0.7 * SIZE for t in texts), [t.size for t in texts]  # readable, not shrunk away


@CJK
@pytest.mark.parametrize("width", [200, 250, 310])
@pytest.mark.parametrize("translation", [CHINESE, JAPANESE], ids=["Chinese", "Japanese"])
def test_chinese_and_japanese_are_drawn_in_a_font_that_has_them_and_wrap_between_characters(translation, width):
    out, rect = translated(translation, width)
    assert undrawable(out) == []
    assert pages(out)[0].text.replace("\r\n", "") == translation  # what a reader copies: the translation
    assert_wrapped_in_the_box(out, rect)
    assert_few_runs(out, translation)
    lines = lines_of(out)
    assert not [line for line in lines if line[0] in CLOSING], lines  # kinsoku: no line opens with 。，」
    assert not [line for line in lines[:-1] if line[-1] in OPENING], lines  # nor ends with 「（
    for word in ("Python", "2025"):  # a Latin word or a number inside stays on one line
        assert any(word in line for line in lines), (word, lines)
    assert len(out) < 200_000  # the font embedded as a subset of the characters drawn, not the whole font


@CJK
@pytest.mark.parametrize("width", [125, 250])  # 125: "새로운 버전의 Python" fits a line, "Python은" does not
def test_korean_is_drawn_in_a_font_that_has_it_and_wraps_at_its_spaces(width):
    out, rect = translated(KOREAN, width)
    assert undrawable(out) == []
    assert_wrapped_in_the_box(out, rect)
    assert_few_runs(out, KOREAN)
    lines = lines_of(out)
    words = KOREAN.split()
    assert " ".join(lines).split() == words  # every line made of whole words ("Python은" in two fonts too)
    assert " ".join(pages(out)[0].text.split()) == KOREAN


@CJK
@pytest.mark.parametrize("width", [125, 250])
def test_a_translation_drawn_in_two_fonts_reads_with_single_spaces(width):
    """Korean in Droid Sans Fallback, its full stops, commas, "Python" and "2025" in Helvetica: a
    space where the font changes began the next run ("나왔습니다" "." " 더"), and PDFium reads a
    space of its own at the change, so the objects' texts read "나왔습니다.  더". The space ends
    the run before; the objects and the page read the translation, a space between words."""
    out, _ = translated(KOREAN, width)
    page = pages(out)[0]
    assert "  " not in "".join(t.text for t in page.texts), [t.text for t in page.texts]
    assert page.text.replace("\r\n", " ") == KOREAN


@URDU_FONT
def test_urdu_heh_goal_and_yeh_barree_are_drawn_with_no_missing_glyph():
    out, rect = translated(URDU)
    assert {"\u06c1", "\u06d2"} <= set(URDU)
    # read back as the translation: a letter without a glyph would be missing from the file's text
    assert " ".join(pages(out)[0].text.split()) == URDU
    (font_data,) = embedded_fonts(out)
    cmap = TTFont(io.BytesIO(font_data)).getBestCmap()
    drawn = "".join(drawn_characters(out)).replace(" ", "")
    assert drawn and all(ord(ch) in cmap for ch in drawn)  # the joined forms drawn, each with its glyph
    # in the box (Amiri's marks above its letters reach a little over Helvetica's ascent)
    assert all(within(t.bounds, rect, 0.25 * SIZE) for t in pages(out)[0].texts)


def embedded_fonts(data: bytes) -> list[bytes]:
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    found = {}
    for obj in page.get_objects(max_depth=1):
        if obj.type == pdfium_c.FPDF_PAGEOBJ_TEXT:
            found[font_program(pdfium_c.FPDFTextObj_GetFont(obj.raw))] = None
    page.close()
    doc.close()
    return list(found)


def test_without_a_cjk_font_a_chinese_translation_is_boxes_that_still_wrap_and_the_log_says_so(monkeypatch, caplog):
    """A deployment without fonts-droid-fallback: each Chinese character is DejaVu's .notdef box
    (a standard font would draw it as a wrong letter), wrapped in the box, and a warning logged."""
    monkeypatch.setattr(pdf_fonts, "CJK_FONTS", ("/nonexistent/font.ttf",))
    with caplog.at_level(logging.WARNING, "attnserve.server.files"):
        out, rect = translated(CHINESE)
    assert "no font here renders" in caplog.text
    assert_wrapped_in_the_box(out, rect)
    assert all("Helvetica" not in t.font for t in pages(out)[0].texts)
