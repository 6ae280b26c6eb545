"""Issue 28 item 8, the file-system leaks that are not a file's contents: `stat` and inotify
reach files Landlock hides (Landlock mediates opening, not looking up). Through the real CPU
backend with the text filters off (test_sandbox_attacks.WallOnlyWorker): only the walls stand.
xfail until the cell gets a mount namespace (see each reason)."""

from __future__ import annotations

import pytest
import test_sandbox_attacks as walls

from app.gpu import sandbox
from app.gpu.cpu import find_compiler

# the wall-only transpose evaluator and the outside directory of the sandbox attack tests
secret_env, transpose, outside, attack = walls.secret_env, walls.transpose, walls.outside, walls.attack
pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.skipif(not sandbox.enabled(), reason="sandbox switched off")]
MOUNT_NS = ("Landlock has no right for path lookup: stat() and inotify_add_watch() on a file "
            "outside the cell succeed in the candidate's process. Closing it needs the walls "
            "engineer's candidate run filter (seccomp.export_candidate_filters) to kill "
            "inotify_init/inotify_init1/inotify_add_watch/fanotify_init/fanotify_mark, "
            "stat/lstat/access/faccessat/faccessat2/readlink/readlinkat, and newfstatat/statx "
            "unless flags has AT_EMPTY_PATH (glibc's fstat), or a mount namespace with an empty "
            "tmpfs over $HOME and /tmp but the scratch directory")


@pytest.mark.xfail(strict=True, reason=MOUNT_NS)
def test_stat_of_a_file_landlock_hides_reveals_nothing(transpose, outside):
    source = f"""#include <stdio.h>
#include <sys/stat.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    struct stat st;
    int r = stat("{outside.secret_file}", &st);
    printf("STAT-ATTACK %d size=%ld\\n", r, r == 0 ? (long)st.st_size : -1L);
    fflush(stdout);
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""
    result = attack(transpose, "stat", source)
    size = outside.secret_file.stat().st_size
    assert f"size={size}" not in result.log, result.log[-1000:]


@pytest.mark.xfail(strict=True, reason=MOUNT_NS)
def test_inotify_on_the_home_directory_reports_nothing(transpose, outside):
    source = f"""#include <stdio.h>
#include <sys/inotify.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    int fd = inotify_init1(0);
    int wd = fd >= 0 ? inotify_add_watch(fd, "{outside.path}", IN_ALL_EVENTS) : -1;
    printf("INOTIFY-ATTACK fd=%d wd=%d\\n", fd, wd);
    fflush(stdout);
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""
    result = attack(transpose, "inotify", source)
    assert "INOTIFY-ATTACK" in result.log or not result.ok
    assert "wd=-1" in result.log or "INOTIFY-ATTACK" not in result.log, result.log[-1000:]
