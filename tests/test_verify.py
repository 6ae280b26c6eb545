"""The verification protocol with numpy runners standing in for kernels (fast, no compiler):
each protection catches the fault it exists for, and a correct runner passes everything. The
same code serves CPU and CUDA operators (array module `xp`, 2-byte dtypes, several outputs)."""

from __future__ import annotations

import numpy as np
import pytest

from app.catalog import families
from app.catalog.cpu.ops import GEMM, RMSNORM, SOFTMAX, TRANSPOSE
from app.catalog.cuda import OPERATORS as CUDA_OPS
from app.catalog.protocol import OperatorBase, from_storage, to_storage
from app.gpu import verify as V
from app.gpu.verify import CheckCase, GuardedOutput, plan_checks


def verify(op, runner, cases, dtype="float32", **kw):
    return V.verify(np, op, runner, cases, dtype, **kw)


def make_inputs(op, case, dtype="float32"):
    return V.make_inputs(np, op, case, dtype)


OPS = [GEMM, SOFTMAX, RMSNORM, TRANSPOSE]
SHAPES = {"gemm": [[32, 48, 64]], "softmax": [[16, 64]], "rmsnorm": [[16, 64]], "transpose": [[32, 64]]}


def exact_runner(op):
    """A correct implementation: the float64 reference, rounded to float32."""

    def run(inputs, outputs, shape, dtype="float32"):
        x64 = {k: from_storage(np, v, dtype) for k, v in inputs.items()}
        for name, ref in op.reference(np, x64, shape).items():
            outputs[name].view[...] = to_storage(np, ref, dtype)

    return run


def cases_for(op, seed=1):
    return plan_checks(op, SHAPES[op.name], op.params(2), seed=seed)


def out_of(outputs):
    return outputs["out"]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_correct_runner_passes_every_case(op):
    cases = cases_for(op)
    # the operator's own distributions, and the families chosen by what it means
    assert {c.distribution for c in cases} == set(op.distributions) | set(families.for_operator(op, "float32"))
    assert verify(op, exact_runner(op), cases) is None


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_reference_is_finite_near_the_dtype_limits(op):
    shape = tuple(SHAPES[op.name][0])
    inputs = make_inputs(op, CheckCase(list(shape), "near_limits", 5))
    assert np.abs(next(iter(inputs.values()))).max() > 1e10
    ref = op.reference(np, {k: v.astype(np.float64) for k, v in inputs.items()}, shape)["out"]
    assert np.isfinite(ref).all()
    assert np.abs(ref.astype(np.float32)).max() < np.finfo(np.float32).max


def test_untouched_output_is_caught_as_nan():
    def lazy(inputs, outputs, shape):  # forgets the last row
        exact_runner(TRANSPOSE)(inputs, outputs, shape)
        out_of(outputs).view[-1, :] = np.nan

    failure = verify(TRANSPOSE, lazy, cases_for(TRANSPOSE))
    assert failure is not None and "NaN" in failure.problem


def test_write_past_the_end_hits_the_guard_canaries():
    def overrun(inputs, outputs, shape):
        exact_runner(TRANSPOSE)(inputs, outputs, shape)
        out = out_of(outputs)
        out.buffer[out.guard + out.size] = 0.0  # one element past the end

    failure = verify(TRANSPOSE, overrun, cases_for(TRANSPOSE))
    assert failure is not None and "guard" in failure.problem and failure.corrupted_memory


def test_write_before_the_start_hits_the_guard_canaries():
    def underrun(inputs, outputs, shape):
        exact_runner(TRANSPOSE)(inputs, outputs, shape)
        out = out_of(outputs)
        out.buffer[out.guard - 1] = 1.0

    assert "guard" in verify(TRANSPOSE, underrun, cases_for(TRANSPOSE)).problem


def test_writing_into_an_input_is_caught():
    def scribble(inputs, outputs, shape):
        exact_runner(SOFTMAX)(inputs, outputs, shape)
        inputs["x"][0, 0] += 1.0

    failure = verify(SOFTMAX, scribble, cases_for(SOFTMAX))
    assert failure is not None and "input" in failure.problem


def test_error_beyond_tolerance_fails_and_within_passes():
    def off(scale):
        def run(inputs, outputs, shape):
            exact_runner(RMSNORM)(inputs, outputs, shape)
            out_of(outputs).view[...] *= np.float32(1 + scale)
        return run

    assert verify(RMSNORM, off(1e-6), cases_for(RMSNORM)) is None
    failure = verify(RMSNORM, off(1e-3), cases_for(RMSNORM))
    assert failure is not None and "outside tolerance" in failure.problem


def test_goal_tolerance_overrides_the_dtype_default():
    def off(inputs, outputs, shape):
        exact_runner(RMSNORM)(inputs, outputs, shape)
        out_of(outputs).view[...] *= np.float32(1 + 1e-3)

    assert verify(RMSNORM, off, cases_for(RMSNORM), rtol=1e-2) is None


def test_constant_output_cheat_fails():
    def zeros(inputs, outputs, shape):
        out_of(outputs).view[...] = 0.0

    assert verify(SOFTMAX, zeros, cases_for(SOFTMAX)) is not None


def test_nondeterminism_is_caught():
    rng = np.random.default_rng(0)

    def noisy(inputs, outputs, shape):  # within tolerance, but differs run to run
        exact_runner(SOFTMAX)(inputs, outputs, shape)
        out = out_of(outputs)
        out.view[...] *= np.float32(1 + 1e-7 * rng.standard_normal(out.shape))

    failure = verify(SOFTMAX, noisy, cases_for(SOFTMAX))
    assert failure is not None and failure.check == "determinism"


def test_reading_the_output_before_writing_it_is_caught():
    def accumulate(inputs, outputs, shape):  # out += A @ B, trusting the buffer to be zero
        out_of(outputs).view[...] += (inputs["A"] @ inputs["B"])

    failure = verify(GEMM, accumulate, cases_for(GEMM))
    assert failure is not None and "NaN" in failure.problem


def test_failing_case_reproduces_the_failure():
    def fails_on_zero_rows(inputs, outputs, shape):
        exact_runner(TRANSPOSE)(inputs, outputs, shape)
        zero_rows = np.all(inputs["x"] == 0, axis=1)
        out_of(outputs).view[:, zero_rows] = np.nan

    failure = verify(TRANSPOSE, fails_on_zero_rows, cases_for(TRANSPOSE))
    case = failure.failing_case("transpose", "float32")
    assert case["distribution"] == "constant_rows"
    # the stored case alone reproduces it
    again = verify(TRANSPOSE, fails_on_zero_rows, plan_checks(TRANSPOSE, [], {}, "float32", [case])[:1],
                   determinism=False)
    assert again is not None and again.case.origin == "validation"


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_edge_shapes_are_not_multiples_of_any_tile(op):
    params = op.params(8)
    tiles = {v for p in op.tile_params for v in params[p] if v > 1}
    shapes = op.edge_shapes(SHAPES[op.name], "float32", params)
    assert len(shapes) >= 2
    for shape in shapes:
        assert len(shape) == op.ndim
        for d in shape:
            assert all(d % t for t in tiles), (shape, tiles)


def test_validation_cases_come_first_and_seeds_are_fresh():
    stored = {"shape": [3, 5], "distribution": "sparse", "seed": 99}
    a = plan_checks(TRANSPOSE, [[32, 64]], TRANSPOSE.params(2), "float32", [stored], seed=1)
    b = plan_checks(TRANSPOSE, [[32, 64]], TRANSPOSE.params(2), "float32", [stored], seed=2)
    assert a[0].identity() == ((3, 5), "sparse", 99) and a[0].origin == "validation"
    assert [c.seed for c in a[1:]] != [c.seed for c in b[1:]]
    assert any(c.shape == [32, 64] for c in a)


def test_malformed_stored_cases_are_skipped():
    cases = plan_checks(TRANSPOSE, [[8, 8]], {}, "float32", [{"nope": 1}, {"shape": [1, 2, 3]}])
    assert all(c.origin != "validation" for c in cases)


def test_guarded_output_starts_as_nan_with_intact_guards():
    out = GuardedOutput(np, (4, 5))
    assert np.isnan(out.view).all() and out.guards_intact()
    out.view[...] = 1.0
    assert out.guards_intact()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_two_byte_outputs_are_guarded_and_nan_filled(dtype):
    out = GuardedOutput(np, (3, 7), dtype)
    assert np.isnan(from_storage(np, out.view, dtype)).all() and out.guards_intact()
    out.buffer[out.guard + out.size] = 0
    assert not out.guards_intact()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_operators_verify_through_the_same_code(dtype):
    """A CUDA operator's float64 reference rounded to its storage dtype passes; a skipped row fails
    with the same message format as on the CPU."""
    op = CUDA_OPS["layernorm"]
    shapes = [[16, 96]]
    cases = plan_checks(op, shapes, op.space(dtype).params, dtype, seed=3)
    run = exact_runner(op)
    assert V.verify(np, op, lambda i, o, s: run(i, o, s, dtype), cases, dtype) is None

    def lazy(inputs, outputs, shape):
        run(inputs, outputs, shape, dtype)
        outputs["y"].view[-1] = outputs["y"].bits[0]  # a canary where a result belongs

    failure = V.verify(np, op, lazy, cases, dtype)
    assert failure is not None and "outputs of 'y'" in failure.problem


def test_several_outputs_are_each_checked():
    """An operator with two outputs (mean and variance): the second one wrong is caught by name."""

    class MeanVar(OperatorBase):
        name, language, deterministic = "meanvar", "c", True
        distributions = ("normal", "offset")
        inputs_vary, fixed_inputs, perturb_timed_inputs = True, (), False

        def check_shape(self, shape, dtype="float32"):
            return None

        def output_shapes(self, shape):
            return {"mean": (shape[0],), "var": (shape[0],)}

        def make_inputs(self, xp, shape, dtype, rng, distribution):
            return {"x": to_storage(xp, rng.standard_normal(tuple(shape)) + 2.0, dtype)}

        def reference(self, xp, inputs, shape):
            x = inputs["x"]
            return {"mean": x.mean(axis=1), "var": x.var(axis=1)}

        def error_scale(self, xp, inputs, ref, shape):
            return {k: xp.abs(v) + 1.0 for k, v in ref.items()}

        def rtol_growth(self, shape, dtype):
            return 10.0

        def atol(self, shape, dtype, rtol):
            return 1e-6

        def edge_shapes(self, goal_shapes, dtype, params):
            return [[3, 5]]

    op = MeanVar()
    cases = plan_checks(op, [[8, 32]], {}, "float32", seed=0)
    good = exact_runner(op)
    assert V.verify(np, op, good, cases) is None

    def bad_var(inputs, outputs, shape):
        good(inputs, outputs, shape)
        outputs["var"].view[...] *= np.float32(1.01)

    failure = V.verify(np, op, bad_var, cases)
    assert failure is not None and "outputs of 'var'" in failure.problem


def test_an_untouched_bf16_output_reads_as_nan_without_a_floating_point_warning():
    """The canary left in an output no kernel wrote is a signalling NaN: widening it must give
    NaN (the comparison then names the output) and must not raise numpy's invalid-cast
    warning, which a run would otherwise print once per unwritten output."""
    import warnings

    import numpy as np

    from app.catalog.protocol import from_storage

    stored = np.array([0x7FA5, 0x3F80], dtype=np.uint16)  # the canary, then 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = from_storage(np, stored, "bfloat16")
    assert np.isnan(got[0]) and got[1] == 1.0
