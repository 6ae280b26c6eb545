"""Timed slots of an operator whose inputs do not depend on the draw (read from files): when
the timer perturbs them, each slot perturbs its own copy. One shared set, perturbed before the
next call on another slot, no longer held what a slot's last call saw, and an honest kernel
fed from files was refused as "outputs of a timed call were wrong" (an imported Kernel Tuner
script without answer= showed it)."""

from __future__ import annotations

import numpy as np

from app.catalog.protocol import OperatorBase, to_storage
from app.gpu.timed_slots import TimedSlots
from app.gpu.verify import Tolerance

STORED = np.linspace(-3.0, 5.0, 257)  # the "file": the same values whatever the seed


class Doubled(OperatorBase):
    name, language, deterministic = "doubled", "c", True
    distributions = ("normal",)
    inputs_vary, perturb_timed_inputs = False, False

    def __init__(self, fixed: tuple[str, ...] = ()) -> None:
        self.fixed_inputs = fixed

    def check_shape(self, shape, dtype="float32"):
        return None

    def output_shapes(self, shape):
        return {"y": tuple(shape)}

    def make_inputs(self, xp, shape, dtype, rng, distribution):
        return {"x": to_storage(xp, STORED.copy(), dtype)}

    def reference(self, xp, inputs, shape):
        return {"y": 2.0 * inputs["x"]}

    def error_scale(self, xp, inputs, ref, shape):
        return {k: xp.abs(v) + 1.0 for k, v in ref.items()}

    def rtol_growth(self, shape, dtype):
        return 1.0

    def atol(self, shape, dtype, rtol):
        return 1e-6


def _honest_calls(inputs, outputs):
    def candidate() -> None:
        outputs["y"].view[...] = 2.0 * inputs["x"]

    return {"candidate": candidate}


def _time(op: Doubled) -> TimedSlots:
    slots = TimedSlots(np, op, (257,), "float32", seed=3, make_calls=_honest_calls)
    calls = slots.calls()
    for _ in range(12):  # the timer's loop: pick, perturb and poison, call
        slots.before("candidate")
        calls["candidate"]()
    return slots


def test_an_honest_kernel_on_perturbed_stored_inputs_passes_on_every_slot():
    slots = _time(Doubled())
    assert slots.check(Tolerance(rtol=1e-6, atol=1e-6)) is None
    ids = {id(s.inputs["x"]) for s in slots.slots}
    assert len(ids) == len(slots.slots)  # each slot its own copy
    changed = [not np.array_equal(s.inputs["x"], STORED.astype(np.float32)) for s in slots.slots]
    assert any(changed)  # the timer did perturb them


def test_inputs_never_perturbed_stay_one_shared_set():
    """Fixed inputs are not perturbed: one set for every slot (no K copies of a huge array)."""
    slots = _time(Doubled(("x",)))
    assert slots.check(Tolerance(rtol=1e-6, atol=1e-6)) is None
    assert len({id(s.inputs["x"]) for s in slots.slots}) == 1
    assert np.array_equal(slots.slots[0].inputs["x"], STORED.astype(np.float32))
