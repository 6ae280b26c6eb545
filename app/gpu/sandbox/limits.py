"""Resource limits (setrlimit) for a worker or compiler process: address space, CPU seconds,
file size, open files, no core dumps. The parent's watchdog still applies wall-clock deadlines
and a resident-memory limit; these are the kernel-enforced floor under it.

RLIMIT_NPROC is not set: it counts every process and thread of the user (the GUI's too), so a
low value breaks honest OpenMP kernels; seccomp forbids new processes instead.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

GiB = 1 << 30


@dataclass(frozen=True)
class Limits:
    address_space: int | None  # bytes; None: not limited (the GPU driver reserves huge ranges)
    cpu_seconds: int
    file_size: int
    open_files: int


def worker_limits(gpu: bool, memory_limit_bytes: int | None) -> Limits:
    space = None if gpu else max(8 * GiB, 2 * (memory_limit_bytes or 0))
    return Limits(address_space=space, cpu_seconds=4 * 3600, file_size=1 * GiB, open_files=4096)


COMPILER_LIMITS = Limits(address_space=8 * GiB, cpu_seconds=300, file_size=512 << 20,
                         open_files=1024)


def _lower(which: int, value: int) -> None:
    _soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def apply(limits: Limits) -> str:
    """Lower this process's limits (children inherit them); a one-line description."""
    done = []
    for name, which, value in (("as", resource.RLIMIT_AS, limits.address_space),
                               ("cpu", resource.RLIMIT_CPU, limits.cpu_seconds),
                               ("fsize", resource.RLIMIT_FSIZE, limits.file_size),
                               ("nofile", resource.RLIMIT_NOFILE, limits.open_files),
                               ("core", resource.RLIMIT_CORE, 0)):
        if value is None:
            continue
        try:
            _lower(which, value)
            done.append(name)
        except (ValueError, OSError) as exc:
            done.append(f"{name} failed ({exc})")
    return "on: " + ", ".join(done)
