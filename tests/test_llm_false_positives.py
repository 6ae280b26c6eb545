"""Valid kernels the source policy used to refuse pass (both the text policy and the compiler
level checks, with real gcc building them), the cheats next to them still fail; and the client
sends each model family the parameters it accepts (checked on a real loopback server)."""

from __future__ import annotations

import subprocess

import pytest
from llm_server import ChatServer, Reply, Status

from app.gpu.cpu import c_checks, elf_check
from app.llm.client import LLMClient, model_quirks
from app.llm.policy import PolicyViolation, check
from app.llm.settings import LLMSettings

FLAGS = ("-O3", "-march=native", "-std=c11", "-shared", "-fPIC", "-fopenmp")

TYPEDEF_STRUCT = """#include <math.h>
typedef struct { float m; float s; } Stat;
typedef union { float f; unsigned int u; } Bits;
static Stat merge(Stat a, Stat b) { Stat r = { fmaxf(a.m, b.m), a.s + b.s }; return r; }
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
    for (long r = 0; r < rows; ++r) {
        Stat st = { -INFINITY, 0.0f };
        for (long c = 0; c < cols; ++c) { Stat one = { x[r * cols + c], 1.0f }; st = merge(st, one); }
        Bits b = { .f = st.m };
        for (long c = 0; c < cols; ++c) y[r * cols + c] = b.f + 0.0f * st.s;
    }
}
"""

READ_WRITE_HELPERS = """static inline float read(const float *p, long i) { return p[i]; }
static inline void write(float *p, long i, float v) { p[i] = v; }
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
    for (long i = 0; i < rows * cols; ++i) write(y, i, 2.0f * read(x, i));
}
"""

OMP_FOR_NOWAIT = """void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma omp parallel num_threads(THREADS)
    {
#pragma omp for nowait
        for (long r = 0; r < rows; ++r)
            for (long c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c];
    }
}
"""


@pytest.mark.parametrize("source", [TYPEDEF_STRUCT, READ_WRITE_HELPERS, OMP_FOR_NOWAIT],
                         ids=["typedef-struct", "read-write-helpers", "omp-for-nowait"])
def test_valid_kernels_pass_the_policy_and_the_compiler_checks(source, tmp_path):
    check(source, language="c", params=["THREADS"])
    assert c_checks.check_source(source, "cc", FLAGS, {"THREADS": 2}, "ks_kernel") == []
    src, lib = tmp_path / "k.c", tmp_path / "k.so"
    src.write_text(source)
    subprocess.run(["cc", *FLAGS, "-DTHREADS=2", str(src), "-o", str(lib)], check=True,
                   capture_output=True)
    assert elf_check.library_problems(lib, "cc", FLAGS) == []


@pytest.mark.parametrize("source, rule", [
    ("struct { float last; } cache;\n" + READ_WRITE_HELPERS, "global_state"),
    ("typedef struct { float v; } S;\nS cache;\n" + READ_WRITE_HELPERS, "global_state"),
    (READ_WRITE_HELPERS.replace("write(y, i,", "y[i] = 0; write(1, y,"), None),
    (READ_WRITE_HELPERS.replace("static inline float read", "float read_"), "system_calls"),
    (OMP_FOR_NOWAIT.replace("#pragma omp for nowait", "#pragma omp task"), "omp_detached"),
    (OMP_FOR_NOWAIT.replace("#pragma omp parallel num_threads(THREADS)",
                            "#pragma omp parallel num_threads(THREADS) nowait"), "omp_detached"),
])
def test_the_cheats_next_to_them_still_fail(source, rule):
    if rule is None:  # the candidate's own write() takes 3 arguments: calling it is fine here
        check(source, language="c", params=["THREADS"])
        return
    with pytest.raises(PolicyViolation) as info:
        check(source, language="c", params=["THREADS"])
    assert info.value.rule == rule


def test_a_libc_name_not_defined_by_the_candidate_is_still_refused_by_the_compiler_checks():
    source = "#include <stdlib.h>\nvoid ks_kernel(float *o) { if (getenv(\"X\")) o[0] = 1; }\n"
    assert c_checks.check_source(source, "cc", FLAGS, {}, "ks_kernel")


@pytest.mark.parametrize("model, temperature, completion_cap", [
    ("o1", False, True), ("o3-mini", False, True), ("openai/o4-mini", False, True),
    ("gpt-5", False, True), ("gpt-5-mini-2025-08-07", False, True),
    ("gpt-4o", True, False), ("qwen2.5-coder:32b", True, False), ("llama3.1", True, False),
    ("deepseek-r1:14b", True, False), ("solo3", True, False),
])
def test_model_families(model, temperature, completion_cap):
    q = model_quirks(model)
    assert (q.temperature, q.max_completion_tokens) == (temperature, completion_cap)


def _settings(server: ChatServer, model: str) -> LLMSettings:
    return LLMSettings(base_url=server.base_url, model=model, timeout_s=2.0, backoff_s=0.01,
                       max_tokens=300, max_retries=0, stream=False)


def test_reasoning_models_get_no_temperature_and_a_completion_cap():
    with ChatServer([Reply("ok"), Reply("ok")]) as srv:
        LLMClient(_settings(srv, "o3-mini"), api_key="k").complete([{"role": "user", "content": "x"}])
        LLMClient(_settings(srv, "gpt-4o"), api_key="k").complete([{"role": "user", "content": "x"}])
    reasoning, chat = srv.requests
    assert "temperature" not in reasoning and reasoning["max_completion_tokens"] == 300
    assert "max_tokens" not in reasoning
    assert chat["temperature"] == pytest.approx(0.7) and chat["max_tokens"] == 300


def test_an_unknown_family_that_rejects_temperature_is_adapted_to():
    with ChatServer([Status(400, "Unsupported parameter: 'temperature' is not supported with "
                                 "this model."), Reply("ok")]) as srv:
        reply = LLMClient(_settings(srv, "some-new-model"), api_key="k").complete(
            [{"role": "user", "content": "x"}])
    assert reply.text == "ok"
    assert "temperature" in srv.requests[0] and "temperature" not in srv.requests[1]
