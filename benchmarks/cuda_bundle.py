"""onnxruntime-gpu and the wheels the server lacks on a GPU machine without internet, in two parts.

The GPU machine (H200, sm_90, Python 3.12, torch and onnxruntime's CPU build, no internet) is
reached by a tool that copies the checkout plus up to 8 carried ignored folders, at most 64 MiB a
call, and keeps files written outside the checkout only while the machine stays warm (30 s).
onnxruntime-gpu's CUDA provider library alone is 284 MB: most of it is the same kernels compiled
for every GPU architecture (the fatbins of its ``.nv_fatbin`` section). This keeps each fatbin's
cubin for ``--sm`` only, moved to the fatbin's front with the fatbin's size set to it and the rest
zeroed, so that xz compresses the rest away while every file offset and every pointer into the
section stays valid; fatbins without that cubin stay whole. ``libonnxruntime.so.VERSION`` is left
out (the Python module does not link it). The site folder is packed with tar and xz and split
in two: ``OUT/a`` (part 0 and ``stash.sh``, call 1: part 0 kept in /root/parts) and ``OUT/b``
(part 1, ``SHA256`` and ``go.sh``, call 2 within 30 s: checked, unpacked to /root/site, the
checkout importable as ``attnserve``, then ``python -m benchmarks.cuda_checks`` or the command
given). It ends with what to carry in which call and how much each call copies.

    python -m benchmarks.cuda_bundle --out .gpu
    python -m benchmarks.cuda_bundle --out .gpu --wheel-dir /tmp/wheels   # no download
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import lzma
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import NamedTuple

from .cuda_bundle_scripts import GO_SH, STASH_SH

REPO = Path(__file__).resolve().parents[1]
CALL_LIMIT = 64 * 2**20  # what the device tool copies per call: the checkout plus the carried folders
# Tracked files the GPU run does not read, to take out of the copy when a call would pass the
# limit: the bundled translator's exports (the GPU checks export their own models, and
# tests/server/test_cuda.py exports from models/zoo's weights).
SPARE = ("models/repo/translator-en-de/",)
CUDA_LIB = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
FATBIN_MAGIC = 0xBA55ED50
CUBIN = 2  # a fatbin entry's kind: 1 is PTX, 2 an ELF cubin
PYTHON_VERSION = "3.12"  # the GPU machine's Python
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# What the server imports at start that the GPU machine's image lacks or has at versions the
# committed stubs refuse (protobuf 7), at the versions the server was tested with there.
WHEELS = (
    ("grpcio", "1.85.3"),
    ("grpcio-health-checking", "1.81.1"),
    ("grpcio-reflection", "1.81.1"),
    ("protobuf", "6.33.6"),
    ("langcodes", "3.5.1"),
    ("sentencex", "1.0.32"),
    ("py3langid", "0.4.0"),
    ("arabic-reshaper", "3.1.0"),
    ("uniseg", "0.10.1"),
    ("pypdfium2", "5.15.2"),
)


class BundleError(Exception):
    """What stops the bundle, said in one line."""


class Section(NamedTuple):
    name: str
    type: int
    addr: int
    offset: int
    size: int


def elf_sections(data: bytes) -> list[Section]:
    """The section table of a 64-bit little-endian ELF file, in index order (as ``readelf -S``)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BundleError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0:
        raise BundleError("the ELF file has no section headers")
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum or 1)]
    if shnum == 0:  # more than 0xff00 sections: the count is in section 0's size
        headers += [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(1, headers[0][5])]
    if shstrndx == 0xFFFF:  # SHN_XINDEX: the index is in section 0's link
        shstrndx = headers[0][6]
    strtab = headers[shstrndx][4]

    def name(offset: int) -> str:
        end = data.index(b"\0", strtab + offset)
        return data[strtab + offset : end].decode("ascii", "replace")

    return [Section(name(h[0]), h[1], h[3], h[4], h[5]) for h in headers]


def cut_fatbins(data: bytearray, start: int, size: int, sm: int) -> collections.Counter:
    """Cut every fatbin in ``data[start:start + size]`` to its cubin for ``sm``, in place: that
    entry moved to the fatbin's front, the fatbin's size set to it, the rest zeroed. Counts of
    fatbins ``cut`` and ``kept`` (no such cubin) and of 8-byte steps ``skipped`` between them."""
    counts: collections.Counter = collections.Counter()
    pos, end = start, start + size
    while pos + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8
            counts["skipped"] += 1
            continue
        body = pos + header_size
        if body + fat_size > end:
            raise BundleError(f"a fatbin at {pos:#x} runs past the section's end")
        chosen = fatbin_entry(data, body, fat_size, sm)
        if chosen is None:
            counts["kept"] += 1
        else:
            entry = bytes(data[chosen[0] : chosen[1]])
            data[body : body + fat_size] = bytes(fat_size)
            data[body : body + len(entry)] = entry
            struct.pack_into("<Q", data, pos + 8, len(entry))
            counts["cut"] += 1
        pos = (body + fat_size + 7) & ~7
    return counts


def fatbin_entry(data: bytes, body: int, fat_size: int, sm: int) -> tuple[int, int] | None:
    """(start, end) of the fatbin's cubin entry for ``sm``, header included, or None."""
    entry = body
    while entry < body + fat_size:
        kind, _version, header_size, padded = struct.unpack_from("<HHIQ", data, entry)
        (arch,) = struct.unpack_from("<I", data, entry + 28)
        if header_size == 0:
            raise BundleError(f"a fatbin entry at {entry:#x} has no header")
        if kind == CUBIN and arch == sm:
            return entry, entry + header_size + padded
        entry += header_size + padded
    return None


def cut_library(path: Path, sm: int) -> collections.Counter:
    """Cut the fatbins of the shared library at ``path`` to ``sm``, in place; its length unchanged."""
    data = bytearray(path.read_bytes())
    found = [s for s in elf_sections(data) if s.name == ".nv_fatbin"]
    if not found:
        raise BundleError(f"{path} has no .nv_fatbin section")
    counts = cut_fatbins(data, found[0].offset, found[0].size, sm)
    if not counts["cut"]:
        raise BundleError(f"{path}: no fatbin holds an sm_{sm} cubin (--sm names the GPU's architecture)")
    path.write_bytes(data)
    return counts


def requirements(ort_version: str) -> list[tuple[str, str]]:
    return [("onnxruntime-gpu", ort_version), *WHEELS]


def download(wheel_dir: Path, ort_version: str) -> None:
    """``pip download`` the wheels for the GPU machine's Python and platform, without their dependencies."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheel_dir)]
    command += ["--python-version", PYTHON_VERSION, "--implementation", "cp"]
    command += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command += [f"{name}=={version}" for name, version in requirements(ort_version)]
    print(f"downloading {len(requirements(ort_version))} wheels to {wheel_dir} ...", flush=True)
    if subprocess.run(command).returncode != 0:
        raise BundleError("pip download failed (its output is above); --wheel-dir takes wheels already downloaded")


def find_wheels(wheel_dir: Path, ort_version: str) -> list[Path]:
    """The wheel of each requirement in ``wheel_dir``, by its file name (``name-version-...whl``)."""

    def key(name: str) -> str:
        return name.lower().replace("-", "_").replace(".", "_")

    if not wheel_dir.is_dir():
        raise BundleError(f"--wheel-dir {wheel_dir}: no such folder")
    present = {}
    for wheel in sorted(wheel_dir.glob("*.whl")):
        parts = wheel.name.split("-")
        present[(key(parts[0]), parts[1] if len(parts) > 1 else "")] = wheel
    wanted = requirements(ort_version)
    missing = [f"{name}=={version}" for name, version in wanted if (key(name), version) not in present]
    if missing:
        raise BundleError(f"{wheel_dir} lacks the wheels of: {' '.join(missing)}")
    return [present[(key(name), version)] for name, version in wanted]


def build_site(wheels: list[Path], site: Path, ort_version: str, sm: int) -> None:
    """Unpack the wheels into ``site`` (file modes kept), drop libonnxruntime.so, cut the CUDA library."""
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                path = Path(archive.extract(info, site))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    path.chmod(mode)
    (site / f"onnxruntime/capi/libonnxruntime.so.{ort_version}").unlink(missing_ok=True)
    library = site / CUDA_LIB
    if not library.is_file():
        raise BundleError(f"the onnxruntime-gpu wheel has no {CUDA_LIB}")
    before = library.stat().st_size
    counts = cut_library(library, sm)
    print(
        f"{CUDA_LIB}: {before / 1e6:.0f} MB, {counts['cut']} fatbins cut to sm_{sm}, "
        f"{counts['kept']} without an sm_{sm} cubin kept whole",
        flush=True,
    )


def pack(site: Path, bundle: Path) -> None:
    """``site`` as ``site/...`` in a tar (sorted, owners and times cleared) compressed by xz -7."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    print(f"packing {site} into {bundle} (xz -7) ...", flush=True)
    xz = shutil.which("xz")
    with open(bundle, "wb") as out:
        if xz is None:  # Python's lzma: one thread, slower
            with lzma.open(out, "wb", preset=7) as stream, tarfile.open(fileobj=stream, mode="w|") as tar:
                tar.add(site, arcname="site", filter=clean)
            return
        proc = subprocess.Popen([xz, "-7", "-T0", "-c"], stdin=subprocess.PIPE, stdout=out)
        with tarfile.open(fileobj=proc.stdin, mode="w|") as tar:
            tar.add(site, arcname="site", filter=clean)
        proc.stdin.close()
        if proc.wait() != 0:
            raise BundleError("xz failed")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def split(bundle: Path, out: Path, part_bytes: int) -> tuple[Path, Path]:
    """``out/a/part.0`` (the first ``part_bytes``) and ``out/b/part.1`` (the rest), the two scripts
    and ``out/b/SHA256`` (each part's and the bundle's, as sha256sum writes them)."""
    parts = (out / "a" / "part.0", out / "b" / "part.1")
    for path in parts:
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(bundle, "rb") as src:
        parts[0].write_bytes(src.read(part_bytes))
        with open(parts[1], "wb") as dst:
            shutil.copyfileobj(src, dst)
    sums = [(sha256(parts[0]), "part.0"), (sha256(parts[1]), "part.1"), (sha256(bundle), "bundle.tar.xz")]
    (out / "b" / "SHA256").write_text("".join(f"{digest}  {name}\n" for digest, name in sums))
    for path, text in ((out / "a" / "stash.sh", STASH_SH), (out / "b" / "go.sh", GO_SH)):
        path.write_text(text)
        path.chmod(0o755)
    return parts


def git_files(repo: Path, *args: str) -> dict[str, int]:
    """Size of each file ``git ls-files ARGS`` lists in ``repo`` (files gone from disk left out)."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *args], capture_output=True, check=True)
    sizes = {}
    for name in listed.stdout.decode().split("\0"):
        path = repo / name
        if name and path.is_file() and not path.is_symlink():
            sizes[name] = path.stat().st_size
    return sizes


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def call_plan(tracked: dict[str, int], untracked: int, calls: dict[str, int], limit: int = CALL_LIMIT) -> list[str]:
    """Lines on what each call copies (the checkout's files plus its carried folder) and, where a
    call passes ``limit``, which of the ``SPARE`` tracked files (largest first) to take out of the
    copy for both calls."""
    tree = sum(tracked.values()) + untracked
    mib = 2**20
    lines = [
        f"{call} copies {tree / mib:.1f} MiB of the checkout + {size / mib:.1f} MiB carried = "
        f"{(tree + size) / mib:.1f} MiB (at most {limit / mib:.0f} MiB)"
        for call, size in calls.items()
    ]
    over = tree + max(calls.values()) - limit
    if over <= 0:
        return lines
    names, freed = [], 0
    spare = {name: size for name, size in tracked.items() if name.startswith(SPARE)}
    for name, size in sorted(spare.items(), key=lambda item: -item[1]):
        if freed >= over:
            break
        names.append(name)
        freed += size
    if freed < over:
        return [
            *lines,
            f"WARNING: a call passes {limit / mib:.0f} MiB even without {' '.join(SPARE)}: "
            "take more of the checkout out of the copy (git rm --cached + .git/info/exclude)",
        ]
    listed = " ".join(names)
    return [
        *lines,
        f"WARNING: a call passes {limit / mib:.0f} MiB by {over / mib:.1f} MiB: take these tracked files "
        f"({freed / mib:.1f} MiB) out of the copy for both calls:",
        f"  git rm -q --cached -- {listed} && printf '%s\\n' {listed} >> .git/info/exclude",
        f"and after call 2: git reset -q -- {listed}, and delete those {len(names)} lines from .git/info/exclude",
    ]


def report(out: Path, repo: Path) -> None:
    """Print what to carry in which call and how much each call copies beside the checkout."""
    try:
        where = out.resolve().relative_to(repo)
    except ValueError:
        print(f"WARNING: {out} is outside the checkout {repo}: the device tool carries only folders inside it")
        where = out.resolve()
    else:
        check = ["git", "-C", str(repo), "check-ignore", "-q", f"{where}/a"]
        if subprocess.run(check, stderr=subprocess.DEVNULL).returncode == 1:
            print(f"WARNING: git does not ignore {where}: every call would copy both parts (add it to .gitignore)")
    calls = {"call 1": folder_bytes(out / "a"), "call 2": folder_bytes(out / "b")}
    print(f"\ncall 1: carry {where}/a, run: bash {where}/a/stash.sh")
    print(f"call 2, within 30 s of call 1's end: carry {where}/b, run: bash {where}/b/go.sh [COMMAND ...]")
    print("  (no command: the full python -m benchmarks.cuda_checks run; its results go to $OUT)")
    try:
        tracked = git_files(repo, "--cached")
        untracked = sum(git_files(repo, "--others", "--exclude-standard").values())
    except (OSError, subprocess.CalledProcessError):
        print(f"WARNING: {repo} is not a git checkout: what each call copies beside its part is unknown")
        return
    for line in call_plan(tracked, untracked, calls):
        print(line)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_bundle", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".gpu"), help="a/ and b/ go here (default .gpu)")
    parser.add_argument("--onnxruntime-version", default="1.31.1", help="onnxruntime-gpu's (default 1.31.1)")
    parser.add_argument("--sm", type=int, default=90, help="the GPU's architecture whose cubins are kept (default 90)")
    parser.add_argument("--part-mb", type=float, default=44.0, help="part 0's size in MB of 10^6 bytes (default 44)")
    parser.add_argument("--wheel-dir", type=Path, help="take the wheels from here instead of downloading them")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.part_mb <= 0:
        print("--part-mb must be positive", file=sys.stderr)
        return 2
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    try:
        wheel_dir = args.wheel_dir
        if wheel_dir is None:
            wheel_dir = work / "wheels"
            download(wheel_dir, args.onnxruntime_version)
        wheels = find_wheels(wheel_dir, args.onnxruntime_version)
        print(f"unpacking {len(wheels)} wheels into {work / 'site'} ...", flush=True)
        build_site(wheels, work / "site", args.onnxruntime_version, args.sm)
        pack(work / "site", work / "bundle.tar.xz")
        parts = split(work / "bundle.tar.xz", args.out, int(args.part_mb * 1e6))
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sizes = ", ".join(f"{p.relative_to(args.out)} {p.stat().st_size / 1e6:.1f} MB" for p in parts)
    print(f"bundle {(work / 'bundle.tar.xz').stat().st_size / 1e6:.1f} MB: {sizes}", flush=True)
    shutil.rmtree(work / "site")
    (work / "bundle.tar.xz").unlink()
    report(args.out, REPO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
