#!/usr/bin/env python3
"""Count package-level import cycles in app/ (every import, including those inside functions).

A node is a sub-package (app.gpu, app.swarm, ...) or a top-level module (app.goal,
app.session, ...); app.gpu.cuda counts as app.gpu. Prints each elementary cycle and, last,
`import cycles: N`. Exit status 1 when N > 0.

    python scripts/import_cycles.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def node_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "app":
        return None
    return ".".join(parts[:2]) if len(parts) > 1 else "app"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from app import goal` names a module, not an attribute
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def graph(root: Path) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    modules = {module_name(p, root) for p in (root / "app").rglob("*.py")}
    for path in (root / "app").rglob("*.py"):
        module = module_name(path, root)
        src = node_of(module)
        for target in imports_of(path, module):
            # keep only targets that are real modules or packages (not attributes)
            while target and target not in modules:
                target = target.rpartition(".")[0]
            dst = node_of(target) if target else None
            if src and dst and dst != src and dst != "app":
                edges.setdefault(src, set()).add(dst)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Elementary cycles, each listed once, starting at its smallest node."""
    found: list[list[str]] = []
    nodes = sorted(set(edges) | {d for ds in edges.values() for d in ds})
    for start in nodes:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start:
                    found.append(path)
                elif nxt > start and nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return found


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    found = cycles(graph(root))
    for cycle in found:
        print(" -> ".join(cycle + [cycle[0]]))
    print(f"import cycles: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
