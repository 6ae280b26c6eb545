"""The verification protocol with numpy runners standing in for kernels (fast, no compiler):
each protection catches the fault it exists for, and a correct runner passes everything."""

from __future__ import annotations

import numpy as np
import pytest

from app.catalog.cpu.ops import GEMM, RMSNORM, SOFTMAX, TRANSPOSE
from app.gpu.verify import (
    DISTRIBUTIONS,
    CheckCase,
    GuardedOutput,
    edge_shapes,
    make_inputs,
    plan_checks,
    verify,
)

OPS = [GEMM, SOFTMAX, RMSNORM, TRANSPOSE]
SHAPES = {"gemm": [[32, 48, 64]], "softmax": [[16, 64]], "rmsnorm": [[16, 64]], "transpose": [[32, 64]]}


def exact_runner(op):
    """A correct implementation: the float64 reference, rounded to float32."""

    def run(inputs, out):
        x64 = {k: v.astype(np.float64) for k, v in inputs.items()}
        out.view[...] = op.reference(x64).astype(np.float32)

    return run


def cases_for(op, seed=1):
    return plan_checks(op, SHAPES[op.name], op.params(2), seed=seed)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_correct_runner_passes_every_case(op):
    cases = cases_for(op)
    assert {c.distribution for c in cases} == set(DISTRIBUTIONS)
    assert verify(op, exact_runner(op), cases) is None


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_reference_is_finite_near_the_dtype_limits(op):
    shape = tuple(SHAPES[op.name][0])
    inputs = make_inputs(op, CheckCase(list(shape), "near_limits", 5))
    assert np.abs(next(iter(inputs.values()))).max() > 1e10
    ref = op.reference({k: v.astype(np.float64) for k, v in inputs.items()})
    assert np.isfinite(ref).all()
    assert np.abs(ref.astype(np.float32)).max() < np.finfo(np.float32).max


def test_untouched_output_is_caught_as_nan():
    def lazy(inputs, out):  # forgets the last row
        exact_runner(TRANSPOSE)(inputs, out)
        out.view[-1, :] = np.nan

    failure = verify(TRANSPOSE, lazy, cases_for(TRANSPOSE))
    assert failure is not None and "NaN" in failure.problem


def test_write_past_the_end_hits_the_guard_canaries():
    def overrun(inputs, out):
        exact_runner(TRANSPOSE)(inputs, out)
        out.buffer[out.guard + out.size] = 0.0  # one element past the end

    failure = verify(TRANSPOSE, overrun, cases_for(TRANSPOSE))
    assert failure is not None and "guard" in failure.problem and failure.corrupted_memory


def test_write_before_the_start_hits_the_guard_canaries():
    def underrun(inputs, out):
        exact_runner(TRANSPOSE)(inputs, out)
        out.buffer[out.guard - 1] = 1.0

    assert "guard" in verify(TRANSPOSE, underrun, cases_for(TRANSPOSE)).problem


def test_writing_into_an_input_is_caught():
    def scribble(inputs, out):
        exact_runner(SOFTMAX)(inputs, out)
        inputs["x"][0, 0] += 1.0

    failure = verify(SOFTMAX, scribble, cases_for(SOFTMAX))
    assert failure is not None and "input" in failure.problem


def test_error_beyond_tolerance_fails_and_within_passes():
    def off(scale):
        def run(inputs, out):
            exact_runner(RMSNORM)(inputs, out)
            out.view[...] *= np.float32(1 + scale)
        return run

    assert verify(RMSNORM, off(1e-6), cases_for(RMSNORM)) is None
    failure = verify(RMSNORM, off(1e-3), cases_for(RMSNORM))
    assert failure is not None and "outside tolerance" in failure.problem


def test_goal_tolerance_overrides_the_dtype_default():
    def off(inputs, out):
        exact_runner(RMSNORM)(inputs, out)
        out.view[...] *= np.float32(1 + 1e-3)

    assert verify(RMSNORM, off, cases_for(RMSNORM), rtol=1e-2) is None


def test_constant_output_cheat_fails():
    def zeros(inputs, out):
        out.view[...] = 0.0

    assert verify(SOFTMAX, zeros, cases_for(SOFTMAX)) is not None


def test_nondeterminism_is_caught():
    rng = np.random.default_rng(0)

    def noisy(inputs, out):  # within tolerance, but differs run to run
        exact_runner(SOFTMAX)(inputs, out)
        out.view[...] *= np.float32(1 + 1e-7 * rng.standard_normal(out.shape))

    failure = verify(SOFTMAX, noisy, cases_for(SOFTMAX))
    assert failure is not None and failure.check == "determinism"


def test_reading_the_output_before_writing_it_is_caught():
    def accumulate(inputs, out):  # out += A @ B, trusting the buffer to be zero
        out.view[...] += (inputs["A"] @ inputs["B"])

    failure = verify(GEMM, accumulate, cases_for(GEMM))
    assert failure is not None and "NaN" in failure.problem


def test_failing_case_reproduces_the_failure():
    def fails_on_zero_rows(inputs, out):
        exact_runner(TRANSPOSE)(inputs, out)
        zero_rows = np.all(inputs["x"] == 0, axis=1)
        out.view[:, zero_rows] = np.nan

    failure = verify(TRANSPOSE, fails_on_zero_rows, cases_for(TRANSPOSE))
    case = failure.failing_case("transpose")
    assert case["distribution"] == "constant_rows"
    # the stored case alone reproduces it
    again = verify(TRANSPOSE, fails_on_zero_rows, plan_checks(TRANSPOSE, [], {}, [case])[:1],
                   determinism=False)
    assert again is not None and again.case.origin == "validation"


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_edge_shapes_are_not_multiples_of_any_tile(op):
    params = op.params(8)
    tiles = {v for p in op.tile_params for v in params[p] if v > 1}
    shapes = edge_shapes(op, SHAPES[op.name], params)
    assert len(shapes) >= 2
    for shape in shapes:
        assert len(shape) == op.ndim
        for d in shape:
            assert all(d % t for t in tiles), (shape, tiles)


def test_validation_cases_come_first_and_seeds_are_fresh():
    stored = {"shape": [3, 5], "distribution": "sparse", "seed": 99}
    a = plan_checks(TRANSPOSE, [[32, 64]], TRANSPOSE.params(2), [stored], seed=1)
    b = plan_checks(TRANSPOSE, [[32, 64]], TRANSPOSE.params(2), [stored], seed=2)
    assert a[0].identity() == ((3, 5), "sparse", 99) and a[0].origin == "validation"
    assert [c.seed for c in a[1:]] != [c.seed for c in b[1:]]
    assert any(c.shape == [32, 64] for c in a)


def test_malformed_stored_cases_are_skipped():
    cases = plan_checks(TRANSPOSE, [[8, 8]], {}, [{"nope": 1}, {"shape": [1, 2, 3]}])
    assert all(c.origin != "validation" for c in cases)


def test_guarded_output_starts_as_nan_with_intact_guards():
    out = GuardedOutput((4, 5))
    assert np.isnan(out.view).all() and out.guards_intact()
    out.view[...] = 1.0
    assert out.guards_intact()
