"""English and Chinese PDFs translated, without a model: a stand-in translation written by the PDF
writer and its glyphs read back from the file's content stream and embedded fonts. A Japanese reader
sees kanji in Japanese shapes (a Japanese font, not Droid Sans Fallback's Chinese ones), a Korean or
Taiwanese reader their own where such a font is installed; a translation no one font has (Chinese
with an Urdu name in it, Japanese with a Hebrew one) is drawn in runs, every character in a font
that has its glyph, none a .notdef box, its lines still in the block's box."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata

import pytest
from fontTools.ttLib import TTFont
from fpdf import FPDF

from attnserve.benchmarks.pdfs import A4
from attnserve.server.files import jobs, pdf_fonts
from tests.server.files.test_pdf_cjk import CHINESE, ENGLISH, JAPANESE, KOREAN, LIMIT, SIZE, lines_of, undrawable
from tests.support.pdf_pages import glyphs_drawn, pages, within

DROID = "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf"
SHAPES = "直骨写角"  # kanji whose Japanese shapes are not China's
TRADITIONAL = "新版本的Python於2025年3月發佈，此前等待了大約一年。它更快，啟動更早，報告錯誤也更清楚。直骨角"
HAN = CHINESE.replace("Python", "该语言").replace("2025年3月", "二〇二五年三月")  # Droid has all of it
URDU_NAME = "محمد علی ہے"
HEBREW_NAME = "דוד בן גוריון"


def font_name(path: str) -> str:
    return TTFont(path, lazy=True)["name"].getDebugName(6)


def installed(target: str, package: str):
    found = pdf_fonts.regional_fonts(target)
    return pytest.mark.skipif(not found, reason=f"no font of {target}'s script here (Debian's {package})")


JAPANESE_FONT = installed("ja", "fonts-ipafont-gothic")
CJK = pytest.mark.skipif(
    not any(map(os.path.exists, pdf_fonts.CJK_FONTS)), reason="no CJK font here (Debian's fonts-droid-fallback)"
)
URDU_FONT = pytest.mark.skipif(
    not any(map(os.path.exists, pdf_fonts.ARABIC_FONTS)), reason="no Urdu font here (Debian's fonts-hosny-amiri)"
)


def english_pdf(width: float = 250, text: str = ENGLISH, font: str = "") -> tuple[bytes, tuple[float, ...]]:
    """A paragraph in a bordered box ``width`` wide (no room around it), in Helvetica, or in the
    TrueType font at ``font``; and the box."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    if font:
        pdf.add_font("Source", fname=font)
    pdf.set_font("Source" if font else "Helvetica", size=SIZE)
    pdf.set_xy(56, 100)
    pdf.multi_cell(width, 1.3 * SIZE, text)
    pdf.rect(55, 99, width + 2, pdf.get_y() - 98)
    return bytes(pdf.output()), (56, A4[1] - pdf.get_y(), 56 + width, A4[1] - 100)


def written(source: bytes, translation: str, target: str) -> bytes:
    """The PDF with its one block translated into ``target``, as the service writes a file (``jobs``)."""
    (text,) = jobs.read_text("a.pdf", source, LIMIT, target_language=target).texts
    assert text
    return jobs.write_file("a.pdf", source, LIMIT, [translation], None, target_language=target)


def fonts_of(data: bytes, chars: str) -> set[str]:
    """The fonts the runs holding any of ``chars`` are drawn in (presentation forms as their letters)."""
    wanted = set(chars) - {" "}
    return {font for font, text, _ in glyphs_drawn(data) if wanted & {unicodedata.normalize("NFKC", ch) for ch in text}}


@JAPANESE_FONT
@pytest.mark.parametrize("target", ["ja", "JA", "ja-JP", "jpn_Jpan"])
def test_a_translation_into_japanese_is_drawn_in_a_japanese_font(target):
    out = written(english_pdf()[0], JAPANESE + SHAPES, target)
    japanese = font_name(pdf_fonts.regional_fonts("ja")[0])
    runs = glyphs_drawn(out)
    assert {font for font, _, _ in runs} == {japanese}, runs
    assert [wrong for _, _, wrong in runs if wrong] == []  # every character its own glyph
    assert pages(out)[0].text.replace("\r\n", "") == JAPANESE + SHAPES


@JAPANESE_FONT
@CJK
def test_chinese_keeps_its_shapes_and_japanese_from_a_chinese_pdf_is_not_drawn_in_its_font():
    """A Chinese PDF whose embedded font has every kanji of the translation: a translation into
    Chinese is drawn in it, one into Japanese in a Japanese font (the PDF's would show Chinese shapes)."""
    source, _ = english_pdf(text=SHAPES + "。这是很好的消息。", font=DROID)
    japanese = font_name(pdf_fonts.regional_fonts("ja")[0])
    assert japanese not in fonts_of(written(source, SHAPES + "。", "zh"), SHAPES)
    assert fonts_of(written(source, SHAPES + "。", "ja"), SHAPES) == {japanese}


@pytest.mark.parametrize(
    "target, translation",
    [
        pytest.param("ko", KOREAN, marks=installed("ko", "fonts-nanum")),
        pytest.param("zh-TW", TRADITIONAL, marks=installed("zh-TW", "fonts-arphic-bsmi00lp")),
        pytest.param("zh-Hant", TRADITIONAL, marks=installed("zh-Hant", "fonts-arphic-bsmi00lp")),
    ],
)
def test_korean_and_traditional_chinese_are_drawn_in_a_font_of_their_own_shapes(target, translation):
    out = written(english_pdf()[0], translation, target)
    runs = glyphs_drawn(out)
    assert {font for font, _, _ in runs} == {font_name(pdf_fonts.regional_fonts(target)[0])}, runs
    assert [wrong for _, _, wrong in runs if wrong] == []


@CJK
@URDU_FONT
@pytest.mark.parametrize(
    "target, translation, name",
    [
        ("zh", "据报道，" + URDU_NAME + "说：" + CHINESE, URDU_NAME),
        ("ja", "イスラエルの初代首相 " + HEBREW_NAME + " は言った。" + JAPANESE, HEBREW_NAME),
    ],
    ids=["Chinese with an Urdu name", "Japanese with a Hebrew name"],
)
def test_a_translation_no_one_font_has_is_drawn_in_runs_each_in_a_font_that_has_it(target, translation, name):
    source, box = english_pdf()
    out = written(source, translation, target)
    runs = glyphs_drawn(out)
    assert "".join(text for _, text, _ in runs)  # drawn
    assert [wrong for _, _, wrong in runs if wrong] == []  # no .notdef box, no other character's glyph
    around = fonts_of(out, translation.replace(name, ""))  # the Chinese or Japanese
    inside = fonts_of(out, name)
    assert len(around) == 1 and len(inside) == 1 and around != inside, runs
    texts = pages(out)[0].texts
    assert len({t.bounds[1] for t in texts}) > 2  # wrapped onto several lines, in the block's box
    assert all(within(t.bounds, box, 0.25 * SIZE) for t in texts), texts
    inked = [t.bounds for t in texts if t.text.strip()]
    for n, (left, bottom, right, top) in enumerate(inked):  # the runs of a line side by side, none over another
        for other in inked[n + 1 :]:
            if abs(bottom + top - other[1] - other[3]) < SIZE:  # on one line
                assert other[0] >= right - 1 or other[2] <= left + 1, texts


@CJK
def test_a_translation_one_font_has_is_one_text_object_a_line(caplog):
    out = written(english_pdf()[0], HAN, "zh")
    runs = glyphs_drawn(out)
    assert len({font for font, _, _ in runs}) == 1
    assert len(runs) == len(pages(out)[0].texts) > 2  # one object a line, as many as lines
    assert "no font here renders" not in caplog.text


@CJK
def test_chinese_with_latin_words_is_drawn_whole_in_fonts_that_have_it_in_as_few_runs_as_fonts(caplog):
    """Droid Sans Fallback has no Latin letters or digits: where no font here has all of the
    translation (WenQuanYi Micro Hei has), "Python", "2025" and "3" are runs in the block's
    Helvetica between Droid's, each run of a line in another font than the one before it."""
    out = written(english_pdf()[0], CHINESE, "zh")
    assert undrawable(out) == []  # every character its font's glyph
    assert pages(out)[0].text.replace("\r\n", "") == CHINESE
    lines = lines_of(out)
    assert len(lines) > 2 and all(any(word in line for line in lines) for word in ("Python", "2025")), lines
    texts = pages(out)[0].texts
    assert len(texts) <= len(lines) + 2 * 3, texts  # at most two more objects a Latin word or number
    beside = [(a.font, b.font) for a, b in zip(texts, texts[1:]) if b.bounds[0] > a.bounds[2] - 1]  # on one line
    assert all(a != b for a, b in beside), texts
    assert "no font here renders" not in caplog.text


def test_the_fonts_of_a_target_language_are_those_of_its_script_tried_before_the_chinese_ones(monkeypatch, tmp_path):
    font = tmp_path / "japanese.ttf"
    font.write_bytes(b"")
    path = str(font.resolve())
    monkeypatch.setitem(pdf_fonts.REGIONAL_FONTS, "Jpan", (path,))
    for target in ("ja", "JA", "ja-JP", "jpn_Jpan"):
        assert pdf_fonts.regional_fonts(target) == [path], target
    for other in ("zh", "zh-Hans", "en", "", "not a language", "ko-KR", "zh-TW"):
        assert path not in pdf_fonts.regional_fonts(other), other
    order = pdf_fonts.system_fonts([path])
    assert all(order.index(path) < order.index(p) for p in pdf_fonts.CJK_FONTS if p in order)


@JAPANESE_FONT
def test_the_same_pdf_and_translation_give_the_same_file_a_second_later():
    """The embedded font subset keeps its font's own date and the trailer's changing /ID is made
    from the document's bytes (PDFium draws it at random): a file translated again is the same
    file, byte for byte, and another translation gets another /ID."""
    import re
    import time

    import pypdfium2

    source = english_pdf()[0]
    first = written(source, JAPANESE + " Hello wörld", "ja")
    time.sleep(1.1)  # fontTools' timestamps have seconds
    assert written(source, JAPANESE + " Hello wörld", "ja") == first
    other = written(source, JAPANESE + " Hello world", "ja")
    ids = [re.findall(rb"/ID\s*\[\s*<(\w+)>\s*<(\w+)>", data)[-1] for data in (first, other)]
    assert ids[0][0] == ids[1][0] and ids[0][1] != ids[1][1]  # the first half is the document's, kept
    assert pages(first)[0].text.replace("\r\n", "") == JAPANESE + " Hello wörld"
    assert len(pypdfium2.PdfDocument(first)) == 1
    anonymous = re.sub(rb"/ID\s*\[[^\]]*\]", b"", source)  # a source without /ID: PDFium draws both halves
    once = written(anonymous, JAPANESE + " Hello wörld", "ja")
    assert written(anonymous, JAPANESE + " Hello wörld", "ja") == once
    assert pages(once)[0].text.replace("\r\n", "") == JAPANESE + " Hello wörld"


@CJK
@URDU_FONT
def test_a_translation_in_three_fonts_gives_the_same_file_in_every_process(tmp_path):
    """A server restarted (each process hashes strings with its own seed) writes the same file for
    the same PDF and translation, the fonts of a translation's scripts loaded in the same order."""
    source = tmp_path / "a.pdf"
    source.write_bytes(english_pdf()[0])
    translation = "据报道，" + URDU_NAME + "和" + HEBREW_NAME + "说：" + CHINESE
    code = (
        "import sys; from pathlib import Path; from attnserve.server.files import jobs\n"
        "source = Path(sys.argv[1]).read_bytes()\n"
        "jobs.read_text('a.pdf', source, 1 << 20, target_language='zh')\n"
        f"out = jobs.write_file('a.pdf', source, 1 << 20, [{translation!r}], None, target_language='zh')\n"
        "Path(sys.argv[2]).write_bytes(out)\n"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code, str(source), str(tmp_path / seed)], env=env, timeout=120)
        assert done.returncode == 0
    first = (tmp_path / "1").read_bytes()
    assert (tmp_path / "2").read_bytes() == first
    assert len({font for font, _, _ in glyphs_drawn(first)}) == 3  # Chinese, Urdu's and Hebrew's
