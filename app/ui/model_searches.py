"""The window's record of a goal searched once per GPU model (heterogeneous devices).

A cuda goal with devices = "each" on a cluster whose GPUs are of several models is run as one
search per model, one after the other (app.cluster.per_model, in the engine process). The
window shows one model's run at a time, as it shows any run, and keeps here what it must not
forget between them: which models, which has started, and one line per ended run.
"""

from __future__ import annotations

from app.core.messages import EngineRunEnded
from app.core.units import format_value


class ModelSearches:
    def __init__(self) -> None:
        self.models: list[str] = []
        self.lines: list[str] = []  # one per ended model run, in order
        self.started = 0  # runs of the sequence that have started (their RunStarted seen)
        self._ended: set[str] = set()

    @property
    def active(self) -> bool:
        return bool(self.models)

    def plan(self, models: list[str]) -> str:
        """A new sequence; returns the line announcing it."""
        self.models, self.lines, self.started, self._ended = list(models), [], 0, set()
        return (f"The cluster has GPUs of {len(models)} models ({', '.join(models)}): one search "
                "per model, one after the other; each later model starts from what the earlier "
                "ones measured")

    def clear(self) -> None:
        self.plan([])

    def run_started(self) -> bool:
        """A run of the sequence started; True when it is not the first (the views that show
        the previous model's run must be emptied first)."""
        self.started += 1
        return self.active and self.started > 1

    def current_model(self) -> str:
        """The model whose run is on (the first not yet ended)."""
        return next((m for m in self.models if m not in self._ended), "")

    def title(self, goal_name: str) -> str:
        model = self.current_model()
        if not model:
            return goal_name
        return f"{goal_name} — GPU model {self.models.index(model) + 1} of {len(self.models)}: {model}"

    def ended(self, message: EngineRunEnded, unit: str) -> str:
        """Record one model's run end; returns its line."""
        self._ended.add(message.model)
        result = message.result
        if result is None:
            line = f"{message.model}: no run ({message.message})"
        else:
            best = result.best
            found = (f"best {format_value(best.value, unit)}" if best is not None
                     and best.value is not None else "no correct candidate")
            run = f"run {message.run_id}" if message.run_id is not None else "run"
            line = (f"{message.model}: {run} {result.reason.replace('_', ' ')}, "
                    f"{result.evaluations} evaluations, {found}")
        self.lines.append(line)
        return line

    def summary(self) -> str:
        """The whole sequence in one line (for the status bar at the end)."""
        left = [m for m in self.models if m not in self._ended]
        text = "One search per GPU model: " + "; ".join(self.lines)
        return text + (f"; not searched: {', '.join(left)}" if left else "")
