"""The arguments of a C or CUDA kernel read from its signature: each parameter's name, whether
it is a pointer (an array) or a scalar, and its dtype from the C type. The signature itself comes
from app.llm.contract (the compiler's own declaration output for C, pycparser for CUDA): this
module only turns its (type, name) pairs into the Arguments table's rows."""

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
QUALIFIERS = re.compile(r"\b(const|volatile|restrict|__restrict__|__restrict|__grid_constant__)\b")


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


def parse_signature(source: str, entry: str, language: str = "c",
                    tunables: tuple[str, ...] = ()) -> list[SignatureArg]:
    """The entry's parameters, in call order; SignatureError naming the problem otherwise.
    `tunables`: the #define names the harness passes (so the declarations compile)."""
    from app.llm.contract import signature

    found = signature(source, entry, language, tuple(tunables))
    if found is None:
        how = "the compiler" if language == "c" else "the parser"
        raise SignatureError(f"{how} cannot read a definition of {entry}(...) in the source")
    out = []
    for c_type, name in found.params:
        pointer = "*" in c_type or "[" in c_type
        base = QUALIFIERS.sub(" ", c_type.split("*")[0].split("[")[0])
        words = " ".join(sorted(w for w in base.split() if w != "signed"))
        out.append(SignatureArg(name=name or f"arg{len(out)}", pointer=pointer,
                                dtype=C_DTYPES.get(words, ""), const=bool(re.search(
                                    r"\bconst\b", c_type.split("*")[0])), c_type=c_type))
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
