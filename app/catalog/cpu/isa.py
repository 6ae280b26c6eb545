"""The SIMD instruction sets this machine reports, as the values of a template's ISA parameter.

0 portable C (always), 1 AVX2+FMA, 2 AVX-512F. Templates are compiled with -march=native, and
each SIMD path refuses to compile (#error) when the target lacks it, so a candidate for an
instruction set the machine does not have never runs, even if it slips into a space.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

PORTABLE, AVX2, AVX512 = 0, 1, 2
ISA_NAMES = {PORTABLE: "portable C", AVX2: "AVX2+FMA", AVX512: "AVX-512F"}
# the cpuinfo flags each path needs
_REQUIRES = {AVX2: {"avx2", "fma"}, AVX512: {"avx512f", "avx2", "fma"}}


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The flags of the first processor in /proc/cpuinfo (empty where there is none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def isa_levels(flags: set[str] | None = None, machine: str | None = None) -> list[int]:
    """The ISA values this machine can run, best first; the portable path is always last."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "i386", "i686"):
        return [PORTABLE]
    flags = cpu_flags() if flags is None else flags
    found = [isa for isa in (AVX512, AVX2) if _REQUIRES[isa] <= flags]
    return [*found, PORTABLE]


@functools.lru_cache(maxsize=1)
def machine_isa_levels() -> tuple[int, ...]:
    return tuple(isa_levels())
