"""Attacks on processes and IPC outside the cell, written as C kernels
and run through the real CPU backend (real gcc, the real worker, kernel host and compile
helper) with the text filters off: only the walls stand in the way. The ground truth is read
from outside: a victim process's signals, nice value, affinity, scheduler and limits, the
host's SysV IPC tables, and processes left running after the evaluation."""

from __future__ import annotations

import ctypes
import os
import platform
import random
import resource
import threading
import time

import pytest
from test_sandbox_attacks import CONFIG, TRANSPOSE, assert_correct

from app.core.types import Candidate
from app.goal import Goal
from app.gpu import sandbox
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler, host_program_for
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines, WorkerPool

pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.skipif(not sandbox.enabled(), reason="sandbox switched off")]

COPY = """
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}"""
HEAD = "void ks_kernel(float *y, const float *x, long rows, long cols) {\n"


def settings(compile_s: float = 60.0, run_s: float = 5.0) -> CpuSettings:
    return CpuSettings(
        timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
        baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
        deadlines=Deadlines(compile_s=compile_s, run_s=run_s), flush_bytes=0,
        memory_limit_bytes=1 << 30)


def evaluator(compile_s: float = 60.0, run_s: float = 5.0) -> CpuEvaluator:
    """The real CPU evaluator, its worker without the text checks; the worker's own compile
    timeout (120 s) is longer than the watchdog's, so the watchdog is what ends a slow build."""
    s = settings(compile_s, run_s)
    ev = CpuEvaluator(Goal(name="sandbox walls", backend="cpu", operator="transpose",
                           shapes=[[64, 96]]), settings=s)
    ev.pool.close()
    host = host_program_for(ev.tc)
    ev.pool = WorkerPool("test_sandbox_attacks:WallOnlyWorker",
                         [(ev.op.name, ev.tc.compiler, 120.0, 0, host)],
                         memory_limit_bytes=1 << 30, name="walls-", programs=[host])
    return ev


@pytest.fixture(scope="module")
def transpose():
    ev = evaluator()
    yield ev
    ev.close()


def attack(ev: CpuEvaluator, name: str, source: str):
    return ev.evaluate(Candidate(config=CONFIG, key=f"walls-{name}-{time.monotonic_ns()}",
                                 agent="llm", source=source))




def _ioprio(pid: int) -> int | None:
    number = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(number, 1, pid)  # IOPRIO_WHO_PROCESS


def nice_of(pid: int) -> int:
    """A process's nice value, read from outside it."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def _state(pid: int) -> tuple:
    return (nice_of(pid), sorted(os.sched_getaffinity(pid)), os.sched_getscheduler(pid),
            resource.prlimit(pid, resource.RLIMIT_NOFILE), _ioprio(pid))


# Each acts on the victim's pid: what the issue saw done to the engine and another process.
PROCESS_ATTACKS = {
    "setpriority": ("#include <sys/resource.h>\n", "setpriority(PRIO_PROCESS, {pid}, 19);"),
    "setaffinity": ("#define _GNU_SOURCE\n#include <sched.h>\n",
                    ("cpu_set_t s; CPU_ZERO(&s); CPU_SET(0, &s); "
                     "sched_setaffinity({pid}, sizeof s, &s);")),
    "prlimit": ("#define _GNU_SOURCE\n#include <sys/resource.h>\n",
                "struct rlimit r = {{5, 5}}; prlimit({pid}, RLIMIT_NOFILE, &r, 0);"),
    "scheduler": ("#define _GNU_SOURCE\n#include <sched.h>\n",
                  "struct sched_param p = {{0}}; sched_setscheduler({pid}, SCHED_IDLE, &p);"),
    "ioprio": ("#include <unistd.h>\n#include <sys/syscall.h>\n",
               "syscall(SYS_ioprio_set, 1, {pid}, (3 << 13) | 7);"),  # idle class
}


@pytest.mark.parametrize("name", sorted(PROCESS_ATTACKS))
def test_a_candidate_cannot_reprioritise_or_limit_another_process(transpose, victim, name):
    """Nice 19, one CPU, SCHED_IDLE, rlimits rewritten, idle I/O class."""
    before = _state(victim.pid)
    head, call = PROCESS_ATTACKS[name]
    result = attack(transpose, name, head + HEAD + call.format(pid=victim.pid) + COPY)
    time.sleep(0.1)
    assert victim.poll() is None
    assert _state(victim.pid) == before, (result.reason, result.detail)


def test_a_signal_through_f_setown_never_reaches_another_process(transpose, victim):
    """F_SETOWN + F_SETSIG + O_ASYNC on its own pipe sends any signal on the
    next write (kill and tgkill are filtered, this is not a kill)."""
    source = f"""#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
{HEAD}    int p[2];
    if (pipe(p) == 0) {{
        fcntl(p[0], F_SETOWN, {victim.pid});
        fcntl(p[0], F_SETSIG, SIGKILL);
        fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_ASYNC);
        write(p[1], "x", 1);
    }}{COPY}"""
    result = attack(transpose, "setown", source)
    time.sleep(0.3)
    assert victim.poll() is None, (result.reason, result.detail)
    assert not result.ok


# ---- SysV IPC --------------------------------------------------------------------
IPC_CREAT, IPC_RMID = 0o1000, 0


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    return libc


def _sysv(table: str) -> dict[int, int]:
    """key -> id of the host's SysV objects ('shm', 'msg'), read from /proc/sysvipc."""
    with open(f"/proc/sysvipc/{table}") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return {int(r[0]): int(r[1]) for r in rows}


@pytest.fixture
def segment():
    """A shared-memory segment of another program, holding a secret."""
    libc = _libc()
    key = random.randrange(1 << 20, 1 << 30)
    shmid = libc.shmget(key, 4096, IPC_CREAT | 0o600)
    assert shmid >= 0
    addr = libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, b"victim-secret\0", 14)
    yield key, addr
    libc.shmdt(ctypes.c_void_p(addr))
    libc.shmctl(shmid, IPC_RMID, None)


def test_sysv_ipc_of_the_host_is_out_of_reach_and_nothing_is_left_behind(transpose, segment):
    key, addr = segment
    mine_shm, mine_msg = key + 1, key + 2
    source = f"""#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/msg.h>
{HEAD}    int id = shmget({key}, 0, 0);
    if (id >= 0) {{
        char *p = shmat(id, 0, 0);
        if (p != (char *)-1) memcpy(p, "PWNED", 5);
    }}
    int big = shmget({mine_shm}, 64 << 20, IPC_CREAT | 0600);
    if (big >= 0) {{ char *q = shmat(big, 0, 0); if (q != (char *)-1) memset(q, 1, 64 << 20); }}
    msgget({mine_msg}, IPC_CREAT | 0600);{COPY}"""
    try:
        result = attack(transpose, "sysv", source)
        transpose.pool.broadcast_kill()  # the cell is gone: whatever it made must be too
        time.sleep(0.2)
        assert ctypes.string_at(addr, 13) == b"victim-secret", (result.reason, result.detail)
        assert mine_shm not in _sysv("shm") and mine_msg not in _sysv("msg")
    finally:
        libc = _libc()
        if mine_shm in _sysv("shm"):
            libc.shmctl(_sysv("shm")[mine_shm], IPC_RMID, None)
        if mine_msg in _sysv("msg"):
            libc.msgctl(_sysv("msg")[mine_msg], IPC_RMID, None)


# ---- processes that outlive the cell ---------------------------------------------
def _alive(pid: int, start: str) -> bool:
    """`pid` is still the process that had start time `start` (not a reused pid), not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == start


def _start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def _by_name(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == name:
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _descendants(pid: int) -> list[int]:
    """The process tree below `pid`, read from /proc by the test itself."""
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        try:
            for tid in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(c) for c in f.read().split()]
                found += kids
                queue += kids
        except OSError:
            continue
    return found


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def test_a_candidate_that_leaves_its_session_does_not_outlive_the_cell():
    """The candidate clears its parent-death signal, calls setsid and keeps
    running; the watchdog kills the worker; nothing of it may remain."""
    tag = f"ks-orphan{random.randrange(100000)}"
    source = f"""#include <sys/prctl.h>
#include <unistd.h>
{HEAD}    prctl(PR_SET_NAME, "{tag}");
    prctl(PR_SET_PDEATHSIG, 0);
    setsid();
    for (volatile long spin = 0; ; spin++) {{ }}{COPY}"""
    ev = evaluator(run_s=2.0)
    try:
        result = attack(ev, "orphan", source)
        assert not result.ok
        time.sleep(0.5)
        survivors = _by_name(tag)
        assert survivors == [], (survivors, result.reason, result.detail)
    finally:
        _kill_all(_by_name(tag))
        ev.close()


# Each level includes this very file twice: 2**LEVELS includes, little memory, minutes of cc1.
COMPILE_BOMB = """#if __INCLUDE_LEVEL__ < 24
#include __FILE__
#include __FILE__
#endif
""" + f"#if __INCLUDE_LEVEL__ == 0\n#include <stddef.h>\n{TRANSPOSE}#endif\n"


@pytest.mark.slow
def test_a_compile_bomb_does_not_outlive_the_watchdog():
    """The watchdog kills the worker in its compile stage; the compiler's
    cc1 (a grandchild of the compile helper, in its own session) must die with it."""
    ev = evaluator(compile_s=3.0)
    seen: dict[int, str] = {}
    done = threading.Event()

    def watch() -> None:  # the cell's tree, from outside, while it compiles
        while not done.is_set():
            for w in ev.pool.workers:
                pid = w.pid
                for p in _descendants(pid) if pid else []:
                    try:
                        with open(f"/proc/{p}/comm") as f:
                            if f.read().strip() == "cc1" and p not in seen:
                                seen[p] = _start_time(p)
                    except OSError:
                        pass
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        result = attack(ev, "compile-bomb", COMPILE_BOMB)
        done.set()
        t.join(2)
        assert not result.ok and "compile" in result.detail, (result.reason, result.detail)
        assert seen, "no cc1 was seen in the cell's tree"
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in seen.items()):
            time.sleep(0.05)
        assert not any(_alive(p, s) for p, s in seen.items()), seen
    finally:
        done.set()
        _kill_all(seen)
        ev.close()


def test_an_honest_kernel_still_passes(transpose):
    assert_correct(attack(transpose, "honest", f"#include <stddef.h>\n{TRANSPOSE}"))


PEEK_AT_THE_WORKER = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <fcntl.h>
#include <unistd.h>
#include <string.h>
__attribute__((constructor)) static void peek(void) {
    char path[64], line[512];
    int maps = 0, reads = 0;
    for (int pid = 1; pid < 4096; pid++) {  /* the cell's processes: the worker, the zygote */
        if (pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%d/maps", pid);
        FILE *m = fopen(path, "r");
        if (!m) continue;
        unsigned long lo = 0, hi = 0;
        while (fgets(line, sizeof line, m))
            if (strstr(line, " r") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) break;
        fclose(m);
        maps++;
        snprintf(path, sizeof path, "/proc/%d/mem", pid);
        int fd = open(path, O_RDONLY);
        unsigned char buf[8];
        if (fd >= 0 && lo && pread(fd, buf, sizeof buf, lo) == sizeof buf) reads++;
        if (fd >= 0) close(fd);
    }
    printf("PEEK maps=%d reads=%d\n", maps, reads);
    fflush(stdout);
}
"""


def test_a_candidate_cannot_read_the_workers_memory(transpose):
    """Own attack: load-time code reads /proc/PID/maps and /proc/PID/mem of the cell's other
    processes (the worker holds the expected outputs of the inputs it hands the kernel). The
    worker's /proc entry lies beneath the cell's Landlock rule for /proc/self, and the two ran
    in one Landlock domain with the same uid: 8 bytes of the worker's memory were read. The
    candidate's own nested Landlock domain (kernel_host.c) refuses it."""
    result = attack(transpose, "peek", PEEK_AT_THE_WORKER + TRANSPOSE)
    assert "PEEK maps=0 reads=0" in result.log, result.log[-2000:]
    assert_correct(result)
