"""KDA forward on the CPU: the float64 recurrent reference against closed forms, and the
chunked algorithm (gate cumsum, WY/UT solve, inter-chunk recurrence, output) against the reference
at several T, chunk sizes, with and without an initial state, and across varlen boundaries."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from app.catalog.kda import chunked_kda, make_inputs, recurrent_kda
from app.catalog.kda.chunked import plan_chunks
from app.catalog.kda.tolerance import TOLERANCE, check_close, relative_frobenius_per_head

F64 = TOLERANCE["float64"]


def run_both(x, **kw):
    ref = recurrent_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state,
                        cu_seqlens=kw.get("cu_seqlens"))
    out = chunked_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state, **kw)
    return ref, out


def test_single_step_matches_the_closed_form():
    x = make_inputs(1, 1, 2, 8, 4, seed=3, initial_state=True)
    q, k, v, g, b, S0 = x.q[0, 0], x.k[0, 0], x.v[0, 0], x.g[0, 0], x.beta[0, 0], x.initial_state[0]
    decayed = np.exp(g)[:, :, None] * S0                      # decay before the update
    error = v - np.einsum("hk,hkv->hv", k, decayed)
    S1 = decayed + b[:, None, None] * k[:, :, None] * error[:, None, :]
    o, S = recurrent_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state)
    np.testing.assert_allclose(S[0], S1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(o[0, 0], np.einsum("hk,hkv->hv", q * 8 ** -0.5, S1), rtol=1e-12)


def test_beta_zero_only_decays_the_initial_state():
    x = make_inputs(1, 20, 2, 8, 4, seed=4, initial_state=True)
    o, S = recurrent_kda(x.q, x.k, x.v, x.g, np.zeros_like(x.beta), initial_state=x.initial_state)
    G = np.cumsum(x.g[0], axis=0)                              # [T, H, K]
    expected = np.einsum("thk,hkv->thv", np.exp(G) * x.q[0] * 8 ** -0.5, x.initial_state[0])
    np.testing.assert_allclose(o[0], expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(S[0], np.exp(G[-1])[:, :, None] * x.initial_state[0], rtol=1e-12)


def test_without_decay_and_beta_one_the_delta_rule_recalls_the_last_value():
    """g = 0, beta = 1, unit keys: after writing v under k, reading with q = k gives v back."""
    x = make_inputs(1, 12, 2, 16, 8, seed=5, initial_state=True)
    o, _ = recurrent_kda(x.q, x.k, x.v, np.zeros_like(x.g), np.ones_like(x.beta),
                         scale=1.0, initial_state=x.initial_state)
    o_recall, _ = recurrent_kda(x.k, x.k, x.v, np.zeros_like(x.g), np.ones_like(x.beta),
                                scale=1.0, initial_state=x.initial_state)
    np.testing.assert_allclose(o_recall, x.v, rtol=1e-10, atol=1e-10)
    assert not np.allclose(o, x.v)


@pytest.mark.parametrize("initial_state", [False, True], ids=["zero-state", "initial-state"])
@pytest.mark.parametrize("chunk_size", [16, 32, 64])
@pytest.mark.parametrize("T", [1, 37, 64, 150])
def test_chunked_matches_recurrent(T, chunk_size, initial_state):
    x = make_inputs(2, T, 2, 16, 24, seed=T * 7 + chunk_size, initial_state=initial_state)
    (o_ref, S_ref), (o, S) = run_both(x, chunk_size=chunk_size)
    assert check_close(o, o_ref, "float64").ok, check_close(o, o_ref, "float64")
    assert check_close(S, S_ref, "float64", keep_axes=(0, 1)).ok


def test_varlen_resets_the_state_at_every_boundary():
    cu = [0, 5, 70, 70, 133, 200]                              # short, long, empty, unaligned
    x = make_inputs(1, 200, 2, 16, 16, seed=11, initial_state=True, n_states=len(cu) - 1)
    for chunk_size in (16, 64):
        (o_ref, S_ref), (o, S) = run_both(x, chunk_size=chunk_size, cu_seqlens=cu)
        assert check_close(o, o_ref, "float64").ok
        assert check_close(S, S_ref, "float64", keep_axes=(0, 1)).ok
    for n, (a, b) in enumerate(pairwise(cu)):               # each sequence run on its own
        alone_o, alone_S = recurrent_kda(x.q[:, a:b], x.k[:, a:b], x.v[:, a:b], x.g[:, a:b],
                                         x.beta[:, a:b], initial_state=x.initial_state[n:n + 1])
        np.testing.assert_allclose(o_ref[:, a:b], alone_o, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(S_ref[n], alone_S[0], rtol=1e-12, atol=1e-12)
    carried, _ = chunked_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state[:1])
    assert check_close(carried, o_ref, "bfloat16").worst > 0.1  # without resets: plainly wrong


def test_chunks_never_cross_a_sequence_boundary():
    chunks = plan_chunks(1, 100, 32, [0, 40, 100])
    assert [(c.start, c.end, c.sequence) for c in chunks] == [
        (0, 32, 0), (32, 40, 0), (40, 72, 1), (72, 100, 1)]


def test_strong_decay_stays_finite_and_exact():
    """Chunk-cumulated log-decays far below -700 (exp underflows): the masked pairwise exponent
    never overflows."""
    x = make_inputs(1, 128, 2, 16, 16, seed=12, initial_state=True, gate_scale=30.0)
    assert np.cumsum(x.g[0, :64], axis=0).min() < -700
    (o_ref, S_ref), (o, S) = run_both(x, chunk_size=64)
    assert np.isfinite(o).all() and np.isfinite(S).all()
    assert check_close(o, o_ref, "float64").ok
    assert check_close(S, S_ref, "float64", keep_axes=(0, 1)).ok


def decay_after_update(q, k, v, g, beta, initial_state):
    """A plausible mistake: the rank-1 update reads the undecayed state and decay comes after."""
    S = initial_state[0].copy()
    o = np.zeros_like(v)
    for t in range(q.shape[1]):
        error = v[0, t] - np.einsum("hk,hkv->hv", k[0, t], S)
        S = np.exp(g[0, t])[:, :, None] * (S + np.einsum("hk,hv->hkv", beta[0, t][:, None] * k[0, t], error))
        o[0, t] = np.einsum("hk,hkv->hv", q[0, t] * q.shape[-1] ** -0.5, S)
    return o


def test_a_wrong_decay_placement_is_caught():
    x = make_inputs(1, 96, 2, 16, 16, seed=13, initial_state=True)
    o_ref, _ = recurrent_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state)
    o, _ = chunked_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state, chunk_size=32)
    wrong = decay_after_update(x.q, x.k, x.v, x.g, x.beta, x.initial_state)
    assert check_close(o, o_ref, "float64").ok
    report = check_close(wrong, o_ref, "bfloat16")
    assert not report.ok and report.worst > 5 * TOLERANCE["bfloat16"], report
    shifted = chunked_kda(x.q, x.k, x.v, np.roll(x.g, 1, axis=1), x.beta,   # gate one step late
                          initial_state=x.initial_state, chunk_size=32)[0]
    assert relative_frobenius_per_head(shifted, o_ref, (0, 2)).max() > 5 * TOLERANCE["bfloat16"]


def test_invalid_varlen_and_state_shapes_are_refused():
    x = make_inputs(2, 10, 1, 8, 8, seed=1)
    with pytest.raises(ValueError, match="one batch row"):
        recurrent_kda(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=[0, 4, 10])
    with pytest.raises(ValueError, match="rise from 0"):
        chunked_kda(x.q[:1], x.k[:1], x.v[:1], x.g[:1], x.beta[:1], cu_seqlens=[0, 4, 9])
    with pytest.raises(ValueError, match="initial_state"):
        chunked_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=np.zeros((1, 1, 8, 8)))
