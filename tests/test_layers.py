"""The layers of app/ (README "Layout"), checked on the source: imports only point downward.

Every import counts, including those inside functions: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from project_paths import ROOT

QT = ("PySide6", "pyqtgraph", "shiboken6")
SQL = ("sqlite3", "sqlite_utils")

# (who, what it may not import, why)
RULES = [
    ("app.core", ("app",), "the ground floor imports nothing from the rest of app"),
    ("app.swarm app.gpu app.store app.catalog app.llm", QT + ("app.ui",),
     "only app/ui talks to Qt"),
    ("app.gpu app.catalog", ("app.swarm",), "backends and the catalog never import the search"),
]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "app").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        module = ".".join(p for p in rel.parts if p != "__init__")
        imports = _imports(path)
        for who, banned, why in RULES:
            if not any(_within(module, w) for w in who.split()):
                continue
            for name in sorted(imports):
                if any(_within(name, b) for b in banned) and not _within(name, "app.core"):
                    found.append(f"{rel}.py imports {name}: {why}")
        if not _within(module, "app.store"):
            for name in sorted(imports):
                if any(_within(name, s) for s in SQL):
                    found.append(f"{rel}.py imports {name}: only app/store speaks SQL")
    return found


def test_imports_point_downward():
    assert violations(ROOT) == []


def test_a_forbidden_import_is_caught(tmp_path):
    """The checker itself works: plant one forbidden import of each kind in a copy of app/."""
    shutil.copytree(ROOT / "app", tmp_path / "app",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    planted = {
        "core/types.py": "from app.swarm import blackboard\n",
        "gpu/replay.py": "def f():\n    from PySide6 import QtCore\n",
        "catalog/__init__.py": "import app.swarm.coordinator\n",
        "llm/usage.py": "import sqlite3\n",
    }
    for rel, line in planted.items():
        path = tmp_path / "app" / rel
        path.write_text(path.read_text(encoding="utf-8") + "\n" + line, encoding="utf-8")
    found = violations(tmp_path)
    for rel in planted:
        assert any(v.startswith(f"app/{rel}") for v in found), (rel, found)
