"""Running a custom goal's reference kernel source (C in the CPU worker, CUDA with NVRTC in the
GPU worker), checking a reference once per run, and the GUI's compile preview. The catalog's
custom operator (app.catalog.custom) describes the goal; the runners it calls are registered
here, so the catalog never imports the backends."""

from app.catalog.custom.operator import REFERENCE_KERNEL_RUNNERS
from app.gpu.custom_reference.c_kernel import run_reference_kernel
from app.gpu.custom_reference.cuda_kernel import run_reference_cuda

REFERENCE_KERNEL_RUNNERS.update({"c": run_reference_kernel, "cuda": run_reference_cuda})
