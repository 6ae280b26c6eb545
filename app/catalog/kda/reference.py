"""The float64 recurrent KDA reference: one decay and one rank-1 delta-rule update per step.

Follows flash-linear-attention's `naive_recurrent_kda` (fla/ops/kda/naive.py, fla-org/
flash-linear-attention): per head, with state S [K, V] and scale = K**-0.5 by default,

    S   <- diag(exp(g_t)) S                        (decay first, per key channel)
    S   <- S + beta_t k_t (v_t - S^T k_t)^T        (delta rule on the decayed state)
    o_t  = S^T (scale q_t)                         (read after the update)
"""

from __future__ import annotations

import numpy as np

from app.catalog.kda.sequences import initial_states, sequence_spans


def recurrent_kda(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, *,
                  scale: float | None = None, initial_state: np.ndarray | None = None,
                  cu_seqlens: np.ndarray | list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """o [B, T, H, V] and the final states [N, H, K, V] (N = B, or the number of sequences)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    q, k, v, g, beta = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g, beta))
    spans = sequence_spans(B, T, cu_seqlens)
    states = initial_states(len(spans), H, K, V, initial_state)
    o = np.zeros((B, T, H, V))
    for n, (b, start, end) in enumerate(spans):
        S = states[n]  # [H, K, V], updated in place
        for t in range(start, end):
            S *= np.exp(g[b, t])[:, :, None]
            error = v[b, t] - np.einsum("hk,hkv->hv", k[b, t], S)
            S += np.einsum("hk,hv->hkv", beta[b, t][:, None] * k[b, t], error)
            o[b, t] = np.einsum("hk,hkv->hv", scale * q[b, t], S)
    return o, states
