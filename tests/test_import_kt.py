"""`kernelswarm import-kt`: Kernel-Tuner-style scripts written for these tests, run in a child
process with tune_kernel/run_kernel intercepted, become goals that run (C, real compiler and
workers) or compile for every configuration with NVRTC (CUDA); what cannot be carried over is
refused in one line that names it."""

from __future__ import annotations

import itertools
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from app.catalog.custom import custom_operator
from app.cli import main
from app.goal import Goal
from app.kt_import.importer import ImportRefused, import_script
from app.kt_import.restrictions import NotConvertible, to_expressions
from app.session import check_goal

needs_cc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler")

C_SCRIPT = '''
import numpy as np
from collections import OrderedDict
from kernel_tuner import tune_kernel, run_kernel

kernel = """
extern "C" void vector_add(float *c, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i += block) for (int j = i; j < i + block && j < n; j++) c[j] = a[j] + b[j];
}
"""
size = 5000
a = np.random.randn(size).astype(np.float32)
b = np.random.randn(size).astype(np.float32)
c = np.zeros_like(b)
n = np.int32(size)
tune_params = OrderedDict(block=[1, 2, 4, 8], unroll=[1, 2])
ANSWER
tune_kernel("vector_add", kernel, size, [c, a, b, n], tune_params, lang="C", answer=answer,
            restrictions=[lambda p: p["block"] * p["unroll"] <= 8, "block >= 1"])
'''

CUDA_HEADER = "#define SCALE 2.0f\n"
CUDA_KERNEL = """\
#include "scale.h"
__global__ void scale2d(float *out, const float *in, int nx, int ny) {
    int x = blockIdx.x * block_size_x * tile_x + threadIdx.x;
    int y = blockIdx.y * block_size_y + threadIdx.y;
    for (int t = 0; t < tile_x; t++, x += block_size_x)
        if (x < nx && y < ny) out[y * nx + x] = SCALE * in[y * nx + x];
}
"""
CUDA_SCRIPT = '''
import numpy as np
import kernel_tuner

nx, ny = 300, 200
inp = np.random.rand(ny, nx).astype(np.float32)
out = np.zeros_like(inp)
params = {"block_size_x": [32, 64, 128], "block_size_y": [1, 2, 4], "tile_x": [1, 2]}
kernel_tuner.tune_kernel("scale2d", ["scale2d.cu", "scale.h"], (nx, ny),
                         [out, inp, np.int32(nx), np.int32(ny)], params,
                         grid_div_x=["block_size_x", "tile_x"], grid_div_y="block_size_y",
                         restrictions="block_size_x * block_size_y <= 256",
                         answer=[2 * inp, None, None, None], compiler_options=["-O3", "-DUNUSED=1"])
'''


def _script(tmp_path: Path, text: str, name: str = "tune.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@needs_cc
@pytest.mark.parametrize("answer", ["answer = [a + b, None, None, None]",
                                    ("answer = run_kernel('vector_add', kernel, size, [c, a, b, n], "
                                    "{'block': 1, 'unroll': 1}, lang='C')\nanswer = [answer[0], None, None, None]")],
                         ids=["numpy-answer", "run_kernel-answer"])
@pytest.mark.slow
def test_c_script_imports_and_runs(capsys, tmp_path, answer):
    script = _script(tmp_path, C_SCRIPT.replace("ANSWER", answer))
    rc = main(["import-kt", str(script), "-o", str(tmp_path / "goal")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    goal_file = tmp_path / "goal" / "goal.toml"
    assert f"wrote {goal_file}" in out
    goal = Goal.load(goal_file)
    assert goal.backend == "cpu" and goal.kernel.tune_params == {"block": [1, 2, 4, 8], "unroll": [1, 2]}
    assert goal.kernel.restrictions == ["block * unroll <= 8", "block >= 1"]
    assert [a["name"] for a in goal.kernel.args] == ["c", "a", "b", "n"]  # the script's names
    assert 'extern "C"' not in (tmp_path / "goal" / "vector_add.c").read_text()
    rc = main(["run", str(goal_file), "--db", str(tmp_path / "h.sqlite"), "--quiet", "--max-evals", "4"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "4 evaluations (4 ok, 0 failed)" in out


@needs_cc
def test_an_imported_c_goal_catches_a_wrong_kernel(tmp_path):
    from app.core.types import VERIFY_FAILED, Candidate
    from app.gpu.cpu import CpuEvaluator

    script = _script(tmp_path, C_SCRIPT.replace("ANSWER", "answer = [a - b, None, None, None]"))
    goal = Goal.load(import_script(script, tmp_path / "goal").goal_path)
    check_goal(goal)
    with CpuEvaluator(goal) as ev:
        result = ev.evaluate(Candidate(config={"block": 2, "unroll": 1}, key="k", agent="t"))
    assert not result.ok and result.reason == VERIFY_FAILED and "'c'" in result.detail


def test_cuda_script_with_several_files_compiles_every_configuration(tmp_path):
    nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
    try:
        nvrtc.nvrtc_module()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    (tmp_path / "scale2d.cu").write_text(CUDA_KERNEL)
    (tmp_path / "scale.h").write_text(CUDA_HEADER)
    done = import_script(_script(tmp_path, CUDA_SCRIPT), tmp_path / "goal")
    assert any("-O3" in n for n in done.notes)
    goal = Goal.load(done.goal_path)
    check_goal(goal)
    assert goal.backend == "cuda" and goal.shapes == [[300, 200]]
    assert goal.kernel.grid_div_y == ["block_size_y"] and goal.kernel.compiler_options == ["-DUNUSED=1"]
    op = custom_operator(goal, "cuda")
    params, space = op.params(), op.space()
    configs = [dict(zip(params, v)) for v in itertools.product(*params.values())]
    configs = [c for c in configs if space.is_valid(c)]
    assert len(configs) == 16  # 18 minus the two with 128 x 4 threads
    for config in configs:
        text = op.render(config, [300, 200])
        assert "#define SCALE 2.0f" in text  # the header was inlined
        built = nvrtc.compile_source(text, "scale2d", "sm_80", cache=False)
        assert built.resource().registers > 0
    launch = op.launch({"block_size_x": 64, "block_size_y": 2, "tile_x": 2}, [300, 200])
    assert launch.grid == (3, 100, 1) and launch.block == (64, 2, 1)
    inputs = op.make_inputs(np, [300, 200], "float32", np.random.default_rng(0))
    ref = op.reference(np, {k: v.astype(np.float64) for k, v in inputs.items()}, [300, 200])
    assert np.allclose(ref["out"], 2 * inputs["inp"])  # the stored answer, on the stored input


FAKE_CUPY = '''
import numpy as np
class ndarray:
    __module__ = "cupy._core.core"
    def __init__(self, a): self.a = a
    def get(self): return self.a
'''


@pytest.mark.parametrize("body, words", [
    ("import cupy\nx = cupy.zeros(10, dtype=cupy.float32)\ntune_kernel('k', 'k.cu', 10, [x], {'a': [1]})",
     "before tune_kernel"),
    (("class DeviceAllocation:\n    __module__ = 'pycuda.driver'\n"
     "tune_kernel('k', '__global__ void k(float *x) {}', 10, [DeviceAllocation()], {'a': [1]})"),
     "raw PyCUDA allocation"),
    (("tune_kernel('k', '__global__ void k(float *x) { x[0] = {{ value }}; }', 10, "
     "[np.zeros(10, np.float32)], {'a': [1]})"), "template"),
    ("tune_kernel('k', lambda p: 'code', 10, [np.zeros(10, np.float32)], {'a': [1]})",
     "Python function that generates code"),
    (("limit = 8\ntune_kernel('k', '__global__ void k(float *x) {}', 10, [np.zeros(10, np.float32)], "
     "{'a': [1]}, restrictions=[lambda p: p['a'] < limit])"), "restriction 0"),
    (("tune_kernel('k', '__kernel void k(float *x) {}', 10, [np.zeros(10, np.float32)], {'a': [1]}, "
     "lang='OpenCL')"), "CUDA and C kernels only"),
    (("tune_kernel('k', '__global__ void k(float *x) {}', 10, [np.zeros(10, np.float32)], {'a': [1]}, "
     "smem_args={'size': 64})"), "smem_args"),
    ("x = np.zeros(10, np.float32)\nrun_kernel('k', '__global__ void k(float *x) {}', 10, [x], {'a': 1})",
     "needs a GPU"),
    ("print('no tuning here')", "never called kernel_tuner.tune_kernel"),
    ("tune_kernel('k', '__global__ void k(float *x) {}', 10, [np.zeros(0, np.float32)], {'a': [1]})",
     "argument 0 (arg0) is an empty array"),
    (("tune_kernel('k<float>', 'template <typename T> void k(T *x) {}', 10, [np.zeros(10, np.float32)], "
      "{'a': [1]}, lang='C')"), "builds C kernels as C11"),
    ("tune_kernel('k<float>', '__global__ void k(float *x) {}', 10, [np.zeros(10, np.float32)], {'a': [1]})",
     "no templated __global__ definition of k"),
], ids=["cupy-alloc", "pycuda-raw", "jinja", "callable-source", "closure-lambda", "opencl", "smem",
        "run_kernel-cuda", "no-tune", "empty-array", "c-template", "cpp-template-missing"])
def test_unsupported_scripts_are_refused_in_one_line(capsys, tmp_path, body, words):
    script = _script(tmp_path, "import numpy as np\nfrom kernel_tuner import tune_kernel, run_kernel\n" + body)
    rc = main(["import-kt", str(script), "-o", str(tmp_path / "goal")])
    _, err = capsys.readouterr()
    assert rc == 1 and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "goal" / "goal.toml").exists()


def test_cupy_arrays_are_converted_to_numpy(tmp_path):
    script = _script(tmp_path, FAKE_CUPY + '''
from kernel_tuner import tune_kernel
x = np.arange(8, dtype=np.float32)
y = ndarray(np.zeros(8, np.float32))
tune_kernel("twice", "__global__ void twice(float *y, const float *x) { y[threadIdx.x] = 2 * x[threadIdx.x]; }",
            8, [y, x], {"block_size_x": [8]}, answer=[ndarray(2 * x), None])
''')
    goal = Goal.load(import_script(script, tmp_path / "goal").goal_path)
    check_goal(goal)
    with np.load(tmp_path / "goal" / "expected.npz") as expected:
        assert np.array_equal(expected["y"], 2 * np.arange(8))


def test_pycuda_gpuarrays_are_read_back(tmp_path):
    """A PyCUDA GPUArray (it has .get(), as the real one does) becomes a stored numpy array."""
    script = _script(tmp_path, FAKE_CUPY.replace("cupy._core.core", "pycuda.gpuarray").replace(
        "class ndarray", "class GPUArray") + '''
from kernel_tuner import tune_kernel
x = GPUArray(np.arange(8, dtype=np.float32))
y = GPUArray(np.zeros(8, np.float32))
tune_kernel("twice", "__global__ void twice(float *y, const float *x) { y[threadIdx.x] = 2 * x[threadIdx.x]; }",
            8, [y, x], {"block_size_x": [8]}, answer=[2 * x.get(), None])
''')
    done = import_script(script, tmp_path / "goal")
    goal = Goal.load(done.goal_path)
    check_goal(goal)
    assert [a["name"] for a in goal.kernel.args] == ["y", "x"]
    op = custom_operator(goal, "cuda")
    inputs = op.make_inputs(np, [8], "float32", np.random.default_rng(0))
    assert np.array_equal(inputs["x"], np.arange(8))  # the script's values, read back


def test_lambda_restrictions_are_converted_or_refused():
    names = ["block_size_x", "block_size_y", "tile"]
    assert to_expressions([lambda p: p["block_size_x"] * p["block_size_y"] <= 1024], names) == \
        ["block_size_x * block_size_y <= 1024"]
    assert to_expressions(lambda p: p["tile"] in (1, 2), names) == ["tile in (1, 2)"]

    def rule(config):
        """a one-line function works too"""
        return config["tile"] <= config["block_size_x"]

    assert to_expressions([rule, "tile > 0"], names) == ["tile <= block_size_x", "tile > 0"]
    assert to_expressions([lambda block_size_x, tile: block_size_x % tile == 0], names) == \
        ["block_size_x % tile == 0"]
    with pytest.raises(NotConvertible, match="restriction 0"):
        to_expressions([lambda p: p.get("tile") == 1], names)
    key = "tile"
    with pytest.raises(NotConvertible, match="constant name"):
        to_expressions([lambda p: p[key] == 1], names)
    with pytest.raises(NotConvertible, match="restriction 1"):
        to_expressions(["tile > 0", "__import__('os')"], names)


def test_missing_script_is_refused(tmp_path):
    with pytest.raises(ImportRefused, match="does not exist"):
        import_script(tmp_path / "nope.py")


@needs_cc
def test_c_script_with_an_integer_output_imports_and_verifies(tmp_path):
    from app.core.types import Candidate
    from app.gpu.cpu import CpuEvaluator

    script = _script(tmp_path, '''
import numpy as np
import kernel_tuner
kernel = "void positive(int *flags, const float *x, int n) { for (int i = 0; i < n; i++) flags[i] = x[i] > LIMIT; }"
x = np.random.randn(777).astype(np.float32)
flags = np.zeros(777, dtype=np.int32)
kernel_tuner.tune_kernel("positive", kernel, 777, [flags, x, np.int32(777)], {"LIMIT": [0]}, lang="C",
                         answer=[(x > 0).astype(np.int32), None, None])
''')
    goal = Goal.load(import_script(script, tmp_path / "goal").goal_path)
    check_goal(goal)
    assert goal.dtype == "float32" and goal.kernel.args[0]["dtype"] == "int32"
    with CpuEvaluator(goal) as ev:
        result = ev.evaluate(Candidate(config={"LIMIT": 0}, key="k", agent="t"))
    assert result.ok, (result.reason, result.detail)


NO_ANSWER_SCRIPT = '''
import numpy as np
from kernel_tuner import tune_kernel

kernel = """
void vector_add(float *c, const float *a, const float *b, int n) {
    /* whole blocks only: the tail is lost when block does not divide n */
    for (int i = 0; i + block <= n; i += block) for (int j = i; j < i + block; j++) c[j] = a[j] + b[j];
}
"""
size = 5000
a = np.random.randn(size).astype(np.float32)
b = np.random.randn(size).astype(np.float32)
c = np.zeros_like(b)
tune_params = {"block": [1, 2, 3, 8], "unroll": [16, 1]}
tune_kernel("vector_add", kernel, size, [c, a, b, np.int32(size)], tune_params, lang="C",
            restrictions=["block * unroll <= 8"])
'''


@needs_cc
def test_a_script_without_answer_is_checked_against_its_own_first_valid_configuration(tmp_path):
    """Kernel Tuner's vector_add, matmul, stencil ... examples give no answer=. Imported with
    their outputs unchecked, a configuration that drops the tail (block=3 of n=5000) passed
    and could win; now the kernel itself, at the first configuration the restrictions allow
    (block=1, unroll=1: the first values break the restriction), is the reference."""
    from app.core.types import VERIFY_FAILED, Candidate
    from app.gpu.cpu import CpuEvaluator

    imported = import_script(_script(tmp_path, NO_ANSWER_SCRIPT), tmp_path / "goal")
    assert any("c checked against this same kernel at block=1, unroll=1" in n for n in imported.notes)
    goal = Goal.load(imported.goal_path)
    assert goal.kernel.reference_source == "vector_add.c"
    assert all(a.get("check", True) for a in goal.kernel.args)
    assert custom_operator(goal, "cpu").reference_config() == {"block": 1, "unroll": 1}
    check_goal(goal)
    with CpuEvaluator(goal) as ev:
        wrong = ev.evaluate(Candidate(config={"block": 3, "unroll": 1}, key="tail", agent="t"))
        right = ev.evaluate(Candidate(config={"block": 8, "unroll": 1}, key="whole", agent="t"))
    assert not wrong.ok and wrong.reason == VERIFY_FAILED and "'c'" in wrong.detail, wrong.detail
    assert right.ok, right.detail


def test_without_answer_or_zero_array_the_signature_names_the_outputs(tmp_path):
    """Kernel Tuner's stencil example: x_new starts as a copy of x_old, so no array is all
    zero; the pointer not declared const is the one the kernel writes."""
    script = _script(tmp_path, '''
        import numpy as np
        from kernel_tuner import tune_kernel
        kernel = """
        __global__ void stencil(float *x_new, const float *__restrict__ x_old, int n) {
            int i = blockIdx.x * block_size_x + threadIdx.x;
            if (i > 0 && i < n - 1) x_new[i] = 0.5f * (x_old[i - 1] + x_old[i + 1]);
        }
        """
        x_old = np.random.randn(4096).astype(np.float32)
        x_new, n = np.copy(x_old), np.int32(4096)
        tune_kernel("stencil", kernel, 4096, [x_new, x_old, n],
                    {"block_size_x": [32, 64, 128]})
        ''')
    goal = Goal.load(import_script(script, tmp_path / "goal").goal_path)
    roles = {a["name"]: a["role"] for a in goal.kernel.args}
    assert roles == {"x_new": "inout", "x_old": "input", "n": "scalar"}
    assert goal.kernel.reference_source == "stencil.cu"
    refused = _script(tmp_path, '''
        import numpy as np
        from kernel_tuner import tune_kernel
        x = np.ones(64, np.float32)
        tune_kernel("k", "__global__ void k(const float *x) { }", 64, [x], {"block_size_x": [32]})
        ''', name="const.py")
    with pytest.raises(ImportRefused, match="no pointer the kernel may write"):
        import_script(refused, tmp_path / "const")


def test_per_block_partial_results_are_left_unchecked_with_a_note(tmp_path):
    """Kernel Tuner's expdist: one partial sum per thread block, in an array sized for the
    smallest blocks. Its values differ between block sizes by design, so the kernel at another
    configuration is no reference for it; the element-wise output beside it still is."""
    script = _script(tmp_path, '''
        import numpy as np
        from kernel_tuner import tune_kernel
        kernel = """
        __global__ void partial(float *y, float *d_sums, const float *x, int n, float *bucket) {
            int i = blockIdx.x * block_size_x + threadIdx.x;
            if (i < n) { y[i] = 2.0f * x[i]; atomicAdd(&d_sums[blockIdx.x], x[i]); }
            if (i < 64) bucket[i] = 3.0f * x[i];  /* 64 values: also one grid's block count */
        }
        """
        n = 4096
        x = np.random.randn(n).astype(np.float32)
        y, sums, bucket = np.zeros(n, np.float32), np.zeros(n // 32, np.float32), np.zeros(64, np.float32)
        tune_kernel("partial", kernel, n, [y, sums, x, np.int32(n), bucket],
                    {"block_size_x": [32, 64, 128]})
        ''')
    imported = import_script(script, tmp_path / "goal")
    goal = Goal.load(imported.goal_path)
    checks = {a["name"]: a.get("check", True) for a in goal.kernel.args if a["role"] == "output"}
    assert checks == {"y": True, "sums": False, "bucket": True}  # bucket is not indexed by block
    assert any(n.startswith("sums: one value per thread block") for n in imported.notes)
    assert any("y, bucket checked against this same kernel at block_size_x=32" in n for n in imported.notes)


TEMPLATED_SCRIPT = '''
import numpy
from kernel_tuner import tune_kernel

kernel_string = """
template<typename T, int blockSize>
__global__ void __launch_bounds__(1024) vector_add(T *c, const T *__restrict__ a, T *b, int n) {
    auto i = blockIdx.x * blockSize + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
size = 100000
a = numpy.random.randn(size).astype(numpy.float32)
b = numpy.random.randn(size).astype(numpy.float32)
c = numpy.zeros_like(b)
tune_kernel("vector_add<float, block_size_x>", kernel_string, size, [c, a, b, numpy.int32(size)],
            {"block_size_x": [128 + 64 * i for i in range(15)]})
'''


def test_a_templated_cuda_kernel_imports_behind_a_plain_entry(tmp_path):
    """Kernel Tuner's examples/cuda-c++ (a tunable as a template argument, __launch_bounds__,
    const and __restrict__): imported as the extern "C" wrapper Kernel Tuner itself builds for
    PyCUDA; every configuration compiles with NVRTC and names its instantiation."""
    nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
    try:
        nvrtc.nvrtc_module()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    done = import_script(_script(tmp_path, TEMPLATED_SCRIPT), tmp_path / "goal")
    assert any("vector_add<float, block_size_x> is imported as the extern" in n for n in done.notes)
    goal = Goal.load(done.goal_path)
    check_goal(goal)
    assert goal.kernel.entry == "vector_add_wrapper"
    source = (tmp_path / "goal" / goal.kernel.source).read_text()
    assert "template __device__ void vector_add<float, block_size_x>(float *, const float *__restrict__, float *, int);" in source
    op = custom_operator(goal, "cuda")
    assert {a["name"]: a["role"] for a in goal.kernel.args}["c"] == "output"
    assert op.reference_config() == {"block_size_x": 128}  # no answer=: checked against itself
    for block in goal.kernel.tune_params["block_size_x"]:
        built = nvrtc.compile_source(op.render({"block_size_x": block}, [100000]), "vector_add_wrapper",
                                     "sm_80", cache=False)
        assert built.resource().registers > 0


def test_writable_parameters_read_through_comments_arrays_and_const_pointers():
    from app.kt_import.self_reference import writable_params

    source = ("void k(float x[], const float y[], float *const z, // not const\n"
              " const float *const w, /* const */ float *v) { }")
    assert writable_params(source, "k") == [True, False, True, False, True]


def test_templated_signatures_with_comments_defaults_and_bounds_compile():
    """Signatures a first version of the wrapper broke: a // comment in the parameter list, a
    defaulted template parameter left out, __launch_bounds__ of a template parameter."""
    from app.kt_import.templated import wrap

    nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
    try:
        nvrtc.nvrtc_module()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    source = ("template<typename T, int bs = 128>\n"
              "__global__ void __launch_bounds__(bs) scale(T *out,   // output, n values\n"
              "    const T *__restrict__ in,  /* input, n values */\n    int n) {\n"
              "  int i = blockIdx.x * bs + threadIdx.x;\n  if (i < n) out[i] = 2 * in[i];\n}\n")
    for name in ("scale<float>", "scale<double, 256>"):
        wrapped, entry = wrap(source, name)
        assert entry == "scale_wrapper"
        built = nvrtc.compile_source(wrapped, entry, "sm_80", cache=False)
        assert built.resource().registers > 0
    with pytest.raises(ValueError, match="gives 3 template arguments; scale takes 2"):
        wrap(source, "scale<float, 1, 2>")

