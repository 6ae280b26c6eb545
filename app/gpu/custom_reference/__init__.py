"""A custom goal's reference, above the backends: checking it once per run (probe.py) and the
GUI's compile preview (preview.py). The reference kernel runners live in their backends
(app.gpu.cpu.reference_kernel, app.gpu.cuda.reference_kernel)."""
