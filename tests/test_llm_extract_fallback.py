"""Extraction of the MAIN kernel when a reply offers a fallback after it, and tunables read only
by the preprocessor, on replies shaped like a strong model's."""

from __future__ import annotations

from pathlib import Path

from app.llm.extract import extract
from app.llm.tunables import declared_tunables, used_params

MAIN = """#include <immintrin.h>
void ks_kernel(const float *x, float *y, int n) {
    for (int i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(2.f)));
}
"""
FALLBACK = """void ks_kernel(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = 2.f * x[i];
}
"""


def _reply(intro: str) -> str:
    return (f"Here is the AVX-512 version, 2x faster:\n```c\n{MAIN}```\n\n"
            f"{intro}\n```c\n{FALLBACK}```\n")


def test_a_fallback_offered_after_the_answer_is_not_extracted():
    for intro in ("Alternatively, if your CPU lacks AVX-512, use this scalar fallback:",
                  "If the target does not support AVX-512, here is a portable version:",
                  "As an option, a simpler version:",
                  "Fallback (no intrinsics):"):
        got = extract(_reply(intro), None, "ks_kernel")
        assert "_mm512_mul_ps" in got.source, intro


def test_the_last_answer_still_wins_over_a_draft():
    reply = (f"First attempt:\n```c\n{FALLBACK}```\nBetter, vectorised:\n```c\n{MAIN}```\n")
    assert "_mm512" in extract(reply, None, "ks_kernel").source
    # and with only alternatives on offer, the last one is still taken rather than nothing
    only = f"Alternatively:\n```c\n{MAIN}```\nOr, as another option:\n```c\n{FALLBACK}```\n"
    assert "2.f * x[i]" in extract(only, None, "ks_kernel").source


PRAGMA_ONLY = """// tunable: UNROLL = [1, 2, 4, 8]
// tunable: VEC = [4, 8]
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef VEC
#define VEC 8
#endif
void ks_kernel(const float *x, float *y, int n) {
#pragma GCC unroll UNROLL
    for (int i = 0; i < n; i++) {
#if VEC == 8
        y[i] = 2.f * x[i];
#else
        y[i] = x[i] + x[i];
#endif
    }
}
"""


def test_tunables_read_only_in_pragma_or_if_are_accepted():
    # declared in the reply's prose, read by the kernel only through the preprocessor
    kernel = "\n".join(ln for ln in PRAGMA_ONLY.splitlines() if "tunable:" not in ln)
    d = declared_tunables(PRAGMA_ONLY, kernel, {"BLOCK"})
    assert d.problems == [] and d.params == {"UNROLL": [1, 2, 4, 8], "VEC": [4, 8]}
    assert d.defaults == {"UNROLL": 4, "VEC": 8}


def test_a_tunable_named_only_in_its_guard_and_declaration_is_refused():
    src = PRAGMA_ONLY.replace("#pragma GCC unroll UNROLL", "")
    d = declared_tunables(src, src, set())
    assert "UNROLL" not in d.params and any("never uses it" in p for p in d.problems)


def test_used_params_sees_preprocessor_reads_and_ignores_guards_and_comments():
    tpl = Path("app/catalog/cpu/kernels/cpu_gemm.c").read_text()
    assert {"PAR", "ISA", "ORDER", "SHARE_B"} <= used_params(tpl, ["PAR", "ISA", "ORDER", "SHARE_B"])
    copied = ("// EXP_IMPL picks the exp: 0 libm, 1 polynomial\n#ifndef EXP_IMPL\n#define EXP_IMPL 0"
              "\n#endif\n" + FALLBACK)
    assert used_params(copied, ["EXP_IMPL"]) == set()
