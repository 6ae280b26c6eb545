"""CUDA operators: templates (kernels/*.cu), search spaces, references, baselines."""

from app.catalog import register
from app.catalog.cuda.base import CudaOperator, Launch
from app.catalog.cuda.elementwise import BiasGelu
from app.catalog.cuda.gemm import Gemm
from app.catalog.cuda.rows import LayerNorm, RMSNorm, Softmax
from app.catalog.cuda.transpose import Transpose

OPERATORS: dict[str, CudaOperator] = {
    op.name: op for op in (Softmax(), RMSNorm(), LayerNorm(), Gemm(), Transpose(), BiasGelu())
}
for _name, _op in OPERATORS.items():
    register("cuda", _name, _op)

__all__ = ["OPERATORS", "CudaOperator", "Launch"]
