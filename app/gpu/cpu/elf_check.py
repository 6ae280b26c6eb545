"""The built kernel library, read with pyelftools before it is ever loaded.

Its imports must be on an allow-list, and it may carry no code that runs while the dynamic
loader maps it: no more init/fini/preinit array entries or constructors than the same
toolchain's empty kernel, and no IFUNC at all (an STT_GNU_IFUNC symbol's resolver, or the
R_*_IRELATIVE relocation that calls one, runs inside dlopen, before the candidate's process
gets its last seccomp filter). Nor more writable data or thread-local storage than the empty
kernel (results cached between calls).
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

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
    # the dynamic section's own sizes: the loader runs these, whatever the sections are named
    "DT_INIT_ARRAYSZ": "runs code when the library is loaded (init array entries)",
    "DT_PREINIT_ARRAYSZ": "runs code when the library is loaded (preinit array)",
    "DT_FINI_ARRAYSZ": "runs code when the library is unloaded (fini array entries)",
}
EMPTY_KERNEL = "void ks_empty(float *out, const float *in, long n) { for (long i = 0; i < n; ++i) out[i] = in[i]; }\n"


STT_GNU_IFUNC = 10  # pyelftools calls it STT_LOOS
# R_*_IRELATIVE by e_machine: the loader calls the resolver at this address while mapping
IRELATIVE = {"EM_X86_64": 37, "EM_386": 42, "EM_AARCH64": 1032, "EM_ARM": 160, "EM_PPC64": 248,
             "EM_RISCV": 58, "EM_S390": 61}
LOAD_TIME = "runs code when the library is loaded"


def _elf_facts(library: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """(section sizes, undefined dynamic symbols, problems with segments)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection
    from elftools.elf.sections import SymbolTableSection

    with open(library, "rb") as fh:
        elf = ELFFile(fh)
        sizes = {s.name: s["sh_size"] for s in elf.iter_sections()}
        dynsym = elf.get_section_by_name(".dynsym")
        imports = [sym.name for sym in (dynsym.iter_symbols() if dynsym is not None else ())
                   if sym.name and sym["st_shndx"] == "SHN_UNDEF"]
        problems = []
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_INTERP":
                problems.append("is a program, not a library")
            if seg["p_type"] == "PT_GNU_STACK" and seg["p_flags"] & 1:
                problems.append("asks for an executable stack")
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1 and seg["p_flags"] & 2:
                problems.append("has memory that is both writable and executable")
        irelative = IRELATIVE.get(elf["e_machine"])
        for section in elf.iter_sections():
            if isinstance(section, SymbolTableSection):  # .dynsym and .symtab
                for sym in section.iter_symbols():
                    if sym["st_info"]["type"] in ("STT_LOOS", STT_GNU_IFUNC):
                        problems.append(f"{LOAD_TIME} (an IFUNC resolver: {sym.name or '?'})")
                        break
            if isinstance(section, RelocationSection) and any(
                    rel["r_info_type"] == irelative for rel in section.iter_relocations()):
                    problems.append(f"{LOAD_TIME} (an IRELATIVE relocation calls a resolver)")
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag in ("DT_INIT_ARRAYSZ", "DT_PREINIT_ARRAYSZ",
                                           "DT_FINI_ARRAYSZ"):  # what the loader reads
                        sizes[tag.entry.d_tag] = tag.entry.d_val
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
