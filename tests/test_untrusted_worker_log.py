"""A candidate that floods its stderr: 200 MB per call into the worker's
log must not land in the engine's memory; the engine reads only a bounded tail. Ground truth:
the engine process's peak resident memory (ru_maxrss), from a real `kernelswarm run`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from app.kt_import.importer import import_script

SCRIPT = '''
import numpy as np
from kernel_tuner import tune_kernel
kernel = r"""
#include <stdio.h>
#include <string.h>
void noisy(float *c, const float *a, int n) {
    char line[1 << 16];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = 0;
    for (int k = 0; k < MB * 16; k++) fputs(line, stderr);  /* MB megabytes per call */
    for (int i = 0; i < n; i++) c[i] = a[i];
}
"""
a = np.random.randn(1000).astype(np.float32)
c = np.zeros_like(a)
tune_kernel("noisy", kernel, 1000, [c, a, np.int32(1000)], {"MB": [MEGABYTES]}, lang="C",
            answer=[a, None, None])
'''

PEAK = ("import resource, sys; from app.cli import main; rc = main(sys.argv[1:]); "
        "print('PEAK_MB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="needs a C compiler")
def test_a_candidate_flooding_stderr_does_not_grow_the_engine(tmp_path):
    peaks = {}
    for mb in (0, 200):
        script = tmp_path / f"tune{mb}.py"
        script.write_text(textwrap.dedent(SCRIPT).replace("MEGABYTES", str(mb)))
        goal = import_script(script, tmp_path / f"goal{mb}").goal_path
        proc = subprocess.run([sys.executable, "-c", PEAK, "run", str(goal), "--db",
                               str(tmp_path / "h.sqlite"), "--max-evals", "1", "--agents",
                               "explorer", "--quiet"],
                              capture_output=True, text=True, timeout=300, check=False)
        found = [int(line.split()[1]) for line in proc.stdout.splitlines()
                 if line.startswith("PEAK_MB")]
        assert found, proc.stdout + proc.stderr
        peaks[mb] = found[0]
    # the same run, same roofs and baselines: only the candidate's stderr differs
    assert peaks[200] < peaks[0] + 150, f"engine peaks {peaks} MB: it read the candidate's stderr"
