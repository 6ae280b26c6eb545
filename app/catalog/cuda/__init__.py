"""CUDA operators: templates (kernels/*.cu), search spaces, references, baselines."""

from app.catalog import register
from app.catalog.cuda.base import CudaOperator, Launch
from app.catalog.cuda.elementwise import BiasGelu
from app.catalog.cuda.gemm import Gemm, MmaSyncGemm
from app.catalog.cuda.kda import Kda
from app.catalog.cuda.rows import LayerNorm, RMSNorm, Softmax
from app.catalog.cuda.transpose import Transpose

OPERATORS: dict[str, CudaOperator] = {
    op.name: op for op in (Softmax(), RMSNorm(), LayerNorm(), Gemm(), MmaSyncGemm(), Transpose(),
                            BiasGelu())
}
# Multi-kernel operators (several entries, workspaces, 4-D / packed-sequence shapes): registered
# for goals, the worker and the LLM agents, kept apart from the one-kernel [rows, cols] families.
PIPELINES: dict[str, CudaOperator] = {op.name: op for op in (Kda(),)}
for _name, _op in {**OPERATORS, **PIPELINES}.items():
    register("cuda", _name, _op)

__all__ = ["OPERATORS", "PIPELINES", "CudaOperator", "Launch"]
