"""The tensor-core (factored, matmul) form of KDA's intra-chunk products: equal to the pairwise
form, safe in float32 with 16-row sub-chunks when the gate is bounded below, overflowing when a
whole 64-row chunk is factored at once: the numerical constraint the CUDA kernel inherits."""

from __future__ import annotations

import numpy as np
import pytest

from app.catalog.kda import check_close, chunked_kda, make_inputs, recurrent_kda
from app.catalog.kda.chunked import gate_cumsum, gated_products


@pytest.mark.parametrize("n,sub_chunk", [(64, 16), (37, 16), (64, 32), (20, 64)])
@pytest.mark.parametrize("diagonal", [False, True])
def test_factored_products_equal_the_pairwise_ones(n, sub_chunk, diagonal):
    x = make_inputs(1, n, 2, 16, 16, seed=n + sub_chunk)
    G = gate_cumsum(x.g[0])
    k, q = np.moveaxis(x.k[0], 1, 0), np.moveaxis(x.q[0], 1, 0)
    pairwise = gated_products(q, k, G, diagonal=diagonal)
    factored = gated_products(q, k, G, diagonal=diagonal, sub_chunk=sub_chunk)
    np.testing.assert_allclose(factored, pairwise, rtol=1e-12, atol=1e-14)
    assert np.all(np.triu(factored, k=0 if not diagonal else 1) == 0)


def test_factored_float32_matches_the_reference_at_realistic_gates():
    x = make_inputs(1, 150, 2, 32, 32, seed=31, initial_state=True)
    o_ref, S_ref = recurrent_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state)
    for sub_chunk in (16, 64):
        o, S = chunked_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state,
                           chunk_size=64, sub_chunk=sub_chunk, dtype=np.float32)
        assert o.dtype == np.float32
        assert check_close(o, o_ref, "float32").ok, check_close(o, o_ref, "float32")
        assert check_close(S, S_ref, "float32", keep_axes=(0, 1)).ok


def test_bounded_gates_need_small_sub_chunks():
    """g = -5 sigmoid(.) (a gate bounded below at -5, as flash-linear-attention's safe gate):
    16-row sub-chunks stay exact in float32, a whole 64-row chunk overflows exp(R - G_j)."""
    x = make_inputs(1, 128, 2, 16, 16, seed=32, initial_state=True)
    g = -5.0 / (1.0 + np.exp(-np.random.default_rng(32).standard_normal(x.g.shape)))
    assert np.cumsum(g[0, :64], axis=0).min() < -88.72 < np.cumsum(g[0, :16], axis=0).min()
    o_ref, _ = recurrent_kda(x.q, x.k, x.v, g, x.beta, initial_state=x.initial_state)
    with np.errstate(all="ignore"):
        small = chunked_kda(x.q, x.k, x.v, g, x.beta, initial_state=x.initial_state,
                            chunk_size=64, sub_chunk=16, dtype=np.float32)[0]
        whole = chunked_kda(x.q, x.k, x.v, g, x.beta, initial_state=x.initial_state,
                            chunk_size=64, sub_chunk=64, dtype=np.float32)[0]
    assert check_close(small, o_ref, "float32").ok, check_close(small, o_ref, "float32")
    assert not check_close(whole, o_ref, "bfloat16").ok

