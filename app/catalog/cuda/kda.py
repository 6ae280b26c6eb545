"""The KDA forward (Kimi Delta Attention, chunked gated delta rule with per-channel decay, as
flash-linear-attention's chunk_kda) as a multi-kernel CUDA operator.

One translation unit (kernels/kda.cu) defines four entries, run in order on the harness's stream:
gate cumsum, intra-chunk WY/UT solve, inter-chunk state recurrence, output; FUSE_GATE folds the
first into the second, FUSE_OUTPUT the last into the recurrence. Intermediates are named
workspaces the harness allocates from the shape (gc fp32, w/u/dv bf16, hs the chunk-start states
in bf16) plus two index tables made here (chunks and sequences: chunks never cross a sequence
boundary, a sequence's last chunk may be short).

Shapes: [B, T, H, D] (B sequences of T tokens) or [1, T, H, D, N]: N sequences packed into one row
(cu_seqlens, as flash-linear-attention takes them) with lengths drawn from (T, N) by a fixed rule,
so the same shape always means the same boundaries. D = K = V = 128. Inputs q, k (L2-normalised
per head), v, g (log-decays, <= 0), beta in (0, 1), h0 (the initial state, [N, H, K, V]), all
bf16; outputs o (bf16) and ht, the final state (fp32, as chunk_kda returns it). Verified against
the float64 recurrent reference (one rank-1 update per step) by the worst per-head relative
Frobenius error (app.catalog.kda.tolerance): 1e-2 for bf16.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from app.catalog.cuda.base import (
    Config,
    CudaOperator,
    Launch,
    Step,
    Workspace,
    ceil_div,
    to_storage,
)
from app.catalog.kda.tolerance import TOLERANCE
from app.catalog.protocol import RTOL
from app.core.space import SearchSpace

KD = VD = 128
FLOAT = 4
BF16 = 2
SHARED_LIMIT = {"sm_80": 166912, "sm_90": 232448, "sm_90a": 232448}  # opt-in bytes per block
GATE_SCALE = 0.3  # g = -GATE_SCALE * softplus(x - 1): decays in (0, 1), most near 1 (Kimi Linear)


def cu_seqlens(T: int, n: int) -> np.ndarray:
    """The boundaries of n packed sequences in T tokens: a fixed rule of (T, n), lengths uneven
    and not multiples of any chunk size (every sequence at least one token)."""
    if n < 1 or n > T:
        raise ValueError(f"cannot pack {n} sequences into {T} tokens")
    rng = np.random.default_rng(T * 7919 + n)
    cuts = np.sort(rng.choice(np.arange(1, T), size=n - 1, replace=False)) if n > 1 else np.array([], int)
    return np.concatenate([[0], cuts, [T]]).astype(np.int32)


def spans(shape: list[int]) -> list[tuple[int, int]]:
    """(first token, end token) of every sequence, tokens counted over [B*T]."""
    B, T = shape[0], shape[1]
    if len(shape) == 5:
        cu = cu_seqlens(T, shape[4])
        return [(int(a), int(b)) for a, b in itertools.pairwise(cu)]
    return [(b * T, (b + 1) * T) for b in range(B)]


def chunk_tables(shape: list[int], chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """chunks [NC, 4] = (first token, length, sequence, 0); seqs [N, 4] = (first chunk, count,
    first token, 0)."""
    chunks, seqs = [], []
    for s, (a, b) in enumerate(spans(shape)):
        seqs.append((len(chunks), ceil_div(b - a, chunk), a, 0))
        chunks += [(t, min(chunk, b - t), s, 0) for t in range(a, b, chunk)]
    return np.array(chunks, dtype=np.int32).reshape(-1, 4), np.array(seqs, dtype=np.int32).reshape(-1, 4)


def shared_bytes(kernel: str, config: Config) -> int:
    """Dynamic shared memory of each kernel (the layouts at the top of each kernel in kda.cu):
    kda_state holds STAGES pipeline stages of raw chunk tiles (w, k, u and q in bf16, Gc in fp32)."""
    bt, vt, fused = config["BT"], config["VT"], config["FUSE_OUTPUT"]
    kp, ap, tp = KD + 1, bt + 1, vt + 1
    stage = bt * (KD * (2 * BF16 + FLOAT + fused * BF16) + vt * BF16)
    floats = {
        "kda_gate_cumsum": 0,
        "kda_wy": 2 * bt * kp + bt * (VD + 1) + bt * ap + bt,
        "kda_state": KD * vt + bt * tp + KD + (3 * bt * kp + bt * ap if fused else 0),
        "kda_output": 3 * bt * kp + bt * ap + KD * vt + bt * tp,
    }[kernel]
    return floats * FLOAT + (config.get("STAGES", 1) * stage if kernel == "kda_state" else 0)


class Kda(CudaOperator):
    name = "kda"
    kernel_name = "kda_wy"
    template = "kda.cu"
    description = ("KDA forward (chunked gated delta rule, per-channel decay; flash-linear-attention "
                   "chunk_kda): four kernels (gate cumsum, WY/UT solve, state recurrence, output)")
    shape_doc = "[B, T, H, D] or [1, T, H, D, N] (N packed sequences, cu_seqlens), D = 128"
    dtypes = ("bfloat16",)
    distributions = ("normal", "wide")  # wide: stronger decays (gate x4) and a larger state
    deterministic = True
    input_names = ("q", "k", "v", "g", "beta", "h0")
    output_names = ("o", "ht")

    # ---- the design space -------------------------------------------------------------
    def space(self, dtype: str) -> SearchSpace:
        self.check_dtype(dtype)
        params = {"BT": [16, 32, 64], "NT": [128, 256], "VT": [32, 64, 128],
                  "FUSE_GATE": [0, 1], "FUSE_OUTPUT": [0, 1], "STAGES": [1, 2, 3]}
        # shared memory of the output and state kernels (shared_bytes) within the H100/H200
        # opt-in limit (227 KB); kda_wy always fits
        restrictions = [
            "(3 * BT * 129 + BT * (BT + 1) + 128 * VT + BT * (VT + 1)) * 4 <= 232448",
            ("STAGES * BT * (128 * (8 + 2 * FUSE_OUTPUT) + 2 * VT) + (128 * VT + BT * (VT + 1)"
             " + 128 + FUSE_OUTPUT * (3 * BT * 129 + BT * (BT + 1))) * 4 <= 232448"),
        ]
        return SearchSpace(params, restrictions=restrictions)

    def recommended(self, dtype: str, shape: list[int]) -> list[Config]:
        """Starting points (all fit sm_80 too): chunk 64 split as fla does (separate output
        kernel, V in halves), chunk 32 with everything fused (fewest launches), chunk 32 unfused,
        and chunk 64 in V quarters (a state block per SM at B*H = 32) with the next chunk's tiles
        loading while the current one is computed (STAGES=2)."""
        return [{"BT": 64, "NT": 256, "VT": 64, "FUSE_GATE": 1, "FUSE_OUTPUT": 0, "STAGES": 1},
                {"BT": 32, "NT": 256, "VT": 64, "FUSE_GATE": 1, "FUSE_OUTPUT": 1, "STAGES": 1},
                {"BT": 32, "NT": 128, "VT": 32, "FUSE_GATE": 0, "FUSE_OUTPUT": 0, "STAGES": 1},
                {"BT": 64, "NT": 256, "VT": 32, "FUSE_GATE": 1, "FUSE_OUTPUT": 0, "STAGES": 2}]

    # ---- checks -----------------------------------------------------------------------
    def check_shape(self, shape: list[int], dtype: str = "bfloat16") -> str | None:
        if len(shape) not in (4, 5) or any(int(d) < 1 for d in shape):
            return f"{self.name} takes shapes {self.shape_doc}, got {list(shape)}"
        if shape[3] != KD:
            return f"{self.name} is written for D = {KD} (K = V = {KD}), got D = {shape[3]}"
        if len(shape) == 5 and (shape[0] != 1 or shape[4] > shape[1]):
            return f"packed sequences need B = 1 and N <= T, got {list(shape)}"
        return None

    def static_check(self, config: Config, shape: list[int], dtype: str) -> str | None:
        if VD % config["VT"]:
            return f"VT={config['VT']} does not divide V={VD}"
        for st in self.steps(config, shape, dtype):
            if st.launch.shared_bytes > SHARED_LIMIT["sm_90a"]:
                return (f"{st.kernel} needs {st.launch.shared_bytes} bytes of shared memory, over "
                        f"the {SHARED_LIMIT['sm_90a']} a Hopper block may use")
        return None

    def n_seqs(self, shape: list[int]) -> int:
        return shape[4] if len(shape) == 5 else shape[0]

    # ---- source and launches ----------------------------------------------------------
    def defines(self, config: Config, shape: list[int], dtype: str) -> dict[str, Any]:
        return {"STAGES": 1, **{k: int(v) for k, v in config.items()}, "HEADS": shape[2], "KD": KD,
                "VD": VD}

    def headers_for(self, dtype: str) -> tuple[str, ...]:
        return ("ampere.cuh",)  # cp.async (kda_state's pipeline stages)

    def kernels(self, dtype: str) -> tuple[str, ...]:
        return ("kda_wy", "kda_gate_cumsum", "kda_state", "kda_output")

    def launch(self, config: Config, shape: list[int], dtype: str) -> Launch:
        return self.steps(config, shape, dtype)[0].launch

    def steps(self, config: Config, shape: list[int], dtype: str) -> list[Step]:
        nc = len(chunk_tables(shape, config["BT"])[0])
        H, nt, vt = shape[2], config["NT"], config["VT"]
        out = []
        if not config["FUSE_GATE"]:
            out.append(Step("kda_gate_cumsum", Launch((nc, H, 1), (KD, 1, 1))))
        out.append(Step("kda_wy", Launch((nc, H, 1), (nt, 1, 1), shared_bytes("kda_wy", config))))
        out.append(Step("kda_state", Launch((self.n_seqs(shape), H, VD // vt), (nt, 1, 1),
                                            shared_bytes("kda_state", config))))
        if not config["FUSE_OUTPUT"]:
            out.append(Step("kda_output", Launch((nc, H, VD // vt), (nt, 1, 1),
                                                 shared_bytes("kda_output", config))))
        return out

    def workspaces(self, config: Config, shape: list[int], dtype: str) -> dict[str, Workspace]:
        chunks, seqs = chunk_tables(shape, config["BT"])
        tokens, H = shape[0] * shape[1], shape[2]
        states = len(chunks) * H * KD * VD if not config["FUSE_OUTPUT"] else 1
        return {"chunks": Workspace(chunks.shape, "int32", chunks),
                "seqs": Workspace(seqs.shape, "int32", seqs),
                "gc": Workspace((tokens, H, KD), "float32"),
                "w": Workspace((tokens, H, KD), "uint16"),
                "u": Workspace((tokens, H, VD), "uint16"),
                "dv": Workspace((tokens, H, VD), "uint16"),
                "hs": Workspace((states,), "uint16")}

    def step_args(self, config: Config, index: int, inputs: dict[str, Any], outputs: dict[str, Any],
                  workspaces: dict[str, Any], shape: list[int]) -> tuple:
        kernel = self.steps(config, shape, "bfloat16")[index].kernel
        i, o, ws = inputs, outputs, workspaces
        scale = np.float32(KD ** -0.5)
        return {
            "kda_gate_cumsum": lambda: (i["g"], ws["gc"], ws["chunks"]),
            "kda_wy": lambda: (i["k"], i["v"], i["g"], i["beta"], ws["gc"], ws["w"], ws["u"], ws["chunks"]),
            "kda_state": lambda: (i["q"], i["k"], ws["gc"], ws["w"], ws["u"], i["h0"], ws["hs"], ws["dv"],
                                  o["o"], o["ht"], ws["seqs"], ws["chunks"], scale),
            "kda_output": lambda: (i["q"], i["k"], ws["gc"], ws["hs"], ws["dv"], o["o"], ws["chunks"], scale),
        }[kernel]()

    def kernel_args(self, config, inputs, outputs, shape):
        return self.step_args(config, 0, inputs, outputs, self.workspaces(config, shape, "bfloat16"), shape)

    # ---- data -------------------------------------------------------------------------
    def input_shapes(self, shape: list[int]) -> dict[str, tuple[int, ...]]:
        B, T, H = shape[0], shape[1], shape[2]
        tok = (B, T, H, KD)
        return {"q": tok, "k": tok, "v": (B, T, H, VD), "g": tok, "beta": (B, T, H),
                "h0": (self.n_seqs(shape), H, KD, VD)}

    def output_shapes(self, shape: list[int]) -> dict[str, tuple[int, ...]]:
        B, T, H = shape[0], shape[1], shape[2]
        return {"o": (B, T, H, VD), "ht": (self.n_seqs(shape), H, KD, VD)}

    def output_dtypes(self, dtype: str) -> dict[str, str]:
        return {"ht": "float32"}

    def make_inputs(self, xp: Any, shape: list[int], dtype: str, rng: Any,
                    distribution: str) -> dict[str, Any]:
        s = self.input_shapes(shape)
        strong = 4.0 if distribution == "wide" else 1.0

        def unit(x):  # L2-normalised per head
            return x / xp.sqrt((x * x).sum(axis=-1, keepdims=True) + 1e-12)

        raw = {"q": unit(rng.standard_normal(s["q"])), "k": unit(rng.standard_normal(s["k"])),
               "v": rng.standard_normal(s["v"]),
               "g": -GATE_SCALE * strong * xp.logaddexp(0.0, rng.standard_normal(s["g"]) - 1.0),
               "beta": 1.0 / (1.0 + xp.exp(-rng.standard_normal(s["beta"]))),
               "h0": rng.standard_normal(s["h0"]) * 0.5 * strong}
        return {k: to_storage(xp, v, dtype) for k, v in raw.items()}

    def reference(self, xp: Any, inputs: dict[str, Any], shape: list[int]) -> dict[str, Any]:
        """The float64 recurrent reference (one decay and one rank-1 delta-rule update per step,
        app.catalog.kda.reference), written on `xp` so it runs on the GPU for large shapes."""
        return recurrent_xp(xp, inputs, shape)

    def judge_output(self, xp: Any, name: str, got: Any, expected: Any, shape: list[int], dtype: str,
                     tol: Any) -> str | None:
        """Worst per-head relative Frobenius error (app.catalog.kda.tolerance) within tol.rtol."""
        from app.catalog.kda.tolerance import DENOMINATOR_FLOOR

        keep = (0, 2) if name == "o" else (0, 1)  # o [B, T, H, V] per (row, head); ht per (seq, head)
        reduce = tuple(i for i in range(expected.ndim) if i not in keep)
        size = int(np.prod([expected.shape[i] for i in reduce]))
        rms = float(xp.sqrt(xp.mean(expected * expected))) if expected.size else 0.0
        floor = max(DENOMINATOR_FLOOR * rms * np.sqrt(size), np.finfo(np.float64).tiny)
        err = xp.sqrt(((got - expected) ** 2).sum(axis=reduce)) / xp.maximum(
            xp.sqrt((expected * expected).sum(axis=reduce)), floor)
        worst = float(err.max()) if err.size else 0.0
        if not worst <= tol.rtol:
            at = tuple(int(i) for i in np.unravel_index(int(err.argmax()), err.shape))
            return (f"{name!r}: worst per-head relative Frobenius error {worst:.3e} at {at} is over "
                    f"the tolerance {tol.rtol:.1e}")
        return None

    def rtol_growth(self, shape: list[int], dtype: str) -> float:
        return TOLERANCE[dtype] / RTOL[dtype]  # the table's rtol -> the norm budget

    def atol(self, shape: list[int], dtype: str, rtol: float) -> float:
        return 0.0

    def edge_shapes(self, goal_shapes: Any, dtype: str, params: dict[str, list] | None = None) -> list[list[int]]:
        """Few tokens, T not a multiple of any chunk, one chunk short of a sequence, and packed
        sequences of uneven lengths (state resets inside a row): small, so the float64
        recurrence stays cheap."""
        H = min(int(goal_shapes[0][2]), 2) if goal_shapes else 2
        return [[1, 5, H, KD], [2, 77, H, KD], [1, 150, H, KD, 3]]

    # ---- roofline ---------------------------------------------------------------------
    def flops(self, shape: list[int]) -> float:
        """The chunked algorithm's matmul work at chunk 64 (fla's count): per token and head,
        about 2 (K V) for each of w S, the state update and q S, plus 4 C (K + V) inside the chunk."""
        B, T, H = shape[0], shape[1], shape[2]
        return float(B * T * H * (6 * KD * VD + 4 * 64 * (KD + VD)))

    def bytes_moved(self, shape: list[int], dtype: str = "bfloat16") -> float:
        B, T, H = shape[0], shape[1], shape[2]
        tokens = B * T * H
        state = self.n_seqs(shape) * H * KD * VD
        return float(2 * tokens * (3 * KD + 2 * VD + 1) + 2 * state + 4 * state)

    @property
    def memory_bound(self) -> bool:
        return False


def recurrent_xp(xp: Any, inputs: dict[str, Any], shape: list[int]) -> dict[str, Any]:
    """app.catalog.kda.reference.recurrent_kda on an array module, all sequences of equal
    position advanced together (the packed case, one at a time)."""
    B, T, H = shape[0], shape[1], shape[2]
    q, k, v, g, beta = (inputs[n].reshape(B * T, H, -1) for n in ("q", "k", "v", "g", "beta"))
    beta = beta.reshape(B * T, H)
    scale = KD ** -0.5
    S_all = inputs["h0"].astype(xp.float64).copy()
    o = xp.zeros((B * T, H, VD), dtype=xp.float64)
    if len(shape) == 4:  # B rows of T tokens: step t of every row at once
        S = S_all
        rows = xp.arange(B) * T
        for t in range(T):
            at = rows + t
            S *= xp.exp(g[at])[..., None]
            err = v[at] - xp.einsum("bhk,bhkv->bhv", k[at], S)
            S += (beta[at][..., None] * k[at])[..., None] * err[:, :, None, :]
            o[at] = xp.einsum("bhk,bhkv->bhv", scale * q[at], S)
        return {"o": o.reshape(B, T, H, VD), "ht": S}
    for s, (a, b) in enumerate(spans(shape)):
        S = S_all[s]
        for t in range(a, b):
            S *= xp.exp(g[t])[..., None]
            err = v[t] - xp.einsum("hk,hkv->hv", k[t], S)
            S += (beta[t][:, None] * k[t])[..., None] * err[:, None, :]
            o[t] = xp.einsum("hk,hkv->hv", scale * q[t], S)
    return {"o": o.reshape(B, T, H, VD), "ht": S_all}
