"""What a prompt says about a failed candidate: a summary the product writes itself, never the
candidate's output. A candidate's stderr/stdout, its log and the compiler's messages about its
code are text the candidate controls; encoded (hex, base64, reversed) it passes any scrub. So a
prompt gets only what the product can vouch for: the failure reason and stage, a fixed phrase
per kind of compiler diagnostic with its line number (within the candidate's file), names and
snippets only where they are the model's own text (present in the candidate's source), the
output, shape and input family of a wrong result, a signal's name.
"""

from __future__ import annotations

import re
import signal

from app.core import types as t
from app.core.types import Evaluation

REASONS = {
    t.COMPILE_FAILED: "did not compile", t.RUNTIME_FAILED: "failed at run time",
    t.INVALID: "is not a valid configuration", t.VERIFY_FAILED: "gave wrong results",
    t.TIMEOUT: "ran past its time limit", t.CRASH: "crashed",
    t.RESOURCE_LIMIT: "exceeded a resource limit",
    t.STATIC_CHECK: "was rejected by the source checks before compiling",
    t.OUT_OF_MEMORY: "ran out of memory",
    t.SUSPECT: "was measured faster than the hardware allows (skipped work or a forged timing)",
}
STAGES = ("static_check", "compile", "resources", "load", "verify", "time", "reverify")
DIAGNOSTIC = re.compile(r"^[^\n]*?:(\d+)(?::\d+)?:\s*(fatal error|error)\s*:\s*(.*)$", re.MULTILINE)
KINDS = (  # (pattern in the compiler's message, the phrase the prompt gets)
    (r"undeclared|not declared", "undeclared identifier"),
    (r"implicit declaration", "implicit declaration of a function"),
    (r"unknown type name", "unknown type name"),
    (r"too (?:few|many) arguments", "wrong number of arguments"),
    (r"conflicting types|redefinition|redeclar", "conflicting or repeated definition"),
    (r"no member named|has no member", "no such member"),
    (r"read-only|lvalue", "assignment to something that cannot be assigned"),
    (r"invalid operands", "invalid operands to an operator"),
    (r"incompatible|cannot convert|invalid conversion", "incompatible types"),
    (r"subscript", "bad array subscript"),
    (r"no such file|file not found", "include file not found"),
    (r"#error", "#error directive"),
    (r"undefined reference|undefined symbol", "undefined symbol"),
    (r"expected", "syntax error"),
)
RESOURCES = (("thread", "threads"), ("register", "registers"), ("shared", "shared memory"),
             ("stack", "stack size"), ("global data", "writable global data"),
             ("bss", "writable global data"), ("library", "library checks"))
MAX_DIAGNOSTICS = 4


def failure_summary(e: Evaluation) -> str:
    """One or a few lines on why `e` failed, in the product's words only."""
    reason = e.reason if e.reason in REASONS else None
    text = f"{reason or 'failed'}: the kernel {REASONS.get(reason or '', 'failed')}"
    stage = next((s.name for s in reversed(e.stages) if not s.ok and s.name in STAGES), None)
    if stage:
        text += f" (stage {stage})"
    source = e.source or ""
    detail = e.detail or ""
    if reason == t.COMPILE_FAILED:
        text += _diagnostics(f"{detail}\n{e.log or ''}", source)
    elif reason == t.VERIFY_FAILED:
        text += _wrong_result(detail, source)
    elif reason == t.STATIC_CHECK:
        rule = str((e.resources or {}).get("policy_rule") or "")
        if re.fullmatch(r"[A-Za-z_][\w -]{0,40}", rule):
            text += f"; rule {rule}"
        found = re.search(r"\(found '([^'\n]{1,80})'\)", detail)
        if found and found.group(1) in source:
            text += f"; found {found.group(1)!r}"
    elif reason == t.RESOURCE_LIMIT:
        which = sorted({name for key, name in RESOURCES if key in detail.lower()})
        if which:
            text += "; " + ", ".join(which)
    elif reason in (t.CRASH, t.RUNTIME_FAILED):
        sig = re.search(r"\b(SIG[A-Z]{2,7})\b", detail)
        if sig and sig.group(1) in signal.Signals.__members__:
            text += f"; signal {sig.group(1)}"
        if "sandbox violation" in detail:
            text += "; a forbidden system call (process, program, socket, file, signal)"
    return text


def _own(word: str, source: str) -> bool:
    """A name the model wrote itself: an identifier that occurs in the candidate's source."""
    return bool(re.fullmatch(r"[A-Za-z_]\w{0,39}", word)) and bool(
        re.search(rf"(?<!\w){re.escape(word)}(?!\w)", source))


def _diagnostics(log: str, source: str) -> str:
    lines, seen = [], set()
    n_lines = source.count("\n") + 1 if source else 0
    for m in DIAGNOSTIC.finditer(log):
        line, message = int(m.group(1)), m.group(3).lower()
        kind = next((phrase for pattern, phrase in KINDS if re.search(pattern, message)),
                    "compiler error")
        names = [w for w in re.findall(r"['\u2018\u201c\"]([^'\u2019\u201d\"]{1,40})['\u2019\u201d\"]", m.group(3))
                 if _own(w, source)][:2]
        where = f"line {line}" if 1 <= line <= n_lines else "outside your kernel file"
        item = f"{where}: error: {kind}" + (f" ({', '.join(names)})" if names else "")
        if item not in seen:
            seen.add(item)
            lines.append(item)
        if len(lines) >= MAX_DIAGNOSTICS:
            break
    return ("\n  " + "\n  ".join(lines)) if lines else ""


def _wrong_result(detail: str, source: str) -> str:
    low = detail.lower()
    check = ("after timing" if low.startswith("reverify") else
             "in a timed call" if "timed call" in low else
             "two runs differ" if "determinism" in low else "on verification")
    bits = [check]
    name = re.search(r"output '([^'\n]{1,40})'|'([^'\n]{1,40})'", detail)
    if name and _own(name.group(1) or name.group(2), source):
        bits.append(f"output {name.group(1) or name.group(2)}")
    bits.append("NaN in the output" if "nan" in low else "inf in the output"
                if re.search(r"\binf", low) else "values outside the tolerance")
    shape = re.findall(r"shape \[([\d, ]{1,40})\]", detail)
    if shape:
        bits.append(f"shape [{shape[-1]}]")
    family = re.search(r", ([a-z][a-z0-9_ -]{0,30}) inputs", detail)
    if family:
        bits.append(f"{family.group(1)} inputs")
    return "; " + ", ".join(bits)
