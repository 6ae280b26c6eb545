"""Norm-based tolerances for recurrences computed in low precision.

Elementwise checks (|a - e| <= atol + rtol |e|) suit a GEMM, not a recurrence: a state that
carries rounding errors across thousands of steps makes a few elements of small magnitude wrong by
many ulps while the output is fine as a whole, and a genuinely wrong head hides among correct ones
if the error is averaged over the whole tensor. So the error is measured per head (and per batch
row or sequence) as a relative Frobenius norm,

    err[b, h] = ||actual[b, :, h, :] - expected[b, :, h, :]||_F / ||expected[b, :, h, :]||_F,

and the worst head must stay under TOLERANCE[dtype]. The denominator has a floor, a small fraction
of the whole tensor's RMS times the head's size, so a head whose output has decayed to nearly zero
is judged against the tensor's scale rather than against its own noise.

The bf16 budget: one bf16 rounding has relative error up to 2^-9 (about 2e-3). A kernel in the
style of flash-linear-attention accumulates in fp32 but stores its workspaces (w, u, the chunk
states, the corrected values) and the output in bf16: a handful of roundings in sequence, each
damped rather than amplified by the decay (exp(g) < 1 contracts the state), so the error does not
grow with T. 1e-2 (five roundings' worth) separates that from a wrong algorithm, whose error is
O(1) (tests/test_kda_reference.py measures both). The reference gets the same bf16-rounded inputs:
input rounding is the model's business, not the kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 5e-3, "bfloat16": 1e-2}
DENOMINATOR_FLOOR = 1e-3  # fraction of the tensor's RMS (per element) a head's norm is floored at


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), returned as float32 (numpy has no bf16)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) & np.uint32(0xFFFF0000)).view(np.float32)


def relative_frobenius_per_head(actual: np.ndarray, expected: np.ndarray,
                                keep_axes: tuple[int, ...]) -> np.ndarray:
    """Relative Frobenius error over every axis but `keep_axes` (e.g. (0, 2) for o [B, T, H, V],
    (0, 1) for states [N, H, K, V]); returns an array shaped like the kept axes."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {e.shape}")
    reduce = tuple(i for i in range(e.ndim) if i not in {k % e.ndim for k in keep_axes})
    per_head_size = int(np.prod([e.shape[i] for i in reduce]))
    rms = np.sqrt(np.mean(e * e)) if e.size else 0.0
    floor = max(DENOMINATOR_FLOOR * rms * np.sqrt(per_head_size), np.finfo(np.float64).tiny)
    diff = np.sqrt(np.sum((a - e) ** 2, axis=reduce))
    norm = np.sqrt(np.sum(e * e, axis=reduce))
    err = diff / np.maximum(norm, floor)
    return np.where(np.isfinite(a).all(axis=reduce), err, np.inf)


@dataclass(frozen=True)
class CloseReport:
    worst: float              # the largest per-head relative error
    worst_index: tuple        # where it is, in the kept axes
    tolerance: float
    per_head: np.ndarray

    @property
    def ok(self) -> bool:
        return bool(self.worst <= self.tolerance)

    def __str__(self) -> str:
        verdict = "within" if self.ok else "OVER"
        return (f"worst per-head relative Frobenius error {self.worst:.3e} at {self.worst_index} "
                f"({verdict} tolerance {self.tolerance:.1e})")


def check_close(actual: np.ndarray, expected: np.ndarray, dtype: str, *,
                keep_axes: tuple[int, ...] = (0, 2)) -> CloseReport:
    """Judge `actual` (computed in `dtype`) against a float64 `expected` by the worst head."""
    per_head = relative_frobenius_per_head(actual, expected, keep_axes)
    index = np.unravel_index(int(np.argmax(per_head)), per_head.shape) if per_head.size else ()
    worst = float(per_head[index]) if per_head.size else 0.0
    return CloseReport(worst=worst, worst_index=tuple(int(i) for i in index),
                       tolerance=TOLERANCE[dtype], per_head=per_head)
