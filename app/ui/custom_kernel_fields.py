"""The "Your kernel" page's fixed texts and cell parsers: how outputs can be checked, the
reference file hints and filters, comma lists and pasted Python lists of values."""

from __future__ import annotations

import ast
from typing import Any

# how outputs are checked: the [kernel] table's reference, reference_source or expected
REFERENCE_KINDS = (("Python reference (module.py:function)", "python"),
                   ("Reference kernel source (same signature)", "source"),
                   ("Stored expected outputs (.npz)", "expected"),
                   ("No check", "none"))
REFERENCE_HINTS = {"python": "reference.py (numpy in, arrays out)",
                   "source": "reference.c or reference.cu, built at the first configuration that meets the restrictions",
                   "expected": "expected.npz (one array per checked output)",
                   "none": "outputs are not checked"}
REFERENCE_FILTERS = {"python": "Python (*.py)", "source": "Kernels (*.c *.cu *.cuh);;All (*)",
                     "expected": "NumPy archives (*.npz)"}


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _python_list(text: str) -> list[Any]:
    """A pasted Python list of values ("[16, 32, 64]", or "16, 32, 64")."""
    text = text.strip()
    try:
        value = ast.literal_eval(text if text.startswith(("[", "(")) else f"[{text}]")
    except (ValueError, SyntaxError):
        raise ValueError(f"{text!r} is not a Python list of numbers or strings") from None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{text!r} must hold numbers or strings")
    return values
