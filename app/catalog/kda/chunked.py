"""The chunked KDA forward in numpy, in the four stages a GPU implementation runs as kernels
(flash-linear-attention's chunk_kda: fla/ops/kda/chunk.py, and the algebra of naive_chunk_kda in
fla/ops/kda/naive.py). Chunks never cross a sequence boundary; a sequence's last chunk may be short.

Within a chunk of n steps that starts from state S0, with G the inclusive cumsum of g in the chunk
and P = exp(G) applied per key channel, the recurrence unrolls to

    delta_i = beta_i (v_i - S0^T (P_i k_i) - sum_{j<i} A_ij delta_j),
    A_ij    = k_i . (exp(G_i - G_j) k_j)                   (j < i)

so (I + diag(beta) A) Delta = diag(beta) (V - (P K) S0): one unit-lower-triangular solve gives the
WY/UT form Tm = (I + diag(beta) A)^-1 diag(beta), w = Tm (P K), u = Tm V, Delta = u - w S0. Then

    o_i   = (P_i q_i)^T S0 + sum_{j<=i} (q_i . exp(G_i - G_j) k_j) delta_j
    S_end = diag(exp(G_n)) S0 + sum_j (exp(G_n - G_j) k_j) delta_j^T
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.catalog.kda.sequences import initial_states, sequence_spans


@dataclass(frozen=True)
class Chunk:
    row: int        # batch row
    start: int      # first step (inclusive)
    end: int        # last step (exclusive)
    sequence: int   # index of the sequence the chunk belongs to


def plan_chunks(B: int, T: int, chunk_size: int, cu_seqlens=None) -> list[Chunk]:
    """Chunks in order, each inside one sequence (sequence resets start a new chunk)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return [Chunk(b, s, min(s + chunk_size, end), n)
            for n, (b, start, end) in enumerate(sequence_spans(B, T, cu_seqlens))
            for s in range(start, end, chunk_size)]


# ---- stage 1: gate cumsum within each chunk ----------------------------------------------------

def gate_cumsum(g_chunk: np.ndarray) -> np.ndarray:
    """[n, H, K] log-decays -> [H, n, K] inclusive cumulative sums (decay up to and including i)."""
    return np.cumsum(np.moveaxis(g_chunk, 1, 0), axis=1)


# ---- stage 2: intra-chunk products and the WY/UT solve -----------------------------------------

def gated_products(a: np.ndarray, b: np.ndarray, G: np.ndarray, *, diagonal: bool) -> np.ndarray:
    """M[h, i, j] = sum_d a[h,i,d] b[h,j,d] exp(G[h,i,d] - G[h,j,d]) for j < i (j <= i with
    `diagonal`), else 0. The exponent is masked before exp, so it is never positive (no overflow
    however strong the decay; a kernel that factors exp(G_i) exp(-G_j) must bound the chunk)."""
    n = G.shape[1]
    lower = np.tril(np.ones((n, n), dtype=bool), k=0 if diagonal else -1)
    diff = G[:, :, None, :] - G[:, None, :, :]                      # [H, i, j, K]
    decay = np.exp(np.where(lower[None, :, :, None], diff, -np.inf))
    return np.einsum("hid,hjd,hijd->hij", a, b, decay)


def solve_unit_lower(M: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """X with M X = rhs for unit-lower-triangular M [H, n, n], by forward substitution row by row
    (what a kernel does in registers/shared memory; no general solver)."""
    X = np.zeros_like(rhs)
    for i in range(M.shape[1]):
        X[:, i] = rhs[:, i] - np.einsum("hj,hj...->h...", M[:, i, :i], X[:, :i])
    return X


def wy_transform(k: np.ndarray, v: np.ndarray, G: np.ndarray, beta: np.ndarray):
    """k [H, n, K], v [H, n, V], G [H, n, K], beta [H, n] -> w [H, n, K], u [H, n, V]."""
    n = G.shape[1]
    M = np.eye(n)[None] + beta[:, :, None] * gated_products(k, k, G, diagonal=False)
    Tm = solve_unit_lower(M, beta[:, :, None] * np.eye(n)[None])   # (I + diag(b) A)^-1 diag(b)
    return Tm @ (np.exp(G) * k), Tm @ v


# ---- stage 3: inter-chunk state recurrence (sequential over a sequence's chunks) ----------------

def advance_state(S0: np.ndarray, k: np.ndarray, G: np.ndarray, w: np.ndarray, u: np.ndarray):
    """The chunk's corrected values delta = u - w S0 [H, n, V] and the state after the chunk."""
    delta = u - w @ S0
    last = G[:, -1:, :]                                              # [H, 1, K]
    S_end = np.exp(last[:, 0, :, None]) * S0 + np.swapaxes(np.exp(last - G) * k, 1, 2) @ delta
    return delta, S_end


# ---- stage 4: output (parallel over chunks) ------------------------------------------------------

def chunk_output(q: np.ndarray, k: np.ndarray, G: np.ndarray, S0: np.ndarray,
                 delta: np.ndarray) -> np.ndarray:
    """o [H, n, V] = inter-chunk part (P q) S0 + intra-chunk part Aqk delta (q already scaled)."""
    return (np.exp(G) * q) @ S0 + gated_products(q, k, G, diagonal=True) @ delta


def chunked_kda(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, *,
                scale: float | None = None, initial_state: np.ndarray | None = None,
                cu_seqlens=None, chunk_size: int = 64, dtype=np.float64,
                store: Callable[[np.ndarray], np.ndarray] | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Same contract as recurrent_kda: o [B, T, H, V], final states [N, H, K, V]. `dtype` is the
    working precision (float32 to model a kernel's accumulators); `store` (e.g. round_to_bf16)
    models the precision of what a kernel writes to memory between stages: w, u, the chunk-start
    states, the corrected values and o (the gate cumsum and the final state stay in `dtype`)."""
    keep = store or (lambda x: x)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    q, k, v, g, beta = (np.asarray(x, dtype=dtype) for x in (q, k, v, g, beta))
    chunks = plan_chunks(B, T, chunk_size, cu_seqlens)
    n_seq = len(sequence_spans(B, T, cu_seqlens))
    states = initial_states(n_seq, H, K, V, initial_state).astype(dtype)

    def heads_first(x: np.ndarray, c: Chunk) -> np.ndarray:
        return np.moveaxis(x[c.row, c.start:c.end], 1, 0)            # [H, n, ...]

    G = [gate_cumsum(g[c.row, c.start:c.end]) for c in chunks]                       # stage 1
    wu = [tuple(keep(x) for x in wy_transform(heads_first(k, c), heads_first(v, c), G[i],
                                               heads_first(beta, c)))
          for i, c in enumerate(chunks)]                                                # stage 2
    chunk_start_state, deltas = [], []
    for i, c in enumerate(chunks):                                                      # stage 3
        chunk_start_state.append(keep(states[c.sequence].copy()))
        delta, states[c.sequence] = advance_state(states[c.sequence], heads_first(k, c), G[i], *wu[i])
        deltas.append(keep(delta).astype(dtype))
    o = np.zeros((B, T, H, V), dtype=dtype)
    for i, c in enumerate(chunks):                                                      # stage 4
        out = chunk_output(scale * heads_first(q, c), heads_first(k, c), G[i],
                           chunk_start_state[i], deltas[i])
        o[c.row, c.start:c.end] = np.moveaxis(keep(out), 0, 1)
    return o, states
