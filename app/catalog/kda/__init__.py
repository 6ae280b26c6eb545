"""Kimi Delta Attention (KDA) forward on the CPU, in numpy: the float64 recurrent reference, the
chunked algorithm a GPU kernel implements (stage by stage), realistic inputs, and the norm-based
tolerance a bf16 recurrence is judged by. No Qt, no CuPy."""

from app.catalog.kda.chunked import chunked_kda
from app.catalog.kda.inputs import KdaInputs, make_inputs
from app.catalog.kda.reference import recurrent_kda
from app.catalog.kda.tolerance import (
    TOLERANCE,
    CloseReport,
    check_close,
    relative_frobenius_per_head,
    round_to_bf16,
)

__all__ = [
    "TOLERANCE", "CloseReport", "KdaInputs", "check_close", "chunked_kda", "make_inputs",
    "recurrent_kda", "relative_frobenius_per_head", "round_to_bf16",
]
