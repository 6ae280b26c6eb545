"""The file-system leaks that are not a file's contents: `stat` and inotify
reach files Landlock hides (Landlock mediates opening, not looking up), and O_PATH opens are
not checked by it at all. Through the real CPU backend with the text filters off
(test_sandbox_attacks.WallOnlyWorker): only the walls stand. The candidate's filters
(app.gpu.sandbox.seccomp.deny_lookups) answer ENOENT; the ground truth is the secret file's
real size and the outside directory itself."""

from __future__ import annotations

import os

import pytest
import test_sandbox_attacks as walls

from app.gpu import sandbox
from app.gpu.cpu import find_compiler

# the wall-only transpose evaluator and the outside directory of the sandbox attack tests
secret_env, transpose, outside, attack = walls.secret_env, walls.transpose, walls.outside, walls.attack
pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.skipif(not sandbox.enabled(), reason="sandbox switched off")]
HEAD = "#define _GNU_SOURCE\n#include <stdio.h>\n#include <fcntl.h>\n#include <unistd.h>\n#include <sys/stat.h>\n"
COPY = """
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}"""


@pytest.mark.slow
def test_stat_of_a_file_landlock_hides_reveals_nothing(transpose, outside):
    source = HEAD + f"""
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    struct stat st;
    int r = stat("{outside.secret_file}", &st);
    int a = access("{outside.secret_file}", F_OK);
    int fd = open("{outside.secret_file}", O_PATH);  /* Landlock does not check O_PATH */
    int f = fd >= 0 ? fstat(fd, &st) : -1;
    printf("STAT-ATTACK %d size=%ld access=%d opath=%d fstat=%d\\n", r,
           r == 0 ? (long)st.st_size : -1L, a, fd, f);
    fflush(stdout);{COPY}"""
    result = attack(transpose, "stat", source)
    size = outside.secret_file.stat().st_size
    walls.assert_correct(result)  # refused with an errno, the kernel still ran
    assert "STAT-ATTACK -1 size=-1 access=-1 opath=-1 fstat=-1" in result.log, result.log[-1000:]
    assert f"size={size}" not in result.log


def test_inotify_on_the_home_directory_reports_nothing(transpose, outside):
    source = HEAD + f"""#include <sys/inotify.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    int fd = inotify_init1(0);
    int wd = fd >= 0 ? inotify_add_watch(fd, "{outside.path}", IN_ALL_EVENTS) : -1;
    printf("INOTIFY-ATTACK fd=%d wd=%d\\n", fd, wd);
    fflush(stdout);{COPY}"""
    result = attack(transpose, "inotify", source)
    walls.assert_correct(result)
    assert "INOTIFY-ATTACK fd=-1 wd=-1" in result.log, result.log[-1000:]


def test_load_time_code_writes_renames_and_deletes_nothing(transpose):
    """A constructor (the ELF check is off here) in the cell's scratch directory, which the
    cell itself may write: it may not create, rename or delete a file there."""
    source = HEAD + """
__attribute__((constructor)) static void early(void) {
    int fd = open("planted.txt", O_WRONLY | O_CREAT, 0644);
    int r = rename("candidate-run.bpf", "planted.bpf");
    int u = unlink("candidate-load.bpf");
    printf("LOAD-ATTACK open=%d rename=%d unlink=%d\\n", fd, r, u);
    fflush(stdout);
}
void ks_kernel(float *y, const float *x, long rows, long cols) {""" + COPY
    result = attack(transpose, "load-write", source)
    scratch = next(w.scratch for w in transpose.pool.workers if w.scratch)
    names = sorted(os.listdir(scratch))
    assert "candidate-run.bpf" in names and "candidate-load.bpf" in names, names
    assert not {"planted.txt", "planted.bpf"} & set(names), names
    walls.assert_correct(result)
    assert "LOAD-ATTACK open=-1 rename=-1 unlink=-1" in result.log, result.log[-1000:]
