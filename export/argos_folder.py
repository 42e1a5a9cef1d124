"""``attnserve-export translation --from-argos FOLDER --out REPO``: every Argos Translate package of a
folder (LibreTranslate's package folder) exported into a model repository, one directory each.

Each package is imported, exported and verified on its own into ``REPO/<name>`` (``argos-en-de``),
written aside and renamed into place (:func:`~attnserve.export.modeldir.staged_directory`), so a
package that fails leaves nothing behind and the others still export; the exit code says whether
all of them did. :func:`export_argos_package` is one package's step, for other callers too
(``attnserve-export pull``): it passes what the package says (languages, family, whether sources
end with the end token) to the export pipeline.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from attnserve.contract.manifest import Languages

from .errors import ExportError
from .options import ExportOptions


def is_folder_of_packages(path: Path) -> bool:
    """A directory that is not itself a package (no metadata.json): a folder of packages."""
    return Path(path).is_dir() and not (Path(path) / "metadata.json").is_file()


def export_argos_folder(folder: Path, options: ExportOptions, languages_given: bool = False) -> int:
    """Export every package of ``folder`` into ``options.out``; returns the exit code (0: all exported)."""
    from .errors import is_user_error
    from .importers import argos_packages
    from .importers.argos import package_type
    from .verify import VerificationFailed

    if options.name is not None:
        raise ExportError("--name names one model; with a folder of packages each is named from its metadata.json")
    if languages_given:
        raise ExportError("--source-language / --target-language: Argos packages record their own languages")
    packages = []
    for package in argos_packages(folder):
        kind = package_type(package)
        if kind in ("translate", None):
            packages.append(package)
        else:  # LibreTranslate's folder may hold sentence-boundary (sbd) packages
            print(f"{package.name}: a {kind!r} package, not a translation model; left out", file=sys.stderr)
    packages = newest_versions(packages)
    if not packages:
        raise ExportError(
            f"--from-argos {folder}: no Argos Translate packages in it (.argosmodel files or directories "
            "with metadata.json)"
        )
    out = Path(options.out)
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} exists and is not a directory (with a folder of packages it is a repository)")
    bar = _bar(len(packages))
    written: dict[str, Path] = {}
    failed: list[Path] = []
    for package in packages:
        bar.set_description_str(package.name)
        try:
            name = export_argos_package(package, options, out, skip=written)
            written[name] = package
            bar.write(f"wrote {out / name} (from {package.name})")
        except KeyboardInterrupt as exc:  # Ctrl-C: the packages exported before it are in place, and said
            bar.close()
            print(interrupted(package, list(written), out), file=sys.stderr)
            return getattr(exc, "exit_code", 130)
        except Exception as exc:  # noqa: BLE001 - a package's user-facing error is reported, the others go on
            if not (is_user_error(exc) or isinstance(exc, VerificationFailed)):
                raise
            failed.append(package)
            message = f"attnserve-export: error: {exc}; {package.name} skipped, nothing written for it"
            bar.write(message, file=sys.stderr)
        bar.update(1)
    bar.close()
    failures = f", {len(failed)} failed" if failed else ""
    print(f"{len(written)} of {len(packages)} packages exported to {out}{failures}")
    return 1 if failed else 0


def newest_versions(packages: list[Path]) -> list[Path]:
    """The packages less those of a model another package holds in a newer ``package_version`` (a
    mirror's folder keeps the files the index named before) or holds again, each left out with a note."""
    from .importers.argos import package_metadata, package_name
    from .pull.argos_index import version_key

    kept: dict[str, tuple[Path, str]] = {}
    for package in packages:
        meta = package_metadata(package) or {}
        if not (isinstance(meta.get("from_code"), str) and isinstance(meta.get("to_code"), str)):
            kept[package.name] = (package, "")  # its import says what is wrong with it
            continue
        name, version = package_name(meta), str(meta.get("package_version") or "0")
        first = kept.setdefault(name, (package, version))
        if first[0] is package:
            continue
        if version_key(version) > version_key(first[1]):
            kept[name] = (package, version)
            left, why = first[0], f"version {first[1]}, {package.name} is {version}"
        else:
            left, why = package, f"version {version}, {first[0].name} is {first[1]}"
        print(f"{left.name}: {name} {why}; left out", file=sys.stderr)
    chosen = {package for package, _ in kept.values()}
    return [package for package in packages if package in chosen]


def interrupted(package: Path, written: list[str], out: Path) -> str:
    """What an interrupted folder export leaves: nothing of ``package``, the ``written`` models whole."""
    line = f"attnserve-export: interrupted during {package.name}: nothing of it was written"
    if written:
        line += f"; exported before it, in {out}: {', '.join(written)}"
    return line


def export_argos_package(
    package: Path, options: ExportOptions, repository: Path, skip: dict[str, Path] | None = None
) -> str:
    """Import, export and verify one package into ``repository/<name>`` (written aside, then renamed);
    returns the name (``argos-en-de``). ``options.out`` and ``options.name`` are not used. ``skip``:
    names already written from other packages (ExportError if this one has one of them)."""
    from . import sources
    from .pipeline import export_translation

    source = sources.from_argos(package)
    name = source.description["name"]
    if skip and name in skip:
        raise ExportError(f"{name} was already exported from {skip[name].name}")
    export_translation(
        source.model,
        source.tokenizer,
        dataclasses.replace(options, out=Path(repository) / name, name=None),
        max_source_len=source.limits.get("max_source_len"),
        max_target_len=source.limits.get("max_target_len"),
        extra={"source": source.description},
        family=source.family,
        languages=Languages(**source.languages) if source.languages else None,
        source_eos=source.source_eos,
    )
    return name


def _bar(total: int):
    """A tqdm bar over the packages on a terminal; plain lines elsewhere (CI logs, tests)."""
    from tqdm import tqdm

    return tqdm(total=total, unit="package", file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)
