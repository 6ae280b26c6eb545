"""Holding a measured figure to the hardware's roof without wronging an honest kernel.

A figure faster than the memory level its working set lives in can deliver is not accepted
silently: the kernel skips work, or the timing is wrong. But the cached roofs may have been
measured while the machine was loaded (then they are too low), and the roof must be the one
for the threads the kernel really runs. So, in the cascade (in the worker):

1. the first figure is compared with the cached roof at the kernel's thread count;
2. only when it is beyond it (by ROOF_MARGIN), the level is measured again beside the
   candidate: same cell, same load, right after its timing, at its thread count; the roof
   is the higher of cached and fresh (a loaded measurement is a floor, never a ceiling);
3. still beyond: the candidate is timed again and the level measured again; still beyond
   the highest roof seen: refused as suspect, with both figures (measured_ms, roof_ms) and the
   roof's label.

A backend without a fresh measurement (cuda) goes from 1 to 3 with its own roof.

A compute-bound cpu figure (GFLOP/s) is held the same way to the FP32 peak (unit "GFLOP/s",
one level named "FP32", amounts in FLOPs: app.gpu.cpu.compute_roof measures it again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROOF_MARGIN = 1.10  # a figure more than 10% beyond the roof cannot be right


@dataclass
class RoofCheck:
    """What a figure is held to. Per goal shape: the bytes it moves, the level its working set
    fits in and that level's cached roof (GB/s) at the kernel's thread count; for a compute-
    bound one (unit GFLOP/s) the FLOPs it does and the FP32 peak."""

    threads: int
    levels: list[tuple[str, int, int]]  # the machine's levels: (name, bytes, CPUs sharing one)
    shapes: list[tuple[float, str, float]]  # (bytes moved or FLOPs, level, cached GB/s or GFLOP/s)
    fresh: dict[str, float] = field(default_factory=dict)  # measured beside the candidate
    unit: str = "GB/s"  # or "GFLOP/s": the FP32 compute roof

    @property
    def compute(self) -> bool:
        return self.unit == "GFLOP/s"

    @property
    def metric(self) -> str:
        """The metric that carries the roof's rate."""
        return "roof_gflops" if self.compute else "roof_gbs"

    def rate(self, level: str) -> float:
        cached = max((g for _, lv, g in self.shapes if lv == level), default=0.0)
        return max(cached, self.fresh.get(level, 0.0))

    def roof_ms(self) -> float:
        """The fastest time the hardware allows for the goal's shapes, in ms."""
        return sum(amount / (self.rate(level) * 1e9) * 1e3 for amount, level, _ in self.shapes)

    def label(self) -> str:
        level = self.shapes[0][1]
        where = ", measured again beside the candidate" if self.fresh else ""
        plural = "s" if self.threads != 1 else ""
        what = f"peak {self.rate(level):.0f}" if self.compute else f"roof {self.rate(level):.1f}"
        return f"{level} {what} {self.unit} at {self.threads} thread{plural}{where}"

    def raise_to(self, measured: dict[str, float]) -> None:
        """Fresh figures only ever raise the roof."""
        for level, rate in measured.items():
            self.fresh[level] = max(self.fresh.get(level, 0.0), float(rate))


def beyond(measured_ms: float, roof_ms: float | None) -> float | None:
    """measured as a multiple of the roof's speed, when it is beyond it by more than the margin."""
    if not roof_ms or measured_ms <= 0 or roof_ms / measured_ms <= ROOF_MARGIN:
        return None
    return roof_ms / measured_ms
