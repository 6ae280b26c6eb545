"""Input slots for timed calls: what a timed kernel sees changes from call to call, and what
it writes is checked.

A shape is timed on K slots, each with its own inputs and guarded outputs. Before every timed
call (outside the timed window, through the timer's `before` hook) a slot is picked at random,
never the one of the previous call, a few of its input elements are replaced by other values
of the same array (so a result cache keyed on pointers or on input content returns stale
results) and its outputs are poisoned (NaN between guard
canaries), so a kernel that returns early, or writes only part of its output, leaves NaN or
stale values behind. After timing, every slot a call wrote must hold the reference result of
its inputs as they are now: the last call that used a slot saw exactly those inputs.

A compute-bound operator (its figure in FLOP/s) gets whole fresh inputs before every timed call
instead: with a few elements changed, a kernel could keep each slot's inputs and result
(in its heap, say) and patch the result in O(inputs) for a fraction of the work; with every
element new there is nothing to patch. (A memory-bound kernel that diffs its inputs reads
at least as much as one that does its work.)

Baselines are timed on the same terms: a random slot's inputs and poisoned outputs (their
inputs are not perturbed: the candidate's slot would no longer match its last call).

An operator whose inputs do not depend on the draw (`inputs_vary` False: inputs read from
files or fixed) gets one set of inputs shared by every slot when none of them is perturbed (all
fixed): K copies of the same values would cost K copies of a possibly huge array and check
nothing more. A slot whose outputs are then bit for bit those of a slot already checked on those
very inputs has the same verdict. When some are perturbed, each slot perturbs its own copy: one
shared set, perturbed for the next call on another slot, no longer holds the inputs a slot's
last call saw (an honest kernel fed from files was refused as "outputs of a timed call wrong").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.catalog.protocol import Operator
from app.gpu.verify import CheckCase, GuardedOutput, Tolerance, compare, make_inputs, make_outputs

SLOTS = 3
PERTURBED = 4  # input elements replaced before each timed call, per input array
POOL = 64  # pre-drawn index sets (device-resident: no host transfer inside the timing loop)

MakeCalls = Callable[[dict[str, Any], dict[str, GuardedOutput]], dict[str, Callable[[], None]]]


@dataclass
class Slot:
    inputs: dict[str, Any]
    outputs: dict[str, GuardedOutput]
    calls: dict[str, Callable[[], None]]
    written: bool = False  # a candidate call wrote its outputs


class TimedSlots:
    """K input/output slots for one shape, their dispatching calls and the `before` hook."""

    def __init__(self, xp: Any, op: Operator, shape: tuple[int, ...], dtype: str, seed: int,
                 make_calls: MakeCalls, slots: int = SLOTS) -> None:
        self.xp, self.op, self.shape, self.dtype = xp, op, tuple(shape), dtype
        rng = np.random.default_rng(seed)
        self.slots: list[Slot] = []
        shared = None if op.inputs_vary else make_inputs(
            xp, op, CheckCase(list(shape), "normal", int(rng.integers(2**31)), "timing"), dtype)
        copied = shared is not None and any(  # perturbed: each slot its own (module's note)
            name not in op.fixed_inputs and int(arr.size) >= 2 for name, arr in shared.items())
        for _ in range(slots):
            case = CheckCase(list(shape), "normal", int(rng.integers(2**31)), "timing")
            if shared is None:
                inputs = make_inputs(xp, op, case, dtype)
            else:
                inputs = {k: v.copy() for k, v in shared.items()} if copied else shared
            outputs = make_outputs(xp, op, shape, dtype)
            self.slots.append(Slot(inputs, outputs, make_calls(inputs, outputs)))
        self.names = list(self.slots[0].calls)
        self.current = dict.fromkeys(self.names, 0)
        self._rng, self._draws = rng, 0
        # never the slot of the previous call: a cache with one entry then never hits, and one
        # with more hits on every slot's last call, with results of inputs since perturbed
        steps = rng.integers(1, max(2, slots), size=4096)
        self._picks = np.cumsum(steps) % slots
        self._pools = [self._index_pool(s, rng) for s in self.slots]
        self._fresh = op.perturb_timed_inputs

    def _index_pool(self, slot: Slot, rng: np.random.Generator) -> dict[str, tuple[Any, Any]]:
        """Per input: POOL sets of (positions to change, positions to copy from)."""
        pools = {}
        fixed = self.op.fixed_inputs  # a custom goal's index arrays, stored inputs
        for name, arr in slot.inputs.items():
            n = int(arr.size)
            if n < 2 or name in fixed:
                continue
            k = min(PERTURBED, n)
            dst = rng.integers(n, size=(POOL, k))
            src = (dst + rng.integers(1, n, size=(POOL, k))) % n  # never the same position
            pools[name] = (self.xp.asarray(dst), self.xp.asarray(src))
        return pools

    # ---- what the timer calls ----------------------------------------------------------
    def calls(self) -> dict[str, Callable[[], None]]:
        """One zero-argument call per name, running on the slot the last `before` picked."""
        slots, current = self.slots, self.current

        def candidate() -> float | None:  # a time taken in another process passes through
            k = current["candidate"]
            slots[k].written = True
            return slots[k].calls["candidate"]()

        def other(name: str) -> Callable[[], float | None]:
            return lambda: slots[current[name]].calls[name]()

        calls = {name: candidate if name == "candidate" else other(name) for name in self.names}
        for name, call in calls.items():  # a call that evicts caches itself (timing.py)
            call.flushes_itself = getattr(self.slots[0].calls[name], "flushes_itself", False)
        return calls

    def before(self, name: str) -> None:
        """Pick a slot for the next call of `name`; perturb and poison it (not timed)."""
        k = int(self._picks[self._draws % len(self._picks)])
        self._draws += 1
        self.current[name] = k
        slot = self.slots[k]
        if name == "candidate":
            self._perturb(k)
            for out in slot.outputs.values():
                out.reset()
        else:
            poison = getattr(slot.calls[name], "poison", None)
            if poison is not None:
                poison()

    def _perturb(self, k: int) -> None:
        if self._fresh:  # every element new (see the module's note)
            case = CheckCase(list(self.shape), "normal", int(self._rng.integers(2**31)), "timing")
            fresh = make_inputs(self.xp, self.op, case, self.dtype)
            for name in self._pools[k]:  # the perturbable ones: fixed inputs stay
                self.slots[k].inputs[name][...] = fresh[name]
            return
        row = self._draws % POOL
        for name, (dst, src) in self._pools[k].items():
            flat = self.slots[k].inputs[name].reshape(-1)
            flat[dst[row]] = flat[src[row]]

    # ---- after timing ------------------------------------------------------------------
    def check(self, tol: Tolerance) -> str | None:
        """None when every slot a candidate call wrote holds the right result."""
        checked: list[Slot] = []  # slots whose outputs passed
        for i, slot in enumerate(self.slots):
            if not slot.written:
                continue
            for name, out in slot.outputs.items():
                if not out.guards_intact():
                    return f"slot {i}: wrote outside output {name!r} (guard canaries overwritten)"
            if any(c.inputs is slot.inputs and all(
                    self._same_bits(c.outputs[n].buffer, o.buffer) for n, o in slot.outputs.items())
                   for c in checked):
                continue  # the very inputs and the very bits of a slot that passed
            problem = compare(self.xp, self.op, slot.inputs, {n: o.view for n, o in slot.outputs.items()},
                              self.shape, self.dtype, tol)
            if problem:
                return f"slot {i} of {len(self.slots)}: {problem}"
            checked.append(slot)
        return None

    def _same_bits(self, a: Any, b: Any) -> bool:
        bits = {1: self.xp.uint8, 2: self.xp.uint16, 4: self.xp.uint32, 8: self.xp.uint64}[a.dtype.itemsize]
        return bool(self.xp.array_equal(a.view(bits), b.view(bits)))

    @property
    def first(self) -> Slot:
        return self.slots[0]
