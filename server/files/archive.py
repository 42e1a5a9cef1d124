"""Zip packages (.docx, .pptx, .xlsx, .odt, .odp, .epub), opened only after their directory is checked.

A zip's central directory states every entry's uncompressed size before anything is
inflated: a zip bomb (a few KB that inflate to gigabytes) and a zip of a million entries
are refused from the directory alone (:class:`FileRefused`), before any entry is read.
``zipfile`` then never inflates an entry past its stated size (a lying entry fails its CRC
check). XML parts are parsed by lxml with entities unresolved and no network or DTD loading
(no billion laughs, no external entities), streamed from the zip in chunks: a caller sees each
paragraph as it ends (``parse_xml_stream``) and may stop the parse there, and at most
``MAX_TAGS`` tags of a package are parsed (every ``<``, counted in each inflated chunk before it
is parsed: at least one per element), so a small part that inflates to millions of paragraphs is
refused after the first of them, not after all of it was inflated and built.

A translated package is the original's entries in their order, each with its own name,
date, compression and attributes; only the translated parts have new content (an ODF or
EPUB ``mimetype`` entry stays first and stored, as their specs require).
"""

from __future__ import annotations

import copy
import io
import zipfile
from collections.abc import Callable, Mapping

from lxml import etree

from .refusals import FileRefused

MAX_ENTRIES = 10_000  # a 300-slide deck has ~1,500; a package with more is not a document
MAX_TAGS = 2_000_000  # tags of the XML parts a package's reading parses: ~1,000,000 elements, ~150 MB of tree at most
CHUNK = 1 << 16  # bytes of a zip entry inflated and parsed at a time
UNPACKED_PER_BYTE = 4  # a package may unpack to this many times --max-file-bytes


def open_zip(data: bytes, max_file_bytes: int, kind: str) -> zipfile.ZipFile:
    """``data`` as a zip whose directory passed the checks of the module docstring."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
        raise FileRefused(f"the file is not a valid {kind} (not a readable zip package: {exc})") from None
    entries = archive.infolist()
    if len(entries) > MAX_ENTRIES:
        raise FileRefused(f"the {kind} package has {len(entries):,} entries; at most {MAX_ENTRIES:,} are read")
    unpacked, limit = sum(e.file_size for e in entries), UNPACKED_PER_BYTE * max_file_bytes
    if unpacked > limit:
        raise FileRefused(
            f"the {kind} package unpacks to {unpacked:,} bytes; this server unpacks at most {limit:,} "
            f"({UNPACKED_PER_BYTE} x --max-file-bytes)"
        )
    return archive


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError)


def read(archive: zipfile.ZipFile, name: str, kind: str) -> bytes:
    try:
        return archive.read(name)
    except _ZIP_ERRORS as exc:
        raise FileRefused(f"the {kind} package's entry {name!r} does not read: {exc}") from None


_OPTIONS = {"resolve_entities": False, "no_network": True, "load_dtd": False, "remove_blank_text": False}
_PARSER = etree.XMLParser(**_OPTIONS)


def parse_xml(data: bytes, name: str, kind: str, tags: Tags | None = None) -> etree._ElementTree:
    """``data`` parsed whole; its tags counted in ``tags`` first, when given (a part of text)."""
    if tags is not None:
        tags.add(data)
    try:
        return etree.ElementTree(etree.fromstring(data, _PARSER))
    except etree.XMLSyntaxError as exc:
        raise FileRefused(f"the {kind} package's part {name!r} is not well-formed XML: {exc}") from None


class Tags:
    """Tags (each ``<`` of the XML) inflated so far in one package, against ``MAX_TAGS``."""

    def __init__(self, kind: str, limit: int | None = None, refusal: str = "") -> None:
        self.kind, self.limit, self.counted = kind, MAX_TAGS if limit is None else limit, 0
        self.refusal = refusal or (
            f"the {kind} package's XML parts hold more than {self.limit:,} XML tags; this server "
            "reads at most that many (a document of that size is not one file to translate)"
        )

    def add(self, chunk: bytes | str) -> None:
        self.counted += chunk.count(b"<" if isinstance(chunk, bytes) else "<")
        if self.counted > self.limit:
            raise FileRefused(self.refusal)


def parse_xml_stream(
    archive: zipfile.ZipFile,
    name: str,
    kind: str,
    elements: frozenset[str],
    seen: Callable[[str, etree._Element], None],
    tags: Tags,
) -> etree._ElementTree:
    """The part ``name`` parsed as it is inflated, ``seen("start" | "end", element)`` called as
    each of the ``elements`` starts and ends (at its end its children are complete, its tail not
    yet read), every chunk's tags counted in ``tags`` before it is parsed. Whatever ``seen``
    raises stops the parse there."""
    parser = etree.XMLPullParser(events=("start", "end"), tag=elements, **_OPTIONS)  # only those reach Python
    try:
        with archive.open(name) as part:
            while chunk := part.read(CHUNK):
                tags.add(chunk)
                parser.feed(chunk)
                for event, element in parser.read_events():
                    seen(event, element)
        root = parser.close()
        for event, element in parser.read_events():
            seen(event, element)
    except etree.XMLSyntaxError as exc:
        raise FileRefused(f"the {kind} package's part {name!r} is not well-formed XML: {exc}") from None
    except _ZIP_ERRORS as exc:
        raise FileRefused(f"the {kind} package's entry {name!r} does not read: {exc}") from None
    return root.getroottree()


CONTENT_TYPES = "[Content_Types].xml"
_TYPES = "{http://schemas.openxmlformats.org/package/2006/content-types}"


def overrides(archive: zipfile.ZipFile, kind: str, tags: Tags) -> dict[str, str]:
    """An OOXML package's parts by the content type ``[Content_Types].xml`` declares for each
    (its ``Override`` entries: part name without the leading ``/`` -> content type). A part is
    what its content type says, whatever its name: writers name the same part differently
    (Excel ``xl/comments1.xml``, openpyxl ``xl/comments/comment1.xml``). Its tags count in ``tags``."""
    if CONTENT_TYPES not in archive.namelist():
        return {}
    root = parse_xml(read(archive, CONTENT_TYPES, kind), CONTENT_TYPES, kind, tags).getroot()
    return {
        o.get("PartName", "").lstrip("/"): o.get("ContentType", "")
        for o in root.iter(f"{_TYPES}Override")
        if o.get("PartName")
    }


def serialize_xml(tree: etree._ElementTree) -> bytes:
    """The tree with the XML declaration it came with (encoding, standalone)."""
    info = tree.docinfo
    return etree.tostring(tree, xml_declaration=True, encoding=info.encoding or "UTF-8", standalone=info.standalone)


def rewrite(
    archive: zipfile.ZipFile, replaced: Mapping[str, bytes], kind: str, check: Callable[[], None] = lambda: None
) -> bytes:
    """The package with ``replaced[name]`` as the content of those entries, every other entry as it
    was; ``check()`` (a deadline's) before each entry."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as package:
        for info in archive.infolist():
            check()
            data = replaced[info.filename] if info.filename in replaced else read(archive, info.filename, kind)
            package.writestr(copy.copy(info), data, compress_type=info.compress_type)  # writestr edits its info
    return out.getvalue()
