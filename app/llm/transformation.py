"""What a code change did to a kernel, in the product's own words, for lessons.

Computed from the two sources only (app.llm.features: a fixed vocabulary of structural features
and small numbers, plus the size of the line diff), never from the model's idea line, comments
or identifiers: a lesson text goes into later prompts, and a reply must not be able to write it.
"""

from __future__ import annotations

import difflib

from app.llm.features import features
from app.llm.normal import normalise

WORDS = {"isa": "vector ISA", "threads": "threading", "tiles": "tile levels",
         "staging": "staging", "nests": "loop nests", "depth": "loop depth",
         "tensor": "tensor cores", "vector": "vector loads", "shuffle": "warp shuffles",
         "kernels": "kernels"}


def transformation(before: str, after: str, language: str) -> dict[str, object]:
    """{"changes": ["vector ISA scalar -> AVX-512 intrinsics", ...], "added": n, "removed": m,
    "lines": total, "text": one line}: the structural features that changed and the diff size."""
    lang = "cuda" if language == "cuda" else "c"
    old, new = features(before, lang), features(after, lang)
    changes = []
    for k, was in old.items():
        now = new.get(k)
        if now == was:
            continue
        if isinstance(was, bool):
            changes.append(f"{'added' if now else 'removed'} {WORDS.get(k, k)}")
        else:
            changes.append(f"{WORDS.get(k, k)} {was} -> {now}")
    a, b = normalise(before).splitlines(), normalise(after).splitlines()
    added = removed = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            removed += i2 - i1
        if op in ("replace", "insert"):
            added += j2 - j1
    size = f"+{added}/-{removed} lines of {len(b)}"
    text = ("; ".join(changes) if changes else "same structure") + f" ({size})"
    return {"changes": changes, "added": added, "removed": removed, "lines": len(b),
            "text": text.replace("'", "")}
