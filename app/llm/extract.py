"""Getting kernel source out of a model's reply, whatever shape it comes in.

Accepted: SEARCH/REPLACE edit blocks (applied to the current best source), or a fenced code
block of any language tag (``` or ~~~), or an unfenced reply that is plainly a whole kernel.
Anything else (prose, truncated fences, edits that do not apply) is an ExtractionError with a
message that can go back to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<tag>[\w+#.-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                   re.MULTILINE | re.DOTALL)
EDIT = re.compile(r"^<{5,9}[ \t]*SEARCH[ \t]*\n(?P<search>.*?)^={5,9}[ \t]*\n(?P<replace>.*?)"
                  r"^>{5,9}[ \t]*REPLACE[ \t]*$", re.MULTILINE | re.DOTALL)
IDEA = re.compile(r"^\s*(?:\*\*)?(?:idea|transformation|change)(?:\*\*)?\s*[:\-]\s*(.+)$",
                  re.IGNORECASE | re.MULTILINE)
CODE_TAGS = {"", "c", "cpp", "c++", "cc", "cu", "cuda", "h", "hpp", "cuh", "text", "objc"}


class ExtractionError(ValueError):
    """No usable code in the reply; the message says why (it is shown to the model)."""


@dataclass
class Extracted:
    source: str
    kind: str  # "edit" or "full"
    idea: str = ""  # the model's one-line summary of its transformation, when it gave one


def idea_of(reply: str) -> str:
    m = IDEA.search(reply or "")
    return m.group(1).strip().strip("*").strip()[:200] if m else ""


def extract(reply: str, current: str | None, entry: str, *, truncated: bool = False) -> Extracted:
    """The new full source from a reply; `current` is the source edits apply to."""
    if reply is None or not reply.strip():
        raise ExtractionError("the reply was empty")
    text = reply.replace("\r\n", "\n")
    idea = idea_of(text)
    edits = list(EDIT.finditer(text))
    if edits:
        if current is None:
            raise ExtractionError("the reply has SEARCH/REPLACE edits but there is no current "
                                  "source to apply them to; send the full kernel")
        return Extracted(apply_edits(current, [(m["search"], m["replace"]) for m in edits]),
                         "edit", idea)
    if re.search(r"^<{5,9}[ \t]*SEARCH", text, re.MULTILINE):
        raise ExtractionError("a SEARCH/REPLACE block is incomplete (needs =======, then "
                              ">>>>>>> REPLACE)" + (" - the reply was cut off" if truncated else ""))
    blocks = [(m["tag"].lower(), m["body"]) for m in FENCE.finditer(text)]
    code = [(tag, body) for tag, body in blocks if tag in CODE_TAGS and body.strip()]
    if code:
        with_entry = [body for _, body in code if _defines(body, entry)]
        if with_entry:
            return Extracted(_clean(max(with_entry, key=len)), "full", idea)
        raise ExtractionError(f"no code block defines {entry}(); send the whole kernel file or "
                              "SEARCH/REPLACE edits")
    if re.search(r"^(`{3,}|~{3,})", text, re.MULTILINE):
        raise ExtractionError("a code block was opened but never closed"
                              + (" - the reply was cut off at the length limit" if truncated else ""))
    if truncated:
        raise ExtractionError("the reply was cut off at the length limit before any code")
    # No fences at all: accept a reply that is entirely a kernel (some local models do this).
    if _defines(text, entry) and text.count("{") == text.count("}") and text.count("{") > 0 \
            and not re.search(r"^[A-Z][a-z]+ [a-z]+ [a-z]+.*[.:]$", text.strip().splitlines()[0]):
        return Extracted(_clean(text), "full", idea)
    raise ExtractionError("the reply contains no code; answer with one fenced code block "
                          "holding the whole kernel, or SEARCH/REPLACE edit blocks")


def apply_edits(current: str, edits: list[tuple[str, str]]) -> str:
    """Apply SEARCH/REPLACE edits in order; exact match first, then ignoring indentation and
    trailing blanks line by line. An edit that matches nowhere (or ambiguously) fails all."""
    source = current
    for i, (search, replace) in enumerate(edits, 1):
        if not search.strip():
            raise ExtractionError(f"edit {i}: the SEARCH part is empty")
        count = source.count(search)
        if count == 1:
            source = source.replace(search, replace, 1)
            continue
        if count > 1:
            raise ExtractionError(f"edit {i}: the SEARCH text occurs {count} times; include more "
                                  "context so it matches once")
        span = _loose_find(source, search)
        if span is None:
            first = search.strip().splitlines()[0][:80]
            raise ExtractionError(f"edit {i}: the SEARCH text was not found in the current source "
                                  f"(first line {first!r}); copy it exactly")
        a, b = span
        source = source[:a] + replace + source[b:]
    return source


def _loose_find(source: str, search: str) -> tuple[int, int] | None:
    """Character span of the lines of `source` equal to `search`'s lines up to whitespace."""
    want = [ln.strip() for ln in search.strip("\n").splitlines()]
    lines = source.splitlines(keepends=True)
    have = [ln.strip() for ln in lines]
    hits = [i for i in range(len(lines) - len(want) + 1) if have[i:i + len(want)] == want]
    if len(hits) != 1:
        return None
    start = sum(len(ln) for ln in lines[:hits[0]])
    end = start + sum(len(ln) for ln in lines[hits[0]:hits[0] + len(want)])
    return start, end


def _defines(code: str, entry: str) -> bool:
    return re.search(rf"\b{re.escape(entry)}\s*\(", code) is not None and "{" in code


def _clean(code: str) -> str:
    return code.strip("\n") + "\n"
