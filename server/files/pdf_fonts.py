"""The fonts a PDF's translations are drawn in: the block's own, its standard family, or a
Unicode font of the system, each asked of PDFium which characters it has a glyph for.

PDFium draws each character's own glyph from the font's Unicode map (no shaping), so a font
serves a translation where it maps every character (Arabic letters as their joined presentation
forms, ``pdf_bidi.joined``). The system fonts, tried in this order (the first file found of
DejaVu's and of Amiri's, every CJK file found):

- DejaVu Sans (Debian's fonts-dejavu-core) or Liberation Sans: Latin, Greek, Cyrillic, Hebrew,
  Arabic and Persian;
- Droid Sans Fallback (fonts-droid-fallback): Chinese and Japanese (its Full file, with the rarer
  Han characters of extension A), Korean (its other file, with every Hangul syllable), or
  WenQuanYi Micro Hei (fonts-wqy-microhei) for all three. Droid has no Latin letters or digits: a
  translation with "Python" or "2025" in it is drawn in runs (below) where WenQuanYi is not here;
- Amiri (fonts-hosny-amiri) or Noto Naskh Arabic (fonts-noto-core): Urdu, whose heh goal (ہ) and
  yeh barree (ے) DejaVu lacks. Noto Nastaliq Urdu has no presentation forms, so PDFium could
  draw only unjoined letters in it.

Han characters are drawn in different shapes in China, Japan, Korea and Taiwan (直 骨 写 角), and
Droid Sans Fallback's are China's: a translation into Japanese, Korean or Traditional Chinese
(the target language's script, ``Jpan``, ``Kore``, ``Hant``: ``ja``, ``ko``, ``zh-Hant``, ``zh-TW``)
tries a font of that script first, before Droid and before the block's own font where it has
wide characters (a Chinese PDF's font would draw Japanese in Chinese shapes):

- Japanese: IPAGothic (fonts-ipafont-gothic, IPA Font License: 3.5 MB to download), or IPAexGothic
  (fonts-ipaexfont-gothic), or whichever font Debian's fonts-japanese-gothic.ttf names;
- Korean: NanumGothic (fonts-nanum: Hangul and Korean Hanja; 10 MB to download, so not installed
  by the images), where installed;
- Traditional Chinese: AR PL Mingti2L Big5 (fonts-arphic-bsmi00lp, Arphic Public License: a Ming
  face, the Big5 set of Taiwan's shapes; 3.8 MB to download), the only small Debian font of them.

A translation goes to the first font that has every character. Where none has (Chinese with an
Urdu name in it, Japanese with a Hebrew one), it is drawn as runs (``pdf_runs``): each character in
the font that misses the fewest of the translation's, else, script by script, in the first font
(the block's, its standard one, the system's in order) that has all of that script's characters
(else most of them); a character no font has is drawn as the first font's box, logged at warning.
A translation one font has costs no more than the check that it has.

PDFium embeds a font it loads whole (Droid Sans Fallback: 2 MB in every file), so a system font
is embedded as a subset of the characters the document's translations hold (fontTools, MIT;
a font collection, .ttc, by its first face), a few kilobytes, read once a document.
"""

from __future__ import annotations

import ctypes
import functools
import io
import logging
import os
import unicodedata
from collections.abc import Iterable

from fontTools import subset
from fontTools.ttLib import TTFont, TTLibError

from attnserve.contract.language_tags import tag

from .pdf_paths import pdfium, pdfium_c
from .pdf_runs import Runs
from .refusals import FileRefused

log = logging.getLogger(__name__)

UNICODE_FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
)
CJK_FONTS = (
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
    "/usr/share/fonts-droid-fallback/truetype/DroidSansFallback.ttf",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
)
ARABIC_FONTS = (
    "/usr/share/fonts/opentype/fonts-hosny-amiri/Amiri-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoNaskhArabic-Regular.ttf",
)
# the Han characters' shapes of a script other than simplified Chinese's, by the target's script
REGIONAL_FONTS = {
    "Jpan": (
        "/usr/share/fonts/opentype/ipafont-gothic/ipag.ttf",
        "/usr/share/fonts/opentype/ipaexfont-gothic/ipaexg.ttf",
        "/usr/share/fonts/truetype/fonts-japanese-gothic.ttf",
    ),
    "Kore": ("/usr/share/fonts/truetype/nanum/NanumGothic.ttf",),
    "Hant": ("/usr/share/fonts/truetype/arphic-bsmi00lp/bsmi00lp.ttf",),
}


def regional_fonts(target_language: str) -> list[str]:
    """The installed fonts of the target language's script where its Han characters' shapes are
    not Droid Sans Fallback's (``REGIONAL_FONTS``); none for another language, or none named."""
    found = tag(target_language) if target_language else None
    script = found.maximize().script if found is not None else None
    # fonts-japanese-gothic.ttf is a link to one of the others
    return list(dict.fromkeys(os.path.realpath(p) for p in REGIONAL_FONTS.get(script or "", ()) if os.path.exists(p)))


def system_fonts(regional: Iterable[str] = ()) -> list[str]:
    """The system font files to try, in order: DejaVu (or Liberation), the ``regional`` fonts, the
    CJK fonts, Amiri (or Noto Naskh)."""
    first = [next((p for p in UNICODE_FONTS if os.path.exists(p)), "")]
    arabic = [next((p for p in ARABIC_FONTS if os.path.exists(p)), "")]
    cjk = list(dict.fromkeys([*regional, *(p for p in CJK_FONTS if os.path.exists(p))]))
    return [p for p in first + cjk + arabic if p]


@functools.lru_cache(maxsize=16)
def mapped(path: str) -> frozenset[int]:
    """The characters a font file maps to glyphs (its first face for a collection); none where unreadable."""
    try:
        return frozenset(TTFont(path, fontNumber=0, lazy=True).getBestCmap() or ())
    except (TTLibError, OSError, AssertionError, KeyError, ValueError) as exc:
        log.warning("PDF: cannot read the font %s (%s)", path, exc)
        return frozenset()


def embedded(path: str, characters: Iterable[str]) -> bytes:
    """The font file at ``path`` as a TrueType font of just the glyphs of ``characters`` (and
    .notdef); the whole file where fontTools cannot read it."""
    try:
        # its tables read as far as the subset needs them (fontTools' own subsetter reads so)
        # recalcTimestamp off: the subset keeps the file's own date, so the same document and
        # translation give the same bytes (fontTools would stamp the time of writing)
        font = TTFont(path, fontNumber=0, lazy=True, recalcTimestamp=False)
        options = subset.Options()
        options.layout_features = []  # PDFium does not shape: each character's own glyph only
        options.notdef_outline = True
        options.drop_tables += ["FFTM"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes={ord(ch) for ch in characters})
        subsetter.subset(font)
        out = io.BytesIO()
        font.save(out)
        return out.getvalue()
    except (TTLibError, AssertionError, KeyError, ValueError) as exc:
        log.warning("PDF: cannot embed a subset of %s (%s); embedding all of it", path, exc)
        with open(path, "rb") as file:
            return file.read()


NOT_A_CHARACTER = "\ufdd0"  # a Unicode noncharacter: no font maps it, so it is drawn as the font's .notdef


class Glyphs:
    """One font's glyphs, asked of PDFium once a character: the advance at size 1 it is drawn
    with (a missing one's too: its .notdef box, or nothing), and the characters it has no glyph for."""

    def __init__(self, font: pdfium_c.FPDF_FONT) -> None:
        self.font = font
        self.advance: dict[str, float] = {}
        self.lacking: set[str] = set()
        self.notdef = outline(font, NOT_A_CHARACTER)

    def _ask(self, ch: str) -> tuple[float, bool]:
        """(its advance, whether the font has its glyph)."""
        width = ctypes.c_float()
        if ord(ch) > 0xFFFF or not pdfium_c.FPDFFont_GetGlyphWidth(self.font, ord(ch), ctypes.c_float(1.0), width):
            return 0.0, False
        advance = max(width.value, 0.0)
        # a missing character's width is 0 in a simple embedded subset; in a standard font it is
        # the default width, with no glyph path; in a CID font (a browser's or word processor's
        # subset, a system font loaded here) it is drawn as .notdef, the box a noncharacter gets
        # (its outline is read point by point only where it has as many segments as .notdef's: a
        # Chinese character's has hundreds)
        path = pdfium_c.FPDFFont_GetGlyphPath(self.font, ord(ch), ctypes.c_float(1.0))
        count = pdfium_c.FPDFGlyphPath_CountGlyphSegments(path) if path else 0
        if not ch.isspace() and count <= 0:
            return advance, False
        if self.notdef and count == len(self.notdef) and _points(path, count) == self.notdef:
            return advance, False
        # a combining mark (an Arabic or Hebrew vowel) is drawn over its letter, with no advance
        return advance, advance > 0 or unicodedata.combining(ch) > 0

    def missing(self, text: str) -> int:
        """Characters of ``text`` the font cannot draw (each known after this)."""
        for ch in set(text).difference(self.advance):
            self.advance[ch], has = self._ask(ch)
            if not has:
                self.lacking.add(ch)
        return len(self.lacking.intersection(text))

    def width(self, text: str) -> float:
        """After ``missing(text)``."""
        return sum(map(self.advance.__getitem__, text))

    def runs(self, text: str) -> list[tuple[Glyphs, str]]:
        """``text`` as runs of one font each: all of it in this one."""
        return [(self, text)]


def outline(font: pdfium_c.FPDF_FONT, ch: str) -> tuple[tuple[int, float, float], ...]:
    """The glyph path PDFium draws for ``ch`` at size 1, as (type, x, y) points; () for none."""
    path = pdfium_c.FPDFFont_GetGlyphPath(font, ord(ch), ctypes.c_float(1.0))
    if not path:
        return ()
    return _points(path, pdfium_c.FPDFGlyphPath_CountGlyphSegments(path))


def _points(path: pdfium_c.FPDF_GLYPHPATH, count: int) -> tuple[tuple[int, float, float], ...]:
    points = []
    x, y = ctypes.c_float(), ctypes.c_float()
    for i in range(count):
        segment = pdfium_c.FPDFGlyphPath_GetGlyphPathSegment(path, i)
        pdfium_c.FPDFPathSegment_GetPoint(segment, x, y)
        points.append((pdfium_c.FPDFPathSegment_GetType(segment), round(x.value, 4), round(y.value, 4)))
    return tuple(points)


def drawable(font: pdfium_c.FPDF_FONT) -> bool:
    """Whether PDFium can write new text in the font: not a Type3 font (glyphs drawn by content
    streams, as matplotlib's PDFs have), which has no font program and whose new text is lost."""
    size = ctypes.c_size_t()
    pdfium_c.FPDFFont_GetFontData(font, None, 0, size)
    return size.value > 0


class Fonts:
    """The fonts a document's translations are drawn in, and their glyphs."""

    def __init__(self, doc: pdfium.PdfDocument, characters: Iterable[str] = (), target_language: str = "") -> None:
        self.doc = doc
        self.characters = {" ", *characters}  # what a system font is subset to
        self.regional = regional_fonts(target_language)
        self.system = system_fonts(self.regional)
        self.loaded: dict[str, pdfium_c.FPDF_FONT] = {}
        self.known: dict[int, Glyphs] = {}

    def glyphs(self, font: pdfium_c.FPDF_FONT) -> Glyphs:
        key = ctypes.cast(font, ctypes.c_void_p).value or 0
        if key not in self.known:
            self.known[key] = Glyphs(font)
        return self.known[key]

    def missing(self, font: pdfium_c.FPDF_FONT, text: str) -> int:
        return self.glyphs(font).missing(text)

    def standard(self, font: pdfium_c.FPDF_FONT) -> pdfium_c.FPDF_FONT | None:
        name = base_name(font).lower()
        family = "Times" if "times" in name or "serif" in name and "sans" not in name else "Helvetica"
        family = "Courier" if "courier" in name or "mono" in name else family
        bold = "bold" in name or pdfium_c.FPDFFont_GetWeight(font) >= 600
        italic = "italic" in name or "oblique" in name
        if family == "Times":
            style = {(0, 0): "Roman", (1, 0): "Bold", (0, 1): "Italic", (1, 1): "BoldItalic"}[bold, italic]
        else:
            style = {(0, 0): "", (1, 0): "Bold", (0, 1): "Oblique", (1, 1): "BoldOblique"}[bold, italic]
        return self._load(family + ("-" + style if style else ""))

    def _load(self, name: str) -> pdfium_c.FPDF_FONT | None:
        if name not in self.loaded:
            if name.startswith("/"):
                data = embedded(name, self.characters)
                buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                font = pdfium_c.FPDFText_LoadFont(self.doc.raw, buffer, len(data), pdfium_c.FPDF_FONT_TRUETYPE, 1)
            else:
                font = pdfium_c.FPDFText_LoadStandardFont(self.doc.raw, name.encode())
            self.loaded[name] = font
        return self.loaded[name] or None

    def choose(self, font: pdfium_c.FPDF_FONT, text: str) -> pdfium_c.FPDF_FONT:
        """The first of the block's font, its standard family and the system fonts that renders
        every character of ``text`` (the target script's fonts first for wide characters: a
        Chinese font would draw Japanese in Chinese shapes); else the one that misses the fewest.
        A system font is loaded (and so embedded) only where it is drawn in: its file's Unicode
        map says first whether it has the characters."""
        if self.regional and any(unicodedata.east_asian_width(ch) in "WF" for ch in text):
            found = self._system(self.regional, text)
            if found is not None:
                return found
        candidates = [font] if drawable(font) else []
        if candidates and self.missing(font, text) == 0:
            return font
        standard = self.standard(font)
        if standard is not None:
            candidates.append(standard)
            if self.missing(standard, text) == 0:
                return standard
        found = self._system(self.system, text)
        if found is not None:
            return found
        needed = {ord(ch) for ch in text if not ch.isspace()}
        nearest = min(self.system, key=lambda path: len(needed - mapped(path)), default=None)
        found = self._load(nearest) if nearest else None
        candidates += [found] if found is not None else []
        if not candidates:
            raise FileRefused("the PDF's text is in a font this server cannot draw, and no standard font is here")
        # on a tie an embedded font: it draws a missing character as its .notdef box, where a
        # standard font draws one outside its encoding as another letter
        return min(candidates, key=lambda f: (self.missing(f, text), not pdfium_c.FPDFFont_GetIsEmbedded(f)))

    def _system(self, paths: list[str], text: str) -> pdfium_c.FPDF_FONT | None:
        """The first of the system fonts at ``paths`` that renders every character of ``text``."""
        needed = {ord(ch) for ch in text if not ch.isspace()}
        for path in paths:
            if needed <= mapped(path):
                found = self._load(path)
                if found is not None and self.missing(found, text) == 0:
                    return found
        return None

    def pen(self, font: pdfium_c.FPDF_FONT, text: str) -> Glyphs | Runs:
        """What ``text`` is measured and drawn with: the glyphs of the font ``choose`` finds, where
        it has every character; else runs (``Runs``): the characters it lacks, script by script
        (by their Unicode names' first word: ARABIC, HEBREW, CJK), in the first of the block's
        font, its standard one and the system fonts that has all of the script's characters, else
        in the system font that has most."""
        main = self.glyphs(self.choose(font, text))
        main.missing(" ")
        lacking = main.lacking.intersection(text)
        if not lacking:
            return main
        scripts: dict[str, set[str]] = {}
        # in the text's order, not a set's (which changes with each process's string hashes): the
        # scripts' fonts are loaded, so numbered in the file, alike in every process
        for ch in dict.fromkeys(ch for ch in text if ch in lacking):
            scripts.setdefault(unicodedata.name(ch, "?").split()[0], set()).add(ch)
        order = [font] if drawable(font) else []
        fonts: dict[str, Glyphs] = {}
        for chars in scripts.values():
            other = self._other(order + [self.standard(font)], chars)
            if other is not None:
                fonts.update(dict.fromkeys(chars - other.lacking, other))
        if len(fonts) < len(lacking):
            log.warning("PDF: no font here renders %d character(s) of a translation", len(lacking) - len(fonts))
        return Runs(main, fonts) if fonts else main

    def _other(self, order: list[pdfium_c.FPDF_FONT | None], chars: set[str]) -> Glyphs | None:
        """The first of the fonts of ``order`` and the system's that has all of ``chars``; else the
        system font that has most of them; None where none has any."""
        wanted = {ord(ch) for ch in chars}
        paths = [path for path in self.system if wanted <= mapped(path)]
        nearest = max(self.system, key=lambda path: len(wanted & mapped(path)), default="")
        found = None
        for candidate in order + paths + ([nearest] if nearest and wanted & mapped(nearest) else []):
            loaded = self._load(candidate) if isinstance(candidate, str) else candidate
            if loaded is None:
                continue
            glyphs = self.glyphs(loaded)
            glyphs.missing("".join(chars))
            if not chars & glyphs.lacking:
                return glyphs
            if found is None or len(chars - glyphs.lacking) > len(chars - found.lacking):
                found = glyphs
        return found if found is not None and chars - found.lacking else None

    def close(self) -> None:
        for font in self.loaded.values():
            if font:
                pdfium_c.FPDFFont_Close(font)


def base_name(font: pdfium_c.FPDF_FONT) -> str:
    n = pdfium_c.FPDFFont_GetBaseFontName(font, None, 0)
    buffer = ctypes.create_string_buffer(max(n, 1))
    pdfium_c.FPDFFont_GetBaseFontName(font, buffer, n)
    return buffer.value.decode("latin-1")
