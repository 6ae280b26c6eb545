"""Contracts from a parser: the entry's signature is the compiler's own
declaration output (C: gcc -aux-info) or pycparser's reading of the CUDA entry, never text
from a comment; a user's kernel shows its arguments' shapes and fills; catalog operators
their math in one line, KDA included."""

from __future__ import annotations

from project_paths import ROOT

from app.catalog.cuda.gemm import HOPPER_GEMM
from app.goal import Goal
from app.llm.contract import parse_aux_info, signature
from app.llm.prompts import PromptContext, build_messages
from app.llm.spec import kernel_spec

GOALS = ROOT / "resources" / "goals" / "custom"


def _user(goal: Goal, operator=None) -> str:
    spec = kernel_spec(goal, operator=operator)
    return build_messages("tiling", PromptContext(goal=goal, spec=spec, device="dev",
                                                  current_source=spec.template))[1]["content"]


def test_a_comment_never_becomes_the_signature():
    c = ("/* void ks_kernel(int evil) -- an old prototype in a comment */\n"
         "// ks_kernel (the entry) below\n#ifndef VEC\n#define VEC 4\n#endif\n"
         "void ks_kernel(float *restrict y, const float *restrict x, long n) {\n"
         "  for (long i = 0; i < n; i += VEC) y[i] = x[i];\n}\n")
    got = signature(c, "ks_kernel", "c", ("VEC",))
    assert got is not None
    assert got.text() == "void ks_kernel(float *y, const float *x, long int n)"
    cu = ('// convolution (correlation) of an image\nextern "C" __global__ void\n'
          "__launch_bounds__(256) convolution(float *out, const float* __restrict__ image, "
          "const __grid_constant__ Map m, int w) { }\n")
    got = signature(cu, "convolution", "cuda")
    assert got is not None and got.text() == (
        'extern "C" __global__ void convolution(float *out, const float *__restrict__ image, '
        "const __grid_constant__ Map m, int w)")


def test_the_custom_goals_show_the_parsed_signature_shapes_and_fills():
    conv = _user(Goal.load(GOALS / "convolution_cuda" / "goal.toml"))
    assert "`__global__ void convolution(float *out, const float *__restrict__ image" in conv
    assert "correlation" not in conv.split("contract:", 1)[1].split("\n", 1)[0]
    assert "operator ," not in conv and "your own kernel convolution" in conv
    assert "image: input float32 [4110x4110 (h + 14, w + 14)], filled uniform in [-1, 1]" in conv
    c2d = _user(Goal.load(GOALS / "conv2d_c" / "goal.toml"))
    assert "calls `void conv2d(float *out, const float *image, const float *filter, int w, int h)`" in c2d
    assert "out: output float32 [1024x1024 (h, w)]" in c2d and "w: scalar int32 = 1024" in c2d


def test_catalog_operators_state_their_math_kda_and_the_hopper_gemm_included():
    kda = _user(Goal(name="k", operator="kda", backend="cuda", shapes=[[1, 100, 2, 128]],
                     dtype="bfloat16"))
    assert "math: per sequence and head, state S [K, V]" in kda
    assert "S <- S + beta_t k_t (v_t - S^T k_t)^T" in kda
    assert "void kda_wy(const T *__restrict__ k" in kda
    gemm = _user(Goal(name="h", operator="gemm", backend="cuda", shapes=[[4096] * 3],
                      dtype="bfloat16"), operator=HOPPER_GEMM)
    assert "math: C[m, n] = sum_k A[m, k] * B[k, n]" in gemm
    assert "const __grid_constant__ TensorMap map_a" in gemm
    assert "inputs: a [4096x4096], b [4096x4096] bfloat16" in gemm
    soft = _user(Goal(name="s", operator="softmax", backend="cpu", shapes=[[8, 100]]))
    assert "math: y[r, c] = exp(x[r, c] - max_j x[r, j])" in soft
    assert "calls `void ks_kernel(float *y, const float *x, long int rows, long int cols)`" in soft


def test_the_aux_info_reader_takes_the_names_from_the_kr_part():
    line = ("/* k.c:8:NF */ extern void e (float *, long int); "
            "/* (y, n) float *y; long int n; */")
    got = parse_aux_info(line, "e", "k.c")
    assert got is not None and got.text() == "void e(float *y, long int n)"
    assert parse_aux_info(line, "other", "k.c") is None
