"""The arguments of a C or CUDA kernel read from its signature: each parameter's name, whether
it is a pointer (an array) or a scalar, and its dtype from the C type. The parameter list is
parsed by pycparser (a real C parser) as a declaration; the CUDA and compiler words it does not
know (__global__, __restrict__, __launch_bounds__, extern "C") are dropped first."""

from __future__ import annotations

import re
from dataclasses import dataclass

# C type (its words sorted, signed dropped) -> the goal's dtype
C_DTYPES = {
    "float": "float32", "double": "float64",
    "char": "int8", "int8_t": "int8", "char unsigned": "uint8", "uint8_t": "uint8",
    "short": "int16", "int short": "int16", "int16_t": "int16",
    "int": "int32", "int32_t": "int32", "unsigned": "uint32", "int unsigned": "uint32",
    "uint32_t": "uint32", "long": "int64", "int long": "int64", "long long": "int64",
    "int long long": "int64", "int64_t": "int64", "ptrdiff_t": "int64", "long unsigned": "uint64",
    "long long unsigned": "uint64", "int long unsigned": "uint64", "uint64_t": "uint64",
    "size_t": "uint64",
}
TYPEDEFS = ("int8_t", "uint8_t", "int16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
            "size_t", "ptrdiff_t", "half", "__half", "bfloat16", "__nv_bfloat16")
DROPPED = re.compile(r'extern\s+"C"|__launch_bounds__\s*\([^)]*\)|__global__|__device__|__host__'
                     r'|__forceinline__|__restrict__|__restrict|\brestrict\b|\binline\b|\bstatic\b')


@dataclass
class SignatureArg:
    name: str
    pointer: bool
    dtype: str  # '' when the C type has no dtype of the goal (e.g. half)
    const: bool
    c_type: str

    @property
    def role(self) -> str:
        """A const pointer is read; any other pointer is written (output or inout: the user
        says which); a value is a scalar."""
        return "scalar" if not self.pointer else "input" if self.const else "output"


class SignatureError(ValueError):
    pass


def _parameter_text(source: str, entry: str) -> str:
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.DOTALL)
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    for m in re.finditer(rf"\b{re.escape(entry)}\s*\(", code):
        depth, start = 1, m.end()
        for i in range(start, len(code)):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            if depth == 0:
                if re.match(r"\s*\{", code[i + 1:]):  # the definition, not a call
                    return code[start:i]
                break
    raise SignatureError(f"no definition of {entry}(...) in the source")


def parse_signature(source: str, entry: str) -> list[SignatureArg]:
    """The entry's parameters, in call order; SignatureError naming the problem otherwise."""
    from pycparser import c_ast, c_parser
    from pycparser.c_parser import ParseError

    params = DROPPED.sub(" ", _parameter_text(source, entry)).strip()
    if params in ("", "void"):
        return []
    text = "".join(f"typedef int {t};\n" for t in TYPEDEFS) + f"void {entry}({params});\n"
    try:
        ast = c_parser.CParser().parse(text)
    except (ParseError, AssertionError) as exc:
        raise SignatureError(f"cannot parse the parameters of {entry}: {str(exc).lstrip(': ')}") from None
    out = []
    for decl in ast.ext[-1].type.args.params:
        kind, quals, pointer = decl.type, list(getattr(decl, "quals", [])), False
        while isinstance(kind, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            pointer = True
            kind = kind.type
        quals += getattr(kind, "quals", [])
        names = getattr(kind.type, "names", ["?"])
        words = " ".join(sorted(w for w in names if w != "signed"))
        out.append(SignatureArg(name=decl.name or f"arg{len(out)}", pointer=pointer,
                                dtype=C_DTYPES.get(words, ""), const="const" in quals,
                                c_type=" ".join(names)))
    return out


def suggested_rows(args: list[SignatureArg], dims: list[str],
                   kept: dict[str, tuple[str, str, str, str]]) -> list[tuple[str, str, str, str, str]]:
    """Rows (name, role, dtype, shape or value, fill) for the Arguments table: a row the user
    already filled for a name keeps its role, shape and fill; a scalar's value starts as its own
    name (a dimension's, usually); an array's shape starts as the dimension names."""
    rows = []
    for a in args:
        dtype = a.dtype or "float32"
        if a.name in kept:
            role, old_dtype, shape, fill = kept[a.name]
            rows.append((a.name, role, a.dtype or old_dtype, shape, fill))
        elif a.pointer:
            rows.append((a.name, a.role, dtype, ", ".join(dims), "normal"))
        else:
            rows.append((a.name, "scalar", dtype, a.name, "normal"))  # often a dimension
    return rows
