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


# Reasoning that chat servers pass through in the content (DeepSeek-R1, QwQ, Qwen3 and others
# behind Ollama/vLLM/LM Studio): drafts in it are not the answer.
REASONING = re.compile(r"<(think|thinking|reasoning|reflection)>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)
UNCLOSED_REASONING = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
ORPHAN_CLOSE = re.compile(r"^.*</(think|thinking|reasoning)>\s*", re.DOTALL | re.IGNORECASE)
# a block introduced as the old code, in before/after answers
BEFORE_LABEL = re.compile(r"\b(before|original|old|previous|current|existing)\b[^\n]*:?\s*$",
                          re.IGNORECASE)
# a block offered instead of the answer: a fallback, another option, a simpler variant
ALTERNATIVE = re.compile(
    r"\b(alternative(ly)?|fall-?back|fall back|otherwise|as an? (option|variant)|another "
    r"(option|approach|variant|version)|option (b|2)|if (your|the) (cpu|gpu|machine|target|"
    r"compiler|hardware)[^\n.]*(not|n't|lacks?)|(simpler|portable|scalar|safer) (version|variant))\b",
    re.IGNORECASE)
DIFF_TAGS = {"diff", "patch", "udiff"}
HUNK = re.compile(r"^@@[^\n]*@@[^\n]*$", re.MULTILINE)


def final_answer(reply: str, *, truncated: bool = False) -> str:
    """The reply without its reasoning blocks (the final answer is what follows them)."""
    text = REASONING.sub("", reply)
    text = ORPHAN_CLOSE.sub("", text)  # some servers drop the opening tag
    m = UNCLOSED_REASONING.search(text)
    if m:  # reasoning that never ended: nothing after it is an answer
        if not text[:m.start()].strip():
            raise ExtractionError("the reply ended inside its reasoning block, before any answer"
                                  + (" - it was cut off at the length limit" if truncated else ""))
        text = text[:m.start()]
    return text


def extract(reply: str, current: str | None, entry: str, *, truncated: bool = False) -> Extracted:
    """The new full source from a reply; `current` is the source edits apply to."""
    if reply is None or not reply.strip():
        raise ExtractionError("the reply was empty")
    text = final_answer(reply.replace("\r\n", "\n"), truncated=truncated)
    if not text.strip():
        raise ExtractionError("the reply has only reasoning, no answer after it")
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
    matches = list(FENCE.finditer(text))
    blocks = [(m["tag"].lower(), m["body"], text[:m.start()]) for m in matches]
    # the prose just before each block, back to the previous block: what introduces it
    intro = {m["body"]: text[(matches[i - 1].end() if i else 0):m.start()]
             for i, m in enumerate(matches)}
    diffs = [body for tag, body, _ in blocks if tag in DIFF_TAGS or _is_diff(body)]
    code = [(body, before) for tag, body, before in blocks
            if tag in CODE_TAGS and body.strip() and not _is_diff(body)]
    with_entry = [(body, before) for body, before in code if _defines(body, entry)]
    if with_entry:
        after = [b for b, before in with_entry if not _labelled_before(before)] \
            or [b for b, _ in with_entry]
        main = [b for b in after if not ALTERNATIVE.search(intro.get(b, ""))]
        # the last complete block defining the entry: the answer, not a draft, a "before" or
        # a fallback offered after it ("Alternatively, if AVX-512 is missing, ...")
        return Extracted(_clean((main or after)[-1]), "full", idea)
    if diffs and current is not None:
        return Extracted(apply_edits(current, _diff_edits(diffs[-1])), "edit", idea)
    if code:
        raise ExtractionError(f"no code block defines {entry}(); send the whole kernel file or "
                              "SEARCH/REPLACE edits")
    rest = FENCE.sub("", text)
    unclosed = re.search(r"^(`{3,}|~{3,})", rest, re.MULTILINE) is not None
    if blocks and not unclosed:
        tags = sorted({tag or "untagged" for tag, _, _ in blocks})
        raise ExtractionError("the reply's code blocks are not C/CUDA (" + ", ".join(tags) + ") "
                              f"and none defines {entry}(); send the kernel in a c or cuda block")
    if unclosed:
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


def _labelled_before(preceding: str) -> bool:
    """Whether the prose just before a block introduces it as the old code."""
    lines = [ln for ln in preceding.rstrip().splitlines() if ln.strip()]
    return bool(lines) and BEFORE_LABEL.search(lines[-1].strip("*#: ").strip() + ":") is not None \
        and not re.search(r"\b(after|new|improved|optimi[sz]ed|final|updated)\b", lines[-1], re.IGNORECASE)


def _is_diff(body: str) -> bool:
    return bool(HUNK.search(body)) or bool(re.match(r"^(---|\+\+\+) ", body))


def _diff_edits(body: str) -> list[tuple[str, str]]:
    """A unified diff as SEARCH/REPLACE edits, one per hunk (context and '-' lines are what
    is searched; context and '+' lines replace them)."""
    edits: list[tuple[str, str]] = []
    search: list[str] = []
    replace: list[str] = []
    for line in body.splitlines():
        if line.startswith(("---", "+++")) and not search and not replace:
            continue
        if line.startswith("@@"):
            if search or replace:
                edits.append(("".join(search), "".join(replace)))
            search, replace = [], []
            continue
        if line.startswith("-"):
            search.append(line[1:] + "\n")
        elif line.startswith("+"):
            replace.append(line[1:] + "\n")
        else:
            ctx = (line.removeprefix(" ")) + "\n"
            search.append(ctx)
            replace.append(ctx)
    if search or replace:
        edits.append(("".join(search), "".join(replace)))
    if not edits:
        raise ExtractionError("the diff block has no hunks")
    return edits


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
    """Whether `code` defines the entry (a body follows its parameter list), not just calls it."""
    return re.search(rf"\b{re.escape(entry)}\s*\([^;{{}}]*?\)\s*(?:__attribute__\s*\(\([^;{{}}]*\)\)\s*)?\{{",
                     code) is not None


def _clean(code: str) -> str:
    return code.strip("\n") + "\n"
