"""Kernel-specific structural features of a source, for the diversity archive (app.llm.niches)
and for the product's own summary of what an attempt changed (app.llm.memory).

Each feature is one a kernel engineer names first, read from the text with comments stripped
(a cheap, deterministic reading, not an analysis of what the compiler makes of it):

- C: the vector ISA written (AVX-512, AVX2, SSE, NEON intrinsics, vector extensions, a SIMD
  pragma, or none), the threading scheme (OpenMP collapse, parallel for, a parallel region,
  serial), tiling depth (how many loop levels walk tiles), memory staging (local buffers the
  data is packed into) and fusion (how many separate loop nests the file runs).
- CUDA: the tensor-core path (wgmma, mma.sync/ldmatrix, wmma, none), memory staging (TMA,
  cp.async, shared memory, registers only), vectorised loads, warp shuffles, and how many
  kernels the source defines.

Values are short fixed strings or small integers, so every text built from them is the
product's own words (never the model's).
"""

from __future__ import annotations

import re

from app.llm.policy import strip_comments

# The shared CUDA device header's warp reductions (common.cuh): a kernel calling them shuffles.
SHUFFLE_HELPERS = ("group_max", "group_sum", "row_reduce")

_ISA = (("AVX-512 intrinsics", re.compile(r"\b_mm512_\w+|\b__m512[di]?\b")),
        ("AVX2 intrinsics", re.compile(r"\b_mm256_\w+|\b__m256[di]?\b")),
        ("SSE intrinsics", re.compile(r"\b_mm_\w+|\b__m128[di]?\b")),
        ("NEON intrinsics", re.compile(r"\b(vld1q|vst1q|vfmaq|vaddq|vmulq)_\w+|\bfloat32x4_t\b")),
        ("vector extensions", re.compile(r"\bvector_size\b")),
        ("SIMD pragmas", re.compile(r"#\s*pragma\s+(omp\b[^\n]*\bsimd\b|GCC\s+ivdep"
                                    r"|clang\s+loop\s+vectorize)")))
_OMP = re.compile(r"#\s*pragma\s+omp\b([^\n]*)")
_C_BUFFER = re.compile(r"\b(float|double|int|long|__m\d+[di]?)\s+\w+\s*(\[[^\]\n]+\]\s*)+[;=]")
_C_ALIGNED = re.compile(r"\b(_Alignas|aligned_alloc|__attribute__\s*\(\(\s*aligned)\b")

_CU_TENSOR = (("wgmma", re.compile(r"\bwgmma\w*|\bwgmma_m64\w*")),
              ("mma.sync", re.compile(r"\bmma\.sync\b|\bldmatrix\w*|\bmma16816\s*\(|__hmma")),
              ("wmma", re.compile(r"\bwmma::|\bmma_sync\b|\bw?mma\b")))
_CU_STAGING = (("TMA", re.compile(r"\btma_\w+|cp\.async\.bulk\.tensor|\bCUtensorMap\b"
                                  r"|\bTensorMap\b")),
               ("cp.async", re.compile(r"\bcp\.async\b|\bcp_async\w*|__pipeline_memcpy_async"
                                       r"|\bmemcpy_async\b")),
               ("shared memory", re.compile(r"__shared__")))
_CU_VECTOR = re.compile(r"\b(float[24]|double2|int[24]|uint[24]|__half2|half2|__nv_bfloat162"
                        r"|longlong2|Vec\s*<)\b|ld\.global\.v[24]|ld\.shared\.v[24]")
_CU_SHUFFLE = re.compile(r"\b__shfl\w*|\b__reduce_\w+_sync\b|\b(" + "|".join(SHUFFLE_HELPERS)
                         + r")\s*(<[^>]*>)?\s*\(")
_CU_KERNEL = re.compile(r"\b__global__\b")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\+=|-=|\+\+|--|\S")


def features(source: str, language: str) -> dict[str, object]:
    """The structural features of a kernel source ("c" or "cuda"), in a fixed order."""
    text = strip_comments(source)
    if language == "cuda":
        return {
            "tensor": next((n for n, rx in _CU_TENSOR if rx.search(text)), "none"),
            "staging": next((n for n, rx in _CU_STAGING if rx.search(text)), "registers"),
            "vector": bool(_CU_VECTOR.search(text)),
            "shuffle": bool(_CU_SHUFFLE.search(text)),
            "kernels": min(len(_CU_KERNEL.findall(text)), 3)}
    depth, levels, nests = loop_nest(text)
    return {
        "isa": next((n for n, rx in _ISA if rx.search(text)), "scalar"),
        "threads": _threading(text),
        "tiles": min(levels, 2),
        "staging": "packed buffers" if (_C_BUFFER.search(_bodies(text))
                                        or _C_ALIGNED.search(text)) else "direct",
        "nests": min(nests, 3),
        "depth": min(depth, 3)}


def label(feats: dict[str, object], language: str) -> str:
    """The features as a short phrase for a prompt."""
    f = feats
    if language == "cuda":
        k = f["kernels"]
        return ", ".join((
            "no tensor cores" if f["tensor"] == "none" else f"tensor cores via {f['tensor']}",
            f"staging through {f['staging']}" if f["staging"] != "registers"
            else "no shared-memory staging",
            "vectorised loads" if f["vector"] else "scalar loads",
            "warp shuffles" if f["shuffle"] else "no warp shuffles",
            f"{k}{'+' if k >= 3 else ''} kernel(s)"))
    tiles = f["tiles"]
    nests = f["nests"]
    parts = [str(f["threads"]), "no explicit SIMD" if f["isa"] == "scalar" else str(f["isa"]),
             "untiled" if not tiles else f"{tiles}{'+' if tiles >= 2 else ''} tile level(s)",
             str(f["staging"]), f"{nests}{'+' if nests >= 3 else ''} loop nest(s)"]
    if "depth" in f:
        parts.append(f"loop depth {f['depth']}{'+' if f['depth'] >= 3 else ''}")
    return ", ".join(parts)


def _threading(text: str) -> str:
    heads = [m.group(1) for m in _OMP.finditer(text)]
    if any("parallel" in h and "collapse" in h for h in heads):
        return "OpenMP collapse"
    if any(re.search(r"\bparallel\s+for\b", h) for h in heads):
        return "OpenMP parallel for"
    if any(re.search(r"\bparallel\b", h) for h in heads):
        return "OpenMP parallel region"
    return "serial"


def _bodies(text: str) -> str:
    """The text inside braces (locals, not file-scope tables)."""
    depth, out = 0, []
    for c in text:
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif depth:
            out.append(c)
    return "".join(out)


def loop_nest(text: str) -> tuple[int, int, int]:
    """(the deepest `for` nesting, how many loop levels walk tiles, how many outermost loop
    nests). A level walks tiles when an inner loop reads the variable of an outer loop that
    steps by more than one (`for (ii = 0; ...; ii += B) for (i = ii; ...)`), or starts at a
    plain variable (`for (c = c0; ...)`)."""
    code = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
    toks = _TOKEN.findall(code)
    stack: list[list[str]] = []  # open braces: the loop variables whose body each one is
    chain: list[str] = []  # loop vars of brace-less `for` bodies still open
    deepest, nests, starts_at_var = 0, 0, False
    strided: set[str] = set()
    tiling: set[str] = set()  # strided loop variables an inner loop reads
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "for" and i + 1 < len(toks) and toks[i + 1] == "(":
            j, header = _paren_group(toks, i + 1)
            outer = [v for vs in stack for v in vs] + chain
            depth = len(outer) + 1
            deepest = max(deepest, depth)
            nests += depth == 1
            var, init, step = _header_parts(header)
            if depth > 1 and len(init) == 1 and re.fullmatch(r"[A-Za-z_]\w*", init[-1]):
                starts_at_var = True
            tiling |= {tok for tok in header if tok in strided and tok in outer}
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
    levels = len(tiling) or int(starts_at_var)
    return deepest, levels, nests


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
