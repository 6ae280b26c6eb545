"""Kernel Tuner's names for a script run where Kernel Tuner is not installed (the bundle, a
plain `pip install kernelswarm`).

Its own examples import more than tune_kernel: `from kernel_tuner.file_utils import
store_output_file`, `from kernel_tuner.util import get_config_string`, observers built and
handed to tune_kernel. Without a stand-in each failed with "No module named
'kernel_tuner.file_utils'", though nothing of it runs before tune_kernel captures the call.
Here any `kernel_tuner.*` module imports; a class (a capitalised name) builds an inert object
(tune_kernel ignores observers); calling anything else refuses in one line naming it: the
script needed Kernel Tuner itself before tune_kernel.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

PACKAGE = "kernel_tuner"


class Unavailable(RuntimeError):
    """A script called a part of Kernel Tuner that only Kernel Tuner itself can run."""


class Absent:
    """A name from Kernel Tuner: attributes are names below it; calling a class builds an
    inert object, calling anything else (or an object built so) raises Unavailable."""

    def __init__(self, name: str, built: bool = False) -> None:
        self._name, self._built = name, built

    def __getattr__(self, attr: str) -> Absent:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Absent(f"{self._name}.{attr}")

    def __call__(self, *_args: Any, **_kwargs: Any) -> Absent:
        if not self._built and self._name.rsplit(".", 1)[-1][:1].isupper():
            return Absent(self._name, built=True)
        raise Unavailable(f"{self._name} is part of Kernel Tuner, which is not installed here "
                          "(only tune_kernel and run_kernel are stood in for); the script calls "
                          "it before tune_kernel: install kernel_tuner next to KernelSwarm")

    def __repr__(self) -> str:
        return f"<{self._name} (Kernel Tuner is not installed)>"


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package: `import kernel_tuner.observers.nvml` works too

    def attribute(attr: str) -> Absent:  # PEP 562: names the module does not hold
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Absent(f"{name}.{attr}")

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> types.ModuleType:
    """Stand in for Kernel Tuner (which is not importable here): the `kernel_tuner` module."""
    sys.meta_path.insert(0, _Finder())
    module = _module(PACKAGE)
    sys.modules[PACKAGE] = module
    return module
