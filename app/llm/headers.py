"""The harness prefix as a prompt shows it: the shared device headers cut down to the
declarations the kernel uses.

A CUDA template's prefix inlines fixed headers (common.cuh, ampere.cuh, hopper.cuh: 28k
characters of inline PTX for the Hopper GEMM). The model cannot change them and only needs to
know what it can call, so a long prefix is shown as: every preprocessor line (the #defines of
the configuration included), every type the kernel names in full, and, for every function the
kernel calls, its declaration (signature and the comment above it) without its body. The
helpers it does not call are named in one line so a rewrite can still reach for them. The
prompt says that it was shortened; the harness always compiles the whole prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.llm.policy import strip_comments

FULL_PREFIX_CHARS = 4_000  # a prefix this short is shown as it is
_IDENT = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = {"template", "typename", "struct", "class", "union", "enum", "typedef", "using",
             "const", "constexpr", "static", "inline", "unsigned", "signed", "void", "int",
             "float", "double", "bool", "char", "long", "short", "alignas", "sizeof",
             "__device__", "__forceinline__", "__host__", "__global__", "extern", "return"}


@dataclass
class Shown:
    text: str  # what the prompt shows as HARNESS PREFIX
    full_chars: int  # the prefix the harness compiles
    omitted: list[str] = field(default_factory=list)  # helpers not called by the kernel
    bodies_dropped: int = 0  # declarations shown without their bodies

    @property
    def shortened(self) -> bool:
        return len(self.text) < self.full_chars

    def note(self) -> str:
        """One line saying what was left out (empty when nothing was)."""
        if not self.shortened:
            return ""
        bits = [(f"shortened from {self.full_chars} characters: the harness compiles the shared "
                "headers in full; shown are the preprocessor lines, the types CURRENT names and "
                f"the declarations (no bodies) of the {self.bodies_dropped} helper(s) it calls")]
        if self.omitted:
            bits.append("helpers it does not call, also available: " + ", ".join(self.omitted))
        return "; ".join(bits)


def shorten_prefix(prefix: str, kernel: str, limit: int = FULL_PREFIX_CHARS) -> Shown:
    """The prefix for a prompt: as it is when short, else cut to what `kernel` uses."""
    if len(prefix) <= limit:
        return Shown(prefix, len(prefix))
    used = set(_IDENT.findall(strip_comments(kernel)))
    out: list[str] = []
    omitted: list[str] = []
    dropped = 0
    for kind, text, comment in _items(prefix):
        if kind in ("pp", "scope"):
            out.append(text)
            continue
        names = _names(text)
        if not names & used:
            omitted.extend(n for n in sorted(names) if n not in omitted)
            continue
        head, body = _split_body(text)
        if kind == "function" and body:
            dropped += 1
            out.append(comment + head.rstrip() + ";")
        else:
            out.append(comment + text)
    return Shown("\n".join(out) + "\n", len(prefix), omitted, dropped)


def _items(prefix: str) -> list[tuple[str, str, str]]:
    """Top-level items of a header: (kind, text, the comment lines just above it). Kinds:
    "pp" (a preprocessor line), "scope" (`namespace x {`, `extern "C" {` and their `}`),
    "function", "type" (struct/class/typedef/using/enum) and "other" (constants, asserts)."""
    lines = prefix.split("\n")
    items: list[tuple[str, str, str]] = []
    comment: list[str] = []
    scopes = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if not s:
            comment = []
            i += 1
            continue
        if s.startswith("//"):
            comment.append(line)
            i += 1
            continue
        if s.startswith("#"):
            block = [line]
            while block[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                block.append(lines[i])
            items.append(("pp", "\n".join(block), ""))
            comment = []
            i += 1
            continue
        if re.fullmatch(r"(namespace\s+\w+|extern\s+\"C\")\s*\{", s):
            items.append(("scope", line, ""))
            scopes += 1
            comment = []
            i += 1
            continue
        if s.startswith("}") and scopes and _depth(s) < 0:
            items.append(("scope", line, ""))
            scopes -= 1
            i += 1
            continue
        # one declaration: up to where the braces close and a `;` or `}` ends it
        block = [line]
        depth = _depth(line)
        while i + 1 < len(lines) and (depth > 0 or not _ends(block[-1], depth)):
            i += 1
            block.append(lines[i])
            depth += _depth(lines[i])
        text = "\n".join(block)
        items.append((_kind(text), text, "\n".join(comment) + ("\n" if comment else "")))
        comment = []
        i += 1
    return items


def _ends(line: str, depth: int) -> bool:
    code = strip_comments(line).rstrip()
    return depth <= 0 and (code.endswith((";", "}")))


def _depth(line: str) -> int:
    """Braces opened minus closed on a line, strings and comments left out (inline PTX
    strings hold braces)."""
    code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', strip_comments(line))
    return code.count("{") - code.count("}")


def _split_body(text: str) -> tuple[str, str]:
    """(the declaration up to its body, the body) for a definition with braces."""
    code = re.sub(r'"(\\.|[^"\\])*"', lambda m: " " * len(m.group(0)), text)
    at = code.find("{")
    return (text, "") if at < 0 else (text[:at], text[at:])


def _kind(text: str) -> str:
    head = _split_body(strip_comments(text))[0]
    head = re.sub(r"^\s*template\s*<[^{;]*?>\s*", "", head)
    if re.match(r"\s*(typedef|using|struct|class|union|enum)\b", head) or re.search(
            r"\b(struct|class|union)\s+(alignas\s*\((?:[^()]|\([^()]*\))*\)\s*)?\w+\s*$", head):
        return "type"
    if "(" in head and not re.search(r"\b(static_assert|constexpr)\b", head.split("(")[0]):
        return "function"
    return "other"


def _names(text: str) -> set[str]:
    """The names an item declares: a function's name, a type's name, a constant's name."""
    head = _split_body(strip_comments(text))[0]
    head = re.sub(r"^\s*template\s*<[^{;]*?>\s*", "", head)
    if "static_assert" in head:
        return set()
    m = re.search(r"(\w+)\s*(<[^<>()]*>)?\s*\(", head)
    if m and _kind(text) == "function":
        return {m.group(1)}
    if _kind(text) == "type":
        m = re.search(r"\b(?:struct|class|union|enum)\s+(?:alignas\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
                      r"(\w+)", head)
        if m:
            return {m.group(1)}
        m = re.search(r"\busing\s+(\w+)", head)
        if m:
            return {m.group(1)}
    idents = [n for n in _IDENT.findall(head.split("=")[0]) if n not in _KEYWORDS]
    return {idents[-1]} if idents else set()
