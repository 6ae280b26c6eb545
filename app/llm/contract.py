"""The entry's signature from a parser, not a regex over text that may hold comments.

C: the compiler's own declaration output (`gcc -aux-info`: every function the file declares,
as the compiler parsed it, with the parameters' names), so a comment such as
`// 2-D convolution (correlation)` above the entry can never become the signature. CUDA C++:
the entry's declaration is cut out of the comment-stripped source by bracket matching and
its parameter list is parsed by pycparser (a well-kept C parser), the CUDA qualifiers
(`__global__`, `__launch_bounds__(...)`, `__grid_constant__`, `__restrict__`) set aside and
the type names it cannot know declared for it. None when neither can read it: the prompt then
names the entry without a signature rather than a wrong one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from app.llm.policy import strip_comments

COMPILE_TIMEOUT_S = 20
_C_KEYWORDS = {"const", "volatile", "restrict", "unsigned", "signed", "int", "long", "short",
               "char", "float", "double", "void", "struct", "union", "enum", "_Bool", "bool"}


@dataclass(frozen=True)
class Signature:
    entry: str
    returns: str
    params: tuple[tuple[str, str], ...]  # (type, name)
    qualifiers: str = ""  # CUDA: extern "C" __global__

    def text(self) -> str:
        args = ", ".join(f"{t}{n}" if t.endswith("*") else f"{t} {n}" for t, n in self.params)
        head = f"{self.qualifiers} " if self.qualifiers else ""
        return f"{head}{self.returns} {self.entry}({args})"


def signature(source: str, entry: str, language: str,
              params: tuple[str, ...] = ()) -> Signature | None:
    """The entry's signature as a parser reads it (None when it cannot be read). `params`:
    macro names the harness passes as -D (given a value here so the declarations parse)."""
    if language == "cuda":
        return _cuda_signature(strip_comments(source), entry)
    return _c_signature(_declarations_only(strip_comments(source)), entry, tuple(params))


def _declarations_only(code: str) -> str:
    """File-scope text with every body emptied: the compiler needs the declarations only
    (bodies may use tunables the harness passes as -D, and the parse is faster)."""
    out, depth = [], 0
    for line in code.split("\n"):
        if depth == 0 and line.lstrip().startswith("#"):
            out.append(line)
            continue
        kept = []
        for c in line:
            if c == "{":
                if depth == 0:
                    kept.append("{")
                depth += 1
            elif c == "}":
                depth = max(0, depth - 1)
                if depth == 0:
                    kept.append("}")
            elif depth == 0:
                kept.append(c)
        out.append("".join(kept))
    return "\n".join(out)


# ---- C: gcc -aux-info ----------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _c_signature(source: str, entry: str, params: tuple[str, ...] = ()) -> Signature | None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        return None
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    with tempfile.TemporaryDirectory(prefix="ks-contract-") as d:
        src, aux = os.path.join(d, f"k{digest}.c"), os.path.join(d, "aux.txt")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        try:
            subprocess.run([cc, "-std=gnu11", "-fopenmp", "-march=native", "-fsyntax-only",
                            *(f"-D{p}=1" for p in params if p.isidentifier()),
                            "-aux-info", aux, src], capture_output=True, timeout=COMPILE_TIMEOUT_S,
                           check=False, cwd=d)
            with open(aux, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except (OSError, subprocess.TimeoutExpired):
            return None
    return parse_aux_info(text, entry, os.path.basename(src))


def parse_aux_info(text: str, entry: str, file_name: str = "") -> Signature | None:
    """The entry's line of gcc's -aux-info output: `/* f.c:8:NF */ extern void e (float *,
    long int); /* (y, n) float *y; long int n; */` (the K&R part names the parameters)."""
    for line in text.splitlines():
        if file_name and f"/* {file_name}:" not in line and f"/{file_name}:" not in line:
            continue
        m = re.match(r"/\*[^*]*\*/\s*(.*?)\b" + re.escape(entry) + r"\s*\((.*?)\);\s*"
                     r"(?:/\*\s*\(([^)]*)\)(.*?)\*/)?\s*$", line)
        if not m:
            continue
        returns = re.sub(r"\b(extern|static|inline)\b", "", m.group(1)).strip()
        names = [n.strip() for n in (m.group(3) or "").split(",") if n.strip()]
        decls = [d.strip() for d in (m.group(4) or "").split(";") if d.strip()]
        if names and len(decls) == len(names):
            params = []
            for name, decl in zip(names, decls):
                typ = re.sub(rf"\b{re.escape(name)}\b", "", decl, count=1)
                params.append((" ".join(typ.split()).replace("* ", "*"), name))
            return Signature(entry, returns, tuple(params))
        types = [t.strip() for t in m.group(2).split(",") if t.strip() and t.strip() != "void"]
        return Signature(entry, returns, tuple((t, f"arg{i}") for i, t in enumerate(types)))
    return None


# ---- CUDA: the declaration, parsed by pycparser --------------------------------------------
def _cuda_signature(code: str, entry: str) -> Signature | None:
    decl = _declaration(code, entry)
    if decl is None:
        return None
    head, params_text = decl
    qualifiers = " ".join(q for q in ('extern "C"', "__global__") if q in head)
    head = re.sub(r'extern\s*"C"|__global__|__launch_bounds__\s*\([^()]*\)|__forceinline__'
                  r"|__device__|__host__|static|inline", " ", head)
    returns = " ".join(head.split()) or "void"
    params = _parse_params(params_text)
    if params is None:
        return None
    return Signature(entry, returns, tuple(params), qualifiers)


def _declaration(code: str, entry: str) -> tuple[str, str] | None:
    """(what precedes the entry's name in its declaration, its parameter list) for the first
    __global__ definition of `entry`."""
    for m in re.finditer(rf"\b{re.escape(entry)}\s*\(", code):
        start = max(code.rfind(c, 0, m.start()) for c in ";}{")
        line = code.rfind("\n#", 0, m.start())  # a preprocessor line ends a declaration too
        if line > start:
            start = code.find("\n", line + 1)
        head = code[start + 1:m.start()]
        if "__global__" not in head:
            continue
        depth, i = 0, m.end() - 1
        for j in range(i, len(code)):
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
                if depth == 0:
                    return head, code[i + 1:j]
    return None


def _parse_params(text: str) -> list[tuple[str, str]] | None:
    from pycparser import c_ast, c_generator, c_parser

    ParseError = getattr(c_parser, "ParseError", None) or __import__(
        "pycparser.plyparser", fromlist=["ParseError"]).ParseError

    text = re.sub(r"\b__restrict__\b|\b__restrict\b", "restrict", text)
    parts = [p.strip() for p in _split_top(text) if p.strip()]
    grid_constant = ["__grid_constant__" in p for p in parts]
    parts = [re.sub(r"\b__grid_constant__\b", " ", p) for p in parts]
    if parts == ["void"] or not parts:
        return []
    # every identifier but a parameter's own name is a type name to pycparser
    types: set[str] = set()
    for p in parts:
        idents = re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", "", p))
        types |= {t for t in idents[:-1] if t not in _C_KEYWORDS}
    prelude = "".join(f"typedef int {t};\n" for t in sorted(types))
    try:
        ast = c_parser.CParser().parse(prelude + f"void ks_entry({', '.join(parts)});\n")
    except (ParseError, AssertionError, IndexError):
        return None
    decl = ast.ext[-1]
    gen = c_generator.CGenerator()
    out = []
    for p in decl.type.args.params if decl.type.args else []:
        if not isinstance(p, c_ast.Decl):
            continue
        if isinstance(p.type, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            typ = gen._generate_type(p.type, emit_declname=False)
        elif isinstance(p.type, c_ast.TypeDecl):
            typ = " ".join([*p.type.quals, gen.visit(p.type.type)])
        else:
            typ = gen.visit(p.type)
        typ = " ".join(typ.split()).replace(" * ", " *").replace("restrict", "__restrict__")
        if grid_constant[len(out)]:
            typ = typ.replace("const ", "const __grid_constant__ ", 1)
        out.append((typ, p.name))
    return out


def _split_top(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for c in text:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return out


# ---- what the arguments hold and what the operator computes ---------------------------------
# Catalog operators' math in one line (the reference implementations, app.catalog.*).
MATH = {
    "gemm": "C[m, n] = sum_k A[m, k] * B[k, n] (row-major)",
    "gemm_mma": "C[m, n] = sum_k A[m, k] * B[k, n] (row-major)",
    "softmax": "y[r, c] = exp(x[r, c] - max_j x[r, j]) / sum_j exp(x[r, j] - max_j x[r, j])",
    "rmsnorm": "y[r, c] = x[r, c] / sqrt(mean_j x[r, j]^2 + 1e-6) * w[c]",
    "layernorm": "y[r, c] = (x[r, c] - mean_j x[r, j]) / sqrt(var_j x[r, j] + 1e-5) * w[c] + b[c]",
    "bias_gelu": "y[r, c] = gelu(x[r, c] + b[c]), gelu(z) = 0.5 z (1 + erf(z / sqrt(2))) (exact)",
    "transpose": "y[c, r] = x[r, c]",
    "kda": ("per sequence and head, state S [K, V] from h0, for each token t: "
            "S <- diag(exp(g_t)) S; S <- S + beta_t k_t (v_t - S^T k_t)^T; "
            "o_t = S^T (q_t / sqrt(K)); ht = the final S (fp32)"),
}


def math_line(op) -> str:
    """The operator's math in one line ('' for a user's kernel: its reference says it)."""
    return MATH.get(op.name, "") if op is not None else ""


def argument_lines(op, shape: list[int], dtype: str) -> list[str]:
    """Each argument's shape (for the first goal shape) and how its values are drawn: a
    user's kernel from its [[kernel.args]], a catalog operator from its input/output shapes
    and input distributions."""
    if op.spec is not None:
        return _custom_arguments(op.spec, shape)
    out = []
    try:
        ins = op.input_shapes(list(shape) if not isinstance(shape, tuple) else shape)
        outs = op.output_shapes(list(shape))
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return []
    fmt = lambda s: "x".join(map(str, s))
    if ins:
        out.append("inputs: " + ", ".join(f"{n} [{fmt(s)}]" for n, s in ins.items())
                   + f" {dtype}; drawn from the families "
                   + ", ".join(op.distributions or ("normal",)))
    if outs:
        out.append("outputs: " + ", ".join(f"{n} [{fmt(s)}]" for n, s in outs.items()))
    return out


def _custom_arguments(spec, shape: list[int]) -> list[str]:
    from app.catalog.custom import expr

    env = spec.dims_env(shape)
    parts: list[str] = []
    constants: list[str] = []
    for a in spec.args:
        if not a.is_array:
            try:
                value = expr.evaluate(a.value, env) if a.value else ""
            except expr.ExprError:
                value = a.value
            parts.append(f"{a.name}: scalar {a.dtype}" + (f" = {value}" if value != "" else ""))
            continue
        try:
            dims = [int(expr.evaluate(d, env)) for d in a.shape]
            names = ", ".join(map(str, a.shape))
            shape_text = "x".join(map(str, dims)) + (f" ({names})" if names != ", ".join(
                map(str, dims)) else "")
        except (expr.ExprError, TypeError, ValueError):
            shape_text = ", ".join(map(str, a.shape))
        if a.role == "output":
            parts.append(f"{a.name}: output {a.dtype} [{shape_text}]")
            continue
        if a.role == "constant":  # not in the call: read from the __constant__ array
            constants.append(f"{a.name} {a.dtype} [{shape_text}]")
            continue
        fill = "from a file" if a.data is not None else (
            f"{a.fill} in [{a.low:g}, {a.high:g}]" if a.fill in ("uniform", "randint")
            else a.fill)
        parts.append(f"{a.name}: {a.role} {a.dtype} [{shape_text}], filled {fill}"
                     + ("; not perturbed by the timer" if a.fixed else ""))
    dims = ", ".join(f"{d}={v}" for d, v in env.items())
    lines = [f"arguments in call order for {dims}: " + "; ".join(parts)] if parts else []
    if constants:
        lines.append("__constant__ arrays the kernel reads by name (not parameters; keep their "
                     "declarations): " + "; ".join(constants))
    return lines
