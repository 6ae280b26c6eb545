"""Boundedness is one attribute of the operator protocol (Operator.memory_bound): every catalog
operator of every backend declares it, and the objective's unit, the throughput a time
becomes and the engine side's figures all follow from it, never from a backend's own word."""

from __future__ import annotations

import pytest

from app.catalog import known_operators
from app.catalog.goals import goal_is_memory_bound
from app.catalog.protocol import Operator, OperatorBase
from app.goal import Goal, KernelTable
from app.gpu.registry import backend_spec

MEMORY_BOUND = {"cpu": {"bias_gelu", "layernorm", "rmsnorm", "softmax", "transpose"},
                "cuda": {"bias_gelu", "layernorm", "rmsnorm", "softmax", "transpose"}}


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_operator_declares_its_boundedness(backend):
    ops = known_operators(backend)
    assert ops
    for name, op in ops.items():
        assert isinstance(op, Operator), name
        assert isinstance(op.memory_bound, bool), name
        assert op.memory_bound == (name in MEMORY_BOUND[backend]), name


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_operator_declares_the_optional_hooks(backend):
    """The readers (verification, the workers, the prompts) call the optional hooks directly:
    an operator outside OperatorBase would fail there at run time, not here."""
    from app.catalog.custom.operator import CustomCudaOperator, CustomOperator

    assert issubclass(CustomOperator, OperatorBase) and issubclass(CustomCudaOperator, OperatorBase)
    for name, op in known_operators(backend).items():
        assert isinstance(op, OperatorBase), name
        assert isinstance(op.output_dtypes("float32"), dict), name


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_unit_follows_the_attribute(backend):
    for name, op in known_operators(backend).items():
        goal = Goal(name=name, backend=backend, operator=name, shapes=[[64, 64, 64]])
        goal.objective.metric = "throughput"
        assert goal_is_memory_bound(backend, goal) is op.memory_bound
        assert backend_spec(backend).unit(goal) == ("GB/s" if op.memory_bound else "GFLOP/s")
        goal.objective.metric = "time"
        assert backend_spec(backend).unit(goal) == "ms"


def test_a_cpu_operator_counts_what_its_boundedness_says():
    ops = known_operators("cpu")
    gemm, softmax = ops["gemm"], ops["softmax"]
    assert gemm.throughput((64, 64, 64), 1.0) == gemm.flops((64, 64, 64)) / 1e9
    assert softmax.throughput((16, 256), 1.0) == softmax.bytes_moved((16, 256)) / 1e9
    assert (gemm.memory_bound, softmax.memory_bound) == (False, True)


def test_your_own_kernel_is_memory_bound_unless_it_counts_flops():
    goal = Goal(name="k", backend="cpu", shapes=[[64]],
                kernel=KernelTable(source="k.c", entry="k"))
    assert goal_is_memory_bound("cpu", goal)
    goal.kernel.flops = "2 * n"
    assert not goal_is_memory_bound("cpu", goal)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_operator_declares_its_input_hooks(backend):
    """inputs_vary, fixed_inputs and perturb_timed_inputs are the protocol's, not sniffed: the
    timer perturbs a compute-bound CPU operator's inputs before each timed call; the catalog's
    CUDA operators keep it off until it is measured on a GPU."""
    for name, op in known_operators(backend).items():
        assert op.inputs_vary is True and op.fixed_inputs == (), name
        assert op.perturb_timed_inputs is (backend == "cpu" and not op.memory_bound), name
