"""Work-arounds for bugs of the Qt binding in use.

PySide6 6.12.0 drops one reference to None each time C++ calls a Python override that returns
None where Qt expects a QVariant (QAbstractItemModel.data for roles a model does not serve,
pyqtgraph's QGraphicsItem overrides, ...). On CPython before 3.12 None is an ordinary
refcounted object, so a table or plot that repaints for a few minutes drives None's count to
zero and the interpreter aborts with "none_dealloc: deallocating None" (True and False
leak the same way through bool-returning overrides). Python 3.12 made None
immortal; on older interpreters we give it the same treatment by raising its count far beyond
anything the leak can consume (2**40 repaints). tests/ui/test_qtcompat.py reproduces the leak.
"""

from __future__ import annotations

import ctypes
import sys

_HEADROOM = 1 << 40


def guard_none_refcount() -> None:
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return  # None is immortal there
    for singleton in (None, True, False):  # bool-returning overrides leak the same way
        refcnt = ctypes.c_ssize_t.from_address(id(singleton))  # ob_refcnt: PyObject's first field
        if refcnt.value < _HEADROOM:
            refcnt.value += _HEADROOM
