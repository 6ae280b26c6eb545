"""The layers of app/ (../shared/DESIGN.md "Layers"), checked on the source: imports only point
downward.

Every import counts, including those inside functions and relative ones (a lazy import is still
a dependency), and so does a module named in a string ("app.gpu.cpu.worker:CpuWorker", `-m
app.kt_import.runner`): code loaded by name is a dependency too.
"""

from __future__ import annotations

import ast
import re
import shutil
from fnmatch import fnmatchcase
from pathlib import Path

from project_paths import ROOT

# Top to bottom. A module imports only its own unit and units of the layers below it; units
# of one layer are siblings and never import each other. "app" alone is app/__init__.py; a
# unit of several names ("a,b") is one unit.
LAYERS = [
    "app.cli,app.cli_*,app.__main__",
    "app.ui",
    "app.engine_process app.selftest",
    "app.export",
    "app.html_report",
    "app.session",
    "app.llm app.cluster app.kt_import",
    "app.swarm",
    "app.gpu",
    "app.catalog",
    "app.store",
    "app.goal",
    "app.paths app.run_summary",
    "app.core app",
]

QT = ("PySide6", "pyqtgraph", "shiboken6")
SQL = ("sqlite3", "sqlite_utils")
_NAMED = re.compile(r"app(\.\w+)+")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def unit_of(module: str) -> tuple[int, str] | None:
    """(layer index, unit) of an app module; None when no layer lists it."""
    for index, layer in enumerate(LAYERS):
        for unit in layer.split():
            if any((module == "app") if name == "app" else (
                    _within(module, name) or fnmatchcase(module, name))
                   for name in unit.split(",")):
                return index, unit
    return None


def _module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__")


def _resolve(name: str, known: set[str]) -> str:
    """The app module `name` refers to: "app.core.types.Evaluation" -> "app.core.types"."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(root: Path, path: Path, known: set[str],
               package_arrows: bool = True) -> list[tuple[int, str]]:
    """(line, module) for every import in one file; app names resolved to their module.
    `from package import module` also counts as an arrow to the package's __init__ unless
    `package_arrows` is False (the __init__ then only gathers names for outside users)."""
    module = _module_name(root, path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            named = [f"{base}.{a.name}" for a in node.names] if _within(base, "app") else []
            if package_arrows or not all(n in known for n in named):
                found.append((node.lineno, base))
            found += [(node.lineno, n) for n in named]  # `from app import ui` names a module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = _NAMED.fullmatch(node.value.partition(":")[0])
            if named and _resolve(named.group(0), known) != "app":
                found.append((node.lineno, named.group(0)))
    return [(line, _resolve(name, known) if _within(name, "app") else name)
            for line, name in found]


def _imports(path: Path) -> set[str]:
    """Every module one file of app/ imports (other tests' narrower checks use it)."""
    root = next(p.parent for p in path.parents if p.name == "app")
    known = {_module_name(root, p) for p in (root / "app").rglob("*.py")}
    return {name for _, name in imports_of(root, path, known)}


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """One circle per module that lies on one, as the path back to itself (shortest first)."""
    found = []
    for start in sorted(arrows):
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            for nxt in sorted(arrows[path[-1]]):
                if nxt == start:
                    found.append(path + [start])
                    paths = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    paths.append(path + [nxt])
    return found


def package_graph(root: Path) -> dict[str, set[str]]:
    """app.X -> the app.Y packages and top-level modules it imports (app.gpu.cuda counts as
    app.gpu). Within one unit of LAYERS (app.cli and app.cli_run) only this graph sees a cycle."""
    paths = sorted((root / "app").rglob("*.py"))
    known = {_module_name(root, p) for p in paths}
    top = lambda m: ".".join(m.split(".")[:2])
    arrows: dict[str, set[str]] = {}
    for path in paths:
        mine = top(_module_name(root, path))
        arrows.setdefault(mine, set()).update(
            top(name) for _, name in imports_of(root, path, known, package_arrows=False)
            if _within(name, "app") and top(name) not in (mine, "app"))
    return arrows


def violations(root: Path) -> list[str]:
    paths = sorted((root / "app").rglob("*.py"))
    known = {_module_name(root, p) for p in paths}
    found = []
    for path in paths:
        rel = path.relative_to(root)
        module = _module_name(root, path)
        mine = unit_of(module)
        if mine is None:
            found.append(f"{rel}: in no layer (add it to LAYERS and to DESIGN.md's list)")
            continue
        seen = set()
        for line, name in sorted(set(imports_of(root, path, known))):
            theirs = unit_of(name)
            if (line, theirs) in seen and theirs:  # `from app.x import a, b`: one arrow
                continue
            seen.add((line, theirs))
            where = f"{rel}:{line} imports {name}"
            if not _within(name, "app"):
                if mine[1] != "app.ui" and name.split(".")[0] in QT:
                    found.append(f"{where}: only app/ui talks to Qt")
                if mine[1] != "app.store" and name.split(".")[0] in SQL:
                    found.append(f"{where}: only app/store speaks SQL")
                continue
            if theirs is None or theirs[1] == mine[1]:
                continue
            if theirs[0] < mine[0]:
                found.append(f"{where}: an arrow up ({theirs[1]} is above {mine[1]})")
            elif theirs[0] == mine[0]:
                found.append(f"{where}: siblings ({mine[1]}, {theirs[1]}) never import each other")
            elif mine[1] == "app.swarm" and theirs[1] == "app.gpu":
                found.append(f"{where}: the search sees evaluators only through app/core")
    return found


def test_imports_point_downward():
    assert violations(ROOT) == []


def test_no_package_is_in_an_import_cycle():
    assert circles(package_graph(ROOT)) == []


def test_a_package_cycle_is_caught(tmp_path):
    shutil.copytree(ROOT / "app", tmp_path / "app",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    with (tmp_path / "app" / "cli_common.py").open("a", encoding="utf-8") as f:
        f.write("\ndef f():\n    from app import cli\n")  # cli imports cli_common
    assert ["app.cli", "app.cli_common", "app.cli"] in circles(package_graph(tmp_path))


def test_the_order_is_whole():
    """Every package and top-level module of app/ is in exactly one layer."""
    units = [u for layer in LAYERS for u in layer.split()]
    assert len(units) == len(set(units))
    tops = {p.stem if p.suffix else p.name for p in (ROOT / "app").iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert all(unit_of("app" if t == "__init__" else f"app.{t}") for t in tops), tops


def test_a_forbidden_import_is_caught(tmp_path):
    """The checker itself works: plant one forbidden import of each kind in a copy of app/."""
    shutil.copytree(ROOT / "app", tmp_path / "app",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    planted = {
        "core/planted.py": "from app.swarm import blackboard\n",  # the ground floor
        "gpu/planted.py": "def f():\n    from PySide6 import QtCore\n",  # Qt, lazily
        "catalog/planted.py": "import app.swarm.coordinator\n",  # an arrow up
        "llm/planted.py": "import sqlite3\n",  # SQL outside the store
        "session_planted.py": "x = 1\n",  # a module no layer lists
        "kt_import/planted.py": "from .. import session\n",  # relative, up one layer
        "cli_planted.py": "from PySide6.QtWidgets import QApplication\n",  # Qt in the CLI
        "cluster/planted.py": "def f():\n    from ..llm import agent\n",  # a sibling
        "swarm/planted.py": "import app.gpu.verify\n",  # the search into a backend
        "store/planted.py": 'FACTORY = "app.ui.main_window:MainWindow"\n',  # named in a string
    }
    for rel, text in planted.items():
        path = tmp_path / "app" / rel
        before = path.read_text(encoding="utf-8") if path.exists() else ""
        path.write_text(before + "\n" + text, encoding="utf-8")
    found = violations(tmp_path)
    for rel in planted:
        assert any(v.startswith(f"app/{rel}") for v in found), (rel, found)
    assert len(found) == len(planted), found
