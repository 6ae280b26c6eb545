"""No false alarm from the input families (app.catalog.families): the honest templates of every
CPU catalog operator, at configurations that cover each branch of the template, and every
example goal the CPU backend runs (catalog and your own C kernels, at the goal's own shapes)
pass verification through the real CPU backend with every family checked. CUDA goals are
planned here (every shape a family adds passes the operator's static check for its
recommended configurations); their kernels need a GPU."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from project_paths import GOALS
from test_cheats import FAST

from app.catalog import families
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, find_compiler
from app.gpu.verify import plan_checks, shapes_of
from app.gpu.worker import Deadlines

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


def grid(base: dict, **axes: list) -> list[dict]:
    return [{**base, **dict(zip(axes, values, strict=True))}
            for values in itertools.product(*axes.values())]


ROWS = {"CHUNK": 4, "THREADS": 1}
GEMM = {"MR": 6, "NV": 2, "KC": 128, "MC": 96, "NC": 256, "UK": 4, "PF": 0, "SHARE_B": 1,
        "THREADS": 1}
# each template's branches: vector widths, online/two-pass, exp and erf implementations,
# double accumulation, one-pass statistics, write order, instruction sets, parallel packing
SWEEP = {
    "softmax": ([32, 128], grid(ROWS, ONLINE=[0, 1], EXP_IMPL=[0, 1], VEC=[16], ACC=[8])),
    "rmsnorm": ([32, 128], grid({**ROWS, "ACC": 4}, ACC_DOUBLE=[0, 1], VEC=[16])),
    "layernorm": ([32, 128], grid(ROWS, STATS=[0, 1], VEC=[16])),
    "bias_gelu": ([32, 128], grid(ROWS, ERF_IMPL=[0, 1, 2], VEC=[16])),
    "transpose": ([64, 96], [{"THREADS": 1, "WRITE_MAJOR": 0, "VEC": 4, "TILE": 4},
                             {"THREADS": 1, "WRITE_MAJOR": 1, "VEC": 16, "TILE": 128}]),
    "gemm": ([32, 64, 48], grid(GEMM, ISA=[0, 1, 2], ORDER=[1], PAR=[1])),
}


@pytest.mark.parametrize("operator", sorted(SWEEP))
def test_honest_templates_pass_every_family(operator):
    shape, configs = SWEEP[operator]
    ev = CpuEvaluator(Goal(name=f"families {operator}", backend="cpu", operator=operator,
                           shapes=[shape]), settings=FAST)
    try:
        fams = set(families.for_operator(ev.op, "float32"))
        assert fams
        ran = 0
        for i, config in enumerate(configs):
            if not ev.space.is_valid(config):
                continue  # an instruction set this machine lacks
            result = ev.evaluate(Candidate(config=config, key=f"families-{operator}-{i}",
                                           agent="explorer"))
            assert result.ok, (config, result.detail)
            ran += 1
        assert ran >= 2
    finally:
        ev.close()


CPU_GOALS = sorted(p for p in [*GOALS.glob("cpu_*.toml"), *GOALS.glob("custom/*/goal.toml")]
                   if Goal.load(p).backend == "cpu")
CUDA_GOALS = sorted(p for p in GOALS.glob("cuda_*.toml"))


@pytest.mark.parametrize("path", CPU_GOALS, ids=lambda p: p.parent.name if p.name == "goal.toml"
                         else p.stem)
@pytest.mark.slow
def test_example_goal_verifies_with_the_families(path):
    goal = Goal.load(path)
    # the goal's own (large) shapes: the product's default deadline, not the suite's 2 s
    ev = CpuEvaluator(goal, settings=dataclasses.replace(FAST, deadlines=Deadlines(60.0, 60.0)))
    try:
        cases = plan_checks(ev.op, goal.shapes, ev.op.params(), "float32", seed=0)
        planned = {c.distribution for c in cases}
        assert set(families.for_operator(ev.op, "float32")) <= planned
        rng = random.Random(0)
        config = next(c for c in iter(lambda: ev.space.sample(rng), None)
                      if c.get("THREADS", 1) == 1)
        result = ev.evaluate(Candidate(config=config, key=f"example-{path.parent.name}",
                                       agent="explorer"))
        assert result.ok, (config, result.detail)
    finally:
        ev.close()


@pytest.mark.parametrize("path", CUDA_GOALS, ids=lambda p: p.stem)
def test_cuda_example_goal_shapes_stay_in_range(path):
    from app.catalog import get_operator

    goal = Goal.load(path)
    op = get_operator("cuda", goal.operator)
    dtype = goal.dtype
    cases = plan_checks(op, goal.shapes, {}, dtype, seed=0)
    assert set(families.for_operator(op, dtype)) <= {c.distribution for c in cases}
    for config in op.recommended(dtype, goal.shapes[0]):
        if op.static_check(config, goal.shapes[0], dtype) is not None:
            continue
        for shape in shapes_of(goal.shapes, cases):
            assert op.check_shape(shape, dtype) is None
            assert op.static_check(config, shape, dtype) is None, (config, shape)
