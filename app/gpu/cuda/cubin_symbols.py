"""Sizes of a cubin's data objects (its __constant__ arrays among them), read from the ELF
symbol table: CuPy's Module.get_global_var hands back a bare address, and a copy of more bytes
than the symbol holds would write past it."""

from __future__ import annotations

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile


def object_sizes(cubin_path: str) -> dict[str, int]:
    """Name -> size in bytes of each data object (STT_OBJECT) in the cubin; {} if unreadable."""
    try:
        with open(cubin_path, "rb") as fh:
            table = ELFFile(fh).get_section_by_name(".symtab")
            if table is None:
                return {}
            return {s.name: int(s["st_size"]) for s in table.iter_symbols()
                    if s["st_info"]["type"] == "STT_OBJECT" and s.name}
    except (OSError, ELFError):
        return {}
