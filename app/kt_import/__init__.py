"""`kernelswarm import-kt SCRIPT.py [-o DIR]`: a Kernel Tuner tuning script becomes a goal
directory (app.kt_import.importer: import_script, ImportRefused).

This package imports nothing itself: a script's sandbox cell starts from app.kt_import.cell and
must still be single-threaded when it enters its walls (numpy starts OpenBLAS's threads at
import, and a process with threads cannot enter a user namespace, so a user who is not root
would get no network namespace and the import would be refused).
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name not in ("import_script", "ImportRefused"):  # a submodule: the import system's
        raise AttributeError(name)
    # import_module, not `from app.kt_import import importer`: that would ask this function
    return getattr(importlib.import_module("app.kt_import.importer"), name)
