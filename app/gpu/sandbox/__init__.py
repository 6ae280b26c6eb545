"""The cell every candidate runs in: a worker process (and its compile helper) that sees no
secrets, no network, no files outside its scratch directory and the toolchain, and, once sealed,
can start no process or program.

Mechanisms, one module each, in the order a cell enters them:

1. env.py        - a fresh environment from an allow-list (set when the process is started)
2. namespaces.py - own user, network, PID and IPC namespaces: no network (loopback included),
                   no other process to name, no SysV IPC shared; the cell forks into the PID
                   namespace (a small init there, a shim outside mirrors its end)
3. helper.py     - the compile helper is started here, before the walls below close
4. limits.py     - setrlimit: address space, CPU seconds, file size, open files, no core
   mounts.py     - the cell's file view: a root holding only what its rules name (a hidden
                   file cannot even be stat'ed), its own /proc and /dev/shm
5. landlock.py   - files: read the system/toolchain/Python, write scratch + cache, exec
                   toolchain; a second domain scopes signals (none to a process outside)
6. seccomp.py    - sealed after the handler is built: no exec/fork/sockets/ptrace/signals,
                   process-acting calls (F_SETOWN, prlimit, setpriority...) only on itself
7. tree.py       - the engine's side: the cell's whole process tree killed with it

Where the platform lacks one, the cell logs it and keeps the others (fallback order: each
mechanism is independent; `status()` says which are on). KERNELSWARM_SANDBOX=off turns every
wall off (debugging only; logged loudly).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core import entry_points
from app.gpu.sandbox import env as _env
from app.gpu.sandbox import landlock, limits, mounts, namespaces, seccomp, tree
from app.gpu.sandbox.helper import ToolClient

log = logging.getLogger("kernelswarm.sandbox")
PROTECTIONS = ("environment", "network", "files", "file view", "limits",  # every cell's walls
               "processes", "pid namespace", "ipc namespace", "process-acting calls",
               "signal scope", "tree kill")
STATUS_NAMES = PROTECTIONS + ("candidates",)  # and where a CPU candidate runs
SWITCH_ENV = "KERNELSWARM_SANDBOX"
cell_environment = _env.cell_environment

_SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache",
                "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
                "/proc/cpuinfo",
                "/proc/meminfo", "/proc/stat", "/proc/self", "/sys/devices/system/cpu",
                "/sys/devices/system/node", "/sys/fs/cgroup")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")
_GPU_READ = ("/sys", "/proc/driver/nvidia", "/proc/modules", "/proc/devices")


CANDIDATE_LINE = ("on: each CPU candidate in its own process (libc only: no numpy or BLAS "
                  "mapped, nothing kept from earlier candidates) and its own Landlock domain "
                  "(no reading the worker's memory); seccomp before loading it "
                  "(files read-only, no stat, inotify or renames: what Landlock hides stays "
                  "unseen) and after: no files, no executable memory")
# not "on": the baseline cell is left unsealed on purpose; it never runs a candidate
BASELINE_LINE = ("by design unsealed: trusted library and compiler baselines only (Triton and "
                 "torch.compile start ptxas and the C compiler); no candidate runs in this cell")
_notes: dict[str, str] = {}


def note(name: str, line: str) -> None:
    """A protection line from the cell's own handler (the kernel host), reported at the seal."""
    _notes[name] = line


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "on").lower() not in ("off", "0", "no", "false")


@dataclass
class CellPlan:
    """What a cell may touch; built in the parent, sent to the cell and its helper."""

    kind: str  # "cpu": candidate code runs on the host; "gpu": host code is ours
    scratch: str
    rules: landlock.FileRules
    programs: list[str] = field(default_factory=list)  # toolchain executables (realpaths)
    memory_limit_bytes: int | None = None
    sys_path: list[str] = field(default_factory=list)
    enabled: bool = True

    def to_json(self) -> str:
        return json.dumps({"rules": asdict(self.rules), "programs": self.programs})


# ---- the parent's side --------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def toolchain_programs() -> tuple[str, ...]:
    """Realpaths of the C toolchain's programs and program directories, and the loader."""
    found: set[str] = set()
    for name in (os.environ.get("CC"), "cc", "gcc", "clang", "nm", "as", "ld", "ld.bfd", "ld.gold"):
        path = shutil.which(name) if name else None
        if not path:
            continue
        found.add(os.path.realpath(path))
        if name in ("nm", "as", "ld", "ld.bfd", "ld.gold"):
            continue
        for prog in ("cc1", "collect2", "lto-wrapper"):
            try:
                out = subprocess.run([path, f"-print-prog-name={prog}"], capture_output=True,
                                     text=True, timeout=30, check=False).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                continue
            if os.path.isabs(out) and os.path.exists(out):
                found.add(os.path.dirname(os.path.realpath(out)))  # gcc's libexec directory
    for loader in glob.glob("/lib64/ld-linux*.so*") + glob.glob("/lib/ld-linux*.so*"):
        found.add(os.path.realpath(loader))
    return tuple(sorted(found))


def _python_read_paths(sys_path: Sequence[str], app_dir: str | None = None,
                       home: str | None = None) -> tuple[list[str], list[str]]:
    """(read, list_only): the Python installation and importable packages. A directory that
    holds the user's home (or is /) is only listable, and so is a checkout holding the app
    package (its `app` directory is readable; the rest of the checkout may hold secrets)."""
    if app_dir is None:
        import app

        app_dir = os.path.dirname(os.path.realpath(app.__file__))
    app_root = os.path.dirname(app_dir)
    home = os.path.realpath(home or os.path.expanduser("~"))
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                              sys.base_exec_prefix)}
    candidates = set(prefixes) | {app_dir}
    candidates.update(v for k, v in sysconfig.get_paths().items() if k.endswith(("lib", "stdlib")))
    candidates.update(os.path.realpath(entry or os.getcwd()) for entry in sys_path)
    installed = any(app_root == q or app_root.startswith(q + os.sep) for q in prefixes)
    read, list_only = set(), set()
    for p in candidates:
        holds_home = p == "/" or home == p or home.startswith(p + os.sep)
        checkout = p == app_root and not installed
        (list_only if holds_home or checkout else read).add(p)
    if getattr(sys, "frozen", False):  # a frozen bundle imports from its own executable's archive
        bundle = {os.path.dirname(os.path.realpath(sys.executable)),
                  os.path.realpath(getattr(sys, "_MEIPASS", sys.executable))}
        read |= bundle
        list_only -= bundle
    return sorted(read), sorted(list_only)


def plan_cell(kind: str, scratch: str, writable: Sequence[str] = (),
              memory_limit_bytes: int | None = None, own_programs: Sequence[str] = ()) -> CellPlan:
    """kind: "cpu" (candidate code runs on the host), "gpu" (candidate kernels on the device,
    host code ours) or "baseline" (no candidate at all: library and compiler baselines, which
    may start the compilers Triton and torch.compile run). own_programs: our programs the cell
    starts before its seal (the CPU kernel host)."""
    device = kind in ("gpu", "baseline")
    read, list_only = _python_read_paths(sys.path)
    read += list(_SYSTEM_READ) + (list(_GPU_READ) if device else [])
    # the libraries the cell is told to load from (passed on in its environment)
    read += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
             if os.path.isabs(d) and os.path.realpath(d) not in ("/", os.path.expanduser("~"))]
    devices = list(_DEVICES)
    write = [scratch, *writable]
    if device:
        devices += sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/*"))
        write += ["/dev/shm", "/proc/self"]  # the driver's shared files, thread names
        read += [os.environ[k] for k in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(k)]
    programs = list(toolchain_programs()) if kind == "cpu" else []
    # the baseline cell starts its compilers itself (no helper: it is never sealed)
    baseline_programs = list(toolchain_programs()) + compiler_programs() if kind == "baseline" else []
    if kind == "baseline" and libcuda_dir():
        read.append(libcuda_dir())  # Triton links its launcher against it
    rules = landlock.FileRules(read=read, list_only=list_only, write=write,
                               exec_files=programs + baseline_programs
                               + [os.path.realpath(p) for p in own_programs],
                               devices=devices)
    sys_path = [p or os.getcwd() for p in sys.path]  # '' is the parent's directory, not the cell's
    return CellPlan(kind, scratch, rules, programs, memory_limit_bytes, sys_path, enabled())


def compiler_programs() -> list[str]:
    """What Triton starts to build a kernel and its launcher, besides the C toolchain: its own
    ptxas/cuobjdump/nvdisasm (found without importing Triton) and ldconfig (libcuda's place)."""
    import importlib.util

    found = [os.path.realpath(p) for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)]
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    if spec and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            found += glob.glob(os.path.join(root, "backends", "nvidia", "bin", "*"))
    return sorted(set(found))


@functools.lru_cache(maxsize=1)
def status() -> dict[str, str]:
    """Which protections a cell gets on this machine (probed in a throw-away process)."""
    if not enabled():
        return _switched_off()
    try:
        with tempfile.TemporaryDirectory(prefix="kernelswarm-probe-") as scratch:
            out = subprocess.run(entry_points.command("app.gpu.sandbox:probe_main", scratch),
                                 capture_output=True, text=True, timeout=60,
                                 check=False, env=_env.cell_environment(scratch), cwd=scratch)
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {p: f"unknown: probe failed ({exc})" for p in STATUS_NAMES}
    return found


def sandbox_summary() -> str:
    """One line: which protections are on and which are off (for `kernelswarm devices`)."""
    found = status()
    on = [k for k, v in found.items() if v.startswith("on")]
    off = [f"{k} {v}" for k, v in found.items() if not v.startswith("on")]
    return ", ".join(on) + " on" + (f"; OFF: {'; '.join(off)}" if off else "")


def probe_main(argv: list[str]) -> None:
    """Entry point of the probe process (status): prints probe_here's lines as JSON."""
    print(json.dumps(probe_here(argv[0] if argv else "")))


def probe_here(scratch: str) -> dict[str, str]:
    """Run in a fresh single-threaded process: which mechanisms this kernel grants."""
    spaces = namespaces.isolate()  # forks: this is the cell inside the namespaces from here on
    view = (_file_view(spaces["mount namespace"], plan_cell("cpu", scratch).rules, scratch)
            if scratch else "unknown: no scratch directory given to the probe")
    net = spaces["network"]
    abi = landlock.abi_version()
    sc = seccomp.available()
    found = {
        "environment": "on: allow-list (no keys, tokens, HOME); HOME and TMPDIR in scratch",
        "network": net.replace("on: ", "on: own ") if net.startswith("on") else net,
        "pid namespace": spaces["pid namespace"],
        "ipc namespace": spaces["ipc namespace"],
        "process-acting calls": seccomp.PROCESS_CALLS_LINE if not sc else (
            f"off: libseccomp is not usable ({sc}); only the PID namespace limits them"),
        "signal scope": landlock.scope_signals(),
        "tree kill": _tree_line(spaces["pid namespace"]),
        "files": (f"on: Landlock ABI {abi} (read system/toolchain, write scratch and cache)"
                  if abi else "off: Landlock is not available"),
        "file view": view,
        "limits": "on: address space, CPU time, file size, open files, no core dumps",
        "processes": ("on: seccomp (no exec, fork, sockets, ptrace, inotify; threads allowed)"
                      if not sc else f"off: libseccomp is not usable ({sc})"),
        "candidates": CANDIDATE_LINE if not sc else (
            "partial: each CPU candidate in its own process (no numpy or BLAS mapped), "
            f"without seccomp filters ({sc})"),
    }
    return {name: found[name] for name in STATUS_NAMES}


def _file_view(mount_namespace: str, rules: landlock.FileRules, scratch: str) -> str:
    return mounts.build_view(rules, scratch) if mount_namespace.startswith("on") else mount_namespace


def _tree_line(pid_namespace: str) -> str:
    if pid_namespace.startswith("on"):
        return ("on: the PID namespace dies with the cell's first process (compile helper, "
                "cc1, kernel host, candidate); the engine also kills the tree it finds")
    return ("partial: no PID namespace; the engine stops and kills every descendant it finds "
            "(the cell is a subreaper, so orphans such as cc1 stay in its tree)")


def kill_cell(pid: int) -> None:
    """The engine's side: kill a cell (the process it started, `pid`) and its whole tree."""
    tree.kill_tree(pid)


def _switched_off() -> dict[str, str]:
    off = {p: f"off: {SWITCH_ENV}=off" for p in STATUS_NAMES}
    off["candidates"] = ("partial: each CPU candidate in its own process (no numpy or BLAS "
                         "mapped), without seccomp filters")
    off["environment"] = "on: allow-list (always applied)"
    off["tree kill"] = _tree_line("off")  # the engine's side: always applied
    return off


# ---- the cell's side ----------------------------------------------------------------------
_tools: ToolClient | None = None
_subprocess_run = subprocess.run
_plan: CellPlan | None = None


def current_plan() -> CellPlan | None:
    """The plan of the cell this process is (None outside a cell)."""
    return _plan


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def enter_cell(plan: CellPlan) -> dict[str, str]:
    """Put this (single-threaded, freshly started) process into its cell, short of the final
    seal; what is on and off, one line each. Call before importing anything that starts threads."""
    global _tools, _plan
    _plan = plan
    if not plan.enabled:
        log.warning("sandbox is OFF (%s=off): candidates run with the user's rights", SWITCH_ENV)
        return _switched_off()
    applied = {"environment": "on: allow-list; HOME and TMPDIR in scratch"}
    if _threads() > 1:
        log.warning("the cell has %d threads before entering its sandbox", _threads())
    applied.update(namespaces.isolate())  # forks: from here this is the cell, pid 2 inside
    applied["file view"] = _file_view(applied.pop("mount namespace"), plan.rules, plan.scratch)
    namespaces.child_subreaper()
    applied["tree kill"] = _tree_line(applied["pid namespace"])
    seccomp.available()  # loads libseccomp now: finding it runs ldconfig, refused once walled
    if plan.programs:  # the helper shares the namespaces, gets its own limits and files rules
        try:
            proc = subprocess.Popen(entry_points.command("app.gpu.sandbox.helper:main",
                                                         plan.to_json(), sys_path=plan.sys_path),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    cwd=plan.scratch)
            _tools = ToolClient(proc)  # it gets ready while the worker imports its handler
        except OSError as exc:
            applied["compiler"] = f"off: the compile helper did not start ({exc})"
    if plan.kind == "cpu" and "own /proc" in applied["file view"]:
        # the kernel host counts its candidate's threads there; this procfs holds the cell's
        # processes only (and the candidate's own Landlock domain keeps it from their memory)
        plan.rules.read.append("/proc")
    applied["limits"] = limits.apply(limits.worker_limits(plan.kind in ("gpu", "baseline"),
                                                          plan.memory_limit_bytes))
    applied["files"] = landlock.restrict(plan.rules)
    applied["signal scope"] = landlock.scope_signals()
    return applied


def seal_cell(plan: CellPlan, applied: dict[str, str]) -> None:
    """The last wall, once the handler (our own code) is built: no exec, fork, sockets...
    From here on subprocess.run in this process goes to the compile helper (the backends call
    the compiler and nm through it), so no process is ever forked from the sealed cell.
    Adds the "processes" and "compiler" lines to `applied`."""
    global _tools
    if not plan.enabled:
        applied["processes"] = f"off: {SWITCH_ENV}=off"
        return
    if _tools is not None:
        try:
            lines = _tools.protections
            state = "on" if all(v.startswith("on") for v in lines.values()) else "partial"
            applied["compiler"] = f"{state}: helper; " + "; ".join(f"{k} {v}" for k, v in lines.items())
        except OSError as exc:
            applied["compiler"] = f"off: the compile helper did not start ({exc})"
            _tools = None
    applied.update(_notes)
    if plan.kind == "baseline":
        applied["processes"] = applied["process-acting calls"] = BASELINE_LINE
        return
    if _tools is None and plan.kind == "cpu":  # the compile helper did not start: the cell
        # itself must still start the compiler, so it stays unsealed; the status says so
        applied["processes"] = applied["process-acting calls"] = (
            "off: no compile helper (the compiler runs here)")
        return
    applied["processes"] = seccomp.seal(kill=plan.kind == "cpu",
                                        allow_unix_sockets=plan.kind == "gpu")
    applied["process-acting calls"] = (seccomp.PROCESS_CALLS_LINE if applied["processes"]
                                       .startswith("on") else applied["processes"])
    if _tools is not None:
        subprocess.run = run_tool


_reported: set[tuple[str, str]] = set()


def report_off(applied: dict[str, str]) -> None:
    """Log (once per process and message) each protection that is not fully on."""
    for name, line in applied.items():
        if not line.startswith(("on", "by design")) and (name, line) not in _reported:
            _reported.add((name, line))
            log.warning("sandbox: %s protection is %s", name, line)


def _cache_dirs(cache: str, kind: str) -> dict[str, str]:
    """The cache directories the libraries in a cell of `kind` use, by environment variable."""
    if kind != "baseline":  # the user's own cache places for the candidate cells, as before
        return {"CUPY_CACHE_DIR": os.environ.get("CUPY_CACHE_DIR") or os.path.join(cache, "cupy"),
                "CUDA_CACHE_PATH": os.environ.get("CUDA_CACHE_PATH") or os.path.join(cache, "nv")}
    return {"CUPY_CACHE_DIR": os.path.join(cache, "cupy"), "CUDA_CACHE_PATH": os.path.join(cache, "nv"),
            "TRITON_CACHE_DIR": os.path.join(cache, "triton"),
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor")}


def cache_environment(cache: str, kind: str = "gpu") -> dict[str, str]:
    """Where the libraries inside a cell keep their caches (HOME is the throw-away scratch):
    CuPy's kernels and the CUDA driver's JIT cache go under `cache`. The baseline cell, whose
    `cache` is its own (app.paths.baseline_cache_dir), also gets Triton's and Inductor's
    caches, and where libcuda is, so Triton need not run ldconfig (on Ubuntu a shell script,
    which the cell may not start)."""
    env = {"KERNELSWARM_CACHE": cache, **_cache_dirs(cache, kind)}
    if kind == "baseline":
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no compile worker processes
        libcuda = libcuda_dir()  # runs ldconfig: once
        if libcuda:
            env["TRITON_LIBCUDA_PATH"] = libcuda
    return env


def writable_caches(cache: str, kind: str = "gpu") -> list[str]:
    """The cache directories a cell may write (created here: Landlock needs them to exist)."""
    dirs = [cache, *(d for d in _cache_dirs(cache, kind).values() if os.path.isabs(d))]
    for d in dirs:
        with contextlib.suppress(OSError):
            os.makedirs(d, exist_ok=True)
    return dirs


def libcuda_in_ldconfig(listing: str) -> str | None:
    """The directory of libcuda.so.1 in `ldconfig -p`'s listing, a 64-bit one (flags
    "x86-64", "AArch64") before any other."""
    found = [(name, path.strip()) for name, _, path in (line.partition("=>") for line in listing.splitlines())
             if name.strip().startswith("libcuda.so.1 ") and path.strip()]
    found.sort(key=lambda entry: "64" not in entry[0])
    return os.path.dirname(found[0][1]) if found else None


@functools.lru_cache(maxsize=1)
def libcuda_dir() -> str | None:
    """The directory of the driver's libcuda.so.1, found here (outside any cell): ldconfig's
    cache first, then the usual places; None where there is no driver."""
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30,
                                 check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = libcuda_in_ldconfig(out)
        if found:
            return found
    for pattern in ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                    "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"):
        if os.path.exists(pattern):
            return os.path.dirname(pattern)
    return None


def run_tool(cmd: Sequence[Any], *, check: bool = False, capture_output: bool = True,
             text: bool = True, timeout: float | None = None, **_: Any) -> subprocess.CompletedProcess:
    """subprocess.run for toolchain programs: through the compile helper inside a cell (the
    cell itself may start nothing), directly elsewhere."""
    if _tools is None:
        return _subprocess_run(list(map(str, cmd)), check=check, capture_output=capture_output,
                              text=text, timeout=timeout)
    result = _tools.run(cmd, timeout, text)
    if check and result.returncode:
        raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout,
                                            result.stderr)
    return result
