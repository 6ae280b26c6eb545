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
    values = _template_values(name, kernel_name, _split(uncommented(definition.group(1))), arguments)
    types, names = [], []
    for param in _split(uncommented(definition.group(3))):
        found = re.match(r"(.*?[\s*&]+)(\w+)$", param, re.DOTALL)
        if found is None:
            raise NotWrappable(f"cannot read the parameter {param!r} of {name}")
        types.append(_instantiate(re.sub(r"\s+", " ", found.group(1)).strip(), values))
        names.append(found.group(2))
    bounds = _instantiate(definition.group(2) or "", values)
    plain = definition.group(0).replace("__global__", "__device__", 1)
    if definition.group(2):
        plain = plain.replace(definition.group(2), " ", 1)
    entry = name + WRAPPER_SUFFIX
    params = ", ".join(f"{t} {n}" for t, n in zip(types, names))
    appended = (f"\ntemplate __device__ void {kernel_name}({', '.join(types)});\n"
                f'extern "C" __global__ void {bounds}{entry}({params}) {{\n'
                f"    {kernel_name}({', '.join(names)});\n}}\n")
    return source.replace(definition.group(0), plain, 1) + appended, entry


def _template_values(name: str, kernel_name: str, parameters: list[str], arguments: list[str]
                     ) -> dict[str, str]:
    """Each template parameter's name -> the argument given, or its default."""
    if len(arguments) > len(parameters):
        raise NotWrappable(f"{kernel_name} gives {len(arguments)} template arguments; "
                           f"{name} takes {len(parameters)}")
    values = {}
    for i, param in enumerate(parameters):
        head, _, default = param.partition("=")
        found = re.match(r".*?(\w+)$", head.strip(), re.DOTALL)
        if found is None:
            raise NotWrappable(f"cannot read the template parameter {param!r} of {name}")
        if i < len(arguments):
            values[found.group(1)] = arguments[i]
        elif default.strip():
            values[found.group(1)] = default.strip()
        else:
            raise NotWrappable(f"{kernel_name} gives {len(arguments)} template arguments; "
                               f"{name} takes {len(parameters)} (without defaults)")
    return values


def _instantiate(text: str, values: dict[str, str]) -> str:
    """The template's parameters replaced by their values, token by token."""
    for param, value in values.items():
        text = re.sub(rf"\b{re.escape(param)}\b", value, text)
    return text


def uncommented(text: str) -> str:
    """C and C++ comments out (a // comment would swallow the rest of a joined line)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.DOTALL)


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
