"""A C++ templated CUDA kernel named with its template arguments (`vector_add<float, block_size_x>`)
becomes a plain entry point, as Kernel Tuner does for PyCUDA: the template turns __device__, an
explicit instantiation follows it, and an extern "C" __global__ wrapper with the instantiated
parameter types calls it. The arguments may name tunables: they are #defines when it compiles.
Pure text (this runs inside the script's sandbox cell)."""

from __future__ import annotations

import re

WRAPPER_SUFFIX = "_wrapper"


class NotWrappable(ValueError):
    """The templated kernel's definition could not be read; the message says what."""


def wrap(source: str, kernel_name: str) -> tuple[str, str]:
    """(source with the wrapper appended, the wrapper's name)."""
    name, _, rest = kernel_name.partition("<")
    name = name.strip()
    if not name.isidentifier() or not rest.rstrip().endswith(">"):
        raise NotWrappable(f"kernel_name {kernel_name!r} is not a name with template arguments")
    arguments = _split(rest.rstrip()[:-1])
    definition = re.search(r"template\s*<([^>]*)>\s*__global__\s+void\s+"
                           r"(__launch_bounds__\s*\([^)]*\)\s*)?" + re.escape(name)
                           + r"\s*\(([^)]*)\)\s*\{", source)
    if definition is None:
        raise NotWrappable(f"no templated __global__ definition of {name} (template <...> "
                           f"__global__ void {name}(...) {{) in the kernel source")
    parameters = _split(definition.group(1))
    if len(parameters) != len(arguments):
        raise NotWrappable(f"{kernel_name} gives {len(arguments)} template arguments; "
                           f"{name} takes {len(parameters)}")
    typenames = {}
    for param, arg in zip(parameters, arguments):
        kind = re.match(r"(typename|class)\s+(\w+)$", param)
        if kind:
            typenames[kind.group(2)] = arg
    types, names = [], []
    for param in _split(definition.group(3)):
        found = re.match(r"(.*?[\s*&]+)(\w+)$", param, re.DOTALL)
        if found is None:
            raise NotWrappable(f"cannot read the parameter {param!r} of {name}")
        kind = re.sub(r"\s+", " ", found.group(1)).strip()
        for typename, actual in typenames.items():  # the instantiated type, token by token
            kind = re.sub(rf"\b{re.escape(typename)}\b", actual, kind)
        types.append(kind)
        names.append(found.group(2))
    bounds = definition.group(2) or ""
    plain = definition.group(0).replace("__global__", "__device__", 1)
    if bounds:
        plain = plain.replace(bounds, " ", 1)
    entry = name + WRAPPER_SUFFIX
    params = ", ".join(f"{t} {n}" for t, n in zip(types, names))
    appended = (f"\ntemplate __device__ void {kernel_name}({', '.join(types)});\n"
                f'extern "C" __global__ void {bounds}{entry}({params}) {{\n'
                f"    {kernel_name}({', '.join(names)});\n}}\n")
    return source.replace(definition.group(0), plain, 1) + appended, entry


def _split(text: str) -> list[str]:
    """Comma-separated items, commas inside <> or () kept."""
    items, depth, current = [], 0, []
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    tail = "".join(current).strip()
    return [*items, tail] if tail or items else []
