"""Your own kernel as a goal: a C or CUDA kernel with its own arguments, launch geometry and
reference, described by a goal's [kernel] table (app.goal.KernelTable), evaluated by the cpu and
cuda backends like a catalog operator.

spec.py reads and checks the table (one GoalError naming the field), operator.py is the
app.catalog.protocol.Operator the backends run, reference.py runs the user's Python reference
(only ever inside a worker process). A reference kernel source is built and run by the backends
(app.gpu.cpu.reference_kernel: C in the CPU worker; app.gpu.cuda.reference_kernel: CUDA with
NVRTC, launched in the GPU worker).
"""

from app.catalog.custom.operator import CustomCudaOperator, CustomOperator, custom_operator
from app.catalog.custom.spec import KernelSpec, load_spec

__all__ = ["CustomCudaOperator", "CustomOperator", "KernelSpec", "custom_operator", "load_spec"]
