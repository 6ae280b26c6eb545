"""NumPy emulations of the KDA kernels (app/catalog/cuda/kernels/kda.cu), by kernel name, for the
fake CuPy (tests/fake_cupy.py): each takes the very arguments the harness passes the real
kernel (inputs, outputs, workspaces, index tables) and does what the kernel does, in the same
stage decomposition: the same workspaces, the same chunking (from the harness's chunk and
sequence tables), fp32 arithmetic, bf16 where the kernel stores bf16 (w, u, dv, hs, o).
The math, not the schedule: kda_state's STAGES (cp.async multi-buffering of each chunk's tiles)
changes which loads overlap which computation, not a single value, so every STAGES runs the same
emulation (tests/test_kda_cuda.py checks the results are identical at STAGES 1, 2 and 3).

`emulations(fault=None)` returns the table to register into fake_cupy.EMULATIONS (a test's own,
cleared by the worker fixture). Faults plant a wrong pipeline on purpose:
  "no_u"        kda_wy never writes u (the NaN-poisoned workspace reaches the outputs)
  "beta_w"      kda_wy leaves beta out of w: every intermediate finite, the outputs wrong
  "slow"        every kernel takes SLOW_S longer (the timed call must cover every launch)
"""

from __future__ import annotations

import time

import numpy as np

from app.catalog.kda.chunked import advance_state, chunk_output, gate_cumsum, wy_transform
from app.catalog.protocol import from_storage, to_storage

SLOW_S = 0.004
CALLS: list[str] = []  # kernel names in launch order (cleared by the tests that read it)


def f32(bits: np.ndarray) -> np.ndarray:
    return from_storage(np, bits, "bfloat16").astype(np.float32)


def bf16(values: np.ndarray) -> np.ndarray:
    return to_storage(np, np.asarray(values, dtype=np.float32), "bfloat16")


def tokens_first(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, T, H, D] (or [tokens, H, D]) -> a [tokens, H, D] view."""
    return x.reshape(-1, heads, x.shape[-1])


def emulations(fault: str | None = None) -> dict:
    def slow(name: str) -> None:
        CALLS.append(name)
        if fault == "slow":
            time.sleep(SLOW_S)

    def gate_cumsum_kernel(g, gc, chunks):
        slow("kda_gate_cumsum")
        H = gc.shape[1]
        gt = tokens_first(g, H)
        for t0, n, _, _ in chunks:
            gc[t0:t0 + n] = np.moveaxis(gate_cumsum(f32(gt[t0:t0 + n])), 0, 1)

    def wy_kernel(k, v, g, beta, gc, w, u, chunks):
        slow("kda_wy")
        H = gc.shape[1]
        kt, vt, gt = tokens_first(k, H), tokens_first(v, H), tokens_first(g, H)
        bt = beta.reshape(-1, H)
        for t0, n, _, _ in chunks:
            sl = slice(t0, t0 + n)
            G = gate_cumsum(f32(gt[sl]))  # fused or not, what kda_wy ends up using
            gc[sl] = np.moveaxis(G, 0, 1)
            b = f32(bt[sl]).T
            wc, uc = wy_transform(np.moveaxis(f32(kt[sl]), 1, 0), np.moveaxis(f32(vt[sl]), 1, 0), G,
                                  np.ones_like(b) if fault == "beta_w" else b)
            if fault == "beta_w":  # u keeps beta; w loses it
                _, uc = wy_transform(np.moveaxis(f32(kt[sl]), 1, 0), np.moveaxis(f32(vt[sl]), 1, 0), G, b)
            w[sl] = bf16(np.moveaxis(wc, 0, 1))
            if fault != "no_u":
                u[sl] = bf16(np.moveaxis(uc, 0, 1))

    def output_rows(q, k, gc, S0, delta, t0, n, scale, o):
        H = gc.shape[1]
        sl = slice(t0, t0 + n)
        out = chunk_output(scale * np.moveaxis(f32(tokens_first(q, H)[sl]), 1, 0),
                           np.moveaxis(f32(tokens_first(k, H)[sl]), 1, 0),
                           np.moveaxis(gc[sl], 1, 0), S0, delta)
        tokens_first(o, H)[sl] = bf16(np.moveaxis(out, 0, 1))

    def state_kernel(q, k, gc, w, u, h0, hs, dv, o, ht, seqs, chunks, scale):
        slow("kda_state")
        H = gc.shape[1]
        fused = hs.size == 1  # FUSE_OUTPUT: no chunk states stored
        K, V = h0.shape[-2], h0.shape[-1]
        kt = tokens_first(k, H)
        for s, (first, count, _, _) in enumerate(seqs):
            S = f32(h0[s])  # [H, K, V]
            for c in range(first, first + count):
                t0, n = int(chunks[c][0]), int(chunks[c][1])
                sl = slice(t0, t0 + n)
                if not fused:
                    hs.reshape(-1, H, K, V)[c] = bf16(S)
                G = np.moveaxis(gc[sl], 1, 0)
                delta, S_next = advance_state(S, np.moveaxis(f32(kt[sl]), 1, 0), G,
                                              np.moveaxis(f32(w[sl]), 1, 0), np.moveaxis(f32(u[sl]), 1, 0))
                dv[sl] = bf16(np.moveaxis(delta, 0, 1))
                if fused:
                    output_rows(q, k, gc, S, delta, t0, n, scale, o)
                S = S_next.astype(np.float32)
            ht[s] = S

    def output_kernel(q, k, gc, hs, dv, o, chunks, scale):
        slow("kda_output")
        H = gc.shape[1]
        K = gc.shape[2]
        V = dv.shape[2]
        for c, (t0, n, _, _) in enumerate(chunks):
            S0 = f32(hs.reshape(-1, H, K, V)[c])
            delta = np.moveaxis(f32(dv[t0:t0 + n]), 1, 0)
            output_rows(q, k, gc, S0, delta, int(t0), int(n), scale, o)

    return {"kda_gate_cumsum": gate_cumsum_kernel, "kda_wy": wy_kernel, "kda_state": state_kernel,
            "kda_output": output_kernel}
