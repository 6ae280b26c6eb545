# PyInstaller hook for CuPy: its Cython modules import each other and parts of the standard
# library at C level (with compressed string tables), where PyInstaller cannot see them, and it
# compiles kernels at run time against headers it ships as data.
from PyInstaller import isolated
from PyInstaller.utils.hooks import collect_data_files, collect_submodules

# Modules for libraries the bundle leaves out (cuFFT, cuSPARSE, cuSOLVER, cuTENSOR, NCCL, cuDNN),
# none of which `import cupy` loads.
_SKIP = ("cupyx.scipy", "cupyx.jit", "cupyx.cutensor", "cupyx.distributed",
         "cupyx.tools", "cupyx.signal", "cupyx.lapack", "cupyx.linalg.sparse",
         "cupy.cuda.cufft", "cupy.cuda.cusolver", "cupy.cuda.cusparse",
         "cupy_backends.cuda.libs.cudnn", "cupy_backends.cuda.libs.nccl",
         "cupy_backends.cuda.libs.cutensor", "cupy_backends.cuda.libs.cusolver",
         "cupy_backends.cuda.libs.cusparse", "cupyx._cusolver", "cupyx.cusolver",
         "cupyx.cusparse", "cupyx._cufft")


def _wanted(name: str) -> bool:
    return not name.startswith(_SKIP) and ".tests" not in name


@isolated.decorate
def _stdlib_imported_by_cupy() -> list:
    """The standard-library modules CuPy's compiled modules import when loaded."""
    import sys

    before = set(sys.modules)
    import cupy
    import cupy.cuda.compiler
    import cupy.random  # noqa: F401
    import cupy_backends.cuda.libs.nvrtc  # noqa: F401

    return sorted(m for m in set(sys.modules) - before
                  if m.split(".")[0] in sys.stdlib_module_names)


hiddenimports = (collect_submodules("cupy", filter=_wanted)
                 + collect_submodules("cupy_backends", filter=_wanted)
                 + ["cupyx", "cupyx._runtime", "cupyx.profiler", "cuda.pathfinder"]
                 + _stdlib_imported_by_cupy())
excludedimports = ["cupyx.scipy", "cupyx.jit"]
# headers (NVRTC includes them), the wheel's preload config (_wheel.json)
datas = collect_data_files("cupy", includes=["_core/include/**", ".data/**", "**/*.json"])
datas += collect_data_files("cuda.pathfinder")
