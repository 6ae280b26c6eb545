"""What bench/cpu_profile.py profiles: the operators and the configurations it builds them with
(`--configs previous|defaults|good|PATH`)."""

from __future__ import annotations

import re
from pathlib import Path

MEMORY_OPS = ("softmax", "rmsnorm", "layernorm", "bias_gelu", "transpose")
ALL_OPS = (*MEMORY_OPS, "gemm")

# The best configurations of the bench/cpu_kernels.py run in bench/README.md (1 December 2026),
# per operator and thread count (THREADS is added when built).
PREVIOUS_BEST = {
    ("softmax", 1): {"VEC": 8, "ACC": 2, "ONLINE": 0, "CHUNK": 64, "EXP_IMPL": 1},
    ("softmax", 2): {"VEC": 16, "ACC": 4, "ONLINE": 0, "CHUNK": 64, "EXP_IMPL": 1},
    ("rmsnorm", 1): {"VEC": 4, "ACC": 1, "ACC_DOUBLE": 0, "CHUNK": 4},
    ("rmsnorm", 2): {"VEC": 8, "ACC": 2, "ACC_DOUBLE": 0, "CHUNK": 64},
    ("layernorm", 1): {"VEC": 8, "STATS": 1, "CHUNK": 64},
    ("layernorm", 2): {"VEC": 16, "STATS": 0, "CHUNK": 64},
    ("bias_gelu", 1): {"VEC": 8, "ERF_IMPL": 1, "CHUNK": 16},
    ("bias_gelu", 2): {"VEC": 16, "ERF_IMPL": 1, "CHUNK": 1},
    ("transpose", 1): {"TILE": 16, "WRITE_MAJOR": 1, "VEC": 4},
    ("transpose", 2): {"TILE": 4, "WRITE_MAJOR": 1, "VEC": 4},
    ("gemm", 1): {"MR": 8, "NV": 1, "KC": 512, "MC": 96, "NC": 1024, "UK": 4, "ORDER": 1,
                  "PAR": 1, "PF": 1, "SHARE_B": 1, "ISA": 2},
    ("gemm", 2): {"MR": 6, "NV": 1, "KC": 256, "MC": 96, "NC": 2048, "UK": 1, "ORDER": 1,
                  "PAR": 0, "PF": 0, "SHARE_B": 0, "ISA": 2},
}

# Configurations chosen in this profile's sessions from interleaved sweeps of the current
# templates (in core at 1 thread and at DRAM size; bench/cpu_profile.md), for --configs good.
GOOD = {
    "softmax": {"VEC": 16, "ACC": 1, "ONLINE": 0, "CHUNK": 64, "EXP_IMPL": 1},
    "rmsnorm": {"VEC": 8, "ACC": 2, "ACC_DOUBLE": 0, "CHUNK": 64},
    "layernorm": {"VEC": 16, "STATS": 1, "CHUNK": 64},
    "bias_gelu": {"VEC": 16, "ERF_IMPL": 2, "CHUNK": 64},
    "transpose": {"TILE": 128, "WRITE_MAJOR": 1, "VEC": 8},
}


def config_for(op_name: str, threads: int, which: str) -> dict:
    if which == "previous":
        return dict(PREVIOUS_BEST[(op_name, threads)])
    if which == "defaults":
        return {}
    if which == "good":
        return dict(GOOD.get(op_name, PREVIOUS_BEST.get((op_name, threads), {})))
    return dict(BENCH_BEST.get((op_name, threads), {}))


BENCH_BEST: dict[tuple[str, int], dict] = {}
TUNED_LINE = re.compile(r"^tuned (\w+)\s+(\d+) thr .*; best (.*)$", re.MULTILINE)


def read_bench_configs(path: str) -> dict[tuple[str, int], dict]:
    """The best configurations a bench/cpu_kernels.py run printed ('tuned OP T thr ... best
    K=V ...'), THREADS left out."""
    found = {}
    for op_name, threads, config in TUNED_LINE.findall(Path(path).read_text()):
        pairs = dict(item.split("=") for item in config.split())
        pairs.pop("THREADS", None)
        found[(op_name, int(threads))] = {k: int(v) for k, v in pairs.items()}
    return found
