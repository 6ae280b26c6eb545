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


class _Symbol:
    """What Module.get_global_var hands back, for this test: a pointer and the symbol's size."""

    def __init__(self, size: int) -> None:
        self.mem = type("Mem", (), {"size": size})()


class _Module:
    def __init__(self, symbols: dict[str, object]) -> None:
        self.symbols = symbols

    def get_global_var(self, name: str) -> object:
        return self.symbols[name]


def test_a_constant_array_is_no_parameter_and_is_copied_before_each_launch(tmp_path):
    goal = _goal(tmp_path)
    check_goal(goal)
    op = custom_operator(goal, "cuda")
    inputs = op.make_inputs(np, [4096], "float32", np.random.default_rng(0))
    assert set(inputs) == {"x", "weights"} and inputs["weights"].shape == (9,)
    outputs = {"out": np.zeros(4096, np.float32)}
    args = op.kernel_args({"block_size_x": 64}, inputs, outputs, [4096])
    assert len(args) == 3 and not any(a is inputs["weights"] for a in args)
    symbol = bytearray(9 * 4)  # the __constant__ array, as host memory here
    copy = op.constant_copy(np, _Module({"weights": symbol}), inputs)
    copy()
    assert np.array_equal(np.frombuffer(symbol, np.float32), inputs["weights"])
    inputs["weights"][3] = 42.0  # the timer perturbs an input: the next launch sees it
    copy()
    assert np.frombuffer(symbol, np.float32)[3] == 42.0
    with pytest.raises(ValueError, match="weights holds 16 bytes; the argument has 36"):
        op.constant_copy(np, _Module({"weights": _Symbol(16)}), inputs)


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
