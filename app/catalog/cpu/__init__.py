"""CPU operators (C11 + OpenMP kernel templates under app/catalog/cpu/kernels/cpu_*.c)."""

from app.catalog import register
from app.catalog.cpu.operator import CpuOperator
from app.catalog.cpu.ops import OPERATORS

for _name, _op in OPERATORS.items():
    register("cpu", _name, _op)

__all__ = ["OPERATORS", "CpuOperator"]
