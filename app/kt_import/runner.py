"""The child process of `kernelswarm import-kt`: runs a Kernel Tuner script with
`kernel_tuner.tune_kernel` and `run_kernel` intercepted and writes what the first tune_kernel
call was given into OUT_DIR (capture.json and arrays/*.npy: JSON and plain arrays, never pickle).
Started inside a sandbox cell by app.kt_import.cell (or directly, when the user trusts the script).

Usage: python -m app.kt_import.runner SCRIPT.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import numpy as np

from app.kt_import import absent
from app.kt_import.restrictions import NotConvertible, to_expressions

ARG_DTYPES = ("float32", "float64", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64")
IGNORED = {"verbose": "", "quiet": "", "log": "", "iterations": "", "device": "", "platform": "",
           "strategy": "the swarm's agents choose configurations",
           "strategy_options": "the swarm's agents choose configurations",
           "cache": "runs are stored in KernelSwarm's history", "metrics": "not imported",
           "observers": "not imported", "objective": "the goal's objective is time",
           "objective_higher_is_better": "", "objectives": "", "simulation_mode": "",
           "parallel": "", "seed": "", "compiler": "the backend's compiler is used"}
REFUSED = {"smem_args": "dynamic shared memory arguments (smem_args)",
           "texmem_args": "texture memory arguments (texmem_args)",
           "verify": "a custom verify function; KernelSwarm compares outputs with atol/rtol"}


class Captured(BaseException):
    """Stops the script after the first tune_kernel call."""


class Refused(Exception):
    """Something the import cannot carry over; the message names it."""


def _language(lang: Any, source: str) -> str:
    name = str(lang or "").upper()
    if not name:
        name = "CUDA" if "__global__" in source else "OPENCL" if "__kernel" in source else "C"
    if name in ("CUDA", "CUPY", "NVCUDA"):
        return "cuda"
    if name == "C":
        return "c"
    raise Refused(f"lang={name!r}: KernelSwarm imports CUDA and C kernels only")


def _read_sources(kernel_source: Any, kernel_name: str) -> tuple[str, str, list[str]]:
    """(main file name, source text with supporting files inlined, notes)."""
    if callable(kernel_source):
        raise Refused("kernel_source is a Python function that generates code per configuration; "
                      "KernelSwarm needs a source file whose parameters are #defines")
    items = list(kernel_source) if isinstance(kernel_source, (list, tuple)) else [kernel_source]
    texts: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if isinstance(item, (str, os.PathLike)) and os.path.isfile(str(item)):
            texts.append((os.path.basename(str(item)), Path(item).read_text(encoding="utf-8")))
        elif isinstance(item, str) and i == 0:
            texts.append(("", item))
        else:
            raise Refused(f"kernel_source[{i}] is neither a file nor source code")
    main_name, main = texts[0]
    if re.search(r"\{\{|\{%", main):
        raise Refused("the kernel source is a template (jinja-style {{ }} / {% %}); render it to "
                      "plain source with #define parameters first")
    notes = []
    for name, text in texts[1:]:
        pattern = rf'^[ \t]*#\s*include\s*"{re.escape(name)}"[ \t]*$'
        if re.search(pattern, main, flags=re.MULTILINE):
            main = re.sub(pattern, lambda m, t=text: t, main, flags=re.MULTILINE)
        else:
            notes.append(f"supporting file {name} is not #included by the kernel; left out")
    return main_name, main, notes


def _instantiated(source: str, kernel_name: str, language: str) -> tuple[str, str, str]:
    """A templated CUDA kernel behind a plain extern "C" entry (app.kt_import.templated)."""
    from app.kt_import.templated import NotWrappable, wrap

    if language != "cuda":
        raise Refused(f"kernel_name {kernel_name!r} has template arguments; KernelSwarm builds C "
                      "kernels as C11 (no templates)")
    try:
        wrapped, entry = wrap(source, kernel_name)
    except NotWrappable as exc:
        raise Refused(str(exc)) from None
    return wrapped, entry, (f"the templated kernel {kernel_name} is imported as the extern \"C\" "
                            f"entry {entry}, which instantiates it (as Kernel Tuner does)")


def _as_array(value: Any, i: int) -> Any:
    if isinstance(value, (np.ndarray, np.generic)):
        return value
    module = type(value).__module__ or ""
    if module.startswith("cupy"):
        return value.get()
    if module.startswith("pycuda"):
        if hasattr(value, "get"):
            return value.get()
        raise Refused(f"argument {i} is a raw PyCUDA allocation ({type(value).__name__}); its "
                      "contents cannot be read back: allocate it with numpy (or a GPUArray)")
    if module.startswith("torch"):
        return value.detach().cpu().numpy()
    if isinstance(value, bool):
        raise Refused(f"argument {i} is a Python bool; use a numpy scalar such as np.int32(1)")
    if isinstance(value, int):
        return np.int32(value)
    if isinstance(value, float):
        return np.float32(value)
    raise Refused(f"argument {i} is a {type(value).__name__}; Kernel Tuner arguments are numpy "
                  "arrays or numpy scalars")


def _names(arguments: list[Any], frame: Any) -> list[str]:
    """The script's own variable names for the arguments, where one is bound to the very object."""
    scopes = [frame.f_locals, frame.f_globals] if frame is not None else []
    names: list[str] = []
    for i, arg in enumerate(arguments):
        found = next((k for scope in scopes for k, v in scope.items()
                      if v is arg and k.isidentifier() and not k.startswith("_")
                      and k not in names and k not in ("args", "arguments")), None)
        names.append(found or f"arg{i}")
    return names


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def capture(out_dir: Path, frame: Any, kernel_name: str, kernel_source: Any, problem_size: Any,
            arguments: list[Any], tune_params: Any, **kw: Any) -> None:
    notes: list[str] = []
    for key, why in REFUSED.items():
        if kw.get(key):
            raise Refused(f"{key}: {why} is not supported")
    for key, value in kw.items():
        if key in IGNORED and value not in (None, False, 0, 7) and IGNORED[key]:
            notes.append(f"{key} is not imported ({IGNORED[key]})")
    main_name, source, more = _read_sources(kernel_source, kernel_name)
    notes += more
    language = _language(kw.get("lang"), source)
    if "<" in kernel_name:
        source, kernel_name, note = _instantiated(source, kernel_name, language)
        notes.append(note)
    sizes = list(problem_size) if isinstance(problem_size, (list, tuple)) else [problem_size]
    if not all(isinstance(_plain(s), int) and not isinstance(s, bool) for s in sizes) or not 1 <= len(sizes) <= 3:
        raise Refused(f"problem_size {problem_size!r}: only 1 to 3 integers are supported "
                      "(not parameter names or functions)")
    params = {str(k): _plain(list(v)) for k, v in dict(tune_params).items()}
    for k, values in params.items():
        if not all(isinstance(v, (int, float, str)) for v in values):
            raise Refused(f"tune_params[{k!r}] holds values that are not numbers or strings")
    try:
        restrictions = to_expressions(kw.get("restrictions"), list(params))
    except NotConvertible as exc:
        raise Refused(str(exc)) from None
    grid = {}
    for axis in ("grid_div_x", "grid_div_y", "grid_div_z"):
        value = kw.get(axis)
        if value is None:
            continue
        if callable(value):
            raise Refused(f"{axis} is a Python function; give a list of parameter names or expressions")
        grid[axis] = [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    arrays: dict[str, np.ndarray] = {}
    names = _names(arguments, frame)
    args = []
    answer = kw.get("answer")
    if answer is not None and len(answer) != len(arguments):
        raise Refused(f"answer has {len(answer)} entries; there are {len(arguments)} arguments")
    for i, (name, value) in enumerate(zip(names, arguments)):
        value = _as_array(value, i)
        dtype = str(value.dtype)
        if dtype not in ARG_DTYPES:
            raise Refused(f"argument {i} ({name}) has dtype {dtype}; supported: {', '.join(ARG_DTYPES)}")
        if isinstance(value, np.generic) or value.ndim == 0:
            args.append({"name": name, "kind": "scalar", "dtype": dtype, "value": _plain(value)})
            continue
        if value.size == 0:  # e.g. a size computed in int32 that overflowed to 0
            raise Refused(f"argument {i} ({name}) is an empty array (shape {list(value.shape)})")
        entry = {"name": name, "kind": "array", "dtype": dtype, "shape": list(value.shape)}
        arrays[f"in_{name}"] = np.ascontiguousarray(value)
        if answer is not None and answer[i] is not None:
            expected = _as_array(answer[i], i)
            arrays[f"out_{name}"] = np.ascontiguousarray(expected).reshape(value.shape)
            entry["answer"] = True
        args.append(entry)
    for name, value in dict(kw.get("cmem_args") or {}).items():  # __constant__ arrays by name
        value = _as_array(value, len(args))
        if str(value.dtype) not in ARG_DTYPES or value.ndim == 0 or not str(name).isidentifier():
            raise Refused(f"cmem_args[{name!r}] must be a numpy array of {', '.join(ARG_DTYPES)}")
        if any(a["name"] == name for a in args):
            raise Refused(f"cmem_args[{name!r}] has the name of a kernel argument; the "
                          "__constant__ array needs a name of its own")
        arrays[f"in_{name}"] = np.ascontiguousarray(value)
        args.append({"name": str(name), "kind": "array", "dtype": str(value.dtype),
                     "shape": [int(value.size)], "constant": True})
    defines = {}
    for k, v in dict(kw.get("defines") or {}).items():
        if callable(v):
            raise Refused(f"defines[{k!r}] is a Python function; only constant defines are imported")
        defines[str(k)] = _plain(v)
    options = [str(o) for o in (kw.get("compiler_options") or [])]
    data = {"kernel_name": kernel_name, "source_name": main_name, "source": source,
            "language": language, "problem_size": [int(_plain(s)) for s in sizes],
            "tune_params": params, "restrictions": restrictions, "grid": grid,
            "block_size_names": [str(b) for b in kw.get("block_size_names") or []],
            "args": args, "has_answer": answer is not None, "atol": float(kw.get("atol") or 1e-6),
            "defines": defines, "compiler_options": options, "notes": notes}
    # one .npy per array: each file stays under the cell's file-size limit (1 GiB)
    (out_dir / "arrays").mkdir(exist_ok=True)
    for key, value in arrays.items():
        np.save(out_dir / "arrays" / f"{key}.npy", value, allow_pickle=False)
    (out_dir / "capture.json").write_text(json.dumps(data), encoding="utf-8")


def _run_c_kernel(kernel_name: str, kernel_source: Any, arguments: list[Any], params: dict) -> list:
    """run_kernel for a C kernel, here: compiled with the machine's compiler, called through
    ctypes with the arguments' types (as Kernel Tuner's C backend does)."""
    import ctypes
    import tempfile

    from app.gpu.cpu import compile_library, toolchain

    _, source, _ = _read_sources(kernel_source, kernel_name)
    source = re.sub(r'extern\s+"C"\s*(?!\{)', "", source)  # C11 here; Kernel Tuner uses C++
    tc = toolchain()
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "kernel.so"
        ok, log = compile_library(source, dict(params), lib, tc, 120)
        if not ok:
            raise Refused(f"run_kernel: the C kernel does not compile: {log.strip()[:300]}")
        fn = getattr(ctypes.CDLL(str(lib)), kernel_name)
        copies = [np.array(_as_array(a, i), copy=True) for i, a in enumerate(arguments)]
        c_args = []
        for a in copies:
            if isinstance(a, np.ndarray) and a.ndim:
                c_args.append(ctypes.c_void_p(a.ctypes.data))
            else:
                c_args.append(np.ctypeslib.as_ctypes_type(a.dtype)(a.item()))
        fn.restype = None
        fn(*c_args)
    return copies


def install(out_dir: Path) -> None:
    """Make `kernel_tuner.tune_kernel` and `run_kernel` ours (a shim module when Kernel Tuner is
    not installed)."""
    try:
        import kernel_tuner as kt
    except ImportError:
        kt = absent.install()
    real_run = getattr(kt, "run_kernel", None)

    def tune_kernel(kernel_name, kernel_source, problem_size, arguments, tune_params, **kw):
        capture(out_dir, sys._getframe(1), kernel_name, kernel_source, problem_size,
                list(arguments), tune_params, **kw)
        raise Captured

    def run_kernel(kernel_name, kernel_source, problem_size, arguments, params, **kw):
        main = kernel_source if isinstance(kernel_source, str) else ""
        source = Path(main).read_text() if main and os.path.isfile(main) else main
        if _language(kw.get("lang"), source) == "c":
            return _run_c_kernel(kernel_name, kernel_source, list(arguments), dict(params))
        if real_run is not None and _has_gpu():
            return real_run(kernel_name, kernel_source, problem_size, arguments, params, **kw)
        raise Refused("run_kernel on a CUDA kernel needs a GPU to compute the answer, and none is "
                      "here; compute the answer with numpy, or import on a machine with a GPU")

    kt.tune_kernel = tune_kernel
    kt.run_kernel = run_kernel


def _in_cell() -> bool:
    from app.gpu import sandbox

    return sandbox.current_plan() is not None


def _has_gpu() -> bool:
    try:
        from cupy.cuda import runtime

        return runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver: no GPU
        return False


def main(argv: list[str]) -> int:
    script, out_dir = Path(argv[0]).resolve(), Path(argv[1])
    install(out_dir)
    sys.argv = [str(script)]
    sys.path.insert(0, str(script.parent))
    os.chdir(script.parent)
    result: dict[str, Any] = {}
    try:
        runpy.run_path(str(script), run_name="__main__")
        result = {"error": "the script never called kernel_tuner.tune_kernel"}
    except Captured:
        result = {"ok": True}
    except (Refused, absent.Unavailable) as exc:
        result = {"error": str(exc)}
    except SystemExit as exc:
        result = {"error": f"the script exited (code {exc.code}) before calling tune_kernel"}
    except BaseException as exc:  # noqa: BLE001 - the user's script: any failure is reported
        text = f"{type(exc).__name__}: {exc}"
        hint = ""
        if re.search(r"cuda|cupy|pycuda|driver", text, flags=re.IGNORECASE):
            hint = (" (the script needs a GPU before tune_kernel, e.g. CuPy/PyCUDA allocations or "
                    "run_kernel; allocate with numpy to import on a machine without one)")
        if isinstance(exc, (PermissionError, FileNotFoundError)) and _in_cell():
            # the cell's file view holds only what it may read: a file elsewhere is not there
            hint = (" (in its sandbox cell the script sees only its own directory, the system "
                    "and Python, and writes nowhere; --trust-script runs it with your rights)")
        result = {"error": f"the script failed before tune_kernel: {text}{hint}"}
    write_result(out_dir, result)
    return 0


def write_result(out_dir: Path, result: dict[str, Any]) -> None:
    (out_dir / "result.json").write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
