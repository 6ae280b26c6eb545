"""The CPU backend's compiler: finding it, building candidate libraries, candidate keys."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.catalog.cpu.operator import ENTRY_SYMBOL, CpuOperator
from app.core.evaluator import BackendUnavailable
from app.core.space import config_key
from app.gpu.cascade import scrub
from app.gpu.cpu import c_checks

BASE_FLAGS = ("-O3", "-march=native", "-std=c11", "-shared", "-fPIC")
MAX_SOURCE_BYTES = 200_000


@dataclass(frozen=True)
class Toolchain:
    compiler: str
    identity: str  # first line of `cc --version`: part of every candidate key
    openmp: bool

    @property
    def flags(self) -> tuple[str, ...]:
        return BASE_FLAGS + (("-fopenmp",) if self.openmp else ())


def find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


@functools.lru_cache(maxsize=4)
def toolchain(compiler: str | None = None) -> Toolchain:
    """The machine's C toolchain; BackendUnavailable with a plain message when there is none."""
    compiler = compiler or find_compiler()
    if not compiler:
        raise BackendUnavailable(
            "The CPU backend needs a C compiler and none was found (looked for $CC, cc, gcc and "
            "clang on PATH). Install gcc or clang, or choose the replay backend (recorded spaces) "
            "or the cuda backend.")
    try:
        version = subprocess.run([compiler, "--version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"The C compiler {compiler} does not run ({exc}); the CPU backend "
                                 "needs a working C compiler.") from None
    identity = (version.stdout or version.stderr).strip().splitlines()[0] if version.returncode == 0 else compiler
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("#include <omp.h>\nint ks_probe(void) { return omp_get_max_threads(); }\n")
        probe = subprocess.run([compiler, *BASE_FLAGS, "-fopenmp", str(src), "-o", str(Path(tmp) / "p.so")],
                               check=False, capture_output=True, text=True, timeout=60)
    return Toolchain(compiler, identity, probe.returncode == 0)


def build_key(op: CpuOperator, config: dict[str, Any], source: str, tc: Toolchain) -> str:
    """What actually runs: parameters, final source, flags, compiler."""
    return config_key(config, extra=key_extra(op, source, tc))


def key_extra(op: CpuOperator, source: str, tc: Toolchain) -> dict[str, str]:
    """Everything of a build's key but the parameters (a search space keys with it)."""
    return {"operator": op.name, "source": hashlib.sha256(source.encode()).hexdigest(),
            "flags": " ".join(tc.flags), "compiler": tc.identity}


def static_problems(source: str, tc: Toolchain, defines: dict[str, Any] | None = None,
                    entry: str = ENTRY_SYMBOL) -> list[str]:
    """What the compiler's preprocessor makes of `source`: vetted includes only, no forbidden
    construct in the candidate's own expanded code (app.gpu.cpu.c_checks)."""
    return c_checks.check_source(source, tc.compiler, tc.flags, defines or {}, entry,
                                 max_bytes=MAX_SOURCE_BYTES)


def compile_library(source: str, defines: dict[str, Any], out: Path, tc: Toolchain,
                    timeout_s: float) -> tuple[bool, str]:
    """Build `source` into `out` (atomically); (ok, compiler output)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_src = tempfile.mkstemp(suffix=".c", dir=out.parent)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_out = f"{tmp_src[:-2]}.so"
    cmd = [tc.compiler, *tc.flags, *(f"-D{k}={v}" for k, v in defines.items()), tmp_src, "-o", tmp_out]
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout_s)
        log = scrub(proc.stderr, keep=(tmp_src,))
        if proc.returncode != 0:
            return False, log
        os.replace(tmp_out, out)
        return True, log
    except subprocess.TimeoutExpired:
        return False, f"the compiler ran longer than {timeout_s:g} s"
    finally:
        for p in (tmp_src, tmp_out):
            if os.path.exists(p):
                os.unlink(p)


def compile_command(defines: dict[str, Any], tc: Toolchain) -> str:
    """The compiler command a candidate is built with, as a user would type it (no paths)."""
    return " ".join([os.path.basename(tc.compiler), *tc.flags,
                     *(f"-D{k}={v}" for k, v in defines.items()), "kernel.c", "-o", "kernel.so"])


def kernels_dir() -> Path:
    """Built libraries: candidates and references, in this cell's own scratch (never the shared
    cache, which every cell may write: app.gpu.sandbox.private)."""
    from app.gpu.sandbox.private import private_dir

    return private_dir("cpu-kernels")
