"""`kernelswarm selftest`: can this installation do its job? One line per check.

Storage, a short replay run, a CPU compile-and-run and an NVRTC compile check, each reported
PASS, FAIL or SKIP with the reason. Exit status 0 when nothing FAILED. It is what the smoke test
of the frozen bundle runs, so every check goes through the same code paths the app uses
(app.store, app.session, the CPU backend, CuPy's NVRTC bindings) and surfaces what freezing
broke: a missing module, data file, shared library or header.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
REPLAY_SPACE = "pnpoly_RTX_3090.json.gz"  # ships in resources/spaces


class Skip(Exception):
    """A check cannot run here (missing compiler, no CUDA libraries); not a failure."""


@dataclass
class Outcome:
    name: str
    status: str
    detail: str
    seconds: float

    def line(self) -> str:
        return f"{self.status:4}  {self.name:<8} {self.detail}  ({self.seconds:.2f} s)"


# ---- checks: each returns a one-line detail on success, raises Skip or anything else ---------

def check_storage(workdir: Path) -> str:
    """A real SQLite file: write a run and an evaluation, reopen, read them back."""
    from app.core.types import Evaluation
    from app.goal import Goal
    from app.store import Store

    path = workdir / "selftest-history.sqlite"
    goal = Goal(name="selftest storage", space=REPLAY_SPACE, backend="replay")
    evaluation = Evaluation(key="selftest", config={"x": 1}, ok=True, value=1.5)
    with Store(path) as store:
        run_id = store.create_run(goal, {"kind": "selftest"})
        store.record_evaluation(run_id, 0, evaluation, elapsed_s=0.1, best_so_far=1.5)
        store.finish_run(run_id, "selftest", evaluation)
    with Store(path) as store:
        rows = store.load_evaluations(run_id)
        status = store.get_run(run_id)["status"]
    if len(rows) != 1 or rows[0][1].value != 1.5:
        raise AssertionError(f"read back {len(rows)} evaluations, expected 1 with value 1.5")
    return f"SQLite schema v{_schema_version()} at a temp file; run {run_id} {status}, read back"


def _schema_version() -> int:
    from app.store import SCHEMA_VERSION

    return SCHEMA_VERSION


def check_replay(workdir: Path) -> str:
    """A short swarm run on a recorded space, end to end through RunSession into SQLite."""
    from app.goal import Goal
    from app.session import RunSession
    from app.store import Store

    goal = Goal(name="selftest replay", space=REPLAY_SPACE, backend="replay")
    goal.stop.max_evals = 20
    goal.swarm.workers = 2
    with Store(workdir / "selftest-replay.sqlite") as store:
        session = RunSession(goal, store=store)
        result = session.run()
        stored = len(store.load_evaluations(session.run_id))
    if result.evaluations != goal.stop.max_evals or stored != result.evaluations:
        raise AssertionError(f"{result.evaluations} evaluations run, {stored} stored; "
                             f"expected {goal.stop.max_evals} of each")
    if result.best is None:
        raise AssertionError("no valid configuration found in 20 evaluations")
    return (f"{result.evaluations} evaluations of {REPLAY_SPACE} stored, "
            f"best {result.best.value:.3f} ms")


def check_cpu(workdir: Path) -> str:
    """Compile a C kernel with the system compiler and run it: through the CPU backend when it
    is installed (that exercises its worker processes, which freezing can break), else directly
    with cc and ctypes."""
    try:
        import app.gpu.cpu  # noqa: F401
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("app.gpu.cpu"):
            raise
        return _cpu_direct(workdir)
    return _cpu_backend()


def _cpu_backend() -> str:
    from app.catalog import known_operators
    from app.core.evaluator import BackendUnavailable
    from app.goal import Goal
    from app.paths import resources_dir
    from app.session import RunSession

    operators = sorted(known_operators("cpu"))
    if not operators:
        raise AssertionError("the CPU backend is installed but its catalog has no operators")
    # the smallest kernels first, on a small shape: a selftest takes seconds, not minutes
    operator = next((op for op in ("transpose", "softmax", "rmsnorm") if op in operators),
                    operators[0])
    example = resources_dir() / "goals" / f"cpu_{operator}.toml"
    goal = Goal.load(example) if example.exists() else Goal(backend="cpu", operator=operator)
    goal.name = f"selftest cpu {operator}"
    goal.shapes = [[min(int(d), 256) for d in shape] for shape in goal.shapes[:1]] or [[256, 256]]
    goal.stop.max_evals = 3
    goal.stop.time_budget_s = 60.0
    goal.target.kind = "none"
    goal.swarm.workers = 1
    try:
        session = RunSession(goal)
    except BackendUnavailable as exc:
        raise Skip(str(exc)) from None
    result = session.run()
    good = [e for e in result.history if e.ok]
    if not good:
        reasons = "; ".join(f"{e.reason}: {e.detail}"[:160] for e in result.history[:3])
        raise AssertionError(f"no {operator} candidate compiled and verified ({reasons})")
    return (f"CPU backend: {len(good)} of {result.evaluations} {operator} {goal.shapes[0]} "
            "candidates compiled, verified and timed in worker processes")


C_KERNEL = r"""
void saxpy(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
"""


def _cpu_direct(workdir: Path) -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")
    if not compiler:
        raise Skip("no C compiler (cc, gcc or clang) on PATH; the CPU backend needs one")
    src, lib = workdir / "saxpy.c", workdir / "libsaxpy.so"
    src.write_text(C_KERNEL)
    proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)],
                          check=False, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"{compiler} failed: {proc.stderr.strip()[:300]}")
    fn = ctypes.CDLL(str(lib)).saxpy
    n = 1000
    x = (ctypes.c_float * n)(*range(n))
    y = (ctypes.c_float * n)(*([1.0] * n))
    fn(ctypes.c_int(n), ctypes.c_float(2.0), x, y)
    wrong = [i for i in range(n) if y[i] != 2.0 * i + 1.0]
    if wrong:
        raise AssertionError(f"saxpy wrong at {len(wrong)} of {n} elements")
    return f"{Path(compiler).name} built a kernel; ctypes ran it, {n} outputs right"


NVRTC_KERNEL = r"""
#include <cuda_fp16.h>
extern "C" __global__ void scale(const __half *x, float *y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * __half2float(x[i]);
}
"""


def check_nvrtc(workdir: Path) -> str:
    """Compile a CUDA kernel with a CUDA header to PTX through CuPy's NVRTC bindings. Needs the
    NVRTC library and CUDA headers, not a GPU or a driver."""
    if importlib.util.find_spec("cupy") is None:
        raise Skip("CuPy is not installed; the cuda backend is unavailable")
    # CuPy is here, so failing to import it is a broken installation (or bundle), not a SKIP
    from cupy.cuda import nvrtc
    try:
        # CuPy's include paths (its own headers and the CUDA runtime's), as the cuda backend
        # compiles with them; private API, pinned with CuPy's version
        from cupy._core.core import assemble_cupy_compiler_options

        options = [o for o in assemble_cupy_compiler_options(()) if o.startswith("-I")]
    except Exception:  # noqa: BLE001 - without them NVRTC's own include path is tried
        options = []
    try:
        version = nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - any load error means no usable NVRTC
        raise Skip(f"NVRTC library not found: {exc}") from None
    prog = nvrtc.createProgram(NVRTC_KERNEL, "selftest.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, ["--gpu-architecture=compute_80", *options])
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise AssertionError(f"NVRTC compile failed: {exc}: {log.strip()[:400]}") from None
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    ptx_text = ptx.decode(errors="replace") if isinstance(ptx, bytes) else str(ptx)
    if ".entry scale" not in ptx_text:
        raise AssertionError("NVRTC produced PTX without the kernel's entry point")
    return f"NVRTC {version[0]}.{version[1]} compiled a kernel with cuda_fp16.h to PTX"


def check_sandbox(workdir: Path) -> str:
    """Which protections candidate code runs under here (app.gpu.sandbox); a platform that
    lacks one is reported, not failed."""
    from app.gpu.sandbox import status

    lines = status()
    if any(v.startswith("unknown") for v in lines.values()):
        raise AssertionError("; ".join(f"{k} {v}" for k, v in lines.items()))
    missing = [k for k, v in lines.items() if not v.startswith(("on", "by design"))]
    head = (f"missing or partial on this platform: {', '.join(missing)}" if missing
            else f"all {len(lines)} walls on")
    return f"{head}; " + "; ".join(f"{k} {v}" for k, v in lines.items())


CHECKS: dict[str, Callable[[Path], str]] = {
    "storage": check_storage,
    "replay": check_replay,
    "cpu": check_cpu,
    "nvrtc": check_nvrtc,
    "sandbox": check_sandbox,
}


def run_check(name: str, check: Callable[[Path], str], verbose: bool = False) -> Outcome:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"kernelswarm-selftest-{name}-") as tmp:
        try:
            detail, status = check(Path(tmp)), PASS
        except Skip as exc:
            detail, status = str(exc), SKIP
        except Exception as exc:  # noqa: BLE001 - a failed check is reported, not raised
            detail, status = f"{type(exc).__name__}: {exc}", FAIL
            if verbose:
                traceback.print_exc()
    return Outcome(name, status, " ".join(detail.split()), time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kernelswarm selftest",
        description="Check this installation: storage, replay run, CPU compile-and-run, NVRTC.")
    parser.add_argument("checks", nargs="*", metavar="CHECK",
                        help=f"run only these ({', '.join(CHECKS)}); default: all")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print the traceback of a failed check")
    args = parser.parse_args(argv)
    unknown = [n for n in args.checks if n not in CHECKS]
    if unknown:
        parser.error(f"unknown check {unknown[0]!r}; choose from {', '.join(CHECKS)}")
    names = args.checks or list(CHECKS)
    outcomes = []
    for name in names:
        outcome = run_check(name, CHECKS[name], args.verbose)
        print(outcome.line(), flush=True)
        outcomes.append(outcome)
    failed = [o.name for o in outcomes if o.status == FAIL]
    frozen = " (frozen bundle)" if getattr(sys, "frozen", False) else ""
    print(f"selftest{frozen}: {len(outcomes) - len(failed)} of {len(outcomes)} checks did not fail"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
