"""What a candidate ran, for the candidate view: the source after its parameters went in, the
compiler command and the compiler's own output. Only a replay run's candidates are recorded
measurements without code; catalog operators and your own kernels (app.catalog.custom) show
the code that was compiled."""

from __future__ import annotations

import logging
from pathlib import Path

from app.core.types import Evaluation

log = logging.getLogger(__name__)


def is_recorded(goal) -> bool:
    """A recorded tuning space (replay): its file keeps timings, not the code that ran."""
    return goal is not None and goal.backend == "replay"


def compile_command(ev: Evaluation) -> str:
    """The command the candidate was compiled with: recorded on success, the log's first
    '$ ' line on a failed compile."""
    command = ev.resources.get("compile_command")
    if isinstance(command, (list, tuple)):
        command = " ".join(str(c) for c in command)
    if command:
        return str(command)
    for line in (ev.log or "").splitlines():
        if line.startswith("$ "):
            return line[2:].strip()
    return ""


def compiler_output(ev: Evaluation) -> str:
    """The compiler's (and worker's) messages, without the command line itself."""
    lines = [ln for ln in (ev.log or "").splitlines() if not ln.startswith("$ ")]
    return "\n".join(lines).strip()


class RunSource:
    """The run's operator, loaded once per run: a catalog operator, or your own kernel read
    from the goal's files (parsed, never run here). `problem` says why it could not be.
    `kept`: your kernel's text as the run kept it when it started (the run record's
    `kernel_source`, app.session): what ran, even after the file was edited or removed."""

    def __init__(self, goal, started_at: float | None = None, kept: dict | None = None) -> None:
        self.goal = goal
        self.started_at = started_at
        self.kept = str(kept.get("text") or "") if isinstance(kept, dict) else ""
        self.problem = ""
        self._op = None
        self._loaded = False

    @property
    def language(self) -> str:
        return "cuda" if self.goal is not None and self.goal.backend == "cuda" else "c"

    def operator(self):
        if not self._loaded:
            self._loaded = True
            goal = self.goal
            try:
                if goal is not None and goal.kernel is not None:
                    from app.catalog.custom import custom_operator

                    self._op = custom_operator(goal, goal.backend)
                elif goal is not None and goal.operator:
                    from app.catalog import get_operator

                    self._op = get_operator(goal.backend, goal.operator)
            except Exception as exc:  # noqa: BLE001 - a file moved, an operator renamed since
                log.info("no source for %s: %s", getattr(goal, "name", "?"), exc)
                self.problem = str(exc)
        return self._op

    def kernel_files(self) -> list[Path]:
        goal = self.goal
        if goal is None or goal.kernel is None:
            return []
        names = goal.kernel.source if isinstance(goal.kernel.source, list) else [goal.kernel.source]
        base = Path(goal.source_path).parent if goal.source_path else Path.cwd()
        return [p if p.is_absolute() else base / p for p in (Path(n).expanduser() for n in names if n)]

    def changed_note(self) -> str:
        """Your kernel's file edited after the run started, and the run kept no copy: what
        is shown is today's text."""
        if self.started_at is None or self.kept:
            return ""
        changed = [p.name for p in self.kernel_files()
                   if p.is_file() and p.stat().st_mtime > self.started_at]
        return (f"{', '.join(changed)} changed after this run started: this is its text now, "
                "not necessarily what ran") if changed else ""

    def text(self, ev: Evaluation) -> tuple[str, str] | None:
        """(code, language): the very file the compiler got (kernel.c, or NVRTC's rendered
        source), so a compiler message's line number is the line shown; None when it cannot be
        shown (then `problem` says why). The command and parameters: `preamble`."""
        goal = self.goal
        if goal is None or is_recorded(goal):
            return None
        op = self.operator()
        if self.language == "cuda" and op is not None and goal.shapes:  # a CudaOperator
            shape = [int(v) for v in goal.shapes[0]]
            try:  # what NVRTC compiled: the parameters and launch sizes as #defines, then the code
                return (op.render(dict(ev.config), shape, goal.dtype, ev.source or self.kept or None),
                        "cuda")
            except Exception as exc:  # noqa: BLE001 - shown as source + parameters instead
                log.info("cannot render %s: %s", ev.key[:10], exc)
        if ev.source:
            return ev.source, self.language
        if self.kept:  # kernel.c: the goal's fixed #defines (when its files still load), the kept text
            return self._fixed_header(op) + self.kept, self.language
        body = op.template_source(goal.dtype) if op is not None else ""
        return (body, self.language) if body else None

    @staticmethod
    def _fixed_header(op) -> str:
        """What a custom C kernel's template puts before the user's text (its fixed defines)."""
        spec = op.spec if op is not None else None
        if spec is None:
            return ""
        template = op.template_source()
        return template[:-len(spec.source)] if spec.source and template.endswith(spec.source) else ""

    def preamble(self, ev: Evaluation) -> list[str]:
        """How the file was compiled: the command, or the parameters as -D when it was not
        recorded; for CUDA, the shape the text was rendered for."""
        command = compile_command(ev)
        if self.language == "cuda" and self.goal is not None and self.goal.shapes:
            lines = [(f"As compiled for shape {list(self.goal.shapes[0])} "
                      "(parameters and launch sizes as #defines)")]
        else:  # first: the command's -D flags sit past a narrow dock's edge
            params = " ".join(f"-D{k}={v}" for k, v in ev.config.items())
            lines = [f"Parameters: {params}"] if params else []
        return lines + ([f"Compiled as: {command}"] if command else [])
