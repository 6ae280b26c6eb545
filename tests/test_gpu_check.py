"""scripts/gpu-check without a GPU: the dry run exercises every step that needs no device and
leaves REPORT.md and preflight.json; a failing must-have stops it with one line (report still
written); SIGINT to the whole run (what a time limit sends) still writes the report. The GPU
stages themselves cannot run here: there is no GPU on this machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from project_paths import ROOT

pytest.importorskip("cupy")
SCRIPT = ROOT / "scripts" / "gpu-check"


def _env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH", "CUPY_CACHE_DIR")}
    env.update(PYTHON=sys.executable, KERNELSWARM_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path), **extra)
    return env


def default_sigint() -> None:
    """Started from a background job, SIGINT may be ignored, and an ignored signal stays ignored
    across exec: give the child the default, as a terminal's foreground job has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_dry_run_leaves_a_report_in_time(tmp_path):
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = subprocess.run([str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True, text=True,
                          timeout=180, env=_env(tmp_path), check=False)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert seconds < 120, seconds
    report = (out / "REPORT.md").read_text()
    preflight = json.loads((out / "preflight.json").read_text())
    assert preflight["dry_run"] and preflight["verdict"] == "ok"
    stages = [line.split("\t")[:2] for line in (out / "stages.tsv").read_text().splitlines()]
    assert stages == [["preflight", "0"], ["tests", "0"], ["bench", "0"], ["kda", "0"], ["faults", "0"]]
    assert "no spills" in (out / "kda.txt").read_text() and (out / "gpu_kda.json").exists()
    assert "## Preflight: ok" in report and "GPU tests:" in report
    assert "memory-bound min " in report and "% of copy bandwidth" in report
    assert "Planted faults survived" in report and report.index("| out_of_memory") < report.index("| hang")
    assert (out / "gpu-tests.xml").exists() and (out / "faults" / "gpu_kernels.json").exists()
    rerun = (out / "RERUN.txt").read_text().strip()
    assert rerun.startswith("scripts/gpu-check --only ") and rerun in proc.stdout
    assert "cupy" in (out / "environment.txt").read_text().lower()


def test_a_failed_must_have_stops_with_one_line_and_a_report(tmp_path):
    broken = tmp_path / "broken"
    (broken / "cupy").mkdir(parents=True)
    (broken / "cupy" / "__init__.py").write_text("raise ImportError('planted: no CuPy here')\n")
    out = tmp_path / "out"
    proc = subprocess.run([str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path, PYTHONPATH=str(broken)), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    stop = [ln for ln in proc.stdout.splitlines() if "STOP" in ln]
    assert len(stop) == 1 and "versions failed" in stop[0] and "planted" in stop[0], proc.stdout
    report = (out / "REPORT.md").read_text()
    assert "**Stopped: preflight: versions failed" in report
    assert "--only preflight" in (out / "RERUN.txt").read_text()
    assert json.loads((out / "preflight.json").read_text())["verdict"].startswith("failed")
    assert [ln.split("\t")[0] for ln in (out / "stages.tsv").read_text().splitlines()] == ["preflight"]


@pytest.mark.parametrize("sig,target", [(signal.SIGINT, "group"), (signal.SIGTERM, "script")])
@pytest.mark.slow
def test_a_signal_during_the_benchmark_still_writes_the_report(tmp_path, sig, target):
    """SIGINT to the whole group (a Ctrl-C) or SIGTERM to the script alone (a supervisor's time
    limit): the running stage is stopped with SIGINT, keeps its partial report, and REPORT.md
    is written."""
    out = tmp_path / "out"
    proc = subprocess.Popen([str(SCRIPT), "--dry-run", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=_env(tmp_path, GPU_CHECK_STAND_IN="test_cuda_bench:SlowBenchGpu"),
                            preexec_fn=default_sigint)  # noqa: PLW1509
    deadline = time.monotonic() + 90
    bench = out / "gpu_kernels.json"
    while time.monotonic() < deadline and proc.poll() is None and not bench.exists():
        time.sleep(0.2)
    if target == "group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, stdout[-3000:] + stderr[-3000:]
    report = (out / "REPORT.md").read_text()
    assert f"**Ended early: interrupted by {name} during bench" in report, report[:2000]
    assert "Partial report: interrupted (SIGINT)" in report  # the benchmark's own partial report
    assert "## Preflight: ok" in report and (out / "RERUN.txt").exists()
    stages = (out / "stages.tsv").read_text()
    assert f"stopped early: gpu-check got {name}" in stages
