"""Input families chosen by what the operator means (app.catalog.families): what each family
draws, which arguments it replaces, how they are planned, and the bit-for-bit comparison of
data-movement operators. No real kernel runs here (tests/test_validation_families_honest.py
runs the honest templates and the example goals through the real backend)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.catalog import families, get_operator
from app.catalog.cuda import OPERATORS as CUDA_OPERATORS
from app.catalog.custom.operator import CustomOperator
from app.catalog.custom.spec import Arg, KernelSpec
from app.catalog.protocol import from_storage, to_storage
from app.gpu.verify import CheckCase, compare, make_inputs, plan_checks, tolerance_for

CPU_NAMES = ("gemm", "softmax", "rmsnorm", "layernorm", "bias_gelu", "transpose")
F32_TINY = float(np.finfo(np.float32).tiny)


def draw(name: str, shape=(8, 64), dtype="float32", seed=1):
    return families.FAMILIES[name].draw(np, np.random.default_rng(seed), shape, dtype)


# ---- what each family draws -------------------------------------------------------------------
def test_special_has_both_zeros_denormals_and_tiny_normals():
    x = to_storage(np, draw("special", (64, 64)), "float32")
    bits = x.view(np.uint32)
    assert (bits == 0).any() and (bits == 0x80000000).any()  # +0 and -0 survive storage
    mag = np.abs(x)
    assert ((mag > 0) & (mag < F32_TINY)).any()  # denormals
    assert ((mag >= F32_TINY) & (mag < 1e-30)).any()  # normal, yet below 1e-30
    assert np.isfinite(x).all()


def test_nonfinite_keeps_nan_payloads_through_storage():
    x = to_storage(np, draw("nonfinite", (64, 64)), "float32")
    bits = set(x.view(np.uint32)[np.isnan(x)].tolist())
    assert {0x7FC12345, 0xFFC00007} <= bits
    assert np.isposinf(x).any() and np.isneginf(x).any()


def test_masked_never_masks_a_whole_row_and_masks_the_first_column():
    x = draw("masked", (50, 3))
    assert np.isfinite(x).any(axis=1).all()
    assert np.isneginf(x[0::2, 0]).all()
    assert np.isfinite(draw("masked", (4, 1))).all()  # a one-value row is never masked


def test_unit_sorted_increasing_constant_and_exp_range():
    assert ((draw("unit") >= 0) & (draw("unit") < 1)).all()
    assert (np.diff(draw("sorted"), axis=-1) >= 0).all()
    assert (np.diff(draw("reverse_sorted"), axis=-1) <= 0).all()
    inc = to_storage(np, draw("increasing", (4, 512)), "float32").reshape(-1)
    assert (np.diff(inc) > 0).all()  # strictly increasing in memory order, in storage
    rows = draw("constant_rows", (8, 16))
    assert (rows == rows[:, :1]).all() and (rows[0] == 0).all()
    e = draw("exp_range", (64, 64))
    edge = math.log(float(np.finfo(np.float32).max))
    assert e.max() > edge and e.min() < -edge and np.abs(e).max() <= 1.25 * edge
    e16 = draw("exp_range", (64, 64), "float16")
    assert np.abs(e16).max() < 14 and e16.max() > math.log(65504)


# ---- which families apply, per argument -------------------------------------------------------
def test_each_operator_gets_the_families_its_meaning_asks_for():
    fams = {n: set(families.for_operator(get_operator("cpu", n), "float32")) for n in CPU_NAMES}
    assert "nonfinite" in fams["transpose"] and "nonfinite" not in fams["softmax"]
    assert "masked" in fams["softmax"] and "masked" not in fams["layernorm"]
    assert "exp_range" in fams["softmax"] and "exp_range" in fams["bias_gelu"]
    assert "exp_range" not in fams["gemm"] and "constant_rows" not in fams["transpose"]
    for names in fams.values():
        assert {"special", "unit", "uniform", "sorted", "reverse_sorted"} <= names
    assert "increasing" in fams["gemm"] and "increasing" not in fams["layernorm"]
    assert families.for_operator(get_operator("cuda", "kda"), "bfloat16") == ()
    for family in families.FAMILIES.values():  # every family says where and why
        assert family.applies and family.why


def test_a_family_redraws_the_data_not_the_weights():
    op = CUDA_OPERATORS["layernorm"]
    case = CheckCase([4, 64], "unit", 7)
    got = make_inputs(np, op, case, "float32")
    normal = op.make_inputs(np, [4, 64], "float32", np.random.default_rng(7), "normal")
    assert ((got["x"] >= 0) & (got["x"] < 1)).all()
    assert np.array_equal(got["w"], normal["w"]) and np.array_equal(got["b"], normal["b"])


def _custom(args: list[Arg], dims=("n",)) -> CustomOperator:
    spec = KernelSpec(entry="k", language="c", source="", source_name="k.c", tune_params={},
                      restrictions=[], defines={}, dims=list(dims), args=args,
                      reference_text="def k(x): return x", reference_function="k")
    return CustomOperator(spec)


def test_your_kernel_gets_families_only_inside_each_arguments_range():
    op = _custom([Arg("out", "output", shape=["n"]),
                  Arg("pos", "input", shape=["n"], fill="uniform", low=0.5, high=2.0),
                  Arg("x", "input", shape=["n"], fill="uniform", low=-1.0, high=1.0),
                  Arg("idx", "input", dtype="int32", shape=["n"], fill="randint", low=0, high=9)])
    assert {a.name for a in families.custom_args(op, "unit")} == {"x"}
    assert {a.name for a in families.custom_args(op, "special")} == {"x"}
    assert {a.name for a in families.custom_args(op, "sorted")} == {"pos", "x"}
    assert "nonfinite" not in families.for_operator(op, "float32")
    for fam in families.for_operator(op, "float32"):
        got = make_inputs(np, op, CheckCase([300], fam, 3), "float32")
        assert ((got["pos"] >= 0.5) & (got["pos"] < 2.0)).all(), fam  # the user's range holds
        assert got["idx"].dtype == np.int32
    inc = make_inputs(np, op, CheckCase([300], "increasing", 3), "float32")["pos"]
    assert (np.diff(inc) >= 0).all()


# ---- planning ---------------------------------------------------------------------------------
def test_every_family_is_planned_at_cheap_shapes_and_shape_families_are_named():
    op = get_operator("cpu", "softmax")
    cases = plan_checks(op, [[4096, 1024]], op.params(), "float32", seed=5)
    fams = families.for_operator(op, "float32")
    big = [c for c in cases if math.prod(c.shape) > 100_000]
    assert all(c.origin == "goal" for c in big) and len(big) == 2  # the goal's share only
    prime = [c for c in cases if c.family == "prime"]
    assert len(prime) == 1 and prime[0].shape == [61, 257] and prime[0].distribution == "normal"
    assert any(c.family == "tiny" and c.shape == [1, 1] for c in cases)
    for fam in set(fams) - set(op.distributions):  # at the first edge and the prime shape
        assert {tuple(c.shape) for c in cases if c.distribution == fam} >= {(3, 5), (61, 257)}
    stored = CheckCase([61, 257], "unit", 9, family="").to_dict()
    again = plan_checks(op, [[4096, 1024]], op.params(), "float32", [stored], seed=5)
    assert again[0].distribution == "unit" and again[0].origin == "validation"


def test_your_kernel_gets_the_families_at_its_goal_shapes():
    op = _custom([Arg("out", "output", shape=["n"]), Arg("x", "input", shape=["n"])])
    cases = plan_checks(op, [[1000]], {}, "float32", seed=1)
    assert {c.distribution for c in cases} == {"normal", *families.for_operator(op, "float32")}


# ---- no false alarm from the references and tolerances ---------------------------------------
def _perfect(op, shape, dtype, case):
    """The float64 reference rounded to storage: what a kernel without error writes."""
    inputs = make_inputs(np, op, case, dtype)
    with np.errstate(all="ignore"):
        ref = op.reference(np, {k: from_storage(np, v, dtype) for k, v in inputs.items()}, shape)
    out = {k: to_storage(np, v, dtype) for k, v in ref.items()}
    return compare(np, op, inputs, out, shape, dtype, tolerance_for(op, shape, dtype))


@pytest.mark.parametrize("backend, name", [("cpu", n) for n in CPU_NAMES] +
                         [("cuda", n) for n in CUDA_OPERATORS])
def test_an_exact_kernel_passes_every_family(backend, name):
    op = get_operator(backend, name)
    goal = [[40, 72, 48]] if op.shape_doc.startswith("[M") else [[40, 264]]
    params = op.params() if backend == "cpu" else {}
    for dtype in op.dtypes:
        for case in plan_checks(op, goal, params, dtype, seed=11):
            if math.prod(case.shape) > 300_000:
                continue  # the large edge shape of a GEMM: as the small ones, only slower
            problem = _perfect(op, case.shape, dtype, case)
            assert problem is None, (dtype, case, problem)


# ---- data movement: bit for bit ---------------------------------------------------------------
def test_transpose_is_compared_bit_for_bit():
    op = get_operator("cpu", "transpose")
    case = CheckCase([5, 7], "special", 3)
    x = make_inputs(np, op, case, "float32")
    good = np.ascontiguousarray(x["x"].T)
    tol = tolerance_for(op, [5, 7], "float32")
    assert compare(np, op, x, {"out": good}, [5, 7], "float32", tol) is None
    flushed = np.where(np.abs(good) < 1e-30, np.float32(0), good)  # -0 -> +0, denormals -> 0
    problem = compare(np, op, x, {"out": flushed}, [5, 7], "float32", tol)
    assert problem and "bit for bit" in problem
    nan_case = CheckCase([16, 16], "nonfinite", 4)
    x = make_inputs(np, op, nan_case, "float32")
    good = np.ascontiguousarray(x["x"].T)
    assert compare(np, op, x, {"out": good}, [16, 16], "float32", tol) is None
    quiet = good.copy()
    quiet[np.isnan(quiet)] = np.float32("nan")  # NaN, but not the input's payload
    assert "bit for bit" in compare(np, op, x, {"out": quiet}, [16, 16], "float32", tol)


def test_a_custom_kernel_that_only_copies_is_detected_as_data_movement():
    copy = _custom([Arg("out", "output", shape=["n"]), Arg("x", "input", shape=["n"])])
    x = {"x": np.random.default_rng(0).standard_normal(100)}
    assert families.looks_like_copy(np, x, {"out": x["x"][::-1].copy()})
    assert not families.looks_like_copy(np, x, {"out": 2 * x["x"]})
    assert not families.looks_like_copy(np, x, {"out": x["x"].reshape(10, 10).max(axis=1)})
    assert families.is_movement(copy, np, x, {"out": x["x"].copy()})
