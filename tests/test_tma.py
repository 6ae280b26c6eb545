"""Host-side TMA descriptors and driver launches without a GPU: every rule
cuTensorMapEncodeTiled would enforce is checked in Python first; the ctypes marshalling of
cuTensorMapEncodeTiled and cuLaunchKernelEx runs against stand-in C functions with the same
signatures (the real driver, libcuda, is absent here); persistent grids and cluster launches."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from app.catalog.cuda.base import Launch, TensorMapArg
from app.gpu.cuda import launch as drv
from app.gpu.cuda import tma


def test_a_row_major_bf16_matrix_maps_innermost_first():
    spec = tma.tiled(0x7F0000000000, (4096, 1024), "bfloat16", (64, 128))
    assert spec.dims == (1024, 4096) and spec.strides == (2048,) and spec.box == (64, 128)
    assert spec.rank == 2 and spec.element_strides == (1, 1) and spec.box_bytes == 64 * 128 * 2


@pytest.mark.parametrize("kwargs, message", [
    ({"address": 0x1008}, "16-byte aligned"),
    ({"shape": (64, 1000 + 4)}, "multiple of 16"),           # rows of 1004 bf16 = 2008 bytes
    ({"box": (64, 257)}, "1..256"),
    ({"box": (0, 64)}, "1..256"),
    ({"box": (128, 64)}, "wider than the 128-byte swizzle"),  # 256-byte rows with 128B swizzle
    ({"box": (4, 64), "swizzle": 0}, "multiple of 16"),      # 8-byte inner rows
    ({"dtype": "int4"}, "CUtensorMapDataType"),
    ({"swizzle": 256}, "one of 0, 32, 64, 128"),
    ({"box": (64,)}, "dimensions"),
    ({"shape": (1, 2, 3, 4, 5, 6), "box": (1,) * 6}, "rank"),
    ({"strides": (2048, 4)}, "contiguous"),
])
def test_what_the_driver_would_refuse_is_refused_here_with_the_rule(kwargs, message):
    args = {"address": 0x10000, "shape": (4096, 1024), "dtype": "bfloat16", "box": (64, 128)}
    args.update(kwargs)
    extra = {k: args.pop(k) for k in ("swizzle", "strides") if k in args}
    with pytest.raises(tma.TensorMapError, match=message):
        tma.tiled(args["address"], args["shape"], args["dtype"], args["box"], **extra)


def test_swizzle_spans_and_narrow_boxes_are_accepted():
    assert tma.tiled(0x10000, (64, 64), "float16", (16, 8), swizzle=32).swizzle == 32
    assert tma.tiled(0x10000, (64, 64), "float32", (16, 8), swizzle=64).box_bytes == 512
    assert tma.tiled(0x10000, (64, 64), "bfloat16", (128, 8), swizzle=0).swizzle == 0


class StandInEncode:
    """Records what cuTensorMapEncodeTiled receives through ctypes and writes a recognisable
    map, the way the driver fills the 128 bytes."""

    def __init__(self, result: int = 0) -> None:
        self.calls: list[dict] = []
        self.result = result
        self.fn = tma.ENCODE_PROTOTYPE(self._encode)

    def _encode(self, tmap, dtype, rank, address, dims, strides, box, estrides, interleave, swizzle,
                l2, oob):
        self.calls.append({"tmap": tmap, "dtype": dtype, "rank": rank, "address": address,
                           "dims": [dims[i] for i in range(rank)],
                           "strides": [strides[i] for i in range(rank - 1)],
                           "box": [box[i] for i in range(rank)], "estrides": [estrides[i] for i in range(rank)],
                           "interleave": interleave, "swizzle": swizzle, "l2": l2, "oob": oob})
        ctypes.memmove(tmap, bytes(range(128)), 128)
        return self.result


def test_the_driver_is_absent_here_and_says_so():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        with pytest.raises(tma.DriverUnavailable, match="libcuda"):
            tma.encode_tiled(tma.tiled(0x10000, (64, 64), "bfloat16", (64, 64)))
    else:  # pragma: no cover - a machine with the NVIDIA driver
        pytest.skip("libcuda is present: the real driver is used on this machine")


def test_encode_marshals_every_argument_and_fills_an_aligned_128_byte_map():
    stand_in = StandInEncode()
    spec = tma.tiled(0x7F0000001000, (4096, 1024), "bfloat16", (64, 128), swizzle=128)
    tmap = tma.encode_tiled(spec, encode=stand_in.fn)
    call = stand_in.calls[0]
    assert call["tmap"] == tmap.ptr and tmap.ptr % 64 == 0
    assert call["dtype"] == 9 and call["rank"] == 2 and call["address"] == 0x7F0000001000
    assert call["dims"] == [1024, 4096] and call["strides"] == [2048] and call["box"] == [64, 128]
    assert call["estrides"] == [1, 1] and call["interleave"] == 0 and call["swizzle"] == 3
    assert call["l2"] == 3 and call["oob"] == 0
    assert tmap.raw == bytes(range(128))


def test_a_driver_error_is_reported_with_its_cuda_result():
    with pytest.raises(tma.TensorMapError, match="CUresult 1"):
        tma.encode_tiled(tma.tiled(0x10000, (64, 64), "float16", (64, 64)), encode=StandInEncode(1).fn)


class FakeDeviceArray:
    """What the marshalling reads of a CuPy array: dtype, shape, strides, data.ptr."""

    def __init__(self, shape, dtype, ptr):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.strides = tuple(int(s) for s in np.empty(shape, dtype=dtype).strides)

        class Data:
            pass
        self.data = Data()
        self.data.ptr = ptr


def test_for_array_takes_address_shape_and_strides_of_the_device_array():
    stand_in = StandInEncode()
    a = FakeDeviceArray((256, 512), np.uint16, 0x7F0000020000)  # bfloat16 stored as uint16 bits
    tma.for_array(a, (64, 128), "bfloat16", encode=stand_in.fn)
    assert stand_in.calls[0]["dims"] == [512, 256] and stand_in.calls[0]["strides"] == [1024]
    with pytest.raises(tma.TensorMapError, match="4 bytes"):
        tma.for_array(FakeDeviceArray((8, 8), np.float32, 0x10000), (8, 8), "bfloat16", encode=stand_in.fn)


class StandInLaunch:
    """Reads back the CUlaunchConfig and the kernelParams array cuLaunchKernelEx receives."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.fn = drv.LAUNCH_PROTOTYPE(self._launch)

    def _launch(self, cfg_ptr, function, params, extra):
        cfg = cfg_ptr.contents
        attrs = [(cfg.attrs[i].id, (cfg.attrs[i].value.clusterDim.x, cfg.attrs[i].value.clusterDim.y,
                                    cfg.attrs[i].value.clusterDim.z)) for i in range(cfg.numAttrs)]
        self.calls.append({"grid": (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                           "block": (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
                           "shared": cfg.sharedMemBytes, "stream": cfg.hStream, "attrs": attrs,
                           "function": function, "params": params, "extra": extra})
        return 0


def test_launch_struct_layouts_match_cuda_h():
    assert ctypes.sizeof(drv.LaunchAttribute) == 72 and drv.LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(drv.LaunchConfig) == 56
    assert drv.LaunchConfig.hStream.offset == 32 and drv.LaunchConfig.attrs.offset == 40
    assert drv.LaunchConfig.numAttrs.offset == 48


def test_a_cluster_persistent_launch_with_tensor_maps_by_value():
    encode, launch_ex = StandInEncode(), StandInLaunch()
    a = FakeDeviceArray((4096, 4096), np.uint16, 0x7F0000100000)
    c = FakeDeviceArray((4096, 4096), np.uint16, 0x7F0002100000)

    class Function:
        ptr = 0xF00D

    launch = Launch((1024, 1, 1), (384, 1, 1), shared_bytes=197696, cluster=(2, 1, 1), persistent=True)
    kernel = drv.DriverKernel(Function(), launch, sms=132, encode=encode.fn, launch_ex=launch_ex.fn,
                              stream=lambda: 0x5EED)
    args = (TensorMapArg(a, (64, 128), "bfloat16"), c, np.int32(4096), np.float32(0.5))
    kernel(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
    kernel(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
    assert len(encode.calls) == 1  # encoded once per argument tuple, not per launch
    first = launch_ex.calls[0]
    assert first["grid"] == (132, 1, 1) and first["block"] == (384, 1, 1) and first["shared"] == 197696
    assert first["attrs"] == [(drv.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, (2, 1, 1))]
    assert first["function"] == 0xF00D and first["stream"] == 0x5EED and first["extra"] is None
    params = first["params"]
    assert ctypes.string_at(params[0], 128) == bytes(range(128))          # the map, by value
    assert params[0] % 64 == 0
    assert ctypes.c_uint64.from_address(params[1]).value == 0x7F0002100000  # the array's address
    assert ctypes.c_int32.from_address(params[2]).value == 4096
    assert ctypes.c_float.from_address(params[3]).value == 0.5


def test_persistent_grids_are_whole_clusters_up_to_the_sm_count():
    lau = Launch((1024, 1, 1), (384, 1, 1), cluster=(2, 1, 1), persistent=True)
    assert lau.device_grid(132) == (132, 1, 1) and lau.device_grid(133) == (132, 1, 1)
    assert Launch((6, 1, 1), (384, 1, 1), cluster=(2, 1, 1), persistent=True).device_grid(132) == (6, 1, 1)
    assert Launch((1024, 1, 1), (256, 1, 1)).device_grid(132) == (1024, 1, 1)  # not persistent
    assert drv.needs_driver(lau) and not drv.needs_driver(Launch((1, 1, 1), (32, 1, 1)))


def test_a_grid_that_is_not_whole_clusters_and_unknown_arguments_are_refused():
    with pytest.raises(drv.LaunchError, match="whole number of clusters"):
        drv.launch_config((3, 1, 1), (128, 1, 1), 0, 0, (2, 1, 1))
    with pytest.raises(TypeError, match="argument 0"):
        drv.KernelParams((4096,))
