"""The norm-based tolerance for recurrences in bf16 (app/catalog/kda/tolerance.py): bf16 rounding,
the per-head relative Frobenius error, and the bf16 budget measured against a chunked forward that
stores its workspaces in bf16 (as a GPU kernel does) and against a wrong algorithm."""

from __future__ import annotations

import numpy as np
from test_kda_reference import decay_after_update

from app.catalog.kda import (
    TOLERANCE,
    check_close,
    chunked_kda,
    make_inputs,
    recurrent_kda,
    relative_frobenius_per_head,
    round_to_bf16,
)


def test_round_to_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-7, -2.5, 3.0e38], dtype=np.float32)
    np.testing.assert_array_equal(round_to_bf16(x)[:5], [1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -2.5])
    r = np.random.default_rng(0).standard_normal(10000).astype(np.float32)
    rel = np.abs(round_to_bf16(r) - r) / np.abs(r)
    assert rel.max() <= 2**-8 and rel.max() > 2**-10     # half an ulp of an 8-bit significand
    assert (round_to_bf16(r).view(np.uint32) & 0xFFFF).max() == 0


def test_per_head_error_flags_the_one_wrong_head():
    rng = np.random.default_rng(1)
    expected = rng.standard_normal((2, 50, 4, 8))
    actual = expected + 1e-4 * rng.standard_normal(expected.shape)
    actual[1, :, 2] *= 1.05                                     # one head of one row off by 5%
    err = relative_frobenius_per_head(actual, expected, (0, 2))
    assert err.shape == (2, 4)
    assert abs(err[1, 2] - 0.05) < 1e-3 and np.delete(err.ravel(), 6).max() < 1e-3
    report = check_close(actual, expected, "bfloat16")
    assert not report.ok and report.worst_index == (1, 2) and "OVER" in str(report)
    # averaged over the whole tensor, the wrong head would pass a bf16 budget
    whole = np.linalg.norm(actual - expected) / np.linalg.norm(expected)
    assert whole < TOLERANCE["bfloat16"] * 3


def test_a_head_that_decayed_to_zero_is_judged_against_the_tensors_scale():
    expected = np.ones((1, 10, 2, 4))
    expected[:, :, 1] = 1e-12
    actual = expected.copy()
    actual[:, :, 1] += 1e-9                                      # noise far below the tensor's scale
    assert check_close(actual, expected, "float32").ok
    actual[0, 3, 0, 0] = np.nan
    assert np.isinf(relative_frobenius_per_head(actual, expected, (0, 2))[0, 0])


def bf16_inputs(x):
    return [round_to_bf16(a).astype(np.float64) for a in (x.q, x.k, x.v, x.g, x.beta, x.initial_state)]


def test_bf16_workspaces_fit_the_budget_and_a_wrong_algorithm_does_not():
    x = make_inputs(1, 200, 3, 32, 32, seed=21, initial_state=True)
    q, k, v, g, beta, s0 = bf16_inputs(x)
    o_ref, S_ref = recurrent_kda(q, k, v, g, beta, initial_state=s0)
    worst = []
    for chunk_size in (16, 32, 64):
        o, S = chunked_kda(q, k, v, g, beta, initial_state=s0, chunk_size=chunk_size,
                           dtype=np.float32, store=round_to_bf16)
        for report in (check_close(o, o_ref, "bfloat16"),
                       check_close(S, S_ref, "bfloat16", keep_axes=(0, 1))):
            assert report.ok, report
            worst.append(report.worst)
    assert max(worst) > 2**-12                                   # bf16 rounding did happen
    print(f"bf16 workspaces: worst per-head relative error {max(worst):.2e}")
    wrong = decay_after_update(q, k, v, g, beta, s0)
    assert check_close(wrong, o_ref, "bfloat16").worst > 10 * max(worst)


def test_bf16_error_does_not_grow_with_sequence_length():
    """The decay contracts the state, so rounding errors are forgotten, not accumulated."""
    errors = []
    for T in (32, 512):
        x = make_inputs(1, T, 2, 16, 16, seed=22, initial_state=True)
        q, k, v, g, beta, s0 = bf16_inputs(x)
        o_ref, _ = recurrent_kda(q, k, v, g, beta, initial_state=s0)
        o, _ = chunked_kda(q, k, v, g, beta, initial_state=s0, chunk_size=32,
                           dtype=np.float32, store=round_to_bf16)
        errors.append(check_close(o, o_ref, "bfloat16").worst)
    assert errors[1] < 2 * errors[0] + 1e-3, errors
