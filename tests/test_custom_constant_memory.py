"""Constant memory (Kernel Tuner's cmem_args): an argument with role = "constant" is a CUDA
__constant__ array of its name; the kernel does not take it as a parameter, and every launch
(candidate and reference kernel) first copies its values there, so what the timer perturbs
reaches the kernel. Kernel Tuner's convolution, sepconv and sepconv_parallel examples use it
and were refused on import. No GPU here: the copy is checked on host buffers and the kernels
are compiled with NVRTC."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from app.catalog.custom import custom_operator
from app.goal import Goal, GoalError
from app.kt_import.importer import import_script
from app.session import check_goal

KERNEL_CU = """\
__constant__ float weights[WIDTH];
__global__ void blur(float *out, const float *in, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i + WIDTH <= n) {
        float s = 0.0f;
        for (int k = 0; k < WIDTH; k++) s += weights[k] * in[i + k];
        out[i] = s;
    }
}
"""
GOAL_TOML = """\
name = "blur with constant weights"
backend = "cuda"
shapes = [[4096]]

[kernel]
source = "blur.cu"
entry = "blur"
defines = { WIDTH = 9 }
tune_params = { block_size_x = [64, 128, 256] }
reference_source = "blur.cu"
args = [
  { name = "out", role = "output", shape = "n" },
  { name = "x", shape = "n + 9" },
  { name = "n", role = "scalar", dtype = "int32", value = "n" },
  { name = "weights", role = "constant", shape = 9, fill = "uniform" },
]
"""


def _goal(tmp_path, toml: str = GOAL_TOML, kernel: str = KERNEL_CU) -> Goal:
    (tmp_path / "blur.cu").write_text(kernel)
    (tmp_path / "goal.toml").write_text(toml)
    return Goal.load(tmp_path / "goal.toml")


class _Module:
    def __init__(self, symbols: dict[str, object]) -> None:
        self.symbols = symbols

    def get_global_var(self, name: str) -> object:
        return self.symbols[name]


class _CupyLike:
    """The calls constant_copy makes on CuPy when get_global_var hands back a bare address
    (CuPy 14: an int), recorded; the "device" memory is a host buffer."""

    def __init__(self, memory: bytearray) -> None:
        self.memory, self.wrapped = memory, []
        outer = self

        class cuda:
            class runtime:
                @staticmethod
                def getDevice():
                    return 0

            @staticmethod
            def UnownedMemory(ptr, size, owner, device_id):
                outer.wrapped.append((ptr, size, owner, device_id))
                return outer.memory

            @staticmethod
            def MemoryPointer(mem, offset):
                return mem

        self.cuda = cuda

    def ndarray(self, shape, dtype, memptr):
        return np.ndarray(shape, dtype, memptr)


def test_a_constant_array_is_no_parameter_and_is_copied_before_each_launch(tmp_path):
    goal = _goal(tmp_path)
    check_goal(goal)
    op = custom_operator(goal, "cuda")
    assert op.has_constants
    inputs = op.make_inputs(np, [4096], "float32", np.random.default_rng(0))
    assert set(inputs) == {"x", "weights"} and inputs["weights"].shape == (9,)
    outputs = {"out": np.zeros(4096, np.float32)}
    args = op.kernel_args({"block_size_x": 64}, inputs, outputs, [4096])
    assert len(args) == 3 and not any(a is inputs["weights"] for a in args)
    memory = bytearray(9 * 4)  # the __constant__ array, as host memory here
    xp = _CupyLike(memory)
    module = _Module({"weights": 0xDEAD00})
    copy = op.constant_copy(xp, module, inputs, {"weights": 36})
    assert xp.wrapped == [(0xDEAD00, 36, module, 0)]  # the bare address wrapped, with its size
    copy()
    assert np.array_equal(np.frombuffer(memory, np.float32), inputs["weights"])
    inputs["weights"][3] = 42.0  # the timer perturbs an input: the next launch sees it
    copy()
    assert np.frombuffer(memory, np.float32)[3] == 42.0
    with pytest.raises(ValueError, match="weights holds 16 bytes; the argument has 36"):
        op.constant_copy(xp, module, inputs, {"weights": 16})
    with pytest.raises(ValueError, match="has no __constant__ array weights"):
        op.constant_copy(xp, module, inputs, {})


def test_the_symbol_size_is_read_from_the_cubin(tmp_path):
    from app.gpu.cuda.cubin_symbols import object_sizes

    nvrtc = _nvrtc()
    op = custom_operator(_goal(tmp_path), "cuda")
    built = nvrtc.compile_source(op.render({"block_size_x": 64}, [4096]), "blur", "sm_80", cache=False)
    assert object_sizes(built.cubin_path)["weights"] == 36
    assert object_sizes(str(tmp_path / "missing.cubin")) == {}


def test_the_llm_is_told_the_constant_is_no_parameter(tmp_path):
    from app.llm.contract import _custom_arguments

    op = custom_operator(_goal(tmp_path), "cuda")
    lines = _custom_arguments(op.spec, [4096])
    assert "weights" not in lines[0] and lines[0].startswith("arguments in call order")
    assert lines[1].startswith("__constant__ arrays the kernel reads by name") and "weights" in lines[1]


def test_constant_arrays_are_refused_where_they_cannot_be(tmp_path):
    with pytest.raises(GoalError, match="declares no __constant__ array 'weights'"):
        custom_operator(_goal(tmp_path, kernel=KERNEL_CU.replace("__constant__ ", "__device__ ")),
                        "cuda")
    c_goal = (GOAL_TOML.replace('backend = "cuda"', 'backend = "cpu"')
              .replace('reference_source = "blur.cu"\n', "")
              .replace('{ name = "out", role = "output", shape = "n" }',
                       '{ name = "out", role = "output", shape = "n", check = false }'))
    with pytest.raises(GoalError, match="constant memory is CUDA's"):
        custom_operator(_goal(tmp_path, c_goal), "cpu")
    (tmp_path / "ref.cu").write_text(KERNEL_CU.replace("__constant__ float weights[WIDTH];\n", ""))
    with pytest.raises(GoalError, match="the reference_source declares no __constant__ array"):
        custom_operator(_goal(tmp_path, GOAL_TOML.replace('reference_source = "blur.cu"',
                                                          'reference_source = "ref.cu"')), "cuda")


def _nvrtc():
    nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
    try:
        nvrtc.nvrtc_module()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    return nvrtc


def test_every_configuration_and_the_reference_compile(tmp_path):
    from app.gpu.cuda.reference_kernel import compile_reference

    nvrtc = _nvrtc()
    op = custom_operator(_goal(tmp_path), "cuda")
    for config in op.valid_configs(100):
        built = nvrtc.compile_source(op.render(config, [4096]), "blur", "sm_80", cache=False)
        assert built.resource().registers > 0
    assert compile_reference(op, [4096], cache=False).resource().registers > 0


def test_kernel_tuner_cmem_args_import_as_constant_arrays(tmp_path):
    """The shape of Kernel Tuner's convolution example: the filter passed in cmem_args, read by
    the kernel from its __constant__ array."""
    nvrtc = _nvrtc()
    (tmp_path / "blur.cu").write_text(KERNEL_CU.replace("WIDTH", "9"))
    script = tmp_path / "tune_blur.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        import kernel_tuner
        n = 4096
        inp = np.random.randn(n + 9).astype(np.float32)
        out = np.zeros(n, np.float32)
        w = np.random.rand(9).astype(np.float32)
        kernel_tuner.tune_kernel("blur", "blur.cu", n, [out, inp, np.int32(n)],
                                 {"block_size_x": [64, 128]}, cmem_args={"weights": w})
        '''))
    goal = Goal.load(import_script(script, tmp_path / "goal").goal_path)
    check_goal(goal)
    roles = {a["name"]: a["role"] for a in goal.kernel.args}
    assert roles["weights"] == "constant" and roles["out"] == "output" and roles["inp"] == "input"
    op = custom_operator(goal, "cuda")
    assert next(a.data for a in op.spec.args if a.name == "weights").size == 9
    built = nvrtc.compile_source(op.render({"block_size_x": 64}, [4096]), "blur", "sm_80", cache=False)
    assert built.resource().registers > 0
