/* The process a CPU candidate runs in (see app/gpu/cpu/kernel_host.py).
 *
 * The worker cell that verifies and times candidates is a Python process with numpy, and so
 * with numpy's BLAS mapped: a candidate loaded there can find the BLAS in memory and call it.
 * This program has only libc, libdl and what the candidate itself links (libgomp, libm).
 *
 * It is a zygote: started once by the cell (inside the cell's namespaces, limits and Landlock),
 * it forks one child per candidate. The child enters the first seccomp filter the cell built
 * with libseccomp (no programs, processes, sockets, signals: what a constructor meets), loads
 * the library, maps the arena (the memfd the cell copies inputs and outputs through), enters
 * the second (no file opened, no memory made executable) and serves calls.
 * A fresh child per candidate: no state (OpenMP settings, heap, statics) survives from one
 * candidate to the next.
 *
 * The zygote never runs candidate code, so it is the candidate's supervisor: every command
 * goes through it, and between commands the child is stopped (SIGSTOP, every thread of it):
 * no thread a kernel leaves behind computes while the harness flushes caches, copies inputs
 * or times a baseline. The zygote flushes caches itself, with the child stopped, and reports
 * the child's CPU time over each call (the kernel's clock cannot be forged by the kernel:
 * the threads it really ran). The child talks only to the zygote, never to the cell.
 *
 * Protocol: one text line per command on COMMAND_FD, one line per answer on REPLY_FD (a
 * candidate's own printing goes to stdout and stderr: the worker's log).
 *   load LIB_HEX ENTRY ARENA_FD ARENA_BYTES FLUSH_BYTES (the path in hex: any byte)
 *                                   -> "ready" | "error ..." (then "exit CODE")
 *   run SEQ N KIND VALUE ...        -> "SEQ NANOSECONDS CPU_NANOSECONDS WINDOW_NANOSECONDS THREADS"
 *   null SEQ                        -> the same for an empty timed window
 *   flush SEQ                       -> "SEQ 0 0 0 0" once FLUSH_BYTES were written (by the zygote)
 *   end                             -> the child is killed: "exit 0"
 * A child that dies answers its command with "signal NUMBER" | "exit CODE".
 * NANOSECONDS: the child's report around the kernel; CPU_NANOSECONDS: the child's CPU time
 * (all threads) from its SIGCONT to its SIGSTOP; WINDOW_NANOSECONDS: the zygote's clock over
 * the same span; THREADS: the child's threads once stopped again (0: unknown).
 * KIND: p = arena offset (a pointer), l = integer (any C integer type), f = float, d = double.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_INT_ARGS 16
#define MAX_FP_ARGS 8
#define LINE_MAX_BYTES 8192

/* Every integer-class argument in order, then every floating-point one: on x86-64 System V and
 * AArch64 the callee reads its own integer and float arguments from these registers and stack
 * slots whatever the real signature's interleaving (extra ones are ignored). A float travels
 * in the low 32 bits of a double register. */
typedef void (*kernel_fn)(long, long, long, long, long, long, long, long, long, long, long,
                          long, long, long, long, long, double, double, double, double, double,
                          double, double, double);

static FILE *cmd_in, *cmd_out;  /* the cell's channel; stdout and stderr are the worker's log */
struct filter {
    unsigned char *bytes;
    size_t len;
};
static struct filter load_filter, run_filter;  /* before and after loading the library */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(cmd_out, fmt, ap);
    va_end(ap);
    fputc('\n', cmd_out);
    fflush(cmd_out);
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int read_filter(const char *path, struct filter *out) {
    if (strcmp(path, "-") == 0) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char buf[65536];
    out->len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (out->len == 0 || out->len % sizeof(struct sock_filter)) return -1;
    out->bytes = malloc(out->len);
    if (!out->bytes) return -1;
    memcpy(out->bytes, buf, out->len);
    return 0;
}

static int install_filter(const struct filter *f) {
    if (!f->bytes) return 0;
    struct sock_fprog prog = {(unsigned short)(f->len / sizeof(struct sock_filter)),
                              (struct sock_filter *)f->bytes};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

/* The child's own Landlock domain, nested in the cell's. Landlock lets a process trace, or
 * read /proc/PID/mem, maps and environ of, only processes of its own domain or nested ones:
 * the candidate cannot read the worker's memory (the expected outputs of the inputs it is
 * given) nor the zygote's. The domain handles writing and making files and grants neither.
 * Landlock's calls have one number on every architecture (444, 446); no kernel header needed.
 * 0: entered; 1: no Landlock here (the cell's files wall is off too); -1: refused. */
struct own_ruleset { unsigned long long handled_access_fs; };
static int own_domain(void) {
    struct own_ruleset attr = {(1ULL << 1) | (1ULL << 8)};  /* WRITE_FILE, MAKE_REG */
    long fd = syscall(444, &attr, sizeof attr, 0);
    if (fd < 0) return errno == ENOSYS || errno == EOPNOTSUPP ? 1 : -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    long r = syscall(446, (int)fd, 0);
    close((int)fd);
    return r ? -1 : 0;
}

static void flush_caches(volatile unsigned char *buf, size_t n) {
    for (size_t i = 0; i < n; i += 64) buf[i] += 1;
}

static int serve(kernel_fn fn, unsigned char *arena, size_t arena_bytes) {
    char line[LINE_MAX_BYTES];
    while (fgets(line, sizeof line, cmd_in)) {
        char *save = NULL;
        char *word = strtok_r(line, " \n", &save);
        if (!word) continue;
        if (strcmp(word, "end") == 0) return 0;
        char *seq = strtok_r(NULL, " \n", &save);
        if (!seq) return 2;
        if (strcmp(word, "null") == 0) {
            long long t0 = now_ns();
            long long t1 = now_ns();
            say("%s %lld", seq, t1 - t0);
            continue;
        }
        if (strcmp(word, "run") != 0) return 2;
        long ints[MAX_INT_ARGS] = {0};
        double fps[MAX_FP_ARGS] = {0};
        int n_int = 0, n_fp = 0;
        int n = atoi(strtok_r(NULL, " \n", &save) ?: "-1");
        if (n < 0) return 2;
        for (int i = 0; i < n; i++) {
            char *kind = strtok_r(NULL, " \n", &save);
            char *value = strtok_r(NULL, " \n", &save);
            if (!kind || !value) return 2;
            if (*kind == 'p' || *kind == 'l') {
                if (n_int == MAX_INT_ARGS) return 2;
                /* unsigned 64-bit scalars above LONG_MAX keep their bits */
                long v = *value == '-' ? strtol(value, NULL, 10) : (long)strtoull(value, NULL, 10);
                if (*kind == 'p') {
                    if (v < 0 || (size_t)v > arena_bytes) return 2;
                    v = (long)(uintptr_t)(arena + v);
                }
                ints[n_int++] = v;
            } else if (*kind == 'f' || *kind == 'd') {
                if (n_fp == MAX_FP_ARGS) return 2;
                double d = strtod(value, NULL);
                if (*kind == 'f') {
                    union { double d; float f[2]; } bits = {0};
                    bits.f[0] = (float)d;  /* little-endian: the low half is what the callee reads */
                    d = bits.d;
                }
                fps[n_fp++] = d;
            } else {
                return 2;
            }
        }
        long long t0 = now_ns();
        fn(ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7], ints[8],
           ints[9], ints[10], ints[11], ints[12], ints[13], ints[14], ints[15], fps[0], fps[1],
           fps[2], fps[3], fps[4], fps[5], fps[6], fps[7]);
        long long t1 = now_ns();
        say("%s %lld", seq, t1 - t0);
    }
    return 0;
}

static int unhex(const char *hex, char *out, size_t cap) {
    size_t n = strlen(hex);
    if (n % 2 || n / 2 >= cap) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned int byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) return -1;
        out[i] = (char)byte;
    }
    out[n / 2] = 0;
    return 0;
}

static int child(char *lib, char *entry, char *arena_fd, size_t arena_bytes) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (own_domain() < 0) {
        say("error the candidate's own Landlock domain is refused (%s)", strerror(errno));
        return 3;
    }
    if (install_filter(&load_filter)) {  /* a constructor meets the seal too */
        say("error the seccomp filter does not load (%s)", strerror(errno));
        return 3;
    }
    void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        say("error the library does not load: %s", dlerror());
        return 3;
    }
    kernel_fn fn = (kernel_fn)dlsym(handle, entry);
    if (!fn) {
        say("error the library has no function %s", entry);
        return 3;
    }
    int fd = atoi(arena_fd);
    unsigned char *arena = MAP_FAILED;
    if (fd > 2 && arena_bytes > 0)
        arena = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd > 2) close(fd);  /* the mapping stays; the candidate gets no handle on the arena */
    if (arena == MAP_FAILED) {
        say("error the arena does not map (%s)", strerror(errno));
        return 3;
    }
    if (install_filter(&run_filter)) {
        say("error the seccomp filter does not load (%s)", strerror(errno));
        return 3;
    }
    say("ready");
    return serve(fn, arena, arena_bytes);
}

/* ---- the zygote: the candidate's supervisor ------------------------------------------- */
static FILE *cell_in, *cell_out;  /* the cell's channel (the zygote's own) */
static pid_t kid;                  /* the current child, 0: none */
static FILE *kid_in, *kid_out;     /* commands to it, its answers */
static clockid_t kid_clock;
static int kid_clock_ok;
static unsigned char *flush_buf;
static size_t flush_len;

static void tell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tell(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(cell_out, fmt, ap);
    va_end(ap);
    fputc('\n', cell_out);
    fflush(cell_out);
}

static long long kid_cpu(void) {
    struct timespec ts;
    if (!kid_clock_ok || clock_gettime(kid_clock, &ts)) return 0;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void drop_kid(void) {
    if (kid_in) fclose(kid_in);
    if (kid_out) fclose(kid_out);
    kid_in = kid_out = NULL;
    kid = 0;
    kid_clock_ok = 0;
}

/* The child ended (or is made to): how, to the cell. */
static void reap(int kill_it) {
    int status = 0;
    if (kill_it) kill(kid, SIGKILL);
    while (waitpid(kid, &status, 0) < 0 && errno == EINTR) {
    }
    drop_kid();
    if (kill_it)
        tell("exit 0");
    else if (WIFSIGNALED(status))
        tell("signal %d", WTERMSIG(status));
    else
        tell("exit %d", WEXITSTATUS(status));
}

/* Every thread of the child stopped (the group stop is complete when waitpid says so).
 * 0: stopped; -1: it died meanwhile (reaped, told). */
static int stop_kid(void) {
    int status = 0;
    kill(kid, SIGSTOP);
    for (;;) {
        pid_t got = waitpid(kid, &status, WUNTRACED);
        if (got < 0 && errno == EINTR) continue;
        if (got == kid && WIFSTOPPED(status)) return 0;
        break;
    }
    drop_kid();
    if (WIFSIGNALED(status))
        tell("signal %d", WTERMSIG(status));
    else
        tell("exit %d", WEXITSTATUS(status));
    return -1;
}

static void start_kid(char *lib, char *entry, char *arena, size_t arena_bytes) {
    int to[2], from[2];
    if (pipe(to) || pipe(from)) {
        tell("error no pipe for the child (%s)", strerror(errno));
        tell("exit 3");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        tell("error fork failed (%s)", strerror(errno));
        tell("exit 3");
        return;
    }
    if (pid == 0) {
        /* the child talks only to the zygote: the cell's channel is closed before loading */
        fclose(cell_in);
        fclose(cell_out);
        close(to[1]);
        close(from[0]);
        cmd_in = fdopen(to[0], "r");
        cmd_out = fdopen(from[1], "w");
        if (!cmd_in || !cmd_out) _exit(3);
        _exit(child(lib, entry, arena, arena_bytes));
    }
    close(to[0]);
    close(from[1]);
    kid = pid;
    kid_in = fdopen(to[1], "w");
    kid_out = fdopen(from[0], "r");
    kid_clock_ok = clock_getcpuclockid(pid, &kid_clock) == 0;
    char line[LINE_MAX_BYTES];
    if (!kid_in || !kid_out || !fgets(line, sizeof line, kid_out)) {
        reap(0);
        return;
    }
    line[strcspn(line, "\n")] = 0;
    if (strcmp(line, "ready") != 0) {
        tell("%s", line);  /* "error ...": the child exits 3 */
        reap(0);
        return;
    }
    if (stop_kid() == 0) tell("ready");
}

/* The child's threads, counted while it is stopped (from /proc/PID/status, the cell's own
 * procfs: only when its PPid is this process, so a host /proc with other pids reads as 0).
 * 0: unknown. A thread a kernel leaves behind is counted even if it computes nothing. */
static int kid_threads(void) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)kid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int threads = 0, ours = 0;
    while (fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "PPid: %d", &v) == 1) ours = v == (int)getpid();
        if (sscanf(line, "Threads: %d", &v) == 1) threads = v;
    }
    fclose(f);
    return ours ? threads : 0;
}

/* One command through the child: continued, the command, its answer, stopped again. */
static void relay(const char *command) {
    long long w0 = now_ns(), c0 = kid_cpu();
    kill(kid, SIGCONT);
    char line[LINE_MAX_BYTES];
    if (fputs(command, kid_in) < 0 || fflush(kid_in) || !fgets(line, sizeof line, kid_out)) {
        reap(0);  /* it died: its end answers the command */
        return;
    }
    if (stop_kid()) return;
    long long window = now_ns() - w0, cpu = kid_cpu() - c0;
    line[strcspn(line, "\n")] = 0;
    char *save = NULL, *seq = strtok_r(line, " ", &save), *ns = strtok_r(NULL, " ", &save);
    if (!seq || !ns || strtok_r(NULL, " ", &save)) {
        tell("garbled %.60s", seq ? seq : "");  /* the cell refuses it */
        return;
    }
    tell("%s %s %lld %lld %d", seq, ns, cpu, window, kid_threads());
}

int main(int argc, char **argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* the cell died: so do we */
    signal(SIGPIPE, SIG_IGN);  /* a dead child's pipe is an answer, not our end */
    if (argc != 5 || read_filter(argv[1], &load_filter) || read_filter(argv[2], &run_filter) ||
        !(cell_in = fdopen(atoi(argv[3]), "r")) || !(cell_out = fdopen(atoi(argv[4]), "w"))) {
        fprintf(stderr, "usage: kernel_host LOAD.bpf|- RUN.bpf|- COMMAND_FD REPLY_FD\n");
        return 2;
    }
    char line[LINE_MAX_BYTES], copy[LINE_MAX_BYTES];
    while (fgets(line, sizeof line, cell_in)) {
        memcpy(copy, line, sizeof line);
        char *save = NULL;
        char *word = strtok_r(line, " \n", &save);
        if (!word) continue;
        if (strcmp(word, "load") == 0) {
            if (kid) reap(1);
            char *lib = strtok_r(NULL, " \n", &save);
            char *entry = strtok_r(NULL, " \n", &save);
            char *arena = strtok_r(NULL, " \n", &save);
            char *arena_bytes = strtok_r(NULL, " \n", &save);
            char *flush_bytes = strtok_r(NULL, " \n", &save);
            static char path[4096];
            if (!lib || !entry || !arena || !arena_bytes || !flush_bytes ||
                unhex(lib, path, sizeof path))
                return 2;
            size_t want = strtoull(flush_bytes, NULL, 10);
            if (want != flush_len) {
                free(flush_buf);
                flush_buf = want ? malloc(want) : NULL;
                flush_len = flush_buf ? want : 0;
                if (flush_buf) memset(flush_buf, 1, flush_len);
            }
            start_kid(path, entry, arena, strtoull(arena_bytes, NULL, 10));
            continue;
        }
        if (strcmp(word, "end") == 0) {
            if (kid) reap(1);
            else tell("exit 0");
            continue;
        }
        char *seq = strtok_r(NULL, " \n", &save);
        if (!seq) return 2;
        if (!kid) {
            tell("exit 0");  /* no child to answer: the cell starts one */
            continue;
        }
        if (strcmp(word, "flush") == 0) {  /* the child is stopped meanwhile */
            if (flush_buf) flush_caches(flush_buf, flush_len);
            tell("%s 0 0 0 0", seq);
        } else if (strcmp(word, "run") == 0 || strcmp(word, "null") == 0) {
            relay(copy);
        } else {
            return 2;
        }
    }
    if (kid) reap(1);
    return 0;
}
