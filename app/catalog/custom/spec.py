"""A custom kernel's [kernel] table read and checked once per run: files loaded (sources,
reference text, .npy/.npz arrays) so the spec is self-contained and picklable (a sandboxed
worker cannot read the goal's directory), every expression checked, one GoalError naming the
field for the first problem."""

from __future__ import annotations

import ast
import hashlib
import io
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.catalog.custom import expr
from app.catalog.protocol import INT_OUTPUTS
from app.core.restrictions import RestrictionError, compile_restriction
from app.goal import Goal, GoalError, KernelTable

ROLES = ("input", "output", "inout", "scalar", "constant")  # constant: a CUDA __constant__ array
FILLS = ("normal", "uniform", "zeros", "ones", "arange", "randint", "file")
ARG_DTYPES = ("float32", "float64", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64")
OUTPUT_DTYPES = ("float32", "float64")  # outputs are verified in the goal's dtype
ARG_FIELDS = {"name", "dtype", "shape", "role", "fill", "low", "high", "seed", "file", "value",
              "rtol", "atol", "check", "fixed"}
DEFAULT_DIMS = {1: ["n"], 2: ["nx", "ny"], 3: ["nx", "ny", "nz"]}
BLOCK_NAMES = ["block_size_x", "block_size_y", "block_size_z"]


@dataclass
class Arg:
    name: str
    role: str
    dtype: str = "float32"
    shape: list[str] = field(default_factory=list)  # expressions of the dims
    fill: str = "normal"
    low: float = -1.0
    high: float = 1.0
    seed: int | None = None  # fixed: the same values in every check
    data: Any = None  # the array read from `file`
    value: str = ""  # scalar: an expression of the dims
    rtol: float | None = None
    atol: float | None = None
    check: bool = True
    fixed: bool = False  # the timer must not perturb it (index arrays, offsets)

    @property
    def is_array(self) -> bool:
        return self.role != "scalar"

    @property
    def is_input(self) -> bool:
        return self.role in ("input", "inout", "constant")

    @property
    def is_param(self) -> bool:
        """Passed to the kernel (a constant array is copied to its __constant__ symbol)."""
        return self.role != "constant"

    @property
    def is_output(self) -> bool:
        return self.role in ("output", "inout")


@dataclass
class KernelSpec:
    """Everything a worker needs to rebuild the operator (picklable)."""

    entry: str
    language: str  # "c" | "cuda"
    source: str  # the kernel's source text (several files joined)
    source_name: str
    tune_params: dict[str, list]
    restrictions: list[str]
    defines: dict[str, Any]
    dims: list[str]
    args: list[Arg]
    dtype: str = "float32"
    problem_size: list[str] = field(default_factory=list)
    block_size_names: list[str] = field(default_factory=lambda: list(BLOCK_NAMES))
    grid_div: list[list[str]] = field(default_factory=list)  # x, y, z
    reference_text: str = ""
    reference_file: str = ""
    reference_function: str = ""
    reference_source: str = ""  # a reference kernel's text (C or CUDA, the kernel's signature)
    reference_source_name: str = ""
    reference_entry: str = ""
    expected: dict[str, Any] = field(default_factory=dict)
    deterministic: bool = True
    flops: str = ""
    bytes: str = ""
    compiler_options: list[str] = field(default_factory=list)
    recorded_space: str = ""

    @property
    def digest(self) -> str:
        """Identifies the kernel in cache and candidate keys."""
        h = hashlib.sha256()
        for part in (self.entry, self.language, self.source, self.reference_text,
                     self.reference_source, self.reference_entry, repr(self.defines),
                     repr([(a.name, a.role, a.dtype, a.shape, a.value) for a in self.args]),
                     repr(self.compiler_options)):
            h.update(part.encode())
        return h.hexdigest()[:10]

    def dims_env(self, shape: list[int] | tuple[int, ...]) -> dict[str, int]:
        return {d: int(v) for d, v in zip(self.dims, shape)}

    def param_defines(self, shape: list[int] | tuple[int, ...]) -> dict[str, Any]:
        env = self.dims_env(shape)
        out = {}
        for k, v in self.defines.items():
            try:
                out[k] = expr.evaluate(v, env) if isinstance(v, str) else v
            except expr.ExprError:  # a -DNAME=text compiler option: passed on as written
                out[k] = v
        return out


def _err(field_name: str, problem: str) -> GoalError:
    return GoalError(f"kernel.{field_name}", problem)


def entry_names(source: str, language: str) -> list[str]:
    """Function names defined in a source (what the GUI offers as the entry)."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.DOTALL)
    if language == "cuda":
        bounds = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
        return re.findall(rf"__global__\s+{bounds}void\s+{bounds}(\w+)\s*\(", code)
    found = re.findall(r"^[ \t]*(?:static\s+|inline\s+)*[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{",
                       code, flags=re.MULTILINE)
    return [f for f in found if f not in ("if", "for", "while", "switch", "return")]


def _read(base: Path, name: str, field_name: str) -> Path:
    p = Path(name).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise _err(field_name, f"file {name!r} does not exist (looked in {p.parent})")
    return p


def _shape_list(value: Any) -> list[str]:
    if isinstance(value, (str, int)):
        return [str(value)]
    if isinstance(value, list) and all(isinstance(v, (str, int)) for v in value):
        return [str(v) for v in value]
    raise ValueError


def _arg(i: int, raw: dict[str, Any], dims: list[str], base: Path, goal: Goal,
         npz_cache: dict[Path, Any]) -> Arg:
    where = f"args[{i}]"
    unknown = set(raw) - ARG_FIELDS
    if unknown:
        raise _err(f"{where}.{min(unknown)}", f"unknown field; known: {', '.join(sorted(ARG_FIELDS))}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise _err(f"{where}.name", "each argument needs a name (an identifier)")
    role = raw.get("role", "input")
    if role not in ROLES:
        raise _err(f"{where}.role", f"{role!r} is not a role; choose one of {', '.join(ROLES)}")
    dtype = raw.get("dtype", goal.dtype)
    if dtype not in ARG_DTYPES:
        raise _err(f"{where}.dtype", f"{dtype!r} is not supported; choose one of {', '.join(ARG_DTYPES)}")
    for k in ("check", "fixed"):
        if not isinstance(raw.get(k, False), bool):
            raise _err(f"{where}.{k}", "must be true or false")
    arg = Arg(name=name, role=role, dtype=dtype, check=raw.get("check", True), fixed=raw.get("fixed", False))
    if role in ("output", "inout") and dtype != goal.dtype and dtype not in INT_OUTPUTS:
        raise _err(f"{where}.dtype", f"outputs are the goal's dtype {goal.dtype} or an integer type "
                   f"({', '.join(INT_OUTPUTS)}); argument {name!r} is {dtype}")
    if role == "scalar":
        if "value" not in raw:
            raise _err(f"{where}.value", f"scalar {name!r} needs a value (an expression of "
                       f"{', '.join(dims)})")
        arg.value = str(raw["value"])
        try:
            expr.check(arg.value, dims)
        except expr.ExprError as exc:
            raise _err(f"{where}.value", str(exc)) from None
        return arg
    if "shape" not in raw:
        raise _err(f"{where}.shape", f"array {name!r} needs a shape (expressions of {', '.join(dims)})")
    try:
        arg.shape = _shape_list(raw["shape"])
    except ValueError:
        raise _err(f"{where}.shape", "must be an expression or a list of expressions") from None
    for s in arg.shape:
        try:
            expr.check(s, dims)
        except expr.ExprError as exc:
            raise _err(f"{where}.shape", str(exc)) from None
    fill = raw.get("fill", "file" if "file" in raw else "normal")
    if fill not in FILLS:
        raise _err(f"{where}.fill", f"{fill!r} is not a fill; choose one of {', '.join(FILLS)}")
    arg.fill = fill
    for k in ("low", "high", "rtol", "atol"):
        v = raw.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise _err(f"{where}.{k}", "must be a number")
    arg.low, arg.high = float(raw.get("low", -1.0)), float(raw.get("high", 1.0))
    arg.rtol, arg.atol = raw.get("rtol"), raw.get("atol")
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _err(f"{where}.seed", "must be an integer")
    arg.seed = seed
    if fill == "file":
        if "file" not in raw or not isinstance(raw["file"], str):
            raise _err(f"{where}.file", f"argument {name!r} is filled from a file: name a .npy or .npz")
        path = _read(base, raw["file"], f"{where}.file")
        try:
            if path.suffix == ".npz":
                if path not in npz_cache:
                    npz_cache[path] = dict(np.load(path, allow_pickle=False))
                if name not in npz_cache[path]:
                    raise _err(f"{where}.file", f"{path.name} has no array named {name!r}; it has "
                               f"{', '.join(sorted(npz_cache[path]))}")
                data = npz_cache[path][name]
            else:
                data = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise _err(f"{where}.file", f"cannot read {path.name}: {exc}") from None
        arg.data = np.ascontiguousarray(data.astype(dtype, copy=False))
    return arg


def _check_reference(spec: KernelSpec, table: KernelTable, base: Path) -> None:
    module, sep, function = table.reference.rpartition(":")
    if not sep or not module.endswith(".py") or not function.isidentifier():
        raise _err("reference", f"{table.reference!r} must read 'module.py:function'")
    path = _read(base, module, "reference")
    text = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text, filename=path.name)  # parsed, never run in this process
    except SyntaxError as exc:
        raise _err("reference", f"{path.name} line {exc.lineno}: {exc.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if function not in defined:
        raise _err("reference", f"{path.name} defines no function {function!r}; it defines "
                   f"{', '.join(sorted(defined)) or 'none'}")
    spec.reference_text, spec.reference_file, spec.reference_function = text, path.name, function


def _check_reference_source(spec: KernelSpec, table: KernelTable, base: Path) -> None:
    """A reference kernel with the kernel's signature: read here, built and run only in a worker
    (app.gpu.custom_reference: C in the CPU worker; CUDA with NVRTC and the goal's geometry)."""
    path = _read(base, table.reference_source, "reference_source")
    text = path.read_text(encoding="utf-8")
    entry = table.reference_entry or spec.entry
    if not entry.isidentifier():
        raise _err("reference_entry", f"{entry!r} is not a function name")
    if not re.search(rf"\b{re.escape(entry)}\s*\(", text):
        found = entry_names(text, spec.language)
        raise _err("reference_entry" if table.reference_entry else "reference_source",
                   f"no function {entry!r} in {path.name}"
                   + (f"; it defines {', '.join(found)}" if found else ""))
    spec.reference_source, spec.reference_source_name, spec.reference_entry = text, path.name, entry


def load_spec(goal: Goal, backend: str) -> KernelSpec:
    """The goal's [kernel] table, checked and with its files read. GoalError names the field."""
    table = goal.kernel
    if table is None:
        raise GoalError("kernel", "a custom-kernel goal needs a [kernel] table")
    base = Path(goal.source_path).parent if goal.source_path else Path.cwd()
    language = _language(goal, table, backend)
    sources, source = _sources(table, base, language)
    dims = _dims(goal, table)
    _check_params(table, dims)
    defines = _defines(table, dims)
    args = _args(table, dims, base, goal)
    spec = KernelSpec(entry=table.entry, language=language, source=source, source_name=sources[0],
                      tune_params={k: list(v) for k, v in table.tune_params.items()},
                      restrictions=list(table.restrictions), defines=defines, dims=dims, args=args,
                      dtype=goal.dtype, deterministic=table.deterministic,
                      compiler_options=list(table.compiler_options),
                      recorded_space=table.recorded_space)
    _outputs_check(spec, table, base, goal)
    for k in ("flops", "bytes"):
        text = getattr(table, k)
        if text:
            try:
                expr.check(text, dims)
            except expr.ExprError as exc:
                raise _err(k, str(exc)) from None
            setattr(spec, k, text)
    _check_constants(spec)
    if language == "cuda":
        _cuda_geometry(spec, table, dims)
    elif table.problem_size or table.grid_div_x or table.block_size_names:
        raise _err("problem_size", "launch geometry is for CUDA kernels; a C kernel is called once")
    _check_sizes(spec, goal)
    return spec


def _check_constants(spec: KernelSpec) -> None:
    """A constant array is a CUDA __constant__ array of the same name, declared in the source
    (Kernel Tuner's cmem_args); the kernel reads it there, not from a parameter."""
    for i, a in enumerate(spec.args):
        if a.role != "constant":
            continue
        if spec.language != "cuda":
            raise _err(f"args[{i}].role", "constant memory is CUDA's; pass the array to a C kernel "
                       "as an input")
        declared = rf"__constant__[^;=]*\b{re.escape(a.name)}\s*\["
        for text, what in ((spec.source, "kernel source"), (spec.reference_source, "reference_source")):
            if text and not re.search(declared, text):
                raise _err(f"args[{i}].name", f"the {what} declares no __constant__ array "
                           f"{a.name!r} (for example: __constant__ float {a.name}[1024];)")


def _language(goal: Goal, table: KernelTable, backend: str) -> str:
    """The kernel's language, which the backend must run; the goal fields custom kernels fix."""
    language = table.language or {"cpu": "c", "cuda": "cuda"}.get(backend, "")
    expected_language = {"cpu": "c", "cuda": "cuda"}.get(backend)
    if language not in ("c", "cuda") or language != expected_language:
        raise _err("language", f"the {backend} backend runs {expected_language or 'no'} kernels, "
                   f"not {language or 'none'!r}")
    if goal.dtype not in OUTPUT_DTYPES:
        raise GoalError("dtype", f"custom kernels are verified in {' or '.join(OUTPUT_DTYPES)}")
    if goal.tolerance.rtol is not None or goal.tolerance.atol is not None:
        raise GoalError("tolerance", "custom kernels take rtol/atol per output, in [[kernel.args]]")
    return language


def _sources(table: KernelTable, base: Path, language: str) -> tuple[list[str], str]:
    """The source files' names and their joined text, which must define the entry."""
    sources = table.source if isinstance(table.source, list) else [table.source] if table.source else []
    if not sources:
        raise _err("source", "name the kernel's source file, e.g. source = \"kernel.c\"")
    texts = [_read(base, s, "source").read_text(encoding="utf-8") for s in sources]
    source = "\n".join(texts)
    if not table.entry:
        found = entry_names(texts[0], language)
        raise _err("entry", "name the function to call" + (f"; {sources[0]} defines {', '.join(found)}"
                                                             if found else ""))
    if not re.search(rf"\b{re.escape(table.entry)}\s*\(", source):
        found = entry_names(source, language)
        raise _err("entry", f"no function {table.entry!r} in {', '.join(sources)}"
                   + (f"; it defines {', '.join(found)}" if found else ""))
    return sources, source


def _dims(goal: Goal, table: KernelTable) -> list[str]:
    """The names of a shape's entries; every goal shape has one size per name."""
    if not goal.shapes:
        raise GoalError("shapes", "give at least one problem size, e.g. shapes = [[4096, 4096]]")
    dims = list(table.dims) or DEFAULT_DIMS.get(len(goal.shapes[0]), [])
    if not dims or any(not d.isidentifier() for d in dims):
        raise _err("dims", "name each entry of a shape, e.g. dims = [\"nx\", \"ny\"]")
    for i, s in enumerate(goal.shapes):
        if len(s) != len(dims):
            raise GoalError(f"shapes[{i}]", f"has {len(s)} entries; kernel.dims names {len(dims)} "
                            f"({', '.join(dims)})")
    return dims


def _check_params(table: KernelTable, dims: list[str]) -> None:
    """Tunable parameters, and restrictions that name only them and the dims."""
    params = table.tune_params
    if not params:
        raise _err("tune_params", "give at least one tunable parameter, e.g. block_size_x = [32, 64]")
    for k, v in params.items():
        if not k.isidentifier() or not isinstance(v, list) or not v:
            raise _err(f"tune_params.{k}", "must be a non-empty list of values")
    names = list(params) + dims
    for i, r in enumerate(table.restrictions):
        try:
            compile_restriction(r, names)
        except RestrictionError as exc:
            raise _err(f"restrictions[{i}]", str(exc)) from None


def _defines(table: KernelTable, dims: list[str]) -> dict[str, Any]:
    """Fixed #defines: the table's (expressions of the dims) and -D compiler options."""
    defines: dict[str, Any] = {}
    for k, v in table.defines.items():
        if isinstance(v, str):
            try:
                expr.check(v, dims)
            except expr.ExprError as exc:
                raise _err(f"defines.{k}", str(exc)) from None
        defines[k] = v
    for i, opt in enumerate(table.compiler_options):  # -D only: the harness owns the other flags
        m = re.fullmatch(r"-D\s*([A-Za-z_]\w*)(?:=(.*))?", opt.strip())
        if not m:
            raise _err(f"compiler_options[{i}]", f"{opt!r}: only -DNAME=VALUE options are passed on "
                       "(the backend chooses optimisation and architecture flags)")
        defines[m.group(1)] = m.group(2) if m.group(2) is not None else 1
    return defines


def _args(table: KernelTable, dims: list[str], base: Path, goal: Goal) -> list[Arg]:
    """The arguments in call order: names unique, at least one output."""
    npz: dict[Path, Any] = {}
    args = [_arg(i, raw, dims, base, goal, npz) for i, raw in enumerate(table.args)]
    if not args:
        raise _err("args", "declare the kernel's arguments in call order, [[kernel.args]]")
    seen: set[str] = set()
    for i, a in enumerate(args):
        if a.name in seen:
            raise _err(f"args[{i}].name", f"argument {a.name!r} is declared twice")
        seen.add(a.name)
    if not any(a.is_output for a in args):
        raise _err("args", "at least one argument must be an output (role = \"output\" or \"inout\")")
    return args


def _outputs_check(spec: KernelSpec, table: KernelTable, base: Path, goal: Goal) -> None:
    """How the checked outputs are judged: one of a reference function, a reference kernel or
    stored expected outputs (read into the spec)."""
    args = spec.args
    checked = [a for a in args if a.is_output and a.check]
    given = [k for k in ("reference", "reference_source", "expected") if getattr(table, k)]
    if len(given) > 1:
        raise _err(given[1], "give one of reference, reference_source or expected outputs, "
                   f"not {' and '.join(given)}")
    if table.reference_entry and not table.reference_source:
        raise _err("reference_entry", "names the function of a reference_source; give that file")
    if table.reference:
        _check_reference(spec, table, base)
    elif table.reference_source:
        _check_reference_source(spec, table, base)
    elif table.expected:
        path = _read(base, table.expected, "expected")
        try:
            stored = dict(np.load(io.BytesIO(path.read_bytes()), allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise _err("expected", f"cannot read {path.name}: {exc}") from None
        for a in checked:
            if a.name not in stored:
                raise _err("expected", f"{path.name} has no expected output {a.name!r}")
        spec.expected = {a.name: stored[a.name] for a in checked}
        if len(goal.shapes) > 1 or any(a.is_input and a.fill != "file" for a in args):
            raise _err("expected", "stored expected outputs fit one problem size with inputs read "
                       "from files; use a reference function otherwise")
    elif checked:
        raise _err("reference", "name a reference ('module.py:function'), a reference kernel "
                   "(reference_source = \"ref.c\") or expected outputs (expected = "
                   "\"outputs.npz\"), or set check = false on every output")


def _check_sizes(spec: KernelSpec, goal: Goal) -> None:
    """Every goal shape gives each argument positive sizes (and a file its number of values)."""
    for i, shape in enumerate(goal.shapes):
        env = spec.dims_env(shape)
        for j, a in enumerate(spec.args):
            try:
                sizes = [expr.as_int(s, env) for s in a.shape] if a.is_array else []
                if a.role == "scalar":
                    expr.evaluate(a.value, env)
            except (expr.ExprError, ZeroDivisionError) as exc:
                raise _err(f"args[{j}]", f"shape {list(shape)}: {exc}") from None
            if any(n <= 0 for n in sizes):
                raise _err(f"args[{j}].shape", f"is {sizes} at shape {list(shape)}; sizes must be > 0")
            if a.data is not None and int(np.prod(sizes)) != a.data.size:
                raise _err(f"args[{j}].file", f"holds {a.data.size} values; the shape {sizes} "
                           f"needs {int(np.prod(sizes))}")


def _cuda_geometry(spec: KernelSpec, table: KernelTable, dims: list[str]) -> None:
    spec.problem_size = list(table.problem_size) or list(dims)
    if len(spec.problem_size) > 3:
        raise _err("problem_size", "has at most three entries (x, y, z)")
    for p in spec.problem_size:
        try:
            expr.check(p, dims)
        except expr.ExprError as exc:
            raise _err("problem_size", str(exc)) from None
    spec.block_size_names = list(table.block_size_names) or list(BLOCK_NAMES)
    known = set(spec.tune_params) | set(dims) | set(BLOCK_NAMES) | set(spec.block_size_names)
    divs = [table.grid_div_x, table.grid_div_y, table.grid_div_z]
    spec.grid_div = []
    for axis, div in zip("xyz", divs):
        div = list(div) or [spec.block_size_names[min("xyz".index(axis), len(spec.block_size_names) - 1)]
                            if "xyz".index(axis) < len(spec.block_size_names) else "1"]
        for d in div:
            try:
                expr.check(d, known)
            except expr.ExprError as exc:
                raise _err(f"grid_div_{axis}", str(exc)) from None
        spec.grid_div.append(div)
