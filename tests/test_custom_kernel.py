"""Your own kernel as a goal (app.catalog.custom): a C kernel tuned end to end from a goal file
with the real compiler and real workers, the CUDA examples compiled by NVRTC for every
configuration the swarm proposes (no GPU), the recorded-space fallback, and malformed goals
refused with one line naming the field through the real CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from project_paths import ROOT

from app.catalog.custom import custom_operator, load_spec
from app.catalog.custom.spec import entry_names
from app.cli import main
from app.core.types import VERIFY_FAILED, Candidate, Evaluation
from app.goal import Goal, GoalError
from app.session import check_goal

EXAMPLES = ROOT / "resources" / "goals" / "custom"
HAS_CC = shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(not HAS_CC, reason="needs a C compiler")

SCALE_C = """\
#include <omp.h>
/* out[i] = a * x[i] + b[i % 8]; BUG=1 forgets the tail when n is not a multiple of UNROLL */
void scale_add(float *out, const float *x, const float *b, float a, int n)
{
    const int body = n - n % UNROLL;
    #pragma omp parallel for num_threads(THREADS)
    for (int i = 0; i < body; i += UNROLL)
        for (int u = 0; u < UNROLL; u++) out[i + u] = a * x[i + u] + b[(i + u) % 8];
#if !BUG
    for (int i = body; i < n; i++) out[i] = a * x[i] + b[i % 8];
#endif
}
"""
REFERENCE_PY = """\
import numpy as np

def scale_add(x, b, a, n):
    return a * x.astype(np.float64) + np.resize(b.astype(np.float64), n)
"""
GOAL_TOML = """\
name = "scale_add"
backend = "cpu"
shapes = [[1001]]

[kernel]
source = "scale_add.c"
entry = "scale_add"
tune_params = { UNROLL = [1, 2, 4, 8], THREADS = [1, 2] }
defines = { BUG = 0 }
reference = "reference.py:scale_add"
args = [
  { name = "out", role = "output", shape = "n" },
  { name = "x", shape = "n" },
  { name = "b", shape = 8, fill = "uniform" },
  { name = "a", role = "scalar", value = "2.5" },
  { name = "n", role = "scalar", dtype = "int32", value = "n" },
]

[stop]
max_evals = 6

[swarm]
workers = 1
"""


def write_goal(tmp_path: Path, goal: str = GOAL_TOML, source: str = SCALE_C,
               reference: str = REFERENCE_PY) -> Path:
    (tmp_path / "scale_add.c").write_text(source)
    (tmp_path / "reference.py").write_text(reference)
    path = tmp_path / "goal.toml"
    path.write_text(goal)
    return path


def _cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@needs_cc
@pytest.mark.slow
def test_c_kernel_is_tuned_end_to_end_from_a_goal_file(capsys, tmp_path):
    goal = write_goal(tmp_path)
    assert len(GOAL_TOML.split("[stop]")[0].strip().splitlines()) <= 20  # "about fifteen lines"
    rc, out, err = _cli(capsys, "run", goal, "--db", tmp_path / "h.sqlite", "--quiet")
    assert rc == 0, out + err
    assert "6 evaluations (6 ok, 0 failed)" in out
    assert "UNROLL=" in out and "THREADS=" in out


@needs_cc
def test_a_wrong_c_kernel_fails_verification_and_an_inout_kernel_passes(tmp_path):
    from app.gpu.cpu import CpuEvaluator

    buggy = Goal.load(write_goal(tmp_path, GOAL_TOML.replace("BUG = 0", "BUG = 1")))
    check_goal(buggy)
    with CpuEvaluator(buggy) as ev:
        good = ev.evaluate(Candidate(config={"UNROLL": 1, "THREADS": 1}, key="a", agent="t"))
        bad = ev.evaluate(Candidate(config={"UNROLL": 8, "THREADS": 1}, key="b", agent="t"))
    assert good.ok, good.detail
    assert not bad.ok and bad.reason == VERIFY_FAILED and "'out'" in bad.detail  # 1001 % 8 != 0

    inout_dir = tmp_path / "inout"
    inout_dir.mkdir()
    source = ("void axpy(float *y, float *unchecked, const float *x, double a, long n) {\n"
              "  for (long i = 0; i < n; i += STEP) for (long j = i; j < i + STEP && j < n; j++) {\n"
              "    y[j] += (float)a * x[j]; unchecked[j] = 0.0f; } }\n")
    (inout_dir / "axpy.c").write_text(source)
    (inout_dir / "ref.py").write_text("def axpy(y, x, a):\n    return y + a * x\n")
    (inout_dir / "goal.toml").write_text(textwrap.dedent("""\
        name = "axpy"
        backend = "cpu"
        shapes = [[777]]
        [kernel]
        source = "axpy.c"
        entry = "axpy"
        tune_params = { STEP = [1, 3] }
        reference = "ref.py:axpy"
        args = [
          { name = "y", role = "inout", shape = "n", rtol = 1e-5 },
          { name = "unchecked", role = "output", shape = "n", check = false },
          { name = "x", shape = "n", seed = 7 },
          { name = "a", role = "scalar", dtype = "float64", value = "0.5" },
          { name = "n", role = "scalar", dtype = "int64", value = "n" },
        ]
        """))
    goal = Goal.load(inout_dir / "goal.toml")
    check_goal(goal)
    with CpuEvaluator(goal) as ev:
        result: Evaluation = ev.evaluate(Candidate(config={"STEP": 3}, key="c", agent="t"))
    assert result.ok, result.detail + result.log
    assert result.time_ms and result.time_ms > 0


def test_the_four_examples_are_valid_goals():
    for name in ("conv2d_c", "pnpoly_c", "pnpoly_cuda", "convolution_cuda"):
        goal = Goal.load(EXAMPLES / name / "goal.toml")
        assert check_goal(goal).name == goal.backend
        spec = load_spec(goal, goal.backend)
        assert spec.entry in entry_names(spec.source, spec.language)


def test_cuda_examples_replay_their_recorded_space_without_a_gpu(capsys, tmp_path):
    from app.core.evaluator import BackendUnavailable
    from app.gpu.cuda.evaluator import visible_devices

    try:
        visible_devices()
        pytest.skip("a GPU is here: the goal measures live")
    except BackendUnavailable:
        pass
    rc, out, err = _cli(capsys, "run", EXAMPLES / "pnpoly_cuda" / "goal.toml", "--db",
                        tmp_path / "h.sqlite", "--quiet", "--max-evals", "15")
    assert rc == 0, err
    assert "15 evaluations" in out and "tile_size=" in out


def test_cuda_kernels_compile_with_nvrtc_for_every_configuration_the_swarm_proposes():
    """The swarm (real agents, real coordinator) proposes; each proposal is rendered the way the
    cuda worker renders it and compiled by NVRTC (no GPU needed)."""
    nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
    try:
        nvrtc.nvrtc_module()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    from app.core.evaluator import DeviceInfo, Evaluator
    from app.swarm.coordinator import Coordinator
    from app.swarm.plan import RunPlan

    class NvrtcOnly(Evaluator):
        max_parallel = 1

        def __init__(self, op, shape):
            self.op, self.shape, self.compiled = op, shape, []

        def evaluate(self, candidate):
            config = dict(candidate.config)
            problem = self.op.static_check(config, self.shape, "float32")
            assert problem is None, (config, problem)
            built = nvrtc.compile_source(self.op.render(config, self.shape), self.op.kernel_for("float32"),
                                         "sm_80", cache=False)
            launch = self.op.launch(config, self.shape, "float32")
            assert built.resource().registers > 0 and all(g >= 1 for g in launch.grid)
            self.compiled.append(config)
            return Evaluation(key=candidate.key, config=config, ok=True, agent=candidate.agent,
                              value=float(built.resource().registers), time_ms=1.0)

        def device(self):
            return DeviceInfo(kind="nvrtc", name="compile only")

    for name, evals in (("pnpoly_cuda", 10), ("convolution_cuda", 10)):
        goal = Goal.load(EXAMPLES / name / "goal.toml")
        op = custom_operator(goal, "cuda")
        ev = NvrtcOnly(op, list(goal.shapes[0]))
        result = Coordinator(op.space(), ev, RunPlan(agents=["explorer", "local", "evolution",
                             "model"], max_evals=evals, seed=1)).run()
        assert result.evaluations == evals and len(ev.compiled) == evals
        assert all(e.ok for e in result.history)


def test_cuda_render_follows_kernel_tuner_geometry():
    goal = Goal.load(EXAMPLES / "convolution_cuda" / "goal.toml")
    op = custom_operator(goal, "cuda")
    config = {"block_size_x": 32, "block_size_y": 4, "tile_size_x": 2, "tile_size_y": 3,
              "read_only": 1, "use_padding": 0, "use_shmem": 1, "use_cmem": 1,
              "filter_height": 15, "filter_width": 15}
    launch = op.launch(config, [4096, 4096], "float32")
    assert launch.block == (32, 4, 1) and launch.grid == (64, 342, 1)  # ceil(4096/64), ceil(4096/12)
    text = op.render(config, [4096, 4096])
    assert "#define tile_size_y 3" in text and "#define grid_size_y 342" in text
    assert 'extern "C" {' in text
    inputs = op.make_inputs(np, [64, 32], "float32", np.random.default_rng(0))
    assert inputs["image"].shape == (46, 78) and inputs["filter"].shape == (15, 15)


MALFORMED = [
    (lambda g: g.replace('entry = "scale_add"\n', ""), "kernel.entry", "defines scale_add"),
    (lambda g: g.replace('shape = "n" },\n  { name = "x"', 'shape = "n * m" },\n  { name = "x"'),
     "kernel.args[0].shape", "unknown name 'm'"),
    (lambda g: g.replace("tune_params", 'restrictions = ["UNROLL >"]\ntune_params'),
     "kernel.restrictions[0]", "not a valid expression"),
    (lambda g: g.replace('reference = "reference.py:scale_add"', 'reference = "reference.py:nope"'),
     "kernel.reference", "defines no function 'nope'"),
]


@pytest.mark.parametrize("edit, field, words", MALFORMED, ids=["entry", "shape", "restriction", "ref-name"])
def test_malformed_custom_goal_is_one_line_naming_the_field(capsys, tmp_path, edit, field, words):
    goal = write_goal(tmp_path, edit(GOAL_TOML))
    with pytest.raises(GoalError) as exc:
        check_goal(Goal.load(goal))
    assert exc.value.field == field
    rc, _, err = _cli(capsys, "run", goal, "--db", tmp_path / "h.sqlite")
    lines = [ln for ln in err.splitlines() if ln.startswith("kernelswarm: error:")]
    assert rc == 1 and len(lines) == 1 and field in lines[0] and words in lines[0], err
    assert "Traceback" not in err


@needs_cc
def test_a_reference_that_raises_is_one_line_from_the_real_cli(tmp_path):
    raising = "def scale_add(x, b, a, n):\n    raise ValueError('reference is broken')\n"
    goal = write_goal(tmp_path, reference=raising)
    proc = subprocess.run([sys.executable, "-m", "app", "run", str(goal), "--db",
                           str(tmp_path / "h.sqlite")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kernelswarm: error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert "kernel.reference" in errors[0] and "ValueError: reference is broken" in errors[0]
    assert "Traceback" not in proc.stderr


def test_goal_with_kernel_table_round_trips_through_toml(tmp_path):
    goal = Goal.load(write_goal(tmp_path))
    again = Goal.from_toml(goal.to_toml())
    assert again.kernel == goal.kernel
    assert "deterministic" not in goal.to_toml()  # defaults stay out of the file
    with pytest.raises(GoalError) as exc:
        Goal.from_toml('name = "x"\n[kernel]\nsauce = "k.c"\n')
    assert exc.value.field == "kernel.sauce"


def test_llm_agents_get_the_users_kernel_as_the_current_source():
    from app.llm.spec import kernel_spec

    for name, language in (("pnpoly_c", "c"), ("convolution_cuda", "cuda")):
        goal = Goal.load(EXAMPLES / name / "goal.toml")
        spec = kernel_spec(goal)
        source = load_spec(goal, goal.backend).source
        assert spec.language == language and source in spec.template
        assert spec.entry == goal.kernel.entry and "block_size_x" in spec.contract or language == "c"


@pytest.fixture
def fake_cuda_worker(monkeypatch):
    """The real CUDA worker on tests/fake_cupy: NVRTC compiles for real, launches are numpy
    emulations looked up by kernel name (no GPU here)."""
    nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
    try:
        nvrtc.nvrtc_module()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    import fake_cupy

    yield fake_cupy.fake_cuda_worker(monkeypatch), fake_cupy.EMULATIONS
    fake_cupy.EMULATIONS.clear()


def _cuda_request(op, goal, config, tmp_path):
    from app.gpu.cascade import CascadeRequest
    from app.gpu.cuda.timing import Protocol

    quick = Protocol(min_samples=5, max_samples=8, max_seconds=0.5, warmup=1, batch=2)
    return CascadeRequest(key="k", config=config, source=None, template=op.template(),
                          goal_shapes=goal.shapes, params=op.params(), seed=3, timing=quick,
                          options={"operator": op, "compile_cache": str(tmp_path)})


def test_custom_cuda_kernel_runs_the_real_cuda_cascade_on_fake_cupy(fake_cuda_worker, tmp_path):
    """NVRTC compiles the user's kernel for real; the launch is emulated in numpy (tests/fake_cupy:
    no GPU here). A correct emulation passes every stage; one that skips the last points fails."""
    worker, emulations = fake_cuda_worker

    def pnpoly(skip_tail):
        def run(inside, points, vertices, n, nv):
            px, py = points[:, 0], points[:, 1]
            odd = np.zeros(int(n), dtype=bool)
            for k in range(int(nv)):
                (xj, yj), (xk, yk) = vertices[k - 1], vertices[k]
                with np.errstate(divide="ignore", invalid="ignore"):
                    odd ^= ((yk > py) != (yj > py)) & (px < (xj - xk) * (py - yk) / (yj - yk) + xk)
            stop = int(n) - 3 if skip_tail else int(n)
            inside[:stop] = odd[:stop]
        return run

    goal = Goal.load(EXAMPLES / "pnpoly_cuda" / "goal.toml")
    goal.shapes = [[5000, 30]]
    op = custom_operator(goal, "cuda")
    config = {"block_size_x": 128, "tile_size": 4, "between_method": 1, "use_method": 2}
    results = {}
    for skip in (False, True):
        emulations["pnpoly"] = pnpoly(skip)
        reply = worker(("evaluate", _cuda_request(op, goal, config, tmp_path)), lambda stage: None)
        results[skip] = Evaluation.from_dict(reply["evaluation"])
    good, bad = results[False], results[True]
    assert good.ok, (good.reason, good.detail, good.log[-1500:])
    assert [s.name for s in good.stages] == ["static_check", "compile", "resources", "verify",
                                             "time", "reverify"]
    assert good.resources["registers"] > 0
    assert not bad.ok and bad.reason == VERIFY_FAILED and "'inside'" in bad.detail


def test_short_toml_of_a_custom_goal_round_trips():
    from app.catalog.custom.toml_text import goal_text

    for name in ("conv2d_c", "pnpoly_c", "pnpoly_cuda", "convolution_cuda"):
        goal = Goal.load(EXAMPLES / name / "goal.toml")
        text = goal_text(goal, "# a header\n")
        again = Goal.from_toml(text)
        again.source_path = goal.source_path
        assert again == goal, name
        assert text.startswith("# a header\n") and len(text.splitlines()) < 40


@needs_cc
@pytest.mark.slow
def test_llm_agent_rewrites_the_users_c_kernel(tmp_path, monkeypatch):
    """A scripted chat server answers with a rewrite of the user's kernel: the prompt carries the
    user's source, the rewrite goes through the real cascade and is verified against the
    user's reference."""
    from llm_server import ChatServer, Reply

    from app.core.events import EventBus
    from app.gpu.cpu import CpuEvaluator
    from app.llm import LLMSettings, make_llm_team
    from app.swarm.coordinator import Coordinator
    from app.swarm.plan import RunPlan

    rewrite = SCALE_C.replace("/* out[i] =", "/* rewritten by the LLM: out[i] =").replace(
        "for (int u = 0; u < UNROLL; u++) out[i + u]", "for (int u = UNROLL - 1; u >= 0; u--) out[i + u]")
    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", "sk-test-0123456789")
    goal = Goal.load(write_goal(tmp_path, GOAL_TOML.replace("max_evals = 6", "max_evals = 3")))
    check_goal(goal)
    evaluator = CpuEvaluator(goal)
    with ChatServer([Reply(f"Idea: walk each block backwards\n```c\n{rewrite}```")],
                    default=Reply("no code"), lifetime_s=120) as server:
        settings = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=8,
                               backoff_s=0.05, max_retries=1, roles=["memory"])
        team = make_llm_team(goal, evaluator, settings=settings, bus=EventBus())
        try:
            result = Coordinator(team.evaluator.space, team.evaluator, RunPlan(agents=team.agents,
                                 max_evals=goal.stop.max_evals, backend="cpu")).run()
        finally:
            evaluator.close()
    prompts = " ".join(m["content"] for body in server.requests for m in body["messages"])
    assert "void scale_add(float *out" in prompts  # the user's kernel is the current source
    # what runs is the rewrite's normal form (comments dropped): find it by its changed loop
    rewritten = [e for e in result.history if e.source and "u = UNROLL - 1; u >= 0; u--" in e.source]
    assert rewritten and rewritten[0].ok, [(e.agent, e.reason, e.detail) for e in result.history]


def test_custom_cuda_inout_array_starts_from_its_input_at_every_launch(fake_cuda_worker, tmp_path):
    worker, emulations = fake_cuda_worker
    (tmp_path / "axpy.cu").write_text(
        "__global__ void axpy(float *y, const float *x, float a, int n) {\n"
        "    int i = blockIdx.x * block_size_x + threadIdx.x;\n"
        "    if (i < n) y[i] += a * x[i];\n}\n")
    (tmp_path / "ref.py").write_text("def axpy(y, x, a):\n    return y + a * x\n")
    (tmp_path / "goal.toml").write_text(textwrap.dedent("""\
        name = "axpy"
        backend = "cuda"
        shapes = [[3000]]
        [kernel]
        source = "axpy.cu"
        entry = "axpy"
        tune_params = { block_size_x = [64, 128] }
        reference = "ref.py:axpy"
        args = [
          { name = "y", role = "inout", shape = "n" },
          { name = "x", shape = "n" },
          { name = "a", role = "scalar", value = "0.5" },
          { name = "n", role = "scalar", dtype = "int32", value = "n" },
        ]
        """))
    goal = Goal.load(tmp_path / "goal.toml")
    check_goal(goal)
    op = custom_operator(goal, "cuda")

    def axpy(y, x, a, n):  # y += a * x: wrong unless y holds its initial values at each launch
        y[:int(n)] += np.float32(a) * x[:int(n)]

    emulations["axpy"] = axpy
    reply = worker(("evaluate", _cuda_request(op, goal, {"block_size_x": 64}, tmp_path)), lambda s: None)
    ev = Evaluation.from_dict(reply["evaluation"])
    assert ev.ok, (ev.reason, ev.detail)


def test_fixed_inputs_are_not_perturbed_by_the_timer(tmp_path):
    from app.gpu.timed_slots import TimedSlots

    goal = Goal.load(write_goal(tmp_path, GOAL_TOML.replace(
        '{ name = "b", shape = 8, fill = "uniform" }', '{ name = "b", shape = 8, fill = "uniform", fixed = true }')))
    op = custom_operator(goal, "cpu")
    assert op.fixed_inputs == ("b",)
    slots = TimedSlots(np, op, (1001,), "float32", 5, lambda i, o: {"candidate": lambda: None})
    before = [{k: v.copy() for k, v in s.inputs.items()} for s in slots.slots]
    for _ in range(40):
        slots.before("candidate")
    for saved, slot in zip(before, slots.slots):
        assert np.array_equal(saved["b"], slot.inputs["b"])
    assert any(not np.array_equal(saved["x"], slot.inputs["x"]) for saved, slot in zip(before, slots.slots))


@needs_cc
def test_integer_outputs_are_verified_in_their_own_dtype(tmp_path):
    from app.gpu.cpu import CpuEvaluator

    (tmp_path / "sign.c").write_text(
        "void sign(int *cls, const float *x, int n) {\n"
        "  for (int i = 0; i < n; i += STEP) for (int j = i; j < i + STEP && j < n; j++)\n"
        "    cls[j] = x[j] > 0.0f ? 1 : (BUG ? 0 : (x[j] < 0.0f ? -1 : 0)); }\n")
    (tmp_path / "ref.py").write_text("import numpy as np\n\ndef sign(x):\n    return np.sign(x)\n")
    (tmp_path / "goal.toml").write_text(textwrap.dedent("""\
        name = "sign"
        backend = "cpu"
        shapes = [[999]]
        [kernel]
        source = "sign.c"
        entry = "sign"
        tune_params = { STEP = [1, 4], BUG = [0, 1] }
        reference = "ref.py:sign"
        args = [
          { name = "cls", role = "output", dtype = "int32", shape = "n" },
          { name = "x", shape = "n" },
          { name = "n", role = "scalar", dtype = "int32", value = "n" },
        ]
        """))
    goal = Goal.load(tmp_path / "goal.toml")
    check_goal(goal)
    assert custom_operator(goal, "cpu").output_dtypes("float32") == {"cls": "int32"}
    with CpuEvaluator(goal) as ev:
        good = ev.evaluate(Candidate(config={"STEP": 4, "BUG": 0}, key="g", agent="t"))
        bad = ev.evaluate(Candidate(config={"STEP": 4, "BUG": 1}, key="b", agent="t"))
    assert good.ok, (good.reason, good.detail)
    assert not bad.ok and bad.reason == VERIFY_FAILED and "'cls'" in bad.detail
