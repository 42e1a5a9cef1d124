"""benchmarks.cuda_bundle: the fatbin cutter, the ELF section lookup, and the two parts with their
scripts, built from tiny fake wheels (no download) and unpacked by go.sh into a temporary root."""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from attnserve.benchmarks import cuda_bundle
from attnserve.benchmarks.cuda_bundle import FATBIN_MAGIC, WHEELS, Section, cut_fatbins, elf_sections

REPO = Path(__file__).resolve().parents[2]
ORT = "1.31.1"
PTX, CUBIN = 1, 2


def entry(kind: int, sm: int, payload: bytes) -> bytes:
    """A fatbin entry: a 64-byte header (kind, version, header size, payload size; the arch at 28)."""
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64, len(payload))
    struct.pack_into("<I", header, 28, sm)
    return bytes(header) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def payload(seed: int, size: int = 256) -> bytes:
    return random.Random(seed).randbytes(size)


def section_bytes() -> tuple[bytes, bytes, bytes]:
    """A section of two fatbins (sm_90 PTX + sm_75/sm_90/sm_120 cubins; an sm_120 cubin alone) with
    8 bytes of padding between them, and the sm_90 cubin entry the first one must become."""
    sm90 = entry(CUBIN, 90, payload(90, 512))
    first = fatbin(entry(PTX, 90, payload(1)), entry(CUBIN, 75, payload(75)), sm90, entry(CUBIN, 120, payload(120)))
    second = fatbin(entry(CUBIN, 120, payload(121)))
    return first + bytes(8) + second, first, sm90


def elf(sections: list[tuple[str, bytes]]) -> tuple[bytes, dict[str, int]]:
    """A 64-bit little-endian ELF file of these sections (plus the null one and .shstrtab), each at
    a 16-byte boundary after a 64-byte header; the file and each section's offset."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, _ in sections) + b".shstrtab\0"
    blobs, offsets, pos = bytearray(), {}, 64
    for name, data in [*sections, (".shstrtab", names)]:
        pad = -pos % 16
        blobs += bytes(pad) + data
        offsets[name] = pos + pad
        pos += pad + len(data)
    shoff = pos + (-pos % 8)
    headers = bytearray(64)  # the null section
    for name, data in [*sections, (".shstrtab", names)]:
        kind = 3 if name == ".shstrtab" else 1  # STRTAB, PROGBITS
        headers += struct.pack(
            "<IIQQQQIIQQ", names.index(name.encode() + b"\0"), kind, 0, 0, offsets[name], len(data), 0, 0, 1, 0
        )
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections) + 2, len(sections) + 1
    )
    data = header + bytes(blobs) + bytes(shoff - pos) + bytes(headers)
    return data, offsets


def readelf_sections(path: Path) -> list[tuple[str, int, int, int]]:
    """(name, address, offset, size) of each section but the null one, as ``readelf -S -W`` prints them."""
    text = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    rows = re.findall(r"^\s*\[\s*(\d+)\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", text, re.M)
    return [(name, int(a, 16), int(o, 16), int(s, 16)) for index, name, a, o, s in rows if index != "0"]


def test_each_fatbin_becomes_its_sm90_cubin_and_one_without_it_stays_whole():
    section, first, sm90 = section_bytes()
    data = bytearray(b"H" * 40 + section + b"T" * 40)
    counts = cut_fatbins(data, 40, len(section), 90)
    assert counts["cut"] == 1 and counts["kept"] == 1
    assert len(data) == 40 + len(section) + 40
    assert data[:40] == b"H" * 40 and data[-40:] == b"T" * 40
    magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", data, 40)
    assert (magic, header_size, fat_size) == (FATBIN_MAGIC, 16, len(sm90))
    assert data[56 : 56 + len(sm90)] == sm90
    assert data[56 + len(sm90) : 40 + len(first)] == bytes(len(first) - 16 - len(sm90))
    assert data[40 + len(first) : 40 + len(section)] == section[len(first) :]  # the padding and the sm_120 one


def test_the_section_lookup_reads_a_small_elf_and_the_cut_keeps_its_place(tmp_path):
    section, _, sm90 = section_bytes()
    data, offsets = elf([(".text", payload(7, 100)), (".nv_fatbin", section), (".rodata", payload(8, 50))])
    path = tmp_path / "lib.so"
    path.write_bytes(data)
    before = elf_sections(data)
    assert [s.name for s in before] == ["", ".text", ".nv_fatbin", ".rodata", ".shstrtab"]
    assert before[2] == Section(".nv_fatbin", 1, 0, offsets[".nv_fatbin"], len(section))
    assert cuda_bundle.cut_library(path, 90)["cut"] == 1
    after = path.read_bytes()
    assert len(after) == len(data) and elf_sections(after) == before
    start = offsets[".nv_fatbin"]
    assert after[:start] == data[:start] and after[start + len(section) :] == data[start + len(section) :]
    assert after[start + 16 : start + 16 + len(sm90)] == sm90
    if shutil.which("readelf"):
        assert readelf_sections(path) == [(s.name, s.addr, s.offset, s.size) for s in before[1:]]


@pytest.mark.skipif(not shutil.which("readelf"), reason="readelf (binutils) is not installed")
def test_the_section_lookup_agrees_with_readelf_on_this_python():
    path = Path(os.path.realpath(sys.executable))
    found = elf_sections(path.read_bytes())
    assert len(found) > 10
    assert readelf_sections(path) == [(s.name, s.addr, s.offset, s.size) for s in found[1:]]


def test_a_library_without_the_architecture_and_a_non_elf_file_are_refused(tmp_path):
    only120 = fatbin(entry(CUBIN, 120, payload(1)))
    path = tmp_path / "lib.so"
    path.write_bytes(elf([(".nv_fatbin", only120)])[0])
    with pytest.raises(cuda_bundle.BundleError, match="no fatbin holds an sm_90 cubin"):
        cuda_bundle.cut_library(path, 90)
    with pytest.raises(cuda_bundle.BundleError, match="not a 64-bit little-endian ELF"):
        elf_sections(b"#!/bin/sh\n" + bytes(64))


def test_the_call_plan_takes_out_the_bundled_translator_when_a_call_passes_64_mib():
    mib = 2**20
    calls = {"call 1": 42 * mib, "call 2": 35 * mib}
    tracked = {"models/zoo/translator-en-de/model.safetensors": 9 * mib, "server/a.py": 10 * mib}
    tracked |= {f"models/repo/translator-en-de/{n}.onnx": 7 * mib for n in ("encoder", "decoder", "aligner")}
    lines = cuda_bundle.call_plan(tracked, 0, calls)
    assert lines[0].startswith("call 1 copies 40.0 MiB of the checkout + 42.0 MiB carried = 82.0 MiB")
    assert "passes 64 MiB by 18.0 MiB" in lines[2]
    command = next(line for line in lines if "git rm" in line)
    assert "models/repo/translator-en-de/encoder.onnx" in command and "safetensors" not in command
    assert cuda_bundle.call_plan({"server/a.py": mib}, 0, calls)[2:] == []
    too_big = cuda_bundle.call_plan({**tracked, "server/a.py": 20 * mib}, 0, calls)
    assert "even without models/repo/translator-en-de/" in too_big[2]


def fake_wheels(folder: Path) -> None:
    """A wheel per requirement; onnxruntime-gpu's with modules that say what go.sh prints, its CUDA
    library an ELF with a fatbin section, and the libonnxruntime.so the bundle leaves out."""
    section, _, _ = section_bytes()
    library = elf([(".text", payload(3, 300)), (".nv_fatbin", section + fatbin(entry(CUBIN, 90, payload(9, 4096))))])
    files = {
        "onnxruntime-gpu": {
            "onnxruntime/__init__.py": f"__version__ = {ORT!r}\n\n\ndef get_available_providers():\n"
            "    return ['CUDAExecutionProvider', 'CPUExecutionProvider']\n",
            "onnxruntime/capi/libonnxruntime_providers_cuda.so": library[0],
            f"onnxruntime/capi/libonnxruntime.so.{ORT}": b"not linked",
        },
        "grpcio": {"grpc/__init__.py": "__version__ = '1.85.3'\n"},
        "protobuf": {"google/protobuf/__init__.py": "__version__ = '6.33.6'\n"},
    }
    folder.mkdir()
    for name, version in [("onnxruntime-gpu", ORT), *WHEELS]:
        module = name.replace("-", "_")
        with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w") as wheel:
            for path, content in files.get(name, {f"{module}/__init__.py": ""}).items():
                wheel.writestr(path, content)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    fake_wheels(root / "wheels")
    out = root / "out"
    assert cuda_bundle.main(["--out", str(out), "--wheel-dir", str(root / "wheels"), "--part-mb", "0.002"]) == 0
    return out


def test_the_parts_join_to_the_bundle_of_the_cut_site(bundle, tmp_path):
    joined = (bundle / "a" / "part.0").read_bytes() + (bundle / "b" / "part.1").read_bytes()
    assert (bundle / "a" / "part.0").stat().st_size == 2000 and len(joined) > 2000
    sums = dict(reversed(line.split("  ")) for line in (bundle / "b" / "SHA256").read_text().splitlines())
    assert sums["bundle.tar.xz"] == hashlib.sha256(joined).hexdigest()
    (tmp_path / "bundle.tar.xz").write_bytes(joined)
    with tarfile.open(tmp_path / "bundle.tar.xz") as tar:
        names = tar.getnames()
        tar.extractall(tmp_path, filter="data")
    assert "site/onnxruntime/capi/libonnxruntime_providers_cuda.so" in names
    assert not [n for n in names if "libonnxruntime.so" in n]
    library = (tmp_path / "site/onnxruntime/capi/libonnxruntime_providers_cuda.so").read_bytes()
    fatbins = [s for s in elf_sections(library) if s.name == ".nv_fatbin"][0]
    assert struct.unpack_from("<Q", library, fatbins.offset + 8)[0] == 64 + 512  # the first fatbin: its sm_90 cubin
    assert (bundle / "a" / "stash.sh").stat().st_mode & 0o111 and (bundle / "b" / "go.sh").stat().st_mode & 0o111


def test_missing_wheels_are_named(tmp_path, capsys):
    (tmp_path / "wheels").mkdir()
    assert cuda_bundle.main(["--out", str(tmp_path / "out"), "--wheel-dir", str(tmp_path / "wheels")]) == 1
    assert f"lacks the wheels of: onnxruntime-gpu=={ORT} grpcio==1.85.3" in capsys.readouterr().err


def script(path: Path, root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "ROOT": str(root), "PY": sys.executable, **env}
    environ.pop("PYTHONPATH", None)
    return subprocess.run(["bash", str(path), *args], cwd=REPO, env=environ, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not (shutil.which("xz") and shutil.which("sha256sum")), reason="xz or sha256sum missing")
def test_go_sh_refuses_a_missing_or_foreign_part_0_then_unpacks_and_links(bundle, tmp_path):
    root = tmp_path / "root"
    refused = script(bundle / "b" / "go.sh", root)
    assert refused.returncode == 3 and "PART 0 MISSING" in refused.stdout
    (root / "parts").mkdir(parents=True)
    (root / "parts" / "part.0").write_bytes(b"another bundle's part 0")
    refused = script(bundle / "b" / "go.sh", root)
    assert refused.returncode == 4 and "IS NOT THIS BUNDLE'S" in refused.stdout
    stashed = script(bundle / "a" / "stash.sh", root)
    assert stashed.returncode == 0, stashed.stdout + stashed.stderr
    assert (root / "parts" / "part.0").read_bytes() == (bundle / "a" / "part.0").read_bytes()
    dry = script(bundle / "b" / "go.sh", root, DRY="1")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"ort {ORT} {root}/site/onnxruntime/__init__.py ['CUDAExecutionProvider'" in dry.stdout
    assert (root / "ns" / "attnserve").resolve() == REPO
    assert "Name: attnserve" in (root / "ns" / "attnserve-0.1.0.dist-info" / "METADATA").read_text()
    probe = "import attnserve.benchmarks.cuda_bundle as m, importlib.metadata as md\n"
    probe += "print(m.__name__, md.version('attnserve'))"
    ran = script(bundle / "b" / "go.sh", root, sys.executable, "-c", probe)
    assert ran.returncode == 0 and "attnserve.benchmarks.cuda_bundle 0.1.0" in ran.stdout, ran.stdout + ran.stderr
