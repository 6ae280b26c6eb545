"""The LLM source policy (static checks before compiling) and code extraction from replies."""

from __future__ import annotations

import glob
import time
from pathlib import Path

import pytest

from app.llm.extract import ExtractionError, apply_edits, extract
from app.llm.policy import PolicyViolation, check

ROOT = Path(__file__).resolve().parent.parent

GOOD = """#include <math.h>
#ifndef VEC
#define VEC 8
#endif
static const float HALF = 0.5f;
static inline long ks_min(long a, long b) { return a < b ? a : b; }
static void row(float *restrict y, const float *restrict x, long n) {
    float acc[4] = {0};  /* static float cache; in a comment is fine */
    for (long j = 0; j < n; ++j) y[j] = x[j] * HALF + acc[j % 4];
}
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma omp parallel for num_threads(THREADS)
    for (long r = 0; r < rows; ++r) row(y + r * cols, x + r * cols, ks_min(cols, cols));
}
"""


def _with(body_line: str, top: str = "") -> str:
    return top + GOOD.replace("    float acc[4] = {0};", "    float acc[4] = {0};\n    " + body_line)


def test_catalog_templates_pass_the_policy():
    for path in sorted(glob.glob(str(ROOT / "app/catalog/cpu/kernels/cpu_*.c"))):
        if path.endswith("cpu_reference.c"):
            continue
        check(Path(path).read_text(), language="c",
              params=["VEC", "ACC", "ONLINE", "CHUNK", "BM", "BN", "BK", "UM", "TILE",
                      "WRITE_MAJOR", "LOOP_ORDER", "ACC_DOUBLE"])
    check(GOOD, language="c", params=["VEC"])


@pytest.mark.parametrize("source, rule", [
    (_with("", "static const float *last_x = 0;\n"), "static_state"),
    (_with("static float *cache;"), "static_state"),
    (_with("", "float *saved_output;\n"), "global_state"),
    (_with("clock_t t = clock();"), "timer"),
    (_with("struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);"), "timer"),
    (_with("double t = omp_get_wtime();"), "timer"),
    (_with('unsigned long long t; __asm__ volatile("rdtsc" : "=A"(t));'), "inline_asm"),
    (_with("pthread_t th; pthread_create(&th, 0, 0, 0);"), "threads"),
    (_with("if (fork() == 0) return;"), "threads"),
    ("#include <pthread.h>\n" + GOOD, "forbidden_include"),
    ("#include <time.h>\n" + GOOD, "forbidden_include"),
    (GOOD.replace("#pragma omp parallel for num_threads(THREADS)",
                  "#pragma omp parallel for nowait"), "omp_detached"),
    ("#pragma GCC optimize(\"fast-math\")\n" + GOOD, "compile_options"),
    ("#define THREADS 64\n" + GOOD, "parameter_override"),
    ("#undef VEC\n" + GOOD, "parameter_override"),
    (_with("_Float16 h = (_Float16)x[0];"), "precision_lowering"),
    (_with("float *p = malloc(16);"), "system_calls"),
    (_with("printf(\"%f\", x[0]);"), "system_calls"),
    ("__attribute__((constructor)) static void init(void) {}\n" + GOOD, "load_time_code"),
    (GOOD.replace("static void row", "void row"), "external_symbol"),
    (GOOD.replace("ks_kernel", "my_kernel"), "entry_missing"),
    ("", "empty"),
])
def test_known_cheats_are_rejected_with_the_rule_named(source, rule):
    with pytest.raises(PolicyViolation) as info:
        check(source, language="c", params=["VEC"])
    assert info.value.rule == rule
    assert info.value.reason == "static_check"


def test_cuda_rules_and_goal_constraints():
    kernel = ('extern "C" __global__ void scale(float* y, const float* x, int n) {\n'
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (i < n) y[i] = BODY;\n}\n")
    check(kernel.replace("BODY", "2.f * x[i]"), language="cuda", entry="scale")
    cheats = {
        "side_stream": "2.f * x[i]; cudaStream_t s; cudaStreamCreate(&s)",
        "timer": "2.f * x[i] + (float)clock64()",
        "asm_timer": '2.f * x[i]; unsigned t; asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t))',
        "precision_lowering": "__half2float(__float2half(x[i]))",
        "host_callback": "2.f * x[i]; cudaLaunchHostFunc(0, 0, 0)",
    }
    for rule, body in cheats.items():
        with pytest.raises(PolicyViolation) as info:
            check(kernel.replace("BODY", body), language="cuda", entry="scale")
        assert info.value.rule in (rule, "side_stream", "timer"), (rule, info.value)
    # half precision is the goal itself for a float16 goal; fast math only when forbidden
    check(kernel.replace("BODY", "__half2float(__float2half(x[i]))"), language="cuda",
          entry="scale", dtype="float16")
    fast = kernel.replace("BODY", "__expf(x[i])")
    check(fast, language="cuda", entry="scale")
    with pytest.raises(PolicyViolation, match="precision_lowering"):
        check(fast, language="cuda", entry="scale", forbid=["precision_lowering"])
    with pytest.raises(PolicyViolation, match="atomics"):
        check(kernel.replace("BODY", "0; atomicAdd(y, x[i])"), language="cuda", entry="scale",
              forbid=["atomics"])


def test_static_check_is_fast_on_hostile_input():
    """Regexes over model output must not backtrack for ages on adversarial text."""
    hostile = ("static " + " ".join(["unsigned"] * 3000) + " (\n") * 3 + GOOD
    t0 = time.perf_counter()
    try:
        check(hostile, language="c", params=["VEC"])
    except PolicyViolation:
        pass
    assert time.perf_counter() - t0 < 2.0


# ---- extraction -----------------------------------------------------------------------------
def test_fenced_blocks_of_any_tag_and_the_idea_line():
    for fence, tag in (("```", "c"), ("```", "cuda"), ("```", ""), ("~~~", "cpp"), ("````", "C")):
        reply = f"Idea: fuse the passes\nHere you go:\n{fence}{tag}\n{GOOD}{fence}\nDone."
        got = extract(reply, None, "ks_kernel")
        assert got.kind == "full" and got.source.strip() == GOOD.strip()
        assert got.idea == "fuse the passes"


def test_the_block_defining_the_entry_wins_over_snippets():
    reply = f"```c\nx[i] = 1;\n```\nFull:\n```c\n{GOOD}```\n```bash\ngcc k.c\n```"
    assert "ks_kernel" in extract(reply, None, "ks_kernel").source


def test_search_replace_edits_apply_to_the_current_source():
    reply = ("Idea: halve differently\n<<<<<<< SEARCH\n    for (long j = 0; j < n; ++j) y[j] = x[j] * HALF + acc[j % 4];\n"
             "=======\n    for (long j = 0; j < n; ++j) y[j] = 0.5f * x[j];\n>>>>>>> REPLACE\n")
    got = extract(reply, GOOD, "ks_kernel")
    assert got.kind == "edit" and "y[j] = 0.5f * x[j];" in got.source and "HALF + acc" not in got.source
    # indentation differences are forgiven, line by line
    loose = apply_edits(GOOD, [("for (long j = 0; j < n; ++j) y[j] = x[j] * HALF + acc[j % 4];\n",
                                "  /* gone */\n")])
    assert "/* gone */" in loose


@pytest.mark.parametrize("reply, message", [
    ("", "empty"),
    ("I think you should use tiling and vectorisation to make it faster.", "no code"),
    ("```c\nvoid ks_kernel(float *y) {\n  for (;;) {", "never closed"),
    ("```c\nint helper(void) { return 1; }\n```", "no code block defines ks_kernel"),
    ("<<<<<<< SEARCH\nnot in the source\n=======\nx\n>>>>>>> REPLACE\n", "not found"),
    ("<<<<<<< SEARCH\nfor (long r = 0;\n=======\n", "incomplete"),
    ("\x00\x01\x02 garbage \ufffd{{{", "no code"),
])
def test_replies_without_usable_code_fail_with_a_reason(reply, message):
    with pytest.raises(ExtractionError, match=message):
        extract(reply, GOOD, "ks_kernel")


def test_an_ambiguous_edit_is_refused():
    with pytest.raises(ExtractionError, match="occurs 2 times"):
        apply_edits("a;\nb;\na;\n", [("a;\n", "c;\n")])
