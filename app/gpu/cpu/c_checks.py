"""Checks on what the C compiler sees and builds, not on the text a candidate was written as.

Text filters on raw source are easy to slip past (a backslash-newline splice hides `asm`, a
macro computes an include path, an attribute after the declarator hides a static). So:

1. The compiler's own preprocessor runs first (`cc -E -H`): every header the candidate includes
   directly must be one of the vetted headers, found in the compiler's system include
   directories; headers they pull in must come from those directories too. A computed include
   of any other file is refused by its resolved path, and its content is never stored or shown.
2. The candidate's own lines of the preprocessed output (splices joined, macros expanded,
   comments and string literals gone) are scanned for inline assembly, load-time code, section
   and symbol tricks, and calls a kernel may not make. Which lines are the candidate's own is
   judged by what the preprocessor opened (`-H`), never by line markers alone: a `#line`
   directive (or a GNU line marker) in the candidate can name any file, so every marker must
   agree with the files the preprocessor really entered, or the candidate is refused.
   `__has_include` is poisoned before the candidate's first line: it would answer whether any
   file exists (Landlock refuses the open, but EACCES still means "there"), one bit per run.
3. The built library is read with pyelftools (app.gpu.cpu.elf_check): imports on an allow-list, no
   load-time code (init/fini arrays, constructors, IFUNC resolvers), no writable data or
   thread-local storage beyond the same toolchain's empty kernel.

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

__all__ = ["check_source", "preprocess"]

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

# Put before the candidate's first line: these answer questions about files outside the
# vetted headers (whether they exist), and poisoning survives macros, token pasting and
# push/pop_macro; vetted headers never use them.
GUARD_HEADER = "#pragma GCC poison __has_include __has_include_next __has_embed\n"

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
        # the guard, then the candidate renumbered from its line 1 (the compile helper refuses
        # -include, rightly: a candidate's flags could name any file with it)
        src.write_text(GUARD_HEADER + "#line 1\n" + source, encoding="utf-8")
        # absolute paths: in a sealed worker the compile helper runs this, in its own cwd
        deps = Path(tmp) / "kernel.d"  # the files really opened (markers can be forged; -MD not)
        cmd = [compiler, "-E", "-H", "-MD", "-MF", str(deps), *language,
               *(f"-D{k}={v}" for k, v in defines.items()),
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
            if any("attempt to use poisoned" in line for line in errors):
                return None, [("asks the preprocessor whether a file exists (__has_include); "
                               "kernels may only include the vetted headers")]
            first = errors[0] if errors else "error"
            # "Permission denied" (there, hidden by Landlock) vs "No such file": one bit
            first = re.sub(r"(Permission denied|No such file or directory)$", "cannot be opened",
                           first)
            return None, [f"preprocessing failed: {first}"]
        text = (Path(tmp) / "kernel.i").read_text(encoding="utf-8", errors="replace")
        opened = _dependencies(deps.read_text(errors="replace") if deps.exists() else "")
        own, forged = own_lines(text, [path for _, path in headers], str(src), opened)
    if forged:
        return None, [forged]
    return Preprocessed(own, tuple(path for _, path in headers)), []


def _opened_headers(stderr: str) -> list[tuple[int, str]]:
    """(depth, path) for each header `-H` reported opening."""
    return [(len(m.group(1)), m.group(2).strip())
            for m in (re.match(r"^(\.+) (.+)$", line) for line in stderr.splitlines()) if m]


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


MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: [1-4])*)$')
PSEUDO_FILES = ("<built-in>", "<command-line>")
FORGED_MARKER = ("uses a #line directive or line marker that does not match the files the "
                 "preprocessor opened (it would make the kernel's own code look like another "
                 "file's)")


def _dependencies(text: str) -> set[str]:
    """Real paths of the files a `-MD` rule names (what the preprocessor really opened)."""
    body = text.replace("\\\n", " ").partition(":")[2]
    return {os.path.realpath(p.replace("\\ ", " ")) for p in re.split(r"(?<!\\)\s+", body) if p}


def own_lines(preprocessed: str, entered: list[str], main: str,
              opened: set[str] | None = None) -> tuple[str, str]:
    """(the candidate's own lines, string literals blanked; a problem or ""). Line markers are
    followed as a stack of files, and each one must agree with what the preprocessor really
    did: an entry (flag 1) is the next header `-H` reported opening (or, before the main file
    starts, the predefined and forced headers), a return (flag 2) names the file below, and a
    plain marker (`#line`) may only renumber the current file. The candidate controls
    `#line` and GNU markers, not what the preprocessor opens, so any forged marker shows."""
    own: list[str] = []
    stack: list[str] = []
    started = False  # the main file's own lines have begun (after <built-in>/<command-line>)
    command_line = False
    pending = list(entered)
    for line in preprocessed.splitlines():
        marker = MARKER.match(line)
        if marker is None:  # code, or a #pragma GCC ... the preprocessor passes through
            if started and stack == [main]:
                own.append(line)
            continue
        name = re.sub(r"\\(.)", r"\1", marker.group(2))
        flags = set(marker.group(3).split())
        if "1" in flags:
            if started:
                # -H reports a forged entry too; the dependency list does not
                if not pending or pending[0] != name or (
                        opened is not None and os.path.realpath(name) not in opened):
                    return "", FORGED_MARKER
                pending.pop(0)
            stack.append(name)
        elif "2" in flags:
            if len(stack) < 2 or stack[-2] != name:
                return "", FORGED_MARKER
            stack.pop()
        elif not stack:
            stack.append(name)
        elif name == stack[-1]:
            pass  # renumbering the current file
        elif not started and name in (main, *PSEUDO_FILES) and len(stack) == 1:
            stack[-1] = name
            command_line = command_line or name == "<command-line>"
            started = name == main and command_line
        else:
            return "", FORGED_MARKER
    if pending or stack != [main]:
        return "", FORGED_MARKER
    return _blank_literals("\n".join(own)), ""


# A line directive in the candidate's own text, found on every reading of it the compiler might
# use (trigraphs on or off, splices with or without trailing blanks): comments may stand
# between its parts, and macros can never produce one (C11 6.10.3.4p3).
_BLANK = re.compile(r"(?:[ \t\f\v]+|/\*.*?\*/)*", re.DOTALL)  # a comment ends at its first */


def _has_line_directive(text: str) -> bool:
    for start in (0, *(m.end() for m in re.finditer("\n", text))):
        at = _BLANK.match(text, start).end()
        for hash_ in ("#", "%:"):
            if text.startswith(hash_, at):
                rest = text[_BLANK.match(text, at + len(hash_)).end():][:5]
                if rest[:1].isdigit() or re.match(r"line\b", rest):
                    return True
    return False


TRIGRAPHS = {"??=": "#", "??/": "\\", "??'": "^", "??(": "[", "??)": "]", "??!": "|",
             "??<": "{", "??>": "}", "??-": "~"}


def line_directive_problem(source: str) -> str:
    """Why `source` is refused for writing a #line directive or GNU line marker, or ""."""
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    readings = [text, re.sub(r"\?\?[=/'()!<>-]", lambda m: TRIGRAPHS[m.group(0)], text)]
    for reading in readings:
        for splice in (r"\\\n", r"\\[ \t\f\v]*\n"):
            if _has_line_directive(re.sub(splice, "", reading)):
                return ("uses a #line directive or line marker (it would make the kernel's own "
                        "code look like another file's)")
    return ""


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
    directive = line_directive_problem(source)
    if directive:
        return [directive]
    pre, problems = preprocess(source, compiler, flags, defines)
    return problems if pre is None else code_problems(pre, entry)
