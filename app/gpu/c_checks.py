"""Checks on what the C compiler sees and builds, not on the text a candidate was written as.

Text filters on raw source are easy to slip past (a backslash-newline splice hides `asm`, a
macro computes an include path, an attribute after the declarator hides a static). So:

1. The compiler's own preprocessor runs first (`cc -E -H`): every header the candidate includes
   directly must be one of the vetted headers, found in the compiler's system include
   directories; headers they pull in must come from those directories too. A computed include
   of any other file is refused by its resolved path, and its content is never stored or shown.
2. The candidate's own lines of the preprocessed output (splices joined, macros expanded,
   comments and string literals gone) are scanned for inline assembly, load-time code, section
   and symbol tricks, and calls a kernel may not make.
3. The built library is read with pyelftools: its imports must be on an allow-list, and it may
   not carry more load-time code (init/fini arrays, constructors), writable data (results
   cached between calls) or thread-local storage than the same toolchain's empty kernel.

The sandbox is the wall (app/gpu/sandbox); these checks are the cheap first filter that names
the problem.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ALLOWED_HEADERS = frozenset({
    "math.h", "stddef.h", "stdint.h", "stdlib.h", "string.h", "float.h", "omp.h", "stdio.h",
    "stdbool.h", "limits.h", "immintrin.h", "x86intrin.h", "arm_neon.h", "stdalign.h"})
SOURCE_NAME = "kernel.c"

# On the candidate's own preprocessed lines (identifiers after macro expansion).
FORBIDDEN_CODE = [
    (r"\b(__asm__|__asm|asm)\b", "inline assembly is not allowed"),
    ((r"#\s*pragma\s+GCC\s+(optimize|push_options|target\b.*\bno-)|\boptimize\s*\(|"
     r"fast-math|\bfp-contract\b|#\s*pragma\s+STDC\s+FP_CONTRACT|#\s*pragma\s+float_control"),
     "changing floating-point semantics from the source is not allowed"),
    (r"\b(constructor|destructor|__constructor__|__destructor__)\b",
     "code that runs at load time is not allowed"),
    ((r"\b(section|__section__|ifunc|__ifunc__|alias|__alias__|weakref|__weakref__|symver|"
     r"__symver__|visibility|__visibility__)\s*\("),
     "placing code or data in chosen sections or symbols is not allowed"),
    ((r"\b(system|fork|vfork|clone|execl|execlp|execle|execv|execvp|execve|execvpe|fexecve|"
     r"posix_spawn|posix_spawnp|popen|dlopen|dlsym|dlvsym|dlinfo|dl_iterate_phdr|syscall|"
     r"pthread_create|signal|sigaction|setitimer|alarm|clock_gettime|gettimeofday|clock|time|"
     r"__rdtsc|rdtsc|__rdtscp|mmap|mprotect|munmap|kill|raise|exit|_exit|_Exit|abort|getenv|"
     r"secure_getenv|environ|__environ|open|openat|fopen|freopen|socket|connect|ptrace|"
     r"readlink|getauxval|__libc_stack_end|_r_debug|_DYNAMIC|_GLOBAL_OFFSET_TABLE_)\b"),
     ("uses a function or symbol a kernel may not use (processes, signals, timers, files, "
     "environment, memory mapping, the dynamic linker)")),
]

# Symbols a kernel library may import: libc memory and output, libm, OpenMP, libmvec.
ALLOWED_IMPORTS = re.compile(
    r"^(mem(cpy|set|move|cmp)|__mem(cpy|set|move)_chk|(posix_memalign|aligned_alloc|malloc|calloc|"
    r"realloc|free)|(f?printf|puts|putchar|fputs|fputc|fwrite|fflush|__printf_chk|__fprintf_chk|"
    r"stdout|stderr)|__stack_chk_fail|__cxa_finalize|_ITM_\w+|__gmon_start__|GOMP_\w+|omp_\w+|"
    r"_ZGV\w+|__\w+_finite|(exp|log|sqrt|pow|sin|cos|tanh|fabs|fmax|fmin|floor|ceil|erf|exp2|"
    r"log2|expm1|log1p|rsqrt|fma|round|trunc)[fl]?)$")

# Sections whose size may not exceed the empty kernel's: load-time code and state.
GUARDED_SECTIONS = {
    ".init_array": "runs code when the library is loaded (init array entries)",
    ".preinit_array": "runs code when the library is loaded (preinit array)",
    ".ctors": "runs code when the library is loaded (constructors)",
    ".fini_array": "runs code when the library is unloaded (fini array entries)",
    ".dtors": "runs code when the library is unloaded (destructors)",
    ".data": "keeps writable global data (state that survives between calls)",
    ".bss": "keeps writable global data (state that survives between calls)",
    ".tdata": "keeps thread-local data (state that survives between calls)",
    ".tbss": "keeps thread-local data (state that survives between calls)",
}
EMPTY_KERNEL = "void ks_empty(float *out, const float *in, long n) { for (long i = 0; i < n; ++i) out[i] = in[i]; }\n"


@dataclass(frozen=True)
class Preprocessed:
    own_code: str  # the candidate's own lines after preprocessing, string literals blanked
    headers: tuple[str, ...]  # every header the preprocessor opened, resolved paths


@functools.lru_cache(maxsize=8)
def system_include_dirs(compiler: str) -> tuple[str, ...]:
    """The compiler's own `#include <...>` search list (from `cc -E -v`)."""
    proc = subprocess.run([compiler, "-E", "-v", "-x", "c", "-fopenmp", os.devnull],
                          capture_output=True, text=True, timeout=60, check=False)
    dirs, inside = [], False
    for line in proc.stderr.splitlines():
        if line.startswith("#include <...> search starts here"):
            inside = True
        elif line.startswith("End of search list"):
            break
        elif inside and line.strip():
            dirs.append(os.path.realpath(line.strip()))
    return tuple(dirs)


def _under(path: str, dirs: tuple[str, ...]) -> str | None:
    real = os.path.realpath(path)
    for d in dirs:
        if real.startswith(d.rstrip("/") + "/"):
            return os.path.relpath(real, d)
    return None


def _blank_literals(code: str) -> str:
    """String and character literals become empty: words inside them call nothing."""
    return re.sub(r'"(\\.|[^"\\\n])*"|\'(\\.|[^\'\\\n])*\'', '""', code)


def preprocess(source: str, compiler: str, flags: tuple[str, ...], defines: dict,
               timeout_s: float = 60.0) -> tuple[Preprocessed | None, list[str]]:
    """Run the compiler's preprocessor on `source`; (result, problems). Problems never quote
    anything but the candidate's own file and the names it wrote."""
    language = [f for f in flags if f.startswith(("-std=", "-march=", "-fopenmp", "-m"))]
    with tempfile.TemporaryDirectory(prefix="kernelswarm-cpp-") as tmp:
        src = Path(tmp) / SOURCE_NAME
        src.write_text(source, encoding="utf-8")
        # absolute paths: in a sealed worker the compile helper runs this, in its own cwd
        cmd = [compiler, "-E", "-H", *language, *(f"-D{k}={v}" for k, v in defines.items()),
               str(src), "-o", str(Path(tmp) / "kernel.i")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired:
            return None, [f"the preprocessor ran longer than {timeout_s:g} s"]
        proc.stderr = proc.stderr.replace(f"{tmp}/", "")
        headers = _opened_headers(proc.stderr)
        problems = include_problems(headers, system_include_dirs(compiler))
        if problems:
            return None, problems
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines()
                      if line.startswith(f"{SOURCE_NAME}:") and "error" in line]
            return None, [f"preprocessing failed: {errors[0] if errors else 'error'}"]
        text = (Path(tmp) / "kernel.i").read_text(encoding="utf-8", errors="replace")
    return Preprocessed(_own_lines(text), tuple(path for _, path in headers)), []


def _opened_headers(stderr: str) -> list[tuple[int, str]]:
    """(depth, path) for each header `-H` reported opening."""
    found = []
    for line in stderr.splitlines():
        match = re.match(r"^(\.+) (.+)$", line)
        if match:
            found.append((len(match.group(1)), match.group(2).strip()))
    return found


def include_problems(headers: list[tuple[int, str]], system_dirs: tuple[str, ...]) -> list[str]:
    problems = []
    for depth, path in headers:
        rel = _under(path, system_dirs)
        if rel is None:
            name = os.path.basename(path)
            problems.append(f"includes {name!r} from outside the compiler's system headers; "
                            f"allowed headers: {', '.join(sorted(ALLOWED_HEADERS))}")
        elif depth == 1 and rel not in ALLOWED_HEADERS:
            problems.append(f"includes <{rel}>; allowed headers: {', '.join(sorted(ALLOWED_HEADERS))}")
    return list(dict.fromkeys(problems))


def _own_lines(preprocessed: str) -> str:
    """The lines of the preprocessed output that came from the candidate's own file."""
    own, current = [], SOURCE_NAME
    for line in preprocessed.splitlines():
        marker = re.match(r'^#\s*(?:line\s+)?\d+\s+"([^"]*)"', line)
        if marker:
            current = marker.group(1)
            continue
        if os.path.basename(current) == SOURCE_NAME:
            own.append(line)
    return _blank_literals("\n".join(own))


# A static function the candidate defines itself (a helper named `open` or `time`): calls
# to it stay in the file, so its name is not the libc symbol the last rule is about.
STATIC_FUNCTION = re.compile(r"\bstatic\b[^;{}()=]*?\b(\w+)[ \t]*\([^;{}]*\)\s*\{")


def code_problems(pre: Preprocessed, entry: str) -> list[str]:
    problems = []
    own = {m.group(1) for m in STATIC_FUNCTION.finditer(pre.own_code)}
    for i, (pattern, why) in enumerate(FORBIDDEN_CODE):
        shadowable = i == len(FORBIDDEN_CODE) - 1
        match = next((m for m in re.finditer(pattern, pre.own_code)
                      if not (shadowable and m.group(0).strip() in own)), None)
        if match:
            problems.append(f"{why} (found {match.group(0).strip()!r})")
    if not re.search(rf"\b{re.escape(entry)}\s*\(", pre.own_code):
        problems.append(f"does not define the entry function {entry}(...)")
    return problems


def check_source(source: str, compiler: str, flags: tuple[str, ...], defines: dict, entry: str,
                 max_bytes: int = 200_000) -> list[str]:
    """Everything wrong with a C candidate before it is compiled (empty: fine)."""
    if len(source.encode()) > max_bytes:
        return [f"source is larger than {max_bytes // 1000} KB"]
    pre, problems = preprocess(source, compiler, flags, defines)
    if pre is None:
        return problems
    return code_problems(pre, entry)


# ---- the built library ---------------------------------------------------------------------
def _elf_facts(library: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """(section sizes, undefined dynamic symbols, problems with segments)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with open(library, "rb") as fh:
        elf = ELFFile(fh)
        sizes = {s.name: s["sh_size"] for s in elf.iter_sections()}
        imports = []
        dynsym = elf.get_section_by_name(".dynsym")
        if dynsym is not None:
            for sym in dynsym.iter_symbols():
                if sym.name and sym["st_shndx"] == "SHN_UNDEF":
                    imports.append(sym.name)
        problems = []
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_INTERP":
                problems.append("is a program, not a library")
            if seg["p_type"] == "PT_GNU_STACK" and seg["p_flags"] & 1:
                problems.append("asks for an executable stack")
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1 and seg["p_flags"] & 2:
                problems.append("has memory that is both writable and executable")
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_TEXTREL":
                        problems.append("modifies its own code at load time (text relocations)")
                    if tag.entry.d_tag == "DT_NEEDED" and not re.match(
                            r"^(libc|libm|libgomp|libmvec|libpthread|ld-linux[-\w]*)\.so", tag.needed):
                        problems.append(f"links against {tag.needed}")
    return sizes, imports, problems


@functools.lru_cache(maxsize=8)
def empty_kernel_sections(compiler: str, flags: tuple[str, ...]) -> dict[str, int]:
    """Section sizes of an empty kernel built by the same toolchain (what crt adds)."""
    with tempfile.TemporaryDirectory(prefix="kernelswarm-empty-") as tmp:
        src, lib = Path(tmp) / "empty.c", Path(tmp) / "empty.so"
        src.write_text(EMPTY_KERNEL)
        subprocess.run([compiler, *flags, str(src), "-o", str(lib)], capture_output=True,
                       timeout=120, check=True)
        sizes, _, _ = _elf_facts(lib)
    return sizes


def library_problems(library: Path, compiler: str, flags: tuple[str, ...]) -> list[str]:
    """Everything wrong with a built kernel library (empty: fine)."""
    sizes, imports, problems = _elf_facts(library)
    empty = empty_kernel_sections(compiler, flags)
    for name, why in GUARDED_SECTIONS.items():
        if sizes.get(name, 0) > empty.get(name, 0):
            problems.append(f"{why}: {name} is {sizes[name]} bytes, an empty kernel's "
                            f"{empty.get(name, 0)}")
    bad = sorted({s.split("@")[0] for s in imports if not ALLOWED_IMPORTS.match(s.split("@")[0])})
    if bad:
        problems.append(f"imports {', '.join(bad[:8])}; kernels may only use memory, math, output "
                        "and OpenMP functions")
    return list(dict.fromkeys(problems))
