"""Checks on what the compiler sees (preprocessed source) and builds (the ELF library): each
attack that slipped past the old text filters, and the catalog kernels that must still pass."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources

import pytest

from app.gpu.cpu import c_checks, elf_check

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
FLAGS = ("-O3", "-march=native", "-std=c11", "-shared", "-fPIC", "-fopenmp")
CATALOG = ["cpu_gemm.c", "cpu_softmax.c", "cpu_rmsnorm.c", "cpu_transpose.c"]


def _catalog(name: str) -> str:
    return resources.files("app.catalog.cpu").joinpath("kernels", name).read_text()


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_kernels_pass_both_checks(name, tmp_path):
    assert c_checks.check_source(_catalog(name), "cc", FLAGS, {}, "ks_kernel") == []
    src, lib = tmp_path / "k.c", tmp_path / "k.so"
    src.write_text(_catalog(name))
    subprocess.run(["cc", *FLAGS, str(src), "-o", str(lib)], check=True, capture_output=True)
    assert elf_check.library_problems(lib, "cc", FLAGS) == []


SOURCE_ATTACKS = {
    # a backslash-newline splice hid `asm` from the regular expressions
    "splice": ('void ks_kernel(float *o) { as\\\nm volatile("nop"); }\n', "inline assembly"),
    # a macro-computed include of an arbitrary file passed the include whitelist
    "computed include": ('#define H "/etc/hostname"\n#include H\nvoid ks_kernel(float *o) {}\n',
                         "outside the compiler's system headers"),
    "relative include": ('#include <../../../etc/hostname>\nvoid ks_kernel(float *o) {}\n',
                         "outside the compiler's system headers"),
    "unlisted system header": ('#include <unistd.h>\nvoid ks_kernel(float *o) {}\n', "<unistd.h>"),
    "token paste": (('#include <stdlib.h>\n#define RUN(x) sys##tem(x)\n'
                    'void ks_kernel(float *o) { RUN("id"); }\n'), "'system'"),
    "address of system": (('#include <stdlib.h>\nvoid ks_kernel(float *o) { int (*f)(const char *) '
                          '= system; f("id"); }\n'), "'system'"),
    "_Pragma optimize": ('_Pragma("GCC optimize(\\"fast-math\\")")\nvoid ks_kernel(float *o) {}\n',
                         "floating-point semantics"),
    "constructor by macro": (('#define C __attribute__((con##structor))\nstatic void C boom(void) {}\n'
                             'void ks_kernel(float *o) {}\n'), "load time"),
    "init_array by section": (('static void boom(void) {}\nstatic void (*p)(void) '
                              '__attribute__((section(".init_array"), used)) = boom;\n'
                              'void ks_kernel(float *o) {}\n'), "sections"),
    "environment": ('#include <stdlib.h>\nvoid ks_kernel(float *o) { o[0] = getenv("OPENAI_API_KEY") != 0; }\n',
                    "'getenv'"),
    "no entry": ("void other(float *o) {}\n", "entry function ks_kernel"),
    # a line directive made the rest of the file "another file" for the scan
    "#line": ('void ks_kernel(float *o) {}\n#line 1 "other.h"\nvoid g(void) { __asm__("nop"); }\n',
              "#line"),
    "GNU marker as a system header": (
        'void ks_kernel(float *o) {}\n# 1 "/usr/include/math.h" 1 3 4\nvoid g(void) { __asm__("nop"); }\n',
        "#line"),
    "#line behind a comment and a splice": (
        'void ks_kernel(float *o) {}\n/* x */ %: /**/ li\\\nne 9 "o.h"\nvoid g(void) { __asm__("nop"); }\n',
        "#line"),
    "#line by trigraph": ('void ks_kernel(float *o) {}\n??=line 1 "o.h"\nvoid g(void) { __asm__("nop"); }\n',
                          "#line"),
    "__has_include by token paste": (
        '#define C(a, b) a##b\n#if C(__has_, include)(</etc/passwd>)\n#endif\nvoid ks_kernel(float *o) {}\n',
        "__has_include"),
}


@pytest.mark.parametrize("name", sorted(SOURCE_ATTACKS))
def test_source_attacks_are_refused_by_name(name):
    source, expected = SOURCE_ATTACKS[name]
    problems = c_checks.check_source(source, "cc", FLAGS, {}, "ks_kernel")
    assert any(expected in p for p in problems), problems


def test_a_refused_include_never_shows_the_files_content(tmp_path):
    secret = tmp_path / "secret.h"
    secret.write_text("sk-KERNELSWARM-CANARY-0123456789\n")
    problems = c_checks.check_source(f'#include "{secret}"\nvoid ks_kernel(float *o) {{}}\n', "cc",
                                     FLAGS, {}, "ks_kernel")
    assert problems and not any("CANARY" in p or str(tmp_path) in p for p in problems)


def test_words_inside_strings_call_nothing():
    source = '#include <stdio.h>\nvoid ks_kernel(float *o) { printf("system asm time\\n"); }\n'
    assert c_checks.check_source(source, "cc", FLAGS, {}, "ks_kernel") == []


LIBRARY_ATTACKS = {
    "static cache": (("static float cache[64]; static long calls;\n"
                     "void ks_kernel(float *o) { if (calls++) o[0] = cache[0]; cache[0] = o[0]; }\n"),
                     "writable global data"),
    "attribute after declarator": (("float cache[64] __attribute__((aligned(64)));\n"
                                   "void ks_kernel(float *o) { cache[0] = o[0]; }\n"), "writable global data"),
    "init array entry": (("static void boom(void) {}\n__attribute__((section(\".init_array\"), used)) "
                         "static void (*p)(void) = boom;\nvoid ks_kernel(float *o) {}\n"), "init array"),
    "thread local": ("_Thread_local float last;\nvoid ks_kernel(float *o) { last = o[0]; }\n", "thread-local"),
    "imports system": ("#include <stdlib.h>\nvoid ks_kernel(float *o) { system(\"id\"); }\n", "imports system"),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_ATTACKS))
def test_library_attacks_are_refused_by_name(name, tmp_path):
    source, expected = LIBRARY_ATTACKS[name]
    src, lib = tmp_path / "k.c", tmp_path / "k.so"
    src.write_text(source)
    subprocess.run(["cc", *FLAGS, str(src), "-o", str(lib)], check=True, capture_output=True)
    problems = elf_check.library_problems(lib, "cc", FLAGS)
    assert any(expected in p for p in problems), problems
