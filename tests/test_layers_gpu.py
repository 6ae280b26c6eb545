"""The shape of app/gpu (../shared/DESIGN.md "app/gpu/"), checked on the source: the backends
cpu/, cuda/ and replay/ are matching siblings (an evaluator.py and a worker.py each) that never
reach into each other; the shared modules (cascade, verify, timing, sandbox, ...) reach into no
backend; and no circle runs through app.gpu's modules.

Every import counts, lazy ones too, and a module named in a string ("app.gpu.cpu.worker:
CpuWorker"): a worker loads its handler by name. `from package import module` is an arrow to
that module, not to the package's __init__ (which only gathers names for outside users).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from project_paths import ROOT
from test_layers import _module_name as module_name
from test_layers import _within, circles, imports_of

BACKENDS = ("cpu", "cuda", "replay")
ABOVE = ("app.gpu", "app.gpu.custom_reference")  # may use every backend: registration, previews


def graph(root: Path) -> dict[str, set[str]]:
    """module -> the app.gpu modules it imports (by explicit arrows, see the module docstring)."""
    known = {module_name(root, p) for p in (root / "app").rglob("*.py")}
    arrows = {}
    for path in sorted((root / "app" / "gpu").rglob("*.py")):
        module = module_name(root, path)
        arrows[module] = {name for _, name in imports_of(root, path, known, package_arrows=False)
                          if _within(name, "app.gpu") and name != module}
    return arrows


def _backend(module: str) -> str | None:
    return next((b for b in BACKENDS if module.startswith(f"app.gpu.{b}.") or
                 module == f"app.gpu.{b}"), None)


def _reach(arrows: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), list(arrows[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += arrows.get(m, ())
    return seen


def violations(root: Path) -> list[str]:
    arrows = graph(root)
    found = []
    for b in BACKENDS:
        for side in ("evaluator", "worker"):
            if not (root / "app" / "gpu" / b / f"{side}.py").exists():
                found.append(f"app/gpu/{b}/ has no {side}.py")
    for module in sorted(arrows):
        if module in ABOVE or any(module.startswith(a + ".") for a in ABOVE[1:]):
            continue
        mine = _backend(module)
        for other in sorted(_reach(arrows, module)):
            theirs = _backend(other)
            if other in ABOVE or any(other.startswith(a + ".") for a in ABOVE[1:]):
                found.append(f"{module} reaches {other}, which sits above the backends")
            elif theirs and theirs != mine:
                found.append(f"{module} reaches {other}: " + (
                    f"the backends {mine} and {theirs} are siblings" if mine
                    else "a shared module reaches into a backend"))
    found += ["a circle: " + " -> ".join(c) for c in circles(arrows)]
    return found


def test_backends_are_matching_siblings_without_circles():
    assert violations(ROOT) == []


def test_a_crossing_or_a_circle_is_caught(tmp_path):
    """The checker itself works: plant one of each violation in a copy of app/gpu."""
    shutil.copytree(ROOT / "app" / "gpu", tmp_path / "app" / "gpu",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    gpu = tmp_path / "app" / "gpu"
    planted = {
        "cuda/planted.py": "def f():\n    from app.gpu.cpu import toolchain\n",  # lazily, a sibling
        "replay/planted.py": 'FACTORY = "app.gpu.cuda.worker:make_handler"\n',  # by name
        "timing.py": "from app.gpu.cpu.memory_roof import Probe\n",  # shared into a backend
        "verify.py": "from app.gpu.probe import case_label\n",  # probe -> verify: a circle
        "cpu/planted2.py": "from app.gpu.custom_reference import probe\n",  # up, above backends
    }
    for rel, text in planted.items():
        path = gpu / rel
        path.write_text((path.read_text(encoding="utf-8") if path.exists() else "") + "\n" + text,
                        encoding="utf-8")
    (gpu / "replay" / "worker.py").unlink()
    found = "\n".join(violations(tmp_path))
    assert "app.gpu.cuda.planted reaches app.gpu.cpu.toolchain: the backends cuda and cpu" in found
    assert "app.gpu.replay.planted reaches app.gpu.cuda.worker" in found
    assert "app.gpu.timing reaches app.gpu.cpu.memory_roof: a shared module" in found
    assert "a circle: app.gpu.probe -> app.gpu.verify -> app.gpu.probe" in found
    assert "app.gpu.cpu.planted2 reaches app.gpu.custom_reference.probe, which sits above" in found
    assert "app/gpu/replay/ has no worker.py" in found
