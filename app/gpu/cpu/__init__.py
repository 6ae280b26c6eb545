"""CPU backend: catalog operators as C11 + OpenMP kernels built by the system C compiler.

The engine process never loads a candidate. It sends each candidate to a worker process
(app.gpu.worker) where the cascade (app.gpu.cascade) checks the source, compiles it into a
shared library in the cache directory (one file per candidate key), checks what the library
imports, loads it in the kernel host's child process, verifies it (app.gpu.verify), times it
against numpy interleaved (app.gpu.timing) and verifies it again. A plain C reference loop and
numpy are measured once per run as baselines.

toolchain.py: the compiler; worker.py: the worker side (cascade hooks, request handler);
evaluator.py: the engine side (CpuEvaluator). Names are re-exported here for their users.
"""

from __future__ import annotations

import os  # noqa: F401 - tests patch app.gpu.cpu.os.cpu_count

from app.gpu.cpu.evaluator import BLAS_SETTLE_S, CpuEvaluator, CpuSettings, cpu_name
from app.gpu.cpu.toolchain import (
    BASE_FLAGS,
    MAX_SOURCE_BYTES,
    Toolchain,
    build_key,
    compile_command,
    compile_library,
    find_compiler,
    kernels_dir,
    static_problems,
    toolchain,
)
from app.gpu.cpu.worker import (
    RETIME_BLOCKS,
    CpuKernelBackend,
    CpuWorker,
    KernelRunner,
    host_args,
    host_program_for,
)

__all__ = ["BASE_FLAGS", "BLAS_SETTLE_S", "MAX_SOURCE_BYTES", "RETIME_BLOCKS", "CpuEvaluator",
           "CpuKernelBackend", "CpuSettings", "CpuWorker", "KernelRunner", "Toolchain",
           "build_key", "compile_command", "compile_library", "cpu_name", "find_compiler",
           "host_args", "host_program_for", "kernels_dir", "static_problems", "toolchain"]
