"""The Argos Translate package index: what it offers, and the pairs a language list selects.

The index is the JSON list argos-translate downloads (``settings.remote_package_index``): one
object per package with ``from_code``, ``to_code``, ``package_version``, ``links`` (URLs of the
``.argosmodel`` zip) and, in newer entries, ``type`` (only ``translate`` packages are read here).
Mirrors may add ``sha256`` (or ``checksum``, ``sha256:<hex>``), which the download then checks, and may
give relative links, read against the index's own location (a folder holding ``index.json`` and
the packages serves an air-gapped site).

A language list selects every pair among its languages that the index offers, as LibreTranslate's
``--load-only`` does; pairs it lacks (most non-English pairs) are served by the server's pivot
through the pairs it has. Its codes find the index's as the server's routing finds a model's
(``attnserve.contract.language_tags``): ``pt-BR`` is Argos' ``pb``, ``zh-Hant`` (or ``zh-TW``) its
``zt``, ``zh-Hans`` its ``zh``, ``en-US`` its ``en``; a bare ``pt`` or ``zh`` is the plain package.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnserve.contract.language_tags import matches, tag

from .download import TIMEOUT_S, USER_AGENT, local_path
from .errors import PullError

log = logging.getLogger(__name__)

DEFAULT_INDEX = "https://raw.githubusercontent.com/argosopentech/argospm-index/main/index.json"
INDEX_ENV = "ATTNSERVE_ARGOS_INDEX"
MAX_INDEX_BYTES = 16 << 20
_CODE = re.compile(r"[a-z]{2,3}([-_][A-Za-z0-9]{2,8})*")


@dataclass(frozen=True)
class ArgosPackage:
    """One translation package of the index."""

    source: str  # from_code
    target: str  # to_code
    version: str
    links: tuple[str, ...]  # absolute URLs or paths, tried in order
    source_name: str = ""
    target_name: str = ""
    sha256: str | None = None

    @property
    def pair(self) -> str:
        return f"{self.source}-{self.target}"

    @property
    def model_name(self) -> str:
        """The model directory it installs as (``argos-en-de``)."""
        return f"argos-{self.pair}"

    @property
    def file_name(self) -> str:
        """The downloaded file's name, versioned so a new version is a new download."""
        return f"translate-{self.source}_{self.target}-{self.version.replace('.', '_')}.argosmodel"


def index_location(flag: str | None) -> str:
    """``--argos-index``, else ``$ATTNSERVE_ARGOS_INDEX``, else the public index."""
    return flag or os.environ.get(INDEX_ENV) or DEFAULT_INDEX


def read_index(location: str) -> list[ArgosPackage]:
    """The translation packages of the index at ``location`` (URL or local path)."""
    data = _parse(location, _read(location))
    packages = []
    for i, entry in enumerate(data):
        try:
            package = _package(location, i, entry)
        except PullError as exc:  # one broken entry of a public index must not take the others down
            log.warning("%s; skipped", exc)
            continue
        if package is not None:
            packages.append(package)
    if data and not packages and any(isinstance(e, dict) and e.get("type", "translate") == "translate" for e in data):
        raise PullError(f"Argos index {location}: no usable translation package (see the warnings above)")
    return packages


def _read(location: str) -> bytes:
    path = local_path(location)
    try:
        if path is not None:
            if path.is_dir():
                path = path / "index.json"
            return path.read_bytes()[: MAX_INDEX_BYTES + 1]
        request = urllib.request.Request(location, headers={"User-Agent": USER_AGENT})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.read(MAX_INDEX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise PullError(f"Argos index {location}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        hint = f" (an air-gapped site gives a mirror with --argos-index or ${INDEX_ENV})"
        raise PullError(f"Argos index {location}: {exc.reason}{hint}") from None
    except OSError as exc:
        raise PullError(f"Argos index {location}: {exc.strerror or exc}") from None


def _parse(location: str, raw: bytes) -> list[Any]:
    if len(raw) > MAX_INDEX_BYTES:
        raise PullError(f"Argos index {location}: larger than {MAX_INDEX_BYTES} bytes; not an index")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PullError(f"Argos index {location}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise PullError(f"Argos index {location}: expected a JSON list of packages, got {type(data).__name__}")
    return data


def _package(location: str, i: int, entry: Any) -> ArgosPackage | None:
    """One index entry; None for what is not a translation package (sbd, multi-language entries)."""
    if not isinstance(entry, dict) or entry.get("type", "translate") != "translate":
        return None
    source, target = entry.get("from_code"), entry.get("to_code")
    if not (isinstance(source, str) and isinstance(target, str)):
        return None
    for field, code in (("from_code", source), ("to_code", target)):
        if not _CODE.fullmatch(code):
            raise PullError(f"Argos index {location}: package {i}: {field} {code!r} is not a language code")
    links = entry.get("links")
    if not isinstance(links, list) or not links or not all(isinstance(x, str) for x in links):
        raise PullError(f"Argos index {location}: package {i} ({source}-{target}) has no links")
    checksum = entry.get("sha256") or entry.get("checksum")
    if isinstance(checksum, str) and checksum.startswith("sha256:"):
        checksum = checksum.removeprefix("sha256:")
    if checksum is not None and not (isinstance(checksum, str) and re.fullmatch(r"[0-9a-fA-F]{64}", checksum)):
        raise PullError(f"Argos index {location}: package {i} ({source}-{target}): sha256 {checksum!r} is not hex")
    return ArgosPackage(
        source=source,
        target=target,
        version=str(entry.get("package_version") or "0"),
        links=tuple(_absolute(location, link) for link in links),
        source_name=str(entry.get("from_name") or ""),
        target_name=str(entry.get("to_name") or ""),
        sha256=checksum,
    )


def _absolute(index: str, link: str) -> str:
    """A link as given when absolute; else read against the index's location."""
    if urllib.parse.urlsplit(link).scheme or Path(link).is_absolute():
        return link
    path = local_path(index)
    if path is not None:
        folder = path if path.is_dir() else path.parent
        return str(folder / link)
    return urllib.parse.urljoin(index, link)


def version_key(version: str) -> tuple:
    """``1.10`` after ``1.9``: the parts compared as numbers."""
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[._-]", version))


def newest(packages: list[ArgosPackage]) -> dict[tuple[str, str], ArgosPackage]:
    """The newest package of every pair."""
    best: dict[tuple[str, str], ArgosPackage] = {}
    for package in packages:
        key = (package.source, package.target)
        if key not in best or version_key(package.version) > version_key(best[key].version):
            best[key] = package
    return best


def parse_languages(text: str) -> list[str]:
    """``en,de,fr`` -> ``["en", "de", "fr"]`` (spaces, case and repeats ignored: the index's codes are
    lower case; ``pt-BR`` -> ``pt-br``, which :func:`index_codes` reads as Argos' ``pb``)."""
    codes = []
    for code in (c.strip().lower() for c in text.split(",")):
        if not code:
            continue
        if not _CODE.fullmatch(code):
            raise PullError(f"--languages: {code!r} is not a language code (ISO 639-1 such as en)")
        if code not in codes:
            codes.append(code)
    if not codes:
        raise PullError("--languages: give a comma-separated list such as en,de,fr")
    return codes


def index_codes(languages: list[str], known: set[str]) -> list[str]:
    """Each language as the index's code (``pt-br`` -> ``pb``, ``en-us`` -> ``en``; one the index does
    not know stays as given, without repeats); raises when a language names several equally."""
    codes: list[str] = []
    for code in languages:
        found = matches(code, sorted(known))
        if len(found) > 1:
            raise PullError(f"--languages: {code} is ambiguous in the Argos index: one of {', '.join(found)}")
        if (found[0] if found else code) not in codes:
            codes.append(found[0] if found else code)
    return codes


def select(packages: list[ArgosPackage], languages: list[str]) -> list[ArgosPackage]:
    """Every pair among ``languages`` (:func:`index_codes`) that the index offers (its newest version),
    in index order of the languages. Raises when a language is in no package at all (nothing could
    serve it), and when the languages make no pair (Argos pairs go to or from English: de,fr alone
    selects nothing)."""
    offered = newest(packages)
    known = {code for pair in offered for code in pair}
    languages = index_codes(languages, known)
    missing = [code for code in languages if code not in known]
    if missing:
        raise PullError(
            f"the Argos index has no package for {', '.join(missing)}; it offers "
            f"{', '.join(sorted(known)) or 'nothing'}"
        )
    chosen = [offered[s, t] for s in languages for t in languages if s != t and (s, t) in offered]
    if not chosen:
        raise PullError(_no_pair(offered, languages))
    return chosen


def _no_pair(offered: dict[tuple[str, str], ArgosPackage], languages: list[str]) -> str:
    """Why ``languages`` select nothing, and the language that would pair them (English, mostly)."""
    among = ", ".join(languages)
    touching = sorted(f"{s}-{t}" for s, t in offered if s in languages or t in languages)
    shown = ", ".join(touching[:12]) + (", ..." if len(touching) > 12 else "")

    def partners(code: str) -> set[str]:
        return {t for s, t in offered if s == code} | {s for s, t in offered if t == code}

    bridges = sorted(set.intersection(*(partners(code) for code in languages)) - set(languages))
    if not bridges:
        return f"the Argos index has no pair among {among}; it offers {shown} for them"
    bridge = "en" if "en" in bridges else bridges[0]
    return (
        f"the Argos index has no pair among {among}: its pairs for them go through {bridge} ({shown}); "
        f"add {bridge} (--languages {','.join([bridge, *languages])})"
    )


def find_pair(packages: list[ArgosPackage], pair: str) -> ArgosPackage:
    """``en-de`` (or ``en_de``, ``EN-de``, ``en_US-de``, ``en-pt-BR``: each side read as ``--languages``
    reads a code) -> its newest package."""
    text = pair.strip().rstrip("/").replace("_", "-").lower()
    parts = text.split("-")
    if len(parts) < 2 or not all(parts):
        raise PullError(f"argos:{pair}: expected a pair such as argos:en-de")
    offered = newest(packages)
    known = sorted({code for both in offered for code in both})
    splits = [("-".join(parts[:i]), "-".join(parts[i:])) for i in range(1, len(parts))]
    found = {
        (s, t)
        for source, target in splits
        for s in matches(source, known)
        for t in matches(target, known)
        if (s, t) in offered
    }
    if len(found) == 1:
        return offered[found.pop()]
    if found:
        named = " or ".join(f"argos:{s}-{t}" for s, t in sorted(found))
        raise PullError(f"argos:{pair}: names more than one package of the Argos index: {named}")
    source, target = _likely_split(splits, known)
    pairs = ", ".join(f"{s}-{t}" for s, t in sorted(offered)) or "nothing"
    raise PullError(f"argos:{pair}: the Argos index has no {source} -> {target} package; it offers {pairs}")


def _likely_split(splits: list[tuple[str, str]], known: list[str]) -> tuple[str, str]:
    """Of a pair of tags (``pt-BR-en``), the split the error names: both sides codes of the index (as
    its codes: ``pb -> en``), else both language tags, else the first."""
    for source, target in splits:
        found = matches(source, known), matches(target, known)
        if all(len(codes) == 1 for codes in found):
            return found[0][0], found[1][0]
    for source, target in splits:
        if tag(source) is not None and tag(target) is not None:
            return source, target
    return splits[0]
