"""``attnserve-export pull``: its flags, the models they name, and the run.

    attnserve-export pull Helsinki-NLP/opus-mt-en-de argos:en-fr --model-repo DIR
    attnserve-export pull --languages en,de,fr --model-repo DIR
    attnserve-export pull --list [--languages en,de,fr] --model-repo DIR

Exit codes: 0 every model installed (or already there), 1 one failed or none could be read (the
others still installed), 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from ..options import thread_count
from . import argos_index
from .download import download
from .errors import PullError
from .install import FAILED, InstallSettings, Outcome, PullItem, install, installed_models, same_origin

REPO_ENV = "ATTNSERVE_MODEL_REPO"  # the server's setting: pull installs where the server reads
CACHE_ENV = "ATTNSERVE_CACHE"
NEEDS = ("torch", "onnx", "huggingface_hub", "sentencepiece")  # the import extra's modules a pull uses


def add_parser(sub: argparse._SubParsersAction) -> None:
    pull = sub.add_parser(
        "pull",
        help="download, import, verify and install models: Hugging Face Hub ids, Argos packages, language lists",
        description="Download models, import and verify them, and install them into a model repository "
        "(written aside and renamed into place: a running server picks them up, never half a model).",
        epilog="NAME: a Hugging Face Hub id (Helsinki-NLP/opus-mt-en-de, facebook/nllb-200-distilled-600M, "
        "google/vit-base-patch16-224; org/model@revision for a revision) or an Argos Translate pair "
        "(argos:en-de). Hugging Face settings hold: HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_OFFLINE. "
        "Exit codes: 0 ok, 1 a model failed (the others are installed), 2 usage.",
    )
    pull.add_argument("names", nargs="*", metavar="NAME", help="models to pull (see below)")
    pull.add_argument(
        "--languages",
        metavar="CODES",
        help="comma-separated language codes (en,de,fr): every pair among them that the Argos index offers, "
        "as LibreTranslate's --load-only; the server pivots through them for the pairs the index lacks",
    )
    pull.add_argument(
        "--model-repo",
        type=Path,
        default=None,
        help=f"model repository to install into (default: ${REPO_ENV}, else ./model-repo, as the server)",
    )
    pull.add_argument(
        "--argos-index",
        metavar="URL|PATH",
        help=f"Argos package index: a URL, a local index.json or a folder holding one (mirrors, air-gapped "
        f"sites; default: ${argos_index.INDEX_ENV}, else {argos_index.DEFAULT_INDEX})",
    )
    pull.add_argument("--list", action="store_true", help="show what the Argos index offers and what is installed")
    pull.add_argument(
        "--cache-dir",
        type=Path,
        help=f"where Argos packages are downloaded (resumable .part files; default: ${CACHE_ENV}, "
        "else ~/.cache/attnserve); Hub models use huggingface_hub's cache",
    )
    pull.add_argument("--precision", choices=("fp32", "fp16", "int8"), default="fp32", help="as the exports")
    pull.add_argument("--force", action="store_true", help="pull and replace models already installed")
    pull.add_argument("--no-verify", dest="verify", action="store_false", help="skip verification (not advised)")
    pull.add_argument("--threads", type=thread_count, default=0, help="torch/onnxruntime threads (default: all)")


def model_repo(flag: Path | None) -> Path:
    return flag or Path(os.environ.get(REPO_ENV) or "model-repo")


def cache_dir(flag: Path | None) -> Path:
    if flag is not None:
        return flag
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnserve"


def run(args: argparse.Namespace) -> int:
    repo = model_repo(args.model_repo)
    if args.list:
        return _list(args, repo)
    if not args.names and not args.languages:
        print("attnserve-export pull: error: name models (NAME ...) or languages (--languages en,de)", file=sys.stderr)
        return 2
    for module in NEEDS:  # missing: one line naming the import extra (cli.main), before any download
        importlib.import_module(module)
    with sigterm_as_interrupt():
        return _pull(args, repo)


def _pull(args: argparse.Namespace, repo: Path) -> int:
    items, failures = plan(args)
    if not items and failures:
        for outcome in failures:
            print(f"attnserve-export: error: {said(outcome)}", file=sys.stderr)
        return 1
    try:
        repo.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PullError(f"--model-repo {repo}: {exc.strerror or exc}") from None
    settings = InstallSettings(args.precision, args.verify, args.force, args.threads)
    outcomes = list(failures)
    for i, item in enumerate(items, 1):
        print(f"[{i}/{len(items)}] pull {item.label} -> {repo / item.name}", file=sys.stderr, flush=True)
        try:
            outcomes.append(install(item, repo, settings))
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: what earlier items installed stays, and is said
            report(outcomes, repo, total=len(failures) + len(items))
            left = len(items) - i
            print(
                f"attnserve-export: interrupted during {item.label}: nothing of it was written"
                + (f"; {left} more not pulled" if left else ""),
                file=sys.stderr,
            )
            return getattr(exc, "exit_code", 130)
        print(f"  {outcomes[-1].status}: {outcomes[-1].detail}", file=sys.stderr, flush=True)
    return report(outcomes, repo)


class Terminated(KeyboardInterrupt):
    """SIGTERM (docker stop, a pod deleted), met as Ctrl-C is: the model being written is removed."""

    exit_code = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
    raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def plan(args: argparse.Namespace) -> tuple[list[PullItem], list[Outcome]]:
    """The models the arguments name, and the names that cannot be pulled (an unknown pair ...).

    An Argos index that cannot be read, or languages it cannot serve, fail the Argos names alone:
    the Hub models named beside them are still pulled."""
    items: list[PullItem] = []
    failures: list[Outcome] = []
    codes = argos_index.parse_languages(args.languages) if args.languages else []  # a typo stops everything
    packages: list[argos_index.ArgosPackage] | PullError = []
    if codes or any(map(is_argos, args.names)):
        try:
            packages = argos_index.read_index(argos_index.index_location(args.argos_index))
        except PullError as exc:
            packages = exc
    if codes:
        label = f"--languages {','.join(codes)}"
        try:
            items += [argos_item(p, args) for p in argos_index.select(_index(packages), codes)]
        except PullError as exc:
            failures.append(Outcome(label, "", FAILED, str(exc)))
    for name in args.names:
        try:
            if is_argos(name):
                package = argos_index.find_pair(_index(packages), name.strip()[len("argos:") :])
                items.append(argos_item(package, args))
            else:
                items.append(hub_item(name))
        except PullError as exc:
            failures.append(Outcome(name, "", FAILED, str(exc)))
    return one_per_folder(items, failures)


def is_argos(name: str) -> bool:
    return name.strip().lower().startswith("argos:")


def one_per_folder(items: list[PullItem], failures: list[Outcome]) -> tuple[list[PullItem], list[Outcome]]:
    """A model named twice is pulled once; a second model that would install as the folder of
    another (two Hub ids ending alike) fails rather than replace it."""
    unique: dict[str, PullItem] = {}
    for item in items:
        first = unique.setdefault(item.name, item)
        if first is not item and not same_origin(first.origin, item.origin):
            clash = f"installs as {item.name}, as {first.label} named before it does; pull it into another --model-repo"
            failures.append(Outcome(item.label, item.name, FAILED, clash))
    return list(unique.values()), failures


def _index(packages: list[argos_index.ArgosPackage] | PullError) -> list[argos_index.ArgosPackage]:
    """The index's packages, or the reason it could not be read, raised for each name that needs it."""
    if isinstance(packages, PullError):
        raise packages
    return packages


def argos_item(package: argos_index.ArgosPackage, args: argparse.Namespace) -> PullItem:
    dest = cache_dir(args.cache_dir) / "argos" / package.file_name
    return PullItem(
        label=f"argos:{package.pair}",
        name=package.model_name,
        kind="argos",
        fetch=partial(_fetch_package, package, dest),
        origin={"argos_index": package.pair, "version": package.version, "links": list(package.links)},
    )


def _fetch_package(package: argos_index.ArgosPackage, dest: Path) -> Path:
    """The first of the package's links that downloads."""
    errors = []
    for link in package.links:
        try:
            return download(link, dest, sha256=package.sha256, label=f"argos:{package.pair}")
        except PullError as exc:
            errors.append(str(exc))
    raise PullError("; ".join(errors))


def hub_item(name: str) -> PullItem:
    from .hub import download_snapshot, split_id

    repo_id, revision = split_id(name)
    canonical = repo_id + (f"@{revision}" if revision else "")  # a URL or a trailing slash: the id it names
    return PullItem(
        label=canonical,
        name=repo_id.split("/")[-1],
        kind="hub",
        fetch=partial(download_snapshot, canonical),
        origin={"hub": repo_id, "revision": revision or "main"},
    )


def report(outcomes: list[Outcome], repo: Path, total: int | None = None) -> int:
    """Each outcome, the failures' reasons, and how many of the ``total`` models named are in place."""
    failed = [o for o in outcomes if o.status == FAILED]
    for outcome in outcomes:
        line = f"{outcome.status:<9} {outcome.label}"
        print(line + (f" -> {outcome.name}" if outcome.name and outcome.status != FAILED else ""))
    for outcome in failed:
        print(f"attnserve-export: error: {said(outcome)}", file=sys.stderr)
    done = len(outcomes) - len(failed)
    total = len(outcomes) if total is None else total
    print(f"{done} of {total} model(s) in {repo}" + (f"; {len(failed)} failed" if failed else ""))
    return 1 if failed else 0


def said(outcome: Outcome) -> str:
    """A failure's line, led by what the user named (once)."""
    if outcome.detail.startswith(outcome.label):
        return outcome.detail
    return f"{outcome.label}: {outcome.detail}"


def _list(args: argparse.Namespace, repo: Path) -> int:
    location = argos_index.index_location(args.argos_index)
    everything = argos_index.newest(argos_index.read_index(location))
    offered = everything
    if args.languages:
        known = {code for pair in everything for code in pair}
        codes = set(argos_index.index_codes(argos_index.parse_languages(args.languages), known))
        offered = {pair: p for pair, p in everything.items() if set(pair) <= codes}
    installed = installed_models(repo)
    print(f"Argos index {location}: {len(offered)} pair(s)")
    print(f"  {'pair':<10} {'version':<9} {'model':<20} {'installed':<9} languages")
    for (_, _), package in sorted(offered.items()):
        mark = "yes" if package.model_name in installed else "-"
        names = f"{package.source_name} -> {package.target_name}".strip(" ->")
        print(f"  {package.pair:<10} {package.version:<9} {package.model_name:<20} {mark:<9} {names}")
    from_index = {p.model_name for p in everything.values()}
    others = [name for name in installed if name not in from_index]
    print(f"installed in {repo}: {len(installed)} model(s)" + (f"; others: {', '.join(others)}" if others else ""))
    return 0
