"""The built-in backends are registered by a call, never by an import: a module that imports
app.gpu (its sandbox, its replay reader) leaves the registry as it found it, and the one place
that fills it is the session's wiring (or a test standing in for an entry point)."""

from __future__ import annotations

import subprocess
import sys

from project_paths import ROOT

CODE = """
import app.gpu, app.gpu.sandbox, app.gpu.replay
from app.gpu import register_builtin_backends
from app.gpu.registry import backend_names, backend_spec
print(backend_names())
register_builtin_backends()
first = backend_spec("cpu")
register_builtin_backends()
print(backend_names(), backend_spec("cpu") is first)
"""


def test_importing_app_gpu_registers_nothing_until_asked():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["()", "('replay', 'cpu', 'cuda') True"]


def test_wiring_registers_the_built_in_backends():
    code = ("from app.session.registries import wire; wire()\n"
            "from app.gpu.registry import backend_names; print(backend_names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('replay', 'cpu', 'cuda')"
