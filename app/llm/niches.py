"""Structural niches of kernel sources, for MAP-Elites style inspiration.

A prompt that shows only the fastest kernels shows variations of one design. Here a kernel
source gets a small structural descriptor (for C: OpenMP parallel or not, explicit SIMD or not,
tiled loops or not, loop-nest depth; for CUDA: shared memory, vectorised loads, warp shuffles,
tensor-core mma), each descriptor is a niche, the best evaluation per niche is its elite, and
inspirations are drawn from niches other than CURRENT's, so the model sees different designs
with their measured values. The descriptor reads the text only (comments stripped): it is a
cheap, deterministic label, not an analysis of what the compiler makes of it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.core.types import Evaluation
from app.llm.policy import strip_comments

# The shared CUDA device header's warp reductions (common.cuh): a kernel calling them shuffles.
SHUFFLE_HELPERS = ("group_max", "group_sum", "row_reduce")

_C_SIMD = re.compile(r"#\s*pragma\s+(omp\b[^\n]*\bsimd\b|GCC\s+ivdep|clang\s+loop\s+vectorize)"
                     r"|\b_mm\d*_\w+|\b__m(128|256|512)[di]?\b|\bvector_size\b"
                     r"|\b(vld1q|vst1q|vfmaq)_\w+|\bfloat32x4_t\b")
_C_PARALLEL = re.compile(r"#\s*pragma\s+omp\b[^\n]*\bparallel\b")
_CU_SHARED = re.compile(r"__shared__")
_CU_VECTOR = re.compile(r"\b(float[24]|double2|int[24]|uint[24]|__half2|half2|__nv_bfloat162"
                        r"|longlong2)\b|ld\.global\.v[24]|ld\.shared\.v[24]")
_CU_SHUFFLE = re.compile(r"\b__shfl\w*|\b__reduce_\w+_sync\b|\b(" + "|".join(SHUFFLE_HELPERS)
                         + r")\s*(<[^>]*>)?\s*\(")
# tensor cores, written out or through the shared headers' helpers (ampere.cuh: ldmatrix_x4,
# mma16816; hopper.cuh: wgmma_m64...)
_CU_MMA = re.compile(r"\bw?mma\b|\bwgmma\b|mma\.sync|\bldmatrix\b|\bwmma::|\bmma_sync\b|__hmma"
                     r"|\bldmatrix_\w+\s*\(|\bmma16816\s*\(|\bwgmma_m64\w*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\+=|-=|\+\+|--|\S")


@dataclass(frozen=True)
class Structure:
    """A kernel's niche: the features a kernel engineer would name first."""

    language: str
    features: tuple[tuple[str, object], ...]  # (name, value), in a fixed order

    @property
    def label(self) -> str:
        f = dict(self.features)
        if self.language == "cuda":
            return ", ".join((
                "shared memory" if f["shared"] else "no shared memory",
                "vectorised loads" if f["vector"] else "scalar loads",
                "warp shuffles" if f["shuffle"] else "no warp shuffles",
                "tensor-core mma" if f["mma"] else "no tensor cores"))
        depth = f["depth"]
        return ", ".join((
            "OpenMP parallel" if f["parallel"] else "serial",
            "explicit SIMD" if f["simd"] else "no explicit SIMD",
            "tiled loops" if f["tiled"] else "untiled",
            f"loop depth {depth}{'+' if depth >= 3 else ''}"))


def structure(source: str, language: str) -> Structure:
    """The niche of a kernel source ("c" or "cuda")."""
    text = strip_comments(source)
    if language == "cuda":
        return Structure("cuda", (
            ("shared", bool(_CU_SHARED.search(text))),
            ("vector", bool(_CU_VECTOR.search(text))),
            ("shuffle", bool(_CU_SHUFFLE.search(text))),
            ("mma", bool(_CU_MMA.search(text)))))
    depth, tiled = _loop_nest(text)
    return Structure("c", (
        ("parallel", bool(_C_PARALLEL.search(text))),
        ("simd", bool(_C_SIMD.search(text))),
        ("tiled", tiled),
        ("depth", min(depth, 3))))


def _loop_nest(text: str) -> tuple[int, bool]:
    """The deepest `for` nesting, and whether some loop walks a tile: an inner loop starts
    at a variable (`for (c = c0; ...)`) or reads the variable of an outer loop that steps by
    more than one (`for (ii = 0; ...; ii += B) for (i = ii; ...)`)."""
    code = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
    toks = _TOKEN.findall(code)
    stack: list[list[str]] = []  # open braces: the loop variables whose body each one is
    chain: list[str] = []  # loop vars of brace-less `for` bodies still open
    deepest, tiled = 0, False
    strided: set[str] = set()
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "for" and i + 1 < len(toks) and toks[i + 1] == "(":
            j, header = _paren_group(toks, i + 1)
            outer = [v for vs in stack for v in vs] + chain
            depth = len(outer) + 1
            deepest = max(deepest, depth)
            var, init, step = _header_parts(header)
            if depth > 1 and init and re.fullmatch(r"[A-Za-z_]\w*", init[-1]) and len(init) == 1:
                tiled = True  # starts at a variable: the inner loop of a tile
            if any(tok in strided for tok in header):
                tiled = True
            if var and step:
                strided.add(var)
            i = j + 1
            if i < len(toks) and toks[i] == "{":
                stack.append(chain + [var])
                chain = []
                i += 1
            else:
                chain.append(var)
            continue
        if t == "{":
            stack.append(list(chain))
            chain = []
        elif t == "}":
            if stack:
                stack.pop()
            chain = []
        elif t == ";":
            chain = []
        i += 1
    return deepest, tiled


def _paren_group(toks: list[str], start: int) -> tuple[int, list[str]]:
    """The index of the `)` matching toks[start] == "(", and the tokens between."""
    depth = 0
    for j in range(start, len(toks)):
        if toks[j] == "(":
            depth += 1
        elif toks[j] == ")":
            depth -= 1
            if depth == 0:
                return j, toks[start + 1:j]
    return len(toks) - 1, toks[start + 1:]


def _header_parts(header: list[str]) -> tuple[str, list[str], bool]:
    """(loop variable, tokens of its initial value, whether it steps by more than one)."""
    parts: list[list[str]] = [[]]
    for tok in header:
        if tok == ";":
            parts.append([])
        else:
            parts[-1].append(tok)
    if len(parts) != 3 or "=" not in parts[0]:
        return "", [], False
    eq = parts[0].index("=")
    var = parts[0][eq - 1] if eq > 0 else ""
    init = parts[0][eq + 1:]
    step = parts[2]
    strided = ((len(step) >= 3 and step[0] == var and step[1] in ("+=", "-=") and step[2:] != ["1"])
               or (len(step) >= 5 and step[0] == var and step[1] == "=" and step[2] == var
                   and step[3] in "+-" and step[4:] != ["1"]))
    return var, init, strided


def niche_elites(evaluations: Iterable[Evaluation], niche_of: Callable[[Evaluation], Structure],
                 sort_key: Callable[[Evaluation], float]) -> dict[Structure, Evaluation]:
    """The best correct evaluation of each niche (MAP-Elites' archive)."""
    best: dict[Structure, Evaluation] = {}
    for e in evaluations:
        if not e.ok or e.value is None:
            continue
        n = niche_of(e)
        if n not in best or sort_key(e) < sort_key(best[n]):
            best[n] = e
    return best


def pick_inspirations(elites: dict[Structure, Evaluation], current: Structure | None,
                      exclude_key: str | None, k: int, rng: random.Random,
                      sort_key: Callable[[Evaluation], float],
                      fallback: Iterable[Evaluation] = ()) -> list[Evaluation]:
    """Up to k elites for a prompt, each from another niche than CURRENT's: drawn at random
    among those niches (not only the fastest), best first in the list. When there are fewer
    such niches, the rest come from `fallback` (the fastest overall)."""
    others = [e for n, e in elites.items() if n != current and e.key != exclude_key]
    picked = rng.sample(others, min(k, len(others)))
    seen = {e.key for e in picked}
    for e in fallback:
        if len(picked) >= k:
            break
        if e.key != exclude_key and e.key not in seen:
            picked.append(e)
            seen.add(e.key)
    return sorted(picked, key=sort_key)
