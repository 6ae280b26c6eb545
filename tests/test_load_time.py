"""Load-time code and the files a later
run trusts. Each attack goes through the real CPU backend (real gcc, the real worker cell, the
text checks on) and is judged from outside: a canary file, the roofs and host binary the next
run uses."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from app.core.types import Candidate
from app.goal import Goal
from app.gpu import sandbox
from app.gpu.cpu import (
    CpuEvaluator,
    CpuSettings,
    find_compiler,
    host_program_for,
    memory_roof,
    toolchain,
)
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines
from app.paths import cache_dir

pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.skipif(not sandbox.enabled(), reason="sandbox switched off")]
FAST = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=10.0), flush_bytes=0, memory_limit_bytes=1 << 30)
CONFIG = {"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8, "THREADS": 1}
TRANSPOSE = """
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}
"""


def _roofs_file() -> Path:
    """Where the next run reads its roofs (the cache itself in earlier versions)."""
    default = getattr(memory_roof, "default_file", None)
    return default() if default else cache_dir() / "cpu-roofs.json"


def _transpose() -> CpuEvaluator:
    return CpuEvaluator(Goal(name="load time", backend="cpu", operator="transpose",
                             shapes=[[64, 96]]), settings=FAST)


def _evaluate(ev: CpuEvaluator, source: str):
    return ev.evaluate(Candidate(config=CONFIG, key=f"lt-{time.monotonic_ns()}", agent="llm",
                                 source=source))


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the resolver makes x86-64 syscalls")
def test_a_line_directive_cannot_hide_an_ifunc_resolver_that_writes_the_cache():
    """`#line 1 "other.h"` made the rest of the file "another file" for the source checks, and
    the IFUNC resolver behind it ran inside dlopen, where files can still be opened."""
    canary = cache_dir() / "ifunc-canary"
    source = TRANSPOSE.replace("void ks_kernel", "static void honest") + textwrap.dedent(f"""\
        static void pick(float *y, const float *x, long rows, long cols);
        void ks_kernel(float *y, const float *x, long rows, long cols) {{ pick(y, x, rows, cols); }}
        #line 1 "other.h"
        static long sc(long n, long a, long b, long c) {{
            long r; __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c)
                                     : "rcx", "r11", "memory"); return r; }}
        static void *resolve(void) {{
            long fd = sc(2, (long)"{canary}", 0101, 0644);
            if (fd >= 0) {{ sc(1, fd, (long)"ifunc", 5); sc(3, fd, 0, 0); }}
            return (void *)honest; }}
        static void pick(float *y, const float *x, long rows, long cols)
            __attribute__((ifunc("resolve")));
        """)
    with _transpose() as ev:
        result = _evaluate(ev, source)
    assert not canary.exists(), "the resolver ran at load time and wrote the cache"
    assert not result.ok and "#line" in result.detail, (result.reason, result.detail)


def test_an_ifunc_is_refused_by_the_library_check_alone(tmp_path):
    """Without the source check (a resolver GCC makes itself, target_clones): still refused."""
    from app.gpu.cpu import elf_check

    tc = toolchain()
    src, lib = tmp_path / "k.c", tmp_path / "k.so"
    src.write_text("static void real(float *o) { o[0] = 1; }\n"
                   "static void (*resolve(void))(float *) { return real; }\n"
                   "static void pick(float *o) __attribute__((ifunc(\"resolve\")));\n"
                   "void ks_kernel(float *o) { pick(o); }\n")
    subprocess.run([tc.compiler, *tc.flags, str(src), "-o", str(lib)], check=True,
                   capture_output=True)
    problems = elf_check.library_problems(lib, tc.compiler, tc.flags)
    assert any("IFUNC" in p for p in problems) and any("IRELATIVE" in p for p in problems), problems


def test_has_include_answers_nothing(tmp_path):
    """`__has_include` of a file outside the cell told whether it exists: one bit a run."""
    there = tmp_path / "secret.txt"
    there.write_text("secret\n")
    outcomes = []
    with _transpose() as ev:
        for path in (there, tmp_path / "missing.txt"):
            wrong = TRANSPOSE.replace("y[j * rows + i] = x[i * cols + j]", "y[j * rows + i] = 0")
            source = f'#if __has_include("{path}")\n{TRANSPOSE}\n#else\n{wrong}\n#endif\n'
            result = _evaluate(ev, source)
            outcomes.append((result.ok, result.reason))
            assert "__has_include" in result.detail, (result.reason, result.detail)
    assert outcomes[0] == outcomes[1]


PYTHON_REFERENCE_GOAL = """\
name = "poison"
backend = "cpu"
shapes = [[257]]

[kernel]
source = "k.c"
entry = "scale"
reference = "reference.py:scale"
tune_params = { U = [1] }
args = [
  { name = "out", role = "output", shape = "n" },
  { name = "x", shape = "n" },
  { name = "n", role = "scalar", dtype = "int64", value = "n" },
]
"""


@pytest.mark.slow
def test_a_colleagues_python_reference_cannot_poison_the_roofs_or_the_host(tmp_path):
    """Import-time code of a goal's Python reference runs in the worker: it rewrote
    cpu-roofs.json (99999 GB/s: the beyond-roof refusal off for every later run) and the
    cached kernel host that every later CPU worker runs before its seal."""
    tc = toolchain()
    host = Path(host_program_for(tc))
    host_bytes = host.read_bytes()
    roofs_file = _roofs_file()
    targets = sorted({str(roofs_file), str(cache_dir() / "cpu-roofs.json"), str(host),
                      str(cache_dir() / "cpu-host" / host.name)})
    fake = ('{"threads": 1, "one_thread": {"DRAM": 99999}, "all_threads": {"DRAM": 99999}, '
            '"levels": [{"name": "DRAM", "size_bytes": 0, "shared_by": 1}], '
            f'"key": "{memory_roof.cache_key(tc.identity)}", "measured_at": 1e12}}')
    (tmp_path / "reference.py").write_text(textwrap.dedent(f"""\
        import os
        for target in {targets!r}:
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w") as f:
                    f.write({fake!r} if target.endswith(".json") else "#!/bin/sh\\nexit 7\\n")
                print("POISONED", target)
            except OSError as exc:
                print("REFUSED", target, exc)

        def scale(x, n):
            return 2.0 * x
        """))
    (tmp_path / "k.c").write_text("void scale(float *out, const float *x, long n) {\n"
                                  "  for (long i = 0; i < n; i++) out[i] = 2.0f * x[i]; }\n")
    (tmp_path / "goal.toml").write_text(PYTHON_REFERENCE_GOAL)
    with CpuEvaluator(Goal.load(tmp_path / "goal.toml"), settings=FAST) as ev:
        result = ev.evaluate(Candidate(config={"U": 1}, key="poison", agent="user"))
    assert "REFUSED" in result.log, result.log[-2000:]  # the reference's code did run
    # the next run, judged from outside: honest roofs, the host it runs is the one we built
    with _transpose() as later:
        roofs = later.roofs()
        assert roofs is not None and max(roofs.all_threads.values()) < 99999, roofs
    assert Path(host_program_for(tc)).read_bytes() == host_bytes


def test_tampered_roofs_and_host_are_discarded_and_rebuilt(monkeypatch, caplog):
    """What a cell could do where Landlock is off (or the user's own tools did): the trusted
    files are changed in place; the next run measures and builds them again, and says so."""
    tc = toolchain()
    roofs_file = _roofs_file()
    roofs_file.parent.mkdir(parents=True, exist_ok=True)
    roofs_file.write_text(
        '{"threads": 1, "one_thread": {"DRAM": 99999}, "all_threads": {"DRAM": 99999}, '
        '"levels": [{"name": "DRAM", "size_bytes": 0, "shared_by": 1}], '
        f'"key": "{memory_roof.cache_key(tc.identity)}", "measured_at": {time.time()}}}')
    honest = memory_roof.Roofs([memory_roof.CacheLevel("DRAM", 0, 1)], 1, {"DRAM": 10.0}, {"DRAM": 20.0})
    monkeypatch.setattr(memory_roof, "measure", lambda *a, **k: honest)
    with _transpose() as ev:
        roofs = ev.roofs()
        host = Path(host_program_for(tc))
    assert roofs is not None and roofs.all_threads["DRAM"] == 20.0, roofs
    built = host.read_bytes()
    host.write_bytes(b"#!/bin/sh\nexit 7\n")
    again = Path(host_program_for(tc))
    assert again.read_bytes() == built
    assert "does not match its MAC" in caplog.text


def test_trusted_files_are_outside_every_cells_write_set():
    from app.gpu.trusted_cache import trusted_dir

    plan = sandbox.plan_cell("cpu", "/tmp/scratch", sandbox.writable_caches(str(cache_dir()), "cpu"))
    trusted = os.path.realpath(trusted_dir())
    for w in plan.rules.write:
        w = os.path.realpath(w)
        assert not (trusted == w or trusted.startswith(w + os.sep)), (w, trusted)
    shutil.rmtree(cache_dir(), ignore_errors=True)
