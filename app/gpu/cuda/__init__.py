"""The cuda backend: NVRTC compile, GPU worker processes, CUDA-event timing, NVML telemetry,
roofline limits. evaluator.py is the engine side (CudaEvaluator), worker.py the GPU worker's
side; no module here imports CuPy at import time (the worker and the device checks do, when
they run)."""
