"""TMA tensor-map descriptors (CUtensorMap) made on the host with the driver's
cuTensorMapEncodeTiled, through ctypes: CuPy does not expose it.

A tensor map is a 128-byte opaque struct, 64-byte aligned, that a Hopper kernel takes by value
(`const __grid_constant__ CUtensorMap`, hopper.cuh's `TensorMap`). Everything the driver would
refuse is checked here first, in Python, with a message that says which rule broke (global
address 16-byte aligned, strides multiples of 16 bytes, box dimensions 1..256, the inner box row
within the swizzle span, a known element type), so the checks run on a machine without a GPU;
the ctypes call itself needs libcuda, and its marshalling is tested against a stand-in function
with the same C signature (`encode_tiled(..., encode=...)`).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# CUtensorMapDataType (cuda.h, CUDA 12)
DATA_TYPES = {"uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5,
              "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
ITEMSIZE = {"uint8": 1, "uint16": 2, "uint32": 4, "int32": 4, "uint64": 8, "int64": 8,
            "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2}
# CUtensorMapSwizzle by span in bytes; CUtensorMapL2promotion by bytes
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION = {0: 0, 64: 1, 128: 2, 256: 3}
INTERLEAVE_NONE = 0
OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-range elements read as zeros
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
CUDA_SUCCESS = 0

cuuint32 = ctypes.c_uint32
cuuint64 = ctypes.c_uint64
# CUresult cuTensorMapEncodeTiled(CUtensorMap*, CUtensorMapDataType, cuuint32_t rank, void* global,
#   const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
#   const cuuint32_t* elementStrides, interleave, swizzle, l2Promotion, oobFill)
ENCODE_ARGTYPES = [ctypes.c_void_p, ctypes.c_int, cuuint32, ctypes.c_void_p,
                   ctypes.POINTER(cuuint64), ctypes.POINTER(cuuint64), ctypes.POINTER(cuuint32),
                   ctypes.POINTER(cuuint32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
ENCODE_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, *ENCODE_ARGTYPES)


class TensorMapError(ValueError):
    """The tensor map's arguments break one of the driver's rules (checked before the call)."""


class DriverUnavailable(RuntimeError):
    """libcuda (the NVIDIA driver library) cannot be loaded here."""


@dataclass(frozen=True)
class TiledMap:
    """Validated arguments of cuTensorMapEncodeTiled; every tuple is innermost dimension first."""

    dtype: str
    address: int
    dims: tuple[int, ...]  # elements
    strides: tuple[int, ...]  # bytes, for dimensions 1..rank-1
    box: tuple[int, ...]  # elements
    element_strides: tuple[int, ...]
    swizzle: int = 128  # bytes
    l2_promotion: int = 256  # bytes

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def box_bytes(self) -> int:
        """What one load of the box delivers (the mbarrier transaction count)."""
        return ITEMSIZE[self.dtype] * math.prod(self.box)


def tiled(address: int, shape: Sequence[int], dtype: str, box: Sequence[int], *, swizzle: int = 128,
          strides: Sequence[int] | None = None, element_strides: Sequence[int] | None = None,
          l2_promotion: int = 256) -> TiledMap:
    """A validated tiled tensor map for the array at `address` of `shape` (row-major, outermost
    first, as NumPy/CuPy give it; `strides` in bytes, outermost first, default contiguous);
    `box` is innermost first, as the kernel's coordinates are (x = column, y = row)."""
    if dtype not in DATA_TYPES:
        raise TensorMapError(f"element type {dtype!r} has no CUtensorMapDataType; "
                             f"one of {', '.join(DATA_TYPES)}")
    size = ITEMSIZE[dtype]
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise TensorMapError(f"tensor rank {rank}: TMA maps 1 to 5 dimensions")
    if len(box) != rank:
        raise TensorMapError(f"box {tuple(box)} has {len(box)} dimensions, the tensor {rank}")
    dims = tuple(int(d) for d in reversed(shape))
    if strides is None:  # contiguous: each dimension's stride is the one below times its size
        byte_strides = tuple(itertools.accumulate(dims[:-1], operator.mul, initial=size))[1:]
    else:
        if len(strides) != rank:
            raise TensorMapError(f"{len(strides)} strides for a rank-{rank} tensor")
        rev = tuple(int(s) for s in reversed(strides))
        if rev[0] != size:
            raise TensorMapError(f"the innermost dimension must be contiguous (stride {rev[0]} "
                                 f"bytes, element {size})")
        byte_strides = rev[1:]
    if address % 16:
        raise TensorMapError(f"global address {address:#x} is not 16-byte aligned")
    for i, d in enumerate(dims):
        if not 0 < d <= 2**32:
            raise TensorMapError(f"dimension {i} (innermost first) has {d} elements; 1..2^32 allowed")
    for i, s in enumerate(byte_strides, start=1):
        if s % 16:
            raise TensorMapError(f"stride of dimension {i} is {s} bytes, not a multiple of 16 "
                                 f"(rows of {s // size} {dtype} elements)")
        if s >= 2**40:
            raise TensorMapError(f"stride of dimension {i} is {s} bytes; under 2^40 allowed")
    box_t = tuple(int(b) for b in box)
    for i, b in enumerate(box_t):
        if not 0 < b <= 256:
            raise TensorMapError(f"box dimension {i} is {b}; 1..256 allowed")
    inner = box_t[0] * size
    if inner % 16:
        raise TensorMapError(f"the box's inner row is {inner} bytes, not a multiple of 16")
    if swizzle not in SWIZZLE:
        raise TensorMapError(f"swizzle {swizzle}: one of 0, 32, 64, 128 bytes")
    if swizzle and inner > swizzle:
        raise TensorMapError(f"the box's inner row is {inner} bytes, wider than the {swizzle}-byte "
                             f"swizzle span (at most {swizzle // size} {dtype} elements)")
    if l2_promotion not in L2_PROMOTION:
        raise TensorMapError(f"L2 promotion {l2_promotion}: one of 0, 64, 128, 256 bytes")
    es = tuple(int(e) for e in (element_strides or (1,) * rank))
    if len(es) != rank or any(not 0 < e <= 8 for e in es):
        raise TensorMapError(f"element strides {es}: one per dimension, each 1..8")
    return TiledMap(dtype, int(address), dims, byte_strides, box_t, es, swizzle, l2_promotion)


class TensorMap:
    """The 128-byte CUtensorMap, in a host buffer aligned on 64 bytes (what the driver requires
    of the pointer it fills, and what a by-value kernel parameter of this type is)."""

    def __init__(self, spec: TiledMap) -> None:
        self.spec = spec
        self._buffer = ctypes.create_string_buffer(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN)
        base = ctypes.addressof(self._buffer)
        self.ptr = base + (-base % TENSOR_MAP_ALIGN)

    @property
    def raw(self) -> bytes:
        return ctypes.string_at(self.ptr, TENSOR_MAP_BYTES)


@functools.cache
def _libcuda() -> Any:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise DriverUnavailable(f"the NVIDIA driver library libcuda.so.1 is not available ({exc})") from None


def driver_function(name: str, argtypes: list[Any]) -> Any:
    """A libcuda entry point with its argument types (DriverUnavailable without a driver)."""
    fn = getattr(_libcuda(), name)
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


def encode_tiled(spec: TiledMap, encode: Any = None) -> TensorMap:
    """Fill a TensorMap with cuTensorMapEncodeTiled. `encode`: the C function (default: the
    driver's; tests pass a stand-in with ENCODE_PROTOTYPE)."""
    fn = encode if encode is not None else driver_function("cuTensorMapEncodeTiled", ENCODE_ARGTYPES)
    tmap = TensorMap(spec)
    rank = spec.rank
    dims = (cuuint64 * rank)(*spec.dims)
    strides = (cuuint64 * max(1, rank - 1))(*(spec.strides or (0,)))
    box = (cuuint32 * rank)(*spec.box)
    estr = (cuuint32 * rank)(*spec.element_strides)
    result = fn(ctypes.c_void_p(tmap.ptr), DATA_TYPES[spec.dtype], rank, ctypes.c_void_p(spec.address),
                dims, strides, box, estr, INTERLEAVE_NONE, SWIZZLE[spec.swizzle],
                L2_PROMOTION[spec.l2_promotion], OOB_FILL_ZERO)
    if result != CUDA_SUCCESS:
        raise TensorMapError(f"cuTensorMapEncodeTiled returned CUresult {result} for {spec}")
    return tmap


def for_array(array: Any, box: Sequence[int], dtype: str, swizzle: int = 128, encode: Any = None) -> TensorMap:
    """The tensor map of a CuPy array (row-major; bfloat16 stored as uint16 bits: say `dtype`)."""
    itemsize = int(array.dtype.itemsize)
    if ITEMSIZE.get(dtype) != itemsize:
        raise TensorMapError(f"array elements are {itemsize} bytes, {dtype} needs {ITEMSIZE.get(dtype)}")
    spec = tiled(int(array.data.ptr), tuple(array.shape), dtype, box, swizzle=swizzle,
                 strides=tuple(int(s) for s in array.strides))
    return encode_tiled(spec, encode)
