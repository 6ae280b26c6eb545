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

def gated_products(a: np.ndarray, b: np.ndarray, G: np.ndarray, *, diagonal: bool,
                   sub_chunk: int | None = None) -> np.ndarray:
    """M[h, i, j] = sum_d a[h,i,d] b[h,j,d] exp(G[h,i,d] - G[h,j,d]) for j < i (j <= i with
    `diagonal`), else 0. Pairwise, the exponent is masked before exp, so it is never positive (no
    overflow however strong the decay). With `sub_chunk`, the tensor-core form instead."""
    if sub_chunk is not None:
        return gated_products_factored(a, b, G, diagonal=diagonal, sub_chunk=sub_chunk)
    n = G.shape[1]
    lower = np.tril(np.ones((n, n), dtype=bool), k=0 if diagonal else -1)
    diff = G[:, :, None, :] - G[:, None, :, :]                      # [H, i, j, K]
    decay = np.exp(np.where(lower[None, :, :, None], diff, -np.inf))
    return np.einsum("hid,hjd,hijd->hij", a, b, decay)


def gated_products_factored(a: np.ndarray, b: np.ndarray, G: np.ndarray, *, diagonal: bool,
                            sub_chunk: int) -> np.ndarray:
    """The same products as matmuls, as a tensor-core kernel computes them: exp(G_i - G_j) =
    exp(G_i - R) exp(R - G_j) for a per-channel reference R, block by block of `sub_chunk` rows.
    Off-diagonal blocks (rows of sub-chunk p, columns of an earlier one c) take R = G at the last
    row of c, so both factors are <= 1: always safe. Diagonal blocks take R = G at their first row,
    so exp(R - G_j) grows up to the decay accumulated inside one sub-chunk: it overflows float32
    once that exceeds about e^88 (why kernels use 16-row sub-chunks and a lower bound on g)."""
    n = G.shape[1]
    out = np.zeros((G.shape[0], n, n), dtype=G.dtype)
    starts = range(0, n, sub_chunk)
    for p in starts:
        rows = slice(p, min(p + sub_chunk, n))
        for c in starts:
            if c > p:
                break
            cols = slice(c, min(c + sub_chunk, n))
            ref = G[:, cols.stop - 1: cols.stop] if c < p else G[:, p:p + 1]   # [H, 1, K]
            with np.errstate(over="ignore", invalid="ignore"):
                left = a[:, rows] * np.exp(G[:, rows] - ref)
                right = b[:, cols] * np.exp(ref - G[:, cols])
                block = left @ np.swapaxes(right, 1, 2)
            if c == p:
                block = np.tril(block, k=0 if diagonal else -1)
            out[:, rows, cols] = block
    return out


def solve_unit_lower(M: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """X with M X = rhs for unit-lower-triangular M [H, n, n], by forward substitution row by row
    (what a kernel does in registers/shared memory; no general solver)."""
    X = np.zeros_like(rhs)
    for i in range(M.shape[1]):
        X[:, i] = rhs[:, i] - np.einsum("hj,hj...->h...", M[:, i, :i], X[:, :i])
    return X


def wy_transform(k: np.ndarray, v: np.ndarray, G: np.ndarray, beta: np.ndarray,
                 sub_chunk: int | None = None):
    """k [H, n, K], v [H, n, V], G [H, n, K], beta [H, n] -> w [H, n, K], u [H, n, V]."""
    eye = np.eye(G.shape[1], dtype=G.dtype)[None]
    M = eye + beta[:, :, None] * gated_products(k, k, G, diagonal=False, sub_chunk=sub_chunk)
    Tm = solve_unit_lower(M, beta[:, :, None] * eye)              # (I + diag(b) A)^-1 diag(b)
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
                 delta: np.ndarray, sub_chunk: int | None = None) -> np.ndarray:
    """o [H, n, V] = inter-chunk part (P q) S0 + intra-chunk part Aqk delta (q already scaled)."""
    Aqk = gated_products(q, k, G, diagonal=True, sub_chunk=sub_chunk)
    return (np.exp(G) * q) @ S0 + Aqk @ delta


def chunked_kda(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, *,
                scale: float | None = None, initial_state: np.ndarray | None = None,
                cu_seqlens=None, chunk_size: int = 64, dtype=np.float64,
                store: Callable[[np.ndarray], np.ndarray] | None = None,
                sub_chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Same contract as recurrent_kda: o [B, T, H, V], final states [N, H, K, V]. `dtype` is the
    working precision (float32 to model a kernel's accumulators); `store` (e.g. round_to_bf16)
    models the precision of what a kernel writes to memory between stages: w, u, the chunk-start
    states, the corrected values and o (the gate cumsum and the final state stay in `dtype`);
    `sub_chunk` computes the intra-chunk products in the factored, matmul form."""
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
                                               heads_first(beta, c), sub_chunk))
          for i, c in enumerate(chunks)]                                                # stage 2
    chunk_start_state, deltas = [], []
    for i, c in enumerate(chunks):                                                      # stage 3
        chunk_start_state.append(keep(states[c.sequence].copy()))
        delta, states[c.sequence] = advance_state(states[c.sequence], heads_first(k, c), G[i], *wu[i])
        deltas.append(keep(delta).astype(dtype))
    o = np.zeros((B, T, H, V), dtype=dtype)
    for i, c in enumerate(chunks):                                                      # stage 4
        out = chunk_output(scale * heads_first(q, c), heads_first(k, c), G[i],
                           chunk_start_state[i], deltas[i], sub_chunk)
        o[c.row, c.start:c.end] = np.moveaxis(keep(out), 0, 1)
    return o, states
