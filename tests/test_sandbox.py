"""The sandbox's parts, each on its own in a real process, and a real worker cell end to end:
environment allow-list, network namespace, Landlock, seccomp, limits, the compile helper."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from app.core.types import CRASH
from app.gpu import sandbox
from app.gpu.sandbox import env, helper, landlock, seccomp
from app.gpu.worker import Deadlines, WorkerPool

FAST = Deadlines(compile_s=30.0, run_s=30.0)
GCC = shutil.which("gcc") or shutil.which("cc")
# refused: Landlock says no (PermissionError), the cell's file view has no such path at all, or
# only the read-only directories leading to a path bound deeper down (OSError: EROFS)
REFUSED = ("PermissionError", "FileNotFoundError", "OSError")


class CellProbe:
    """Runs inside a worker cell ("test_sandbox:CellProbe"): reports what the cell can do."""

    def __init__(self) -> None:
        self.scratch = os.getcwd()

    def __call__(self, request, progress):
        action, arg = request
        if action == "env":
            return {"env": dict(os.environ), "cwd": os.getcwd()}
        if action == "limits":
            return {n: resource.getrlimit(getattr(resource, n)) for n in arg}
        if action == "open":
            path, mode = arg
            try:
                with open(path, mode) as f:
                    f.write("x") if "w" in mode else f.read(10)
                return "ok"
            except OSError as exc:
                return type(exc).__name__
        if action == "threads":
            import threading
            out = []
            ts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            return sorted(out)
        if action == "run":
            try:
                p = subprocess.run(arg, check=False, capture_output=True, text=True, timeout=30)
                return {"rc": p.returncode, "out": p.stdout + p.stderr}
            except OSError as exc:
                return {"error": f"{type(exc).__name__}: {exc}"}
        if action == "inotify":  # a goal's Python reference watching a directory outside
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(0)
            wd = libc.inotify_add_watch(fd, arg.encode(), 0xFFF) if fd >= 0 else -1
            return {"fd": fd, "wd": wd}
        if action == "fork":
            os.fork()
            return "forked"
        if action == "socket":
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            return "socket"
        if action == "unix_socket":
            a, b = socket.socketpair()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            for x in (a, b, s):
                x.close()
            return "unix ok"
        raise AssertionError(action)


@pytest.fixture(scope="module")
def cell():
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-")
    yield pool
    pool.close()


def ask(pool, action, arg=None):
    reply = pool.call((action, arg), FAST)
    assert reply.fault is None, reply.fault
    return reply.result


# ---- the environment ----------------------------------------------------------------------
def test_environment_allow_list_keeps_runtime_knobs_and_drops_secrets():
    source = {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "2",
              "CUDA_VISIBLE_DEVICES": "0", "OPENAI_API_KEY": "s", "GITHUB_TOKEN": "s",
              "CUDA_SECRET": "s", "OMP_AUTH_TOKEN": "s", "KERNELSWARM_LLM_BASE_URL": "s",
              "AWS_SECRET_ACCESS_KEY": "s", "HOME": "/home/me", "SSH_AUTH_SOCK": "/run/s",
              "PYTHONPATH": "/x", "LD_PRELOAD": "/evil.so"}
    got = env.cell_environment("/scratch", {"KERNELSWARM_CACHE": "/c"}, source)
    assert got["PATH"] == "/usr/bin" and got["LC_ALL"] == "C.UTF-8"
    assert got["OMP_NUM_THREADS"] == "2" and got["CUDA_VISIBLE_DEVICES"] == "0"
    assert got["HOME"] == got["TMPDIR"] == "/scratch" and got["KERNELSWARM_CACHE"] == "/c"
    assert "s" not in got.values() and "/home/me" not in got.values()
    assert not {"SSH_AUTH_SOCK", "PYTHONPATH", "LD_PRELOAD"} & set(got)
    assert env.cell_environment("/s", source={"LD_LIBRARY_PATH": "/opt/cuda/lib64"}) \
        ["LD_LIBRARY_PATH"] == "/opt/cuda/lib64"  # CUDA installs need it


def test_a_cell_sees_only_the_allow_list(cell, monkeypatch):
    got = ask(cell, "env")
    assert not [k for k in got["env"] if env.SECRET.search(k) or k.startswith("KERNELSWARM_LLM")]
    assert got["env"]["HOME"] == got["env"]["TMPDIR"] == got["cwd"]
    assert got["cwd"] == cell.workers[0].scratch


# ---- each mechanism alone, in a fresh process -----------------------------------------------
def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    boot = f"import sys, json; sys.path[:0] = json.loads(sys.argv[1])\n{textwrap.dedent(code)}"
    return subprocess.run([sys.executable, "-I", "-c", boot, json.dumps(sys.path), *args],
                          check=False, capture_output=True, text=True, timeout=60)


def test_network_namespace_alone_cuts_off_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    proc = run_python(f"""
        import socket
        from app.gpu.sandbox import namespaces
        print(namespaces.isolate_network())
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            print("CONNECTED")
        except OSError as exc:
            print("refused", exc.errno)
    """)
    server.close()
    assert proc.stdout.startswith("on:"), proc.stdout + proc.stderr
    assert "refused" in proc.stdout and "CONNECTED" not in proc.stdout


@pytest.mark.skipif(landlock.abi_version() < 1, reason="no Landlock on this kernel")
def test_landlock_alone_confines_reads_and_writes(tmp_path):
    inside, outside = tmp_path / "cell", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    plan = sandbox.plan_cell("cpu", str(inside))
    proc = run_python("""
        import json
        from app.gpu.sandbox import landlock
        rules = landlock.FileRules(**json.loads(sys.argv[2]))
        print(landlock.restrict(rules))
        for path, mode in ((sys.argv[3] + "/secret", "r"), (sys.argv[3] + "/new", "w"),
                           (sys.argv[4] + "/new", "w"), ("/etc/hostname", "r")):
            try:
                open(path, mode).close(); print("ok", path)
            except OSError as exc:
                print("denied", path, type(exc).__name__)
    """, json.dumps(plan.rules.__dict__), str(outside), str(inside))
    assert proc.stdout.startswith("on: Landlock"), proc.stdout + proc.stderr
    assert f"denied {outside}/secret" in proc.stdout and f"denied {outside}/new" in proc.stdout
    assert f"ok {inside}/new" in proc.stdout
    assert not (outside / "new").exists()


@pytest.mark.skipif(seccomp.available() != "", reason="libseccomp not usable")
@pytest.mark.parametrize("kill", [True, False])
def test_seccomp_alone_allows_threads_and_forbids_processes(kill):
    proc = run_python(f"""
        import os, threading
        from app.gpu.sandbox import seccomp
        print(seccomp.seal(kill={kill}, allow_unix_sockets=False), flush=True)
        t = threading.Thread(target=print, args=("thread ran",)); t.start(); t.join()
        os.kill(os.getpid(), 0); print("signal to itself ok", flush=True)
        try:
            os.fork(); print("FORKED", flush=True)
        except OSError as exc:
            print("fork refused", exc.errno, flush=True)
    """)
    assert "thread ran" in proc.stdout and "signal to itself ok" in proc.stdout, proc.stderr
    assert "FORKED" not in proc.stdout
    if kill:
        assert proc.returncode == -signal.SIGSYS
    else:
        assert "fork refused 1" in proc.stdout  # EPERM


# ---- the whole cell -------------------------------------------------------------------------
def test_every_protection_is_on_here(cell):
    ask(cell, "env")  # the cell starts on its first call: not left to an earlier test
    protections = cell.workers[0].protections
    assert set(sandbox.PROTECTIONS) <= set(protections)
    for name in ("environment", "network", "limits"):
        assert protections[name].startswith("on"), (name, protections[name])
    if landlock.abi_version() >= 1:
        assert protections["files"].startswith("on")
    if seccomp.available() == "":
        assert protections["processes"].startswith("on")
        assert protections["compiler"].startswith("on"), protections["compiler"]
    assert protections["pid namespace"][:2] == sandbox.status()["pid namespace"][:2]
    if protections["pid namespace"].startswith("on"):  # user namespaces allowed here
        assert protections["ipc namespace"].startswith("on")
        assert protections["tree kill"].startswith("on")
    if seccomp.available() == "":
        assert protections["process-acting calls"].startswith("on")
    if landlock.abi_version() >= 6:
        assert protections["signal scope"].startswith("on"), protections["signal scope"]


def test_status_names_every_protection():
    status = sandbox.status()
    assert set(status) == set(sandbox.STATUS_NAMES)
    assert all(v.split(":")[0] in ("on", "off", "partial", "unknown") for v in status.values())
    assert status["environment"].startswith("on")


def test_limits_are_lowered(cell):
    got = ask(cell, "limits", ["RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_AS"])
    assert got["RLIMIT_CORE"][0] == 0
    assert got["RLIMIT_FSIZE"][0] <= 1 << 30 and got["RLIMIT_CPU"][0] <= 4 * 3600
    assert got["RLIMIT_AS"][0] != resource.RLIM_INFINITY


def test_cell_files(cell, tmp_path):
    scratch = cell.workers[0].scratch
    assert ask(cell, "open", (f"{scratch}/mine.txt", "w")) == "ok"
    assert ask(cell, "open", (str(tmp_path / "theirs.txt"), "w")) in REFUSED
    assert not (tmp_path / "theirs.txt").exists()
    assert ask(cell, "open", ("/etc/hostname", "r")) in REFUSED
    assert ask(cell, "open", ("/usr/include/stdio.h", "r")) == "ok"


def test_a_sealed_cell_cannot_watch_a_directory_landlock_hides(cell, tmp_path):
    """Inotify is not mediated by Landlock (names created in the home)."""
    assert ask(cell, "inotify", str(tmp_path)) == {"fd": -1, "wd": -1}


def test_threads_run_in_a_sealed_cell(cell):
    assert ask(cell, "threads") == [0, 1, 2, 3]


@pytest.mark.parametrize("action", ["fork", "socket"])
def test_processes_and_sockets_kill_the_cell(action):
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-kill-")
    try:
        reply = pool.call((action, None), FAST)
        assert reply.fault is not None and reply.fault.reason == CRASH
        assert "sandbox violation" in reply.fault.detail and "SIGSYS" in reply.fault.detail
    finally:
        pool.close()


@pytest.mark.skipif(GCC is None, reason="needs a C compiler")
def test_the_compile_helper_runs_the_toolchain_and_nothing_else(cell):
    ok = ask(cell, "run", [GCC, "--version"])
    assert ok.get("rc") == 0 and "gcc" in ok["out"].lower() + GCC, ok
    for argv in (["/bin/sh", "-c", "id"], [GCC, "-wrapper", "/bin/sh,-c,id", "--version"],
                 [GCC, "-fplugin=/tmp/x.so", "--version"]):
        got = ask(cell, "run", argv)
        assert "refused" in got.get("error", ""), (argv, got)


@pytest.mark.skipif(seccomp.available() != "", reason="libseccomp not usable")
def test_a_gpu_cell_refuses_instead_of_killing_and_keeps_unix_sockets():
    """GPU cells run only our host code (and the driver): forbidden calls fail with EPERM so a
    library's stray subprocess cannot take the worker down; unix sockets stay (driver, MPS).
    Nothing here touches a GPU: that was not verified on one."""
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-gpu-", kind="gpu")
    try:
        assert pool.workers[0].kind == "gpu"
        assert ask(pool, "unix_socket") == "unix ok"
        assert ask(pool, "threads") == [0, 1, 2, 3]
        protections = pool.workers[0].protections
        assert "refused (EPERM)" in protections["processes"] and "compiler" not in protections
        for action in ("fork", "socket"):
            reply = pool.call((action, None), FAST)
            assert reply.fault is not None and "PermissionError" in reply.fault.detail, action
    finally:
        pool.close()


def test_helper_refuses_flags_that_run_other_code():
    real = os.path.realpath(GCC) if GCC else "/usr/bin/cc"
    assert helper.refused(["/bin/sh", "-c", "id"], [real])
    assert helper.refused([real, "-B/tmp/evil", "k.c"], [real])
    assert helper.refused([real, "-Wl,--wrap=x"], [real])
    assert helper.refused([real, "@/tmp/args"], [real])
    assert not helper.refused([real, "-O3", "-shared", "-fPIC", "k.c", "-o", "k.so"], [real])


def test_switched_off_says_so(monkeypatch):
    monkeypatch.setenv(sandbox.SWITCH_ENV, "off")
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-off-")
    try:
        ask(pool, "threads")
        protections = pool.workers[0].protections
        assert protections["files"].startswith("off") and protections["processes"].startswith("off")
        assert protections["environment"].startswith("on")  # the allow-list always applies
    finally:
        pool.close()


def test_scratch_directory_is_removed_with_the_worker():
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-scratch-")
    ask(pool, "threads")
    scratch = pool.workers[0].scratch
    assert scratch and os.path.isdir(scratch)
    pool.close()
    assert not os.path.exists(scratch)


def test_a_cell_killed_from_outside_leaves_no_scratch_behind():
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-killed-")
    try:
        ask(pool, "threads")
        worker = pool.workers[0]
        first = worker.scratch
        os.kill(worker.pid, signal.SIGKILL)
        worker._proc.join(5)
        ask(pool, "threads")  # a fresh cell
        assert worker.scratch != first and not os.path.exists(first)
    finally:
        pool.close()


def test_the_windows_start_through_multiprocessing_keeps_the_other_walls(monkeypatch):
    """Windows hands no socket to a child process: its workers are spawned by multiprocessing
    and scrub their environment in place (reported as partial); forced here on Linux, every
    other wall is the same."""
    monkeypatch.setenv("KS_CANARY_SECRET", "leak")
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="probe-spawned-")
    pool.workers[0].via_multiprocessing = True
    try:
        got = ask(pool, "env")
        assert "KS_CANARY_SECRET" not in got["env"]
        protections = pool.workers[0].protections
        assert protections["environment"] == "partial: scrubbed in process (Windows)"
        if seccomp.available() == "":
            assert protections["processes"].startswith("on")
        assert ask(pool, "threads") == [0, 1, 2, 3]
    finally:
        pool.close()


def test_python_paths_readable_but_not_a_checkout_or_the_home():
    site = sysconfig.get_paths()["purelib"]
    installed_read, _ = sandbox._python_read_paths(
        [site, "/home/me/project"], app_dir=os.path.join(site, "app"), home="/home/me")
    assert site in installed_read and os.path.join(site, "app") in installed_read
    checkout_read, checkout_list = sandbox._python_read_paths(
        [site, "/srv/checkout", "/home", "/"], app_dir="/srv/checkout/app", home="/home/me")
    assert "/srv/checkout" in checkout_list and "/srv/checkout/app" in checkout_read
    assert "/home" in checkout_list and "/" in checkout_list and site in checkout_read
    assert "/home/me/project" in installed_read  # below the home is fine, the home itself is not


@pytest.mark.parametrize("entry", ["from app.core.entry_points import run",
                                   "from app.gpu.worker import cell_main",
                                   "from app.gpu.sandbox import probe_here",
                                   "from app.kt_import.cell import cell_main"])
def test_a_cell_is_single_threaded_until_it_enters_its_sandbox(entry):
    """A user namespace needs a single-threaded process: what a cell imports before
    enter_cell must not load numpy (OpenBLAS starts its threads at import). An eager import
    of the custom-goal reference runners in app.gpu once did, and the cell fell back to a
    network namespace alone (as root) or none (as a user)."""
    code = (f"import sys, os; sys.path[:0] = [{str(Path(__file__).resolve().parents[1])!r}]; "
            f"{entry}; print('numpy' in sys.modules, len(os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", "1"], out


PY_EXTENSION = """#include <Python.h>
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_probe(void) { return PyModule_Create(&mod); }
"""


@pytest.mark.skipif(GCC is None, reason="needs a C compiler")
def test_the_baseline_cell_may_compile_and_is_still_walled_in(tmp_path, monkeypatch):
    """The trusted baseline cell (Triton and torch.compile start ptxas and the C compiler; no
    candidate runs there) is unsealed by design: it builds a Python extension as Triton builds
    its launcher. Its other walls stand: no program outside the toolchain, no files outside
    scratch and its own cache, which the candidate cells may not write (it loads what is there)."""
    monkeypatch.setenv("KERNELSWARM_CACHE", str(tmp_path / "cache"))
    own_cache = tmp_path / "cache-baselines"
    pools = {kind: WorkerPool("test_sandbox:CellProbe", [()], name=f"probe-{kind}-", kind=kind)
             for kind in ("baseline", "gpu")}
    try:
        worker = pools["baseline"].workers[0]
        env = ask(pools["baseline"], "env")["env"]
        assert env["TRITON_CACHE_DIR"] == str(own_cache / "triton")
        assert env["KERNELSWARM_CACHE"] == str(own_cache)
        assert worker.protections["processes"] == sandbox.BASELINE_LINE
        assert worker.protections["network"].startswith("on")
        Path(worker.scratch, "probe.c").write_text(PY_EXTENSION)
        include = sysconfig.get_paths()["include"]
        built = ask(pools["baseline"], "run", [GCC, "-shared", "-fPIC", f"-I{include}",
                                               f"{worker.scratch}/probe.c", "-o", f"{worker.scratch}/probe.so"])
        assert built.get("rc") == 0, built
        assert Path(worker.scratch, "probe.so").stat().st_size > 0
        assert ask(pools["baseline"], "open", (str(own_cache / "triton" / "k.so"), "w")) == "ok"
        assert ask(pools["baseline"], "open", (str(tmp_path / "theirs.txt"), "w")) in REFUSED
        # a candidate cell writes the application's cache, never the baseline cell's
        assert "TRITON_CACHE_DIR" not in ask(pools["gpu"], "env")["env"]
        assert ask(pools["gpu"], "open", (str(tmp_path / "cache" / "x"), "w")) == "ok"
        if landlock.abi_version() >= 1:
            planted = ask(pools["gpu"], "open", (str(own_cache / "triton" / "planted.so"), "w"))
            assert planted in REFUSED
            shell = ask(pools["baseline"], "run", ["/bin/sh", "-c", "id"])
            assert "PermissionError" in shell.get("error", ""), shell
    finally:
        for pool in pools.values():
            pool.close()


def test_libcuda_is_found_in_ldconfigs_listing():
    listing = ("\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
               "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n"
               "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
               "\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n")
    assert sandbox.libcuda_in_ldconfig(listing) == "/usr/lib/x86_64-linux-gnu"
    assert sandbox.libcuda_in_ldconfig("\tlibcudart.so.12 (libc6,x86-64) => /x/libcudart.so.12\n") is None
