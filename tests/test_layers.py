"""The server's folders are its layers: an import inside ``attnserve.server`` goes down a layer or
stays in its own, never up, and no modules import each other in a circle.

Every import counts, the ones inside functions (taken lazily, to start faster or to leave out an
optional dependency) and the ones only type checkers read among them: each is an edge a reader
follows and a circle the next change can close at import time."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "server"
PACKAGE = "attnserve.server"

# Top to bottom; a folder may import its own layer and every layer below it. ``attnserve.contract``
# is the ground floor under all of them (imported from anywhere, importing none of these).
LAYERS = (
    ("entry",),  # the process: command line, worker processes, the application object
    ("doors",),  # one codec per protocol
    ("service",),  # routing, limits, documents, deadlines, bookkeeping: once for every door
    ("documents", "files"),  # texts as documents; file formats and the stores of files and jobs
    ("state",),  # the records store (SQLite or PostgreSQL): jobs' and stored glossaries' records
    ("runtime",),  # which models are served and loaded
    ("translation", "images"),  # the engines
    ("shared",),  # settings, typed errors, calls, metrics, security, onnxruntime sessions
)
LEVEL = {folder: level for level, folders in enumerate(LAYERS) for folder in folders}
# Each door's own modules (by the module under ``doors`` or ``doors.http``); what several doors share
# sits beside them (``doors.context``, ``doors.params``, ``doors.http.server``, ``doors.http.upstream``, ...).
DOORS = {
    "v1": "v1",
    "v1_codec": "v1",
    "v1_files": "v1",
    "v1_wire": "v1",
    "kserve": "kserve",
    "http.kserve_routes": "kserve",  # KServe v2 over REST: the KServe door's codec over HTTP
    "http.generate_routes": "generate",
    "http.libretranslate_routes": "libretranslate",
    "http.file_routes": "files",
    "http.job_routes": "files",
    "http.deepl_routes": "deepl",
    "http.deepl_languages": "deepl",
    "http.deepl_options": "deepl",
    "http.deepl_glossary_routes": "deepl",
    "http.deepl_v3_glossary_routes": "deepl",
    "http.glossary_routes": "glossaries",
    "http.web_routes": "web",
    "http.openapi": "openapi",
}
# What a door imports: its service, the shared layer and the doors' own shared modules, besides
# ``attnserve.contract`` outside the package. The layers under the service are the service's to call:
# a door that imports one speaks a type, or uses an object, its service does not answer for.
DOORS_SEE = ("doors", "service", "shared")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def edges(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """(line, module of ``attnserve.server``) for every import in ``module``'s source (names relative to
    the package): ``from .x import y`` is an edge to ``x.y`` where that is a module, else to ``x``."""
    here = module.split(".") if module else []
    package = here if is_package else here[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            found += [(node.lineno, n[len(PACKAGE) + 1 :]) for n in names if n.startswith(PACKAGE + ".")]
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module == PACKAGE or (node.module or "").startswith(PACKAGE + "."):
            target = node.module[len(PACKAGE) + 1 :]
        else:
            continue
        for alias in node.names:
            child = f"{target}.{alias.name}" if target else alias.name
            found.append((node.lineno, child if child in known else target))
    return [(line, target) for line, target in found if target != module]


def imports(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``attnserve.server`` that ``module`` imports, anywhere in its source."""
    return {target for _, target in edges(source, module, is_package, known)}


def import_graph(root: Path = SERVER) -> dict[str, set[str]]:
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    known = set(paths)
    return {m: imports(p.read_text(encoding="utf-8"), m, p.name == "__init__.py", known) for m, p in paths.items()}


def layer_of(module: str) -> int | None:
    return LEVEL.get(module.split(".")[0]) if module else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = layer_of(module), layer_of(target)
            if low is not None and high is not None and high < low:
                found.append(f"{module} -> {target}")
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def door_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "doors" or len(parts) < 2:
        return None
    return DOORS.get(".".join(parts[1:3])) or DOORS.get(parts[1])


def doors_importing_doors(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = door_of(module), door_of(target)
            if mine and theirs and mine != theirs:
                found.append(f"{module} -> {target}")
    return found


def doors_reaching_past_their_service(root: Path = SERVER) -> list[str]:
    """``server/doors/x.py:LINE: the import`` for every import in a door module of a layer under the service."""
    known = {module_name(p, root) for p in root.rglob("*.py")}
    found = []
    for path in sorted((root / "doors").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        module = module_name(path, root)
        targets = edges(source, module, path.name == "__init__.py", known)
        below = {line for line, target in targets if target.split(".")[0] not in DOORS_SEE}
        found += [
            f"{path.relative_to(root.parent).as_posix()}:{line}: {lines[line - 1].strip()}" for line in sorted(below)
        ]
    return found


def test_the_checks_find_an_upward_import_a_circle_and_a_door_importing_another(tmp_path):
    files = {
        "shared/__init__.py": "",
        "shared/config.py": "def load():\n    from ..entry.cli import main  # lazily, still an edge\n",
        "entry/__init__.py": "",
        "entry/cli.py": "from ..shared import config\nfrom . import workers\n",
        "entry/workers.py": "from attnserve.server.entry.cli import main\n",
        "doors/__init__.py": "",
        "doors/v1.py": "from .http.file_routes import handler\nfrom .params import decode\n",
        "doors/params.py": "",
        "doors/http/__init__.py": "",
        "doors/http/file_routes.py": "from ..params import decode\nfrom .server import serve\n",
        "doors/http/server.py": "",
        "doors/http/forms.py": "from ...shared import config\n\n\ndef read():\n    from ... import files\n",
        "files/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["entry.cli"] == {"shared.config", "entry.workers"}
    assert upward_imports(graph) == ["shared.config -> entry.cli"]
    assert circles(graph) == [["entry.cli", "entry.workers", "shared.config"]]
    assert doors_importing_doors(graph) == ["doors.v1 -> doors.http.file_routes"]
    assert doors_reaching_past_their_service(tmp_path) == [
        f"{tmp_path.name}/doors/http/forms.py:5: from ... import files"
    ]


def test_every_module_of_the_server_sits_in_a_declared_layer():
    outside = [m for m in import_graph() if m and layer_of(m) is None]
    assert outside == [], f"modules outside the layers {sorted(LEVEL)}: {outside}"


def test_no_import_goes_up_a_layer():
    assert upward_imports(import_graph()) == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(import_graph()) == []


def test_no_door_imports_another():
    assert doors_importing_doors(import_graph()) == []


def test_doors_import_only_their_service_shared_and_their_own_modules():
    found = doors_reaching_past_their_service()
    assert found == [], "doors importing a layer under their service:\n" + "\n".join(found)
