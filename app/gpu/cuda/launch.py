"""Kernel launches CuPy cannot make: thread-block clusters (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
and by-value TMA descriptors (`const __grid_constant__ CUtensorMap`, 128 bytes), through the
driver's cuLaunchKernelEx via ctypes; persistent kernels get a grid of the SM count (whole
clusters). The worker wraps a loaded function in DriverKernel when its Launch asks for a
cluster or a persistent grid (CudaWorker.function); the call signature stays CuPy's
`fn(grid, block, args, shared_mem=...)`, so every launch path of the harness uses it unchanged.

Arguments are marshalled as cuLaunchKernelEx wants them (`void** kernelParams`: one pointer per
parameter, to a copy of its value): device arrays as their 64-bit address, NumPy scalars as their
own C type, TensorMapArg (app.catalog.cuda.base) encoded on the host into a CUtensorMap
(app.gpu.cuda.tma) once per argument tuple. Tests run the marshalling against stand-in functions.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.catalog.cuda.base import Launch, TensorMapArg
from app.gpu.cuda import tma

CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class LaunchAttributeValue(ctypes.Union):  # CUlaunchAttributeValue: a 64-byte union
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", Dim3)]


class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, value
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


# CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void** kernelParams, void** extra)
LAUNCH_ARGTYPES = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                   ctypes.c_void_p]
LAUNCH_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, *LAUNCH_ARGTYPES)

_SCALARS = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
            np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
            np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double,
            np.dtype(np.int16): ctypes.c_int16, np.dtype(np.uint16): ctypes.c_uint16,
            np.dtype(np.int8): ctypes.c_int8, np.dtype(np.uint8): ctypes.c_uint8}


class LaunchError(RuntimeError):
    """cuLaunchKernelEx refused the launch (its CUresult is in the message)."""


def needs_driver(launch: Launch) -> bool:
    return tuple(launch.cluster) != (1, 1, 1) or launch.persistent


class KernelParams:
    """The `void**` array of one argument tuple, with the values it points at kept alive."""

    def __init__(self, args: Sequence[Any], encode: Any = None) -> None:
        self.values: list[Any] = [_value(i, arg, encode) for i, arg in enumerate(args)]
        ptrs = [ctypes.c_void_p(v.ptr) if isinstance(v, tma.TensorMap) else
                ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in self.values]
        self.array = (ctypes.c_void_p * max(1, len(ptrs)))(*[p.value for p in ptrs])


def _value(i: int, arg: Any, encode: Any) -> Any:
    if isinstance(arg, TensorMapArg):
        return tma.for_array(arg.array, arg.box, arg.dtype, arg.swizzle, encode=encode)
    if isinstance(arg, tma.TensorMap):
        return arg
    data = getattr(arg, "data", None)
    if data is not None and hasattr(data, "ptr"):  # a CuPy array: its device address
        return ctypes.c_uint64(int(data.ptr))
    if isinstance(arg, np.generic) and arg.dtype in _SCALARS:
        return _SCALARS[arg.dtype](arg.item())
    raise TypeError(f"kernel argument {i}: cannot pass {type(arg).__name__} to cuLaunchKernelEx "
                    "(device arrays, NumPy scalars and tensor maps only)")


def launch_config(grid: Sequence[int], block: Sequence[int], shared_bytes: int, stream: int,
                  cluster: Sequence[int]) -> tuple[LaunchConfig, Any]:
    """CUlaunchConfig (and its attribute array, to keep alive) for one launch."""
    attrs = (LaunchAttribute * 1)()
    n = 0
    if tuple(cluster) != (1, 1, 1):
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[0].value.clusterDim = Dim3(*[int(c) for c in cluster])
        n = 1
        if any(int(g) % int(c) for g, c in zip(grid, cluster, strict=True)):
            raise LaunchError(f"grid {tuple(grid)} is not a whole number of clusters {tuple(cluster)}")
    cfg = LaunchConfig(*[int(g) for g in grid], *[int(b) for b in block], int(shared_bytes),
                       ctypes.c_void_p(int(stream)), ctypes.cast(attrs, ctypes.POINTER(LaunchAttribute)), n)
    return cfg, attrs


def launch_kernel(function: int, grid: Sequence[int], block: Sequence[int], shared_bytes: int,
                  stream: int, params: KernelParams, cluster: Sequence[int] = (1, 1, 1),
                  launch_ex: Any = None) -> None:
    """cuLaunchKernelEx (`launch_ex`: a stand-in with LAUNCH_PROTOTYPE in tests)."""
    fn = launch_ex if launch_ex is not None else tma.driver_function("cuLaunchKernelEx", LAUNCH_ARGTYPES)
    cfg, _attrs = launch_config(grid, block, shared_bytes, stream, cluster)
    result = fn(ctypes.byref(cfg), ctypes.c_void_p(int(function)), params.array, None)
    if result != 0:
        raise LaunchError(f"cuLaunchKernelEx returned CUresult {result} (grid {tuple(grid)}, block "
                          f"{tuple(block)}, cluster {tuple(cluster)}, {shared_bytes} B shared memory)")


class DriverKernel:
    """A loaded CuPy function launched through the driver: `launch`'s cluster dimensions, its
    persistent grid capped at `sms` (Launch.device_grid), tensor maps encoded once per argument
    tuple. Called like CuPy's Function; runs on CuPy's current stream (graph capture included)."""

    def __init__(self, function: Any, launch: Launch, sms: int, *, encode: Any = None,
                 launch_ex: Any = None, stream: Any = None) -> None:
        self.function, self.launch, self.sms = function, launch, int(sms)
        self.encode, self.launch_ex, self._stream = encode, launch_ex, stream
        self._params: dict[int, tuple[Sequence[Any], KernelParams]] = {}

    @property
    def ptr(self) -> int:
        return self.function.ptr

    def grid(self, grid: Sequence[int]) -> tuple[int, int, int]:
        return self.launch.device_grid(self.sms) if self.launch.persistent else tuple(grid)

    def params(self, args: Sequence[Any]) -> KernelParams:
        held = self._params.get(id(args))
        if held is None or held[0] is not args:
            if len(self._params) > 64:  # argument tuples of finished launchers
                self._params.clear()
            held = (args, KernelParams(args, self.encode))
            self._params[id(args)] = held
        return held[1]

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
                 shared_mem: int = 0, stream: Any = None) -> None:
        if stream is None:
            stream = self._stream() if self._stream is not None else _current_stream()
        launch_kernel(self.function.ptr, self.grid(grid), block, shared_mem, int(getattr(stream, "ptr", stream)),
                      self.params(args), self.launch.cluster, self.launch_ex)


def _current_stream() -> int:
    import cupy as cp

    return int(cp.cuda.get_current_stream().ptr)
