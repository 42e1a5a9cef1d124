"""A .docx and a PDF through ``/translate_file`` against the same text as one document through ``/translate``.

A live ``attnserve-server`` (a subprocess on 127.0.0.1, HTTP on) serves the bundled translator.
The .docx has ``--pages`` pages of about 2,500 characters of its example phrases
(``examples/sentences.tsv``, as ``benchmarks.documents`` builds them, each paragraph's first
number changed so that few sentences repeat), one paragraph per line, every fourth paragraph in
three runs with a bold middle, and an image. Contenders, taking turns
one round each (``interleaved``), both over LibreTranslate's HTTP routes:

- ``.docx via /translate_file``: the upload, the translation, and the download of the file;
- ``its text via /translate``: the paragraphs joined by newlines, one ``q``: one document;
- ``.pdf via /translate_file``: the same paragraphs as a PDF (``benchmarks.pdfs``: two columns a
  page in Helvetica, fpdf2's layout, an image on the first page), each paragraph a text block;
- ``.docx via /translate_file [aligner graph]``: the file on a second server whose decoder does
  not return its steps' attention (``common.without_step_attention_dir``: the directory as
  exported before that output), where the styled paragraphs run the aligner graph.

Reported: characters of text per second (median round) and file / text; the targets are
>= 0.9x for the .docx and >= 0.8x for the PDF. The translations are checked to be the same,
paragraph by paragraph (the PDF's read back from its translated blocks).

    python -m benchmarks.files            # or: attnserve-bench files
    python -m benchmarks.files --quick
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import urllib.request
import zipfile
from typing import Any

from . import pdfs
from .common import (
    add_common_arguments,
    add_model_dir_argument,
    header,
    interleaved,
    linked_repo,
    machine,
    shown_path,
    table,
    without_step_attention_dir,
    write_results,
)
from .documents import COMMITTED, MODEL, document
from .launch import free_port, start_server, wait_ready

NAME = "files"
PAGE_CHARS = 2_500
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.files", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--pages", type=int, default=None, help="pages of about 2,500 characters (default 50)")
    add_model_dir_argument(parser, COMMITTED)
    return parser


def docx(paragraphs: list[str]) -> bytes:
    """A .docx (the parts python-docx and Word read) of ``paragraphs``; every fourth in three runs."""
    from xml.sax.saxutils import escape

    def runs(i: int, text: str) -> str:
        words = text.split()
        if i % 4 or len(words) < 3:
            return f'<w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r>'
        parts = [" ".join(words[:1]) + " ", " ".join(words[1:2]), " " + " ".join(words[2:])]
        bold = ["", "<w:rPr><w:b/></w:rPr>", ""]
        return "".join(f'<w:r>{b}<w:t xml:space="preserve">{escape(p)}</w:t></w:r>' for b, p in zip(bold, parts))

    body = "".join(f"<w:p>{runs(i, t)}</w:p>" for i, t in enumerate(paragraphs))
    declaration = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    xml = f'{declaration}<w:document xmlns:w="{W[1:-1]}"><w:body>{body}</w:body></w:document>'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("[Content_Types].xml", "<Types/>")
        package.writestr("word/document.xml", xml)
        package.writestr("word/media/image1.png", b"\x89PNG\r\n\x1a\n" + bytes(4096))
    return out.getvalue()


def distinct(paragraphs: list[str]) -> list[str]:
    """The example phrases made to differ from paragraph to paragraph (a 50-page document repeats
    few sentences, and a repeated one is decoded once, which would leave little but overhead to
    compare): paragraph i's first number is raised by i."""
    return [re.sub(r"\d+", lambda m, i=i: str(int(m.group()) + i), p, count=1) for i, p in enumerate(paragraphs)]


def post(url: str, body: bytes, content_type: str) -> dict[str, Any]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=3600) as reply:
        return json.loads(reply.read())


def file_form(data: bytes, filename: str) -> tuple[bytes, str]:
    """(body, content type) of the multipart form that sends ``data`` for en -> de."""
    boundary = "bench-boundary-35"
    fields = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in (("source", "en"), ("target", "de"))
    ).encode()
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n\r\n'.encode()
    return fields + head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def translate_file(base: str, data: bytes, filename: str = "bench.docx") -> bytes:
    """The translated file: upload, translation, download (what a LibreTranslate client does)."""
    url = post(f"{base}/translate_file", *file_form(data, filename))["translatedFileUrl"]
    with urllib.request.urlopen(url, timeout=600) as reply:
        return reply.read()


def translate_text(base: str, text: str) -> str:
    body = json.dumps({"q": text, "source": "en", "target": "de"}).encode()
    return post(f"{base}/translate", body, "application/json")["translatedText"]


def paragraphs_of(translated: bytes) -> list[str]:
    """The translated .docx's paragraphs, words single-spaced (outside the timed calls)."""
    from lxml import etree

    with zipfile.ZipFile(io.BytesIO(translated)) as package:
        root = etree.fromstring(package.read("word/document.xml"))
    return [" ".join("".join(p.itertext()).split()) for p in root.iter(f"{W}p")]


def blocks_of(translated: bytes) -> list[str]:
    """The translated PDF's text blocks, words single-spaced (outside the timed calls)."""
    from attnserve.server import files

    return [" ".join(t.split()) for t in files.read("bench.pdf", translated, len(translated)).texts]


FILE, TEXT = ".docx via /translate_file", "its text via /translate"
PDF = ".pdf via /translate_file"
GRAPH = ".docx via /translate_file [aligner graph]"


def run(args: argparse.Namespace) -> dict[str, Any]:
    # the committed model directory (what make serve serves) unless --model-dir names another
    repo = linked_repo(args.work_dir / "documents-repo", MODEL, args.model_dir)
    pages = args.pages or (2 if args.quick else 50)
    repeats = args.repeats or (1 if args.quick else 3)
    paragraphs = distinct([line for line in document(pages * PAGE_CHARS).splitlines() if line.strip()])
    text, data = "\n".join(paragraphs), docx(paragraphs)
    layout = pdfs.columns(paragraphs)
    pdf, _ = pdfs.build(layout)
    info = machine()
    header(
        f"files: a {pages}-page .docx and a {len(layout)}-page PDF ({len(text):,} characters, "
        f"{len(paragraphs)} paragraphs)",
        info,
        args.threads,
    )
    baseline = without_step_attention_dir(args.model_dir, args.work_dir / "files-baseline" / MODEL, MODEL)
    limits = ["--max-text-chars", str(len(text) + 1), "--max-request-chars", str(len(text) + 1)]
    limits += ["--max-file-chars", str(len(text) + 1), "--request-timeout-seconds", "0", "--file-timeout-seconds", "0"]
    servers, bases = [], []
    for path in (repo, baseline.parent):
        http = free_port()
        servers.append(start_server(path, args.threads, 32, extra=["--http-port", str(http), *limits]))
        bases.append(f"http://127.0.0.1:{http}")
    try:
        for proc, address in servers:
            asyncio.run(wait_ready(address, proc))
        runs = {
            FILE: lambda: translate_file(bases[0], data),
            TEXT: lambda: translate_text(bases[0], text),
            GRAPH: lambda: translate_file(bases[1], data),
            PDF: lambda: translate_file(bases[0], pdf, "bench.pdf"),
        }
        timings, values = interleaved(runs, repeats)
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(30)
    lines = [" ".join(line.split()) for line in values[TEXT].split("\n")]
    for name in (FILE, GRAPH):
        assert paragraphs_of(values[name]) == lines, f"{name}: the file's paragraphs are not the text's translation"
    assert blocks_of(values[PDF]) == lines, f"{PDF}: the PDF's blocks are not the text's translation"
    rates = {name: len(text) / t.median for name, t in timings.items()}
    ratio, graph, pdf_ratio = rates[FILE] / rates[TEXT], rates[GRAPH] / rates[TEXT], rates[PDF] / rates[TEXT]
    rows = [[name, f"{t.median:.2f}", round(rates[name]), f"{rates[name] / rates[TEXT]:.2f}x"]
            for name, t in timings.items()]  # fmt: skip
    print(table(["contender", "median s", "characters/s", "vs text"], rows))
    print(f"file / text: {ratio:.2f}x (target >= 0.9x); with the aligner graph {graph:.2f}x")
    print(f"pdf / text: {pdf_ratio:.2f}x (target >= 0.8x)")
    return {
        "machine": info,
        "model_dir": shown_path(args.model_dir),
        "pages": pages,
        "pdf_pages": len(layout),
        "characters": len(text),
        "paragraphs": len(paragraphs),
        "threads": args.threads,
        "repeats": repeats,
        "timings": {name: t.to_json() for name, t in timings.items()},
        "characters_per_s": rates,
        "file_over_text": ratio,
        "file_over_text_aligner_graph": graph,
        "pdf_over_text": pdf_ratio,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    write_results(args.out, NAME, run(args), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
