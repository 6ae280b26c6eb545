"""The normal form of a kernel source: what identifies a candidate.

Comments, blank lines, trailing blanks, runs of blanks inside a line and indentation do not
change what a kernel computes, so two replies that differ only in them are one candidate (the
same key, evaluated once). The normal form is also the source that runs and that prompts show:
comments are gone (free text never rides into later prompts) and indentation is rebuilt from
the brace depth, so the code stays readable.
"""

from __future__ import annotations

import re

from app.llm.policy import strip_comments

INDENT = "    "


def normalise(source: str) -> str:
    """Comments and cosmetic whitespace removed; indentation by brace depth; one final newline."""
    out: list[str] = []
    depth = 0
    for raw in strip_comments(source.replace("\r\n", "\n")).split("\n"):
        line = _squeeze(raw.strip())
        if not line:
            if out and out[-1].endswith("\\"):
                out.append("")  # a blank line ends a continued macro: keep it
            continue
        opens, closes = _braces(line)
        if line.startswith("#"):
            out.append(line)  # preprocessor lines stay at column 0
        else:
            lead = len(line) - len(line.lstrip("}"))  # a line starting with } closes first
            out.append(INDENT * max(0, depth - lead) + line)
        depth = max(0, depth + opens - closes)
    return "\n".join(out) + "\n" if out else ""


def _squeeze(line: str) -> str:
    """Runs of blanks outside string and character literals become one space."""
    parts = re.split(r"(\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')", line)
    return "".join(p if i % 2 else re.sub(r"[ \t\f\v]+", " ", p) for i, p in enumerate(parts))


def _braces(line: str) -> tuple[int, int]:
    code = re.sub(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", "", line)
    return code.count("{"), code.count("}")


def same_code(a: str | None, b: str | None) -> bool:
    """Whether two sources differ only in comments and whitespace."""
    return a is not None and b is not None and normalise(a) == normalise(b)
