"""Realistic KDA inputs: L2-normalised q and k per head, per-channel log-decays g = -softplus(.)
scaled like Kimi Linear's gate (decays in (0, 1), most near 1), beta = sigmoid(.) in (0, 1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KdaInputs:
    q: np.ndarray      # [B, T, H, K]
    k: np.ndarray      # [B, T, H, K]
    v: np.ndarray      # [B, T, H, V]
    g: np.ndarray      # [B, T, H, K] log-decays, <= 0
    beta: np.ndarray   # [B, T, H] in (0, 1)
    initial_state: np.ndarray | None  # [N, H, K, V], N = B, or the number of sequences


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-12)


def make_inputs(B: int, T: int, H: int, K: int, V: int, *, seed: int = 0,
                initial_state: bool = False, n_states: int | None = None,
                gate_scale: float = 0.3) -> KdaInputs:
    """Float64 inputs. `gate_scale` times softplus(N(-1, 1)) gives mean log-decay around -0.1 per
    step: a channel forgets over tens of steps, so a 64-step chunk spans decays down to ~e^-10."""
    rng = np.random.default_rng(seed)
    q = l2_normalise(rng.standard_normal((B, T, H, K)))
    k = l2_normalise(rng.standard_normal((B, T, H, K)))
    v = rng.standard_normal((B, T, H, V))
    g = -gate_scale * softplus(rng.standard_normal((B, T, H, K)) - 1.0)
    beta = 1.0 / (1.0 + np.exp(-rng.standard_normal((B, T, H))))
    state = None
    if initial_state:
        state = rng.standard_normal((n_states or B, H, K, V)) * 0.5
    return KdaInputs(q=q, k=k, v=v, g=g, beta=beta, initial_state=state)
