"""Compile CUDA C++ with NVRTC (through CuPy's bindings) and read back resource usage.

Works without a GPU or driver: NVRTC only needs its own library. `-Xptxas=-v` makes ptxas
report registers, spills, shared/local/constant memory per kernel, which we parse so that
candidates over the goal's limits are rejected before any launch. Compiled cubins are cached on
disk, keyed by a hash of everything that decides the binary: under app.paths.cache_dir()/cuda for
the engine, in the cell's own scratch for a sandboxed worker (nothing another cell planted).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import re
import struct
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.paths import cache_dir

# Instructions only the arch-specific Hopper target (sm_90a) accepts.
_HOPPER_ONLY = re.compile(r"\bwgmma\.|\bsetmaxnreg\b|cp\.async\.bulk\.tensor")


class CompileError(RuntimeError):
    """NVRTC rejected the source; `log` holds the compiler's messages."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class NvrtcUnavailable(RuntimeError):
    """CuPy or its NVRTC library is missing."""


@dataclass
class KernelResources:
    """What ptxas reported for one kernel."""

    registers: int = 0
    spill_stores: int = 0  # bytes
    spill_loads: int = 0  # bytes
    stack_bytes: int = 0  # stack frame (local memory per thread)
    shared_bytes: int = 0  # static shared memory
    const_bytes: int = 0
    barriers: int = 0
    gmem_bytes: int = 0  # module-level __device__ globals ("N bytes gmem"), shared by its kernels

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


@dataclass
class CompiledKernel:
    key: str
    arch: str
    kernel_name: str
    cubin_path: str
    log: str
    resources: dict[str, KernelResources] = field(default_factory=dict)
    compile_s: float = 0.0
    cached: bool = False

    def resource(self, name: str | None = None) -> KernelResources:
        return self.resources.get(name or self.kernel_name) or KernelResources()


def nvrtc_module():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise NvrtcUnavailable(f"CuPy with NVRTC is not installed ({exc}); install cupy-cuda12x") from None
    return nvrtc


@functools.cache
def nvrtc_version() -> str:
    major, minor = nvrtc_module().getVersion()
    return f"{major}.{minor}"


@functools.cache
def include_options() -> list[str]:
    """Include paths for cuda_fp16.h / cuda_bf16.h: CuPy's own (private API, so fall back to
    looking for the headers beside the NVIDIA wheels or CUDA_PATH)."""
    with contextlib.suppress(Exception):  # CuPy internals moved: look for the headers ourselves
        from cupy._core.core import assemble_cupy_compiler_options

        return [o for o in assemble_cupy_compiler_options(()) if o.startswith("-I")]
    candidates = [Path(root) / "include"
                  for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda") if root]
    with contextlib.suppress(Exception):  # no NVIDIA runtime wheel: other places were tried
        import nvidia.cuda_runtime  # type: ignore

        candidates.append(Path(next(iter(nvidia.cuda_runtime.__path__))) / "include")
    return [f"-I{p}" for p in candidates if (p / "cuda_fp16.h").exists()]


def target_arch(compute_capability: str | int, source: str = "") -> str:
    """'90' -> 'sm_90', or 'sm_90a' when the source uses Hopper-only instructions."""
    cc = str(compute_capability).replace("sm_", "").rstrip("a")
    if _HOPPER_ONLY.search(source):
        if cc != "90":
            raise CompileError(f"the source uses Hopper-only instructions (wgmma/TMA/setmaxnreg) "
                               f"which need compute capability 9.0, not {cc}")
        return "sm_90a"
    return f"sm_{cc}"


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_GMEM = re.compile(r"^\s*ptxas info\s*:\s*(\d+) bytes gmem")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Per-kernel resources from ptxas -v output (the format NVRTC 11-13 print)."""
    out: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    gmem = 0
    for line in log.splitlines():
        if (g := _GMEM.search(line)):  # one line per module (and per arch), before the kernels
            gmem = max(gmem, int(g.group(1)))
            continue
        if (m := _ENTRY.search(line)):
            current = out.setdefault(m.group(1), KernelResources())
            continue
        if current is None:
            continue
        if (m := _FRAME.search(line)):
            current.stack_bytes, current.spill_stores, current.spill_loads = map(int, m.groups())
        if (m := _USED.search(line)):
            current.registers = int(m.group(1))
            if (b := _BARRIERS.search(line)):
                current.barriers = int(b.group(1))
            if (s := _SMEM.search(line)):
                current.shared_bytes = int(s.group(1))
            if (c := _CMEM.search(line)):
                current.const_bytes = int(c.group(1))
    for res in out.values():
        res.gmem_bytes = gmem
    return out


_COMMENT_OR_LITERAL = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)


def code_only(source: str) -> str:
    """The source with comments removed and trailing blanks trimmed: what decides the binary.
    String and character literals are kept as they are (a '//' inside one is not a comment)."""
    def keep_literals(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("/*"):
            return " "  # as the C preprocessor does
        return "" if text.startswith("//") else text

    stripped = _COMMENT_OR_LITERAL.sub(keep_literals, source)
    return "\n".join(line.rstrip() for line in stripped.splitlines() if line.strip())


def artifact_key(source: str, arch: str, options: list[str] | tuple[str, ...]) -> str:
    """Cache key: the code without comments (templates name the shape in a comment, which must
    not make the same code compile once per shape), the target, the options, NVRTC's version."""
    blob = json.dumps({"source": code_only(source), "arch": arch, "options": list(options),
                       "nvrtc": nvrtc_version()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def default_cache_dir() -> Path:
    """Outside a cell, the shared cache; inside one, the cell's own scratch: a cubin in the
    shared cache may have been planted by an earlier cell under another source's key, and what
    runs must be what the key names (app.gpu.sandbox.private)."""
    from app.gpu.sandbox import current_plan

    if current_plan() is not None:
        from app.gpu.sandbox.private import private_dir

        return private_dir("cuda")
    return cache_dir() / "cuda"


def compile_source(source: str, kernel_name: str, arch: str, options: list[str] | tuple[str, ...] = (),
                   cache: Path | None | bool = True, filename: str = "kernel.cu") -> CompiledKernel:
    """Compile `source` for `arch` ('sm_80', 'sm_90', 'sm_90a') to a cubin on disk.

    `cache`: True for the default cache directory, a Path for another, False/None for a
    temporary directory (still a real file, so a worker process can load it)."""
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise CompileError(f"target arch {arch!r} is not of the form sm_XX or sm_XXa")
    options = list(options)
    key = artifact_key(source, arch, options)
    if cache is True:
        directory = default_cache_dir()
    elif cache:
        directory = Path(cache)
    else:
        directory = Path(tempfile.mkdtemp(prefix="kernelswarm-nvrtc-"))
    cubin_path, meta_path = directory / f"{key}.cubin", directory / f"{key}.json"
    if cubin_path.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
            return CompiledKernel(
                key=key, arch=arch, kernel_name=kernel_name, cubin_path=str(cubin_path),
                log=meta["log"], compile_s=meta["compile_s"], cached=True,
                resources={k: KernelResources(**v) for k, v in meta["resources"].items()})
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is simply rebuilt
    nvrtc = nvrtc_module()
    t0 = time.perf_counter()
    prog = nvrtc.createProgram(source, filename, [], [])
    try:
        all_options = include_options() + ["--std=c++17", f"--gpu-architecture={arch}",
                                           "-Xptxas=-v", "-DNDEBUG"] + options
        try:
            nvrtc.compileProgram(prog, all_options)
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(prog)
            first = next((ln.strip() for ln in log.splitlines() if "error" in ln), log.strip()[:200])
            raise CompileError(f"NVRTC failed for {arch}: {first}", log) from None
        log = nvrtc.getProgramLog(prog)
        cubin = full_cubin(nvrtc, prog)
    finally:
        nvrtc.destroyProgram(prog)
    compile_s = time.perf_counter() - t0
    resources = parse_ptxas_log(log)
    if kernel_name not in resources:
        raise CompileError(f"kernel {kernel_name!r} not found in the compiled module "
                           f"(found: {', '.join(resources) or 'none'}); is it extern \"C\"?", log)
    directory.mkdir(parents=True, exist_ok=True)
    _atomic_write(cubin_path, cubin)
    _atomic_write(meta_path, json.dumps({"log": log, "compile_s": compile_s, "arch": arch,
                                         "resources": {k: asdict(v) for k, v in resources.items()}}).encode())
    return CompiledKernel(key=key, arch=arch, kernel_name=kernel_name, cubin_path=str(cubin_path),
                          log=log, resources=resources, compile_s=compile_s)


def elf_size(data: bytes) -> int:
    """Where a 64-bit little-endian ELF file ends by its own headers: the furthest of the section
    header table, the program header table and every section's contents."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    end = max(64, phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        at = shoff + i * shentsize
        if at + 64 > len(data):
            break
        sh_type, = struct.unpack_from("<I", data, at + 4)
        offset, size = struct.unpack_from("<QQ", data, at + 24)
        if sh_type != 8:  # SHT_NOBITS occupies no bytes in the file
            end = max(end, offset + size)
    return end


@functools.cache
def _nvrtc_library() -> Any:
    """The libnvrtc CuPy loaded (found in this process's memory map), through ctypes: CuPy's
    bindings lack nvrtcGetCUBINSize. None where it cannot be found."""
    try:
        with open("/proc/self/maps") as fh:
            path = next((ln.split()[-1] for ln in fh if re.search(r"/libnvrtc\.so[.\d]*$", ln.strip())),
                        None)
        path = path or ctypes.util.find_library("nvrtc")
        if not path:
            return None
        lib = ctypes.CDLL(path)
        lib.nvrtcGetCUBINSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        lib.nvrtcGetCUBIN.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        return lib
    except (OSError, AttributeError):
        return None


def full_cubin(nvrtc: Any, prog: int) -> bytes:
    """All of the cubin. CuPy's getCUBIN treats it as a C string and drops the last byte (loading
    still works, cuobjdump rejects it): read size and bytes with NVRTC itself, or else restore the
    missing zero bytes up to the end the ELF headers give."""
    lib = _nvrtc_library()
    if lib is not None:
        size = ctypes.c_size_t()
        if lib.nvrtcGetCUBINSize(ctypes.c_void_p(prog), ctypes.byref(size)) == 0 and size.value:
            buf = ctypes.create_string_buffer(size.value)
            if lib.nvrtcGetCUBIN(ctypes.c_void_p(prog), buf) == 0:
                return buf.raw
    cubin = bytes(nvrtc.getCUBIN(prog))
    end = elf_size(cubin)
    if 0 < end - len(cubin) <= 8:  # the headers' last bytes are zero (high bytes of a size)
        cubin += b"\0" * (end - len(cubin))
    return cubin


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def check_limits(res: KernelResources, *, dynamic_shared: int = 0, max_registers: int | None = None,
                 max_shared: int | None = None, device_shared_limit: int | None = None,
                 allow_spills: bool = False) -> str | None:
    """Why a compiled kernel must not be launched, or None. Shared memory counts static plus
    the launch's dynamic bytes. Register spills are refused unless allowed: a spilling
    configuration goes through local memory and is never the fastest (0.6-3 KB per thread seen)."""
    total_shared = res.shared_bytes + dynamic_shared
    if max_registers is not None and res.registers > max_registers:
        return f"uses {res.registers} registers per thread, over the goal's limit of {max_registers}"
    if max_shared is not None and total_shared > max_shared:
        return f"uses {total_shared} bytes of shared memory, over the goal's limit of {max_shared}"
    if device_shared_limit is not None and total_shared > device_shared_limit:
        return f"needs {total_shared} bytes of shared memory per block; the device allows {device_shared_limit}"
    if not allow_spills and res.spills:
        return (f"spills registers to local memory ({res.spill_stores} bytes of spill stores, "
                f"{res.spill_loads} bytes of spill loads per thread)")
    return None
