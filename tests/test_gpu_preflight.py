"""The GPU preflight's dry run: every step that needs no device runs here (CuPy, NVRTC, the
fp16/bf16 headers, a catalog compile), and a failing must-have is one line and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from project_paths import ROOT

pytest.importorskip("cupy")


def _preflight(tmp_path, *extra):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_preflight.py"), "--dry-run",
                           "--out", str(tmp_path), *extra], capture_output=True, text=True,
                          timeout=120, check=False)


def test_dry_run_compiles_and_reports(tmp_path):
    proc = _preflight(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "preflight.json").read_text())
    steps = report["steps"]
    assert steps["versions"]["ok"] and steps["versions"]["nvrtc"]
    assert set(steps["headers"]["found"]) == {"cuda_fp16.h", "cuda_bf16.h"}
    assert steps["catalog"]["ok"] and steps["catalog"]["registers"] > 0
    assert steps["launch"]["ok"] is None and "dry run" in steps["launch"]["skipped"]
    assert proc.stdout.strip().startswith("preflight: ok")


def test_a_failing_must_have_is_one_line(tmp_path):
    proc = _preflight(tmp_path, "--arch", "sm_1")  # no such architecture: compiles fail
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preflight: headers failed")
    assert json.loads((tmp_path / "preflight.json").read_text())["verdict"].startswith("failed")


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_preflight", ROOT / "scripts" / "gpu_preflight.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stopped_in,status", [("baseline_cell", 0), ("headers", 1)])
def test_the_time_limit_keeps_what_was_checked(tmp_path, monkeypatch, capsys, stopped_in, status):
    """gpu-check stops the preflight with SIGINT at its time limit: the steps done are kept, the
    report says where it stopped, and only a must-have not reached stops the GPU check."""
    preflight = _module()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(preflight, stopped_in, interrupted)
    assert preflight.main(["--dry-run", "--out", str(tmp_path)]) == status
    report = json.loads((tmp_path / "preflight.json").read_text())
    step = {"baseline_cell": "cell", "headers": "headers"}[stopped_in]
    assert report["interrupted"] == step and report["steps"][step]["error"] == "interrupted (time limit)"
    assert report["steps"]["versions"]["ok"]
    line = capsys.readouterr().out.strip().splitlines()[-1]
    if status == 0:
        assert line.startswith("preflight: ok") and "interrupted in cell" in line
    else:
        assert line.startswith("preflight: headers failed: interrupted (time limit)")
        assert "catalog" not in report["steps"]
