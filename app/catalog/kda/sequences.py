"""Which (batch row, start, end) spans are independent sequences: each batch row, or, with
cu_seqlens (B must be 1, as in flash-linear-attention), the packed sequences of row 0."""

from __future__ import annotations

from itertools import pairwise

import numpy as np


def sequence_spans(B: int, T: int, cu_seqlens: np.ndarray | list[int] | None) -> list[tuple[int, int, int]]:
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(x) for x in cu_seqlens]
    if B != 1:
        raise ValueError(f"cu_seqlens needs the sequences packed into one batch row, got B={B}")
    if len(cu) < 2 or cu[0] != 0 or cu[-1] != T or any(b < a for a, b in pairwise(cu)):
        raise ValueError(f"cu_seqlens must rise from 0 to T={T}, got {cu}")
    return [(0, a, b) for a, b in pairwise(cu)]


def initial_states(n: int, H: int, K: int, V: int, initial_state: np.ndarray | None) -> np.ndarray:
    """A float64 copy of the initial states [n, H, K, V] (zeros when none is given)."""
    if initial_state is None:
        return np.zeros((n, H, K, V))
    if initial_state.shape != (n, H, K, V):
        raise ValueError(f"initial_state must be {(n, H, K, V)}, got {initial_state.shape}")
    return np.array(initial_state, dtype=np.float64)
