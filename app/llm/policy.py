"""What an LLM-written kernel may contain, checked before anything is compiled.

Only device code may change: the harness (host code, launch, timing) comes from the operator
definition. These static checks reject the known ways generated kernels fool a benchmark (see
shared/notes/verification-cheats.md) with a reason that names the rule, so the rejection is
stored (reason `static_check`) and fed back to the model. Verification catches what slips
through; these checks make the cheap cases cheap and the reason readable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.core.types import STATIC_CHECK

MAX_SOURCE_CHARS = 200_000
LOW_PRECISION_OK = {"float16", "bfloat16"}  # goal dtypes for which half types are the goal

# Headers a kernel may include, per language. Anything else (threads, timers, I/O, dlopen...)
# is rejected: the harness provides everything a kernel legitimately needs.
ALLOWED_HEADERS = {
    "c": {"math.h", "stddef.h", "stdint.h", "stdbool.h", "float.h", "limits.h", "string.h",
          "omp.h", "immintrin.h", "x86intrin.h", "arm_neon.h", "complex.h", "tgmath.h",
          "stdalign.h", "assert.h"},
    "cuda": {"cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda/barrier", "cuda/pipeline",
             "cuda_pipeline.h", "cooperative_groups.h", "cooperative_groups/reduce.h",
             "cooperative_groups/memcpy_async.h", "cuda/std/cstdint", "cuda/std/limits",
             "cuda/std/type_traits", "cuda/std/utility", "cuda/std/array", "mma.h",
             "common.cuh"},
}


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern
    why: str
    languages: tuple[str, ...] = ("c", "cuda")


def _rx(p: str) -> re.Pattern:
    return re.compile(p, re.MULTILINE)


RULES: tuple[Rule, ...] = (
    # -- work that escapes the timer ---------------------------------------------------
    Rule("side_stream", _rx(r"\b(cuda|cu)Stream\w*|\bcudaStream_t\b|\bstream\s*\(|cudaLaunch\w*|"
                            r"\bcudaGraph\w*"),
         "creates or uses streams/launches: work may run outside the harness's timing", ("cuda",)),
    Rule("host_callback", _rx(r"\bcu(da)?LaunchHostFunc\b|\bcudaStreamAddCallback\b|"
                              r"\bcudaHostRegister\b"),
         "host callbacks run outside the harness's timing", ("cuda",)),
    Rule("device_sync_or_alloc", _rx(r"\bcuda(DeviceSynchronize|Malloc\w*|Free\w*|Memcpy\w*|"
                                     r"Memset\w*|EventRecord|DeviceReset)\b"),
         "device code may not call the CUDA runtime: the harness owns memory and sync", ("cuda",)),
    Rule("threads", _rx(r"\bpthread_\w+|\bstd::(thread|async|jthread)\b|\bthrd_create\b|"
                        r"\bclone\s*\(|\bfork\s*\(|\bvfork\s*\(|\bposix_spawn\w*"),
         "spawns threads or processes: work may outlive the timed call (use OpenMP)"),
    # `nowait` on a worksharing loop inside a parallel region is fine (the region's closing
    # barrier still joins every thread); on a combined parallel or target construct it is not
    Rule("omp_detached", _rx(r"#\s*pragma\s+omp\b[^\n]*\b(task\w*|detach)\b|"
                             r"#\s*pragma\s+omp\b[^\n]*\b(parallel|target)\b[^\n]*\bnowait\b"),
         "OpenMP tasks/nowait can leave work running past the timed call", ("c",)),
    # -- reading or patching the clock -------------------------------------------------
    Rule("timer", _rx(r"\b(clock|clock64|clock_gettime|gettimeofday|time|timespec_get|"
                      r"omp_get_wtime|__rdtsc|__rdtscp|_rdtsc|rdtsc|globaltimer|"
                      r"QueryPerformanceCounter|mach_absolute_time|getrusage|times)\s*\(|"
                      r"%globaltimer|%clock(64)?\b|\bcudaEvent\w*|\bstd::chrono\b"),
         "reads or patches a clock: a kernel must not know it is being timed"),
    Rule("inline_asm", _rx(r"\b(__asm__|__asm|asm)\b"),
         "inline assembly on the CPU cannot be audited (timers, syscalls)", ("c",)),
    Rule("asm_timer", _rx(r"\basm\b[^;]*\b(rdtsc|%clock|%globaltimer|nanosleep)"),
         "inline PTX reading a timer", ("cuda",)),
    # -- escaping the sandbox the harness sets ------------------------------------------
    Rule("system_calls", _rx(r"\b(syscall|system|popen|execv\w*|execl\w*|dlopen|dlsym|mmap|"
                             r"mprotect|signal|sigaction|raise|setjmp|longjmp|sigsetjmp|"
                             r"atexit|at_quick_exit|exit|_exit|abort|getenv|setenv|putenv|"
                             r"fopen|open|read|write|printf|fprintf|puts|malloc|calloc|realloc|"
                             r"free|sleep|usleep|nanosleep|sched_yield)\s*\("),
         "calls the OS or allocates: a kernel only computes on the buffers it is given", ("c",)),
    Rule("load_time_code", _rx(r"__attribute__\s*\(\(\s*(constructor|destructor|ifunc|alias|weak)"),
         "code that runs at load time or interposes symbols"),
    Rule("compile_options", _rx(r"#\s*pragma\s+(GCC|clang)\s+(optimize|target)|"
                                r"__attribute__\s*\(\(\s*(optimize|target)\b|"
                                r"#\s*pragma\s+STDC\s+FENV_ACCESS|\bfesetround\b|_Pragma\s*\("),
         "changes compile options or rounding: they are fixed by the harness"),
    Rule("token_pasting", _rx(r"##"),
         "token pasting hides names from review"),
    Rule("main", _rx(r"\bmain\s*\("), "defines main: only the kernel is accepted"),
)

LOW_PRECISION = _rx(r"\b(__half2?|half2?|__nv_bfloat162?|nv_bfloat16|_Float16|__fp16|__bf16|"
                    r"__nv_fp8\w*|__float2half\w*|__float2bfloat16\w*|__half2float|"
                    r"__bfloat162float|tf32|__float_to_tf32)\b|\.(f16|bf16|tf32|e4m3|e5m2)\b")
FAST_MATH = _rx(r"\b(__expf|__logf|__powf|__sinf|__cosf|__tanf|__fdividef|__exp10f|__log2f|"
                r"__frcp_\w+|__fsqrt_\w+)\s*\(")
ATOMICS = _rx(r"\batomic\w*\s*\(|\b_Atomic\b|\b__atomic_\w+|\b__sync_\w+|#\s*pragma\s+omp\s+atomic")
INCLUDE = _rx(r'#\s*include\s*[<"]([^>"]+)[>"]')
# `static` data (not functions): one line, words separated by blanks or stars (written so a
# failed match cannot backtrack exponentially).
STATIC_VAR = _rx(r"\bstatic[ \t]+(?!inline\b|__device__[ \t]+__forceinline__)"
                 r"(?:\w+(?:[ \t]+|[ \t]*\*+[ \t]*))+\w+[ \t]*(?:\[[^\]\n]*\][ \t]*)*(?:=|;|,)")


def _mutable(declaration: str) -> bool:
    """Whether a data declaration can change: `const float *p` can (the pointer moves),
    `const float t[4]` and `float *const p` cannot."""
    decl = declaration.split("=")[0]
    if "*" in decl:
        return not re.search(r"\*\s*const\b[^*]*$", decl)
    return not re.search(r"\b(const|constexpr|__constant__)\b", decl)


# Rules on called names a candidate's own static function may shadow (a helper named `read`).
OWN_NAMES_OK = {"system_calls"}
STATIC_FUNCTION = _rx(r"\bstatic\b[^;{}()=]*?\b(\w+)[ \t]*\([^;{}]*\)\s*\{")


def own_static_functions(code: str) -> set[str]:
    """Names of the static functions a source defines (calls to them stay in the file)."""
    return {m.group(1) for m in STATIC_FUNCTION.finditer(code)}


class PolicyViolation(ValueError):
    def __init__(self, rule: str, why: str, snippet: str = "") -> None:
        detail = f"{rule}: {why}" + (f" (found {snippet!r})" if snippet else "")
        super().__init__(detail)
        self.rule = rule
        self.why = why
        self.snippet = snippet
        self.reason = STATIC_CHECK


def strip_comments(source: str) -> str:
    """Source with comments blanked out (strings kept: inline asm lives in strings)."""
    out = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            out.append(source[i:j + 1])
            i = j + 1
        elif source.startswith("//", i):
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _top_level(code: str) -> str:
    """The file-scope text: everything outside braces (function bodies, struct bodies)."""
    depth, out = 0, []
    for c in code:
        if c == "{":
            depth += 1
            out.append(" { } " if depth == 1 else "")
        elif c == "}":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(c)
    return "".join(out)


def check(source: str, *, language: str = "c", entry: str = "ks_kernel", dtype: str = "float32",
          forbid: list[str] | tuple[str, ...] = (), params: tuple[str, ...] | list[str] = ()) -> None:
    """Raise PolicyViolation for the first broken rule; return None for an acceptable kernel."""
    if language not in ALLOWED_HEADERS:
        raise ValueError(f"unknown kernel language {language!r}")
    if not source or not source.strip():
        raise PolicyViolation("empty", "the kernel source is empty")
    if len(source) > MAX_SOURCE_CHARS:
        raise PolicyViolation("too_long", f"the source has {len(source)} characters "
                              f"(limit {MAX_SOURCE_CHARS})")
    code = strip_comments(source)
    for m in INCLUDE.finditer(code):
        header = m.group(1).strip()
        if header not in ALLOWED_HEADERS[language]:
            raise PolicyViolation("forbidden_include", "only math/SIMD headers are available to "
                                  f"a kernel; allowed: {', '.join(sorted(ALLOWED_HEADERS[language]))}",
                                  m.group(0))
    _check_parameter_macros(code, set(params) | {"THREADS"})
    own = own_static_functions(code)
    for rule in RULES:
        if language not in rule.languages:
            continue
        for m in rule.pattern.finditer(code):
            called = re.match(r"\w+", m.group(0))
            if rule.name in OWN_NAMES_OK and called and called.group(0) in own:
                continue  # a call of the candidate's own static helper (read, write, ...)
            raise PolicyViolation(rule.name, rule.why, m.group(0).strip())
    if dtype not in LOW_PRECISION_OK:
        m = LOW_PRECISION.search(code)
        if m:
            raise PolicyViolation("precision_lowering", f"the goal computes in {dtype}; "
                                  "lower-precision types or conversions are not allowed",
                                  m.group(0))
    if "precision_lowering" in forbid:
        m = FAST_MATH.search(code)
        if m:
            raise PolicyViolation("precision_lowering", "the goal forbids fast approximate math",
                                  m.group(0).strip())
    if "atomics" in forbid:
        m = ATOMICS.search(code)
        if m:
            raise PolicyViolation("atomics", "the goal forbids atomics", m.group(0).strip())
    m = next((m for m in STATIC_VAR.finditer(code) if _mutable(m.group(0))), None)
    if m:
        raise PolicyViolation("static_state", "static variables keep state between calls "
                              "(e.g. outputs cached by pointer); make it const or local",
                              m.group(0).strip())
    _check_file_scope(code, language, entry)


def _check_parameter_macros(code: str, params: set[str]) -> None:
    """Tunables arrive as -D options; a kernel may give defaults (#ifndef P / #define P) but
    never override them: the configuration recorded must be the one that ran."""
    guarded: set[str] = set()
    for line in code.splitlines():
        m = re.match(r"\s*#\s*(ifndef|undef|define)\s+(\w+)", line)
        if not m:
            continue
        what, name = m.groups()
        if name not in params and not name.startswith("KS_"):
            continue
        if what == "ifndef":
            guarded.add(name)
        elif what == "undef" or name not in guarded:
            raise PolicyViolation("parameter_override", "overrides a tuning parameter set by the "
                                  "configuration; defaults need #ifndef", line.strip())


_DECL_SKIP = re.compile(r"^\s*(typedef|using|template|namespace|extern\s+\"C\"\s*$|struct|union|"
                        r"enum|class|static_assert|_Static_assert)\b")


def _check_file_scope(code: str, language: str, entry: str) -> None:
    top = _top_level("\n".join(line for line in code.splitlines()
                               if not line.lstrip().startswith("#")))
    if not re.search(rf"\b{re.escape(entry)}\s*\(", top):
        raise PolicyViolation("entry_missing", f"the kernel must define {entry}() with the "
                              "harness's signature")
    # `typedef struct { ... } T;` names a type, it holds no state
    top = re.sub(r"\btypedef\b[^;]*?\{ \}[^;]*;", ";", top)
    for stmt in re.split(r";|\{ \}", top):
        s = " ".join(stmt.split())
        if not s or _DECL_SKIP.match(s):
            continue
        if "(" in s:  # a function definition or prototype
            name = re.search(r"(\w+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$", s)
            fn = name.group(1) if name else ""
            if language == "c" and fn and fn != entry and not re.search(r"\bstatic\b", s) \
                    and not fn.startswith("ks_"):
                raise PolicyViolation("external_symbol", "helper functions must be static (or "
                                      "named ks_*): an exported name could interpose library "
                                      "or harness symbols", fn)
            continue
        if not _mutable(s):
            continue
        raise PolicyViolation("global_state", "mutable file-scope variables keep state between "
                              "calls (e.g. outputs cached by pointer)", s[:80])
