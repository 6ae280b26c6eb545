"""Compile one configuration of a custom-kernel goal and print what the compiler said (the GUI's
"compile one configuration" preview runs this as a subprocess, never on its own thread).

Usage: python -m app.gpu.custom_reference.preview GOAL.toml
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from app.catalog.custom.operator import custom_operator
from app.goal import Goal, GoalError


def preview(goal: Goal) -> tuple[bool, str]:
    """(compiled, text): the configuration, then the compiler's output."""
    op = custom_operator(goal, goal.backend)
    config = op.space().sample(random.Random(0))
    if config is None:
        return False, "no configuration satisfies the restrictions"
    head = "configuration: " + ", ".join(f"{k}={v}" for k, v in config.items()) + "\n"
    if op.language == "cuda":
        with tempfile.TemporaryDirectory(prefix="kernelswarm-preview-") as tmp:  # none left behind
            return _preview_cuda(goal, op, config, head, Path(tmp))
    return _preview_c(goal, op, config, head)


def _preview_cuda(goal: Goal, op: Any, config: dict[str, Any], head: str, tmp: Path
                  ) -> tuple[bool, str]:
    from app.gpu.cuda import nvrtc

    try:
        built = nvrtc.compile_source(op.render(config, list(goal.shapes[0])), op.entry(),
                                     "sm_80", cache=tmp)
    except (nvrtc.CompileError, nvrtc.NvrtcUnavailable) as exc:
        return False, head + f"{exc}\n{getattr(exc, 'log', '')}"
    res = built.resource()
    text = head + (f"compiled for sm_80 in {built.compile_s:.2f} s: {res.registers} registers, "
                   f"{res.shared_bytes} bytes shared memory, {res.spill_stores} bytes spilled\n"
                   + built.log)
    if op.spec.reference_source:  # the reference kernel must compile too (it runs on the GPU)
        from app.gpu.cuda.reference_kernel import ReferenceKernelError, compile_reference

        try:
            compile_reference(op, list(goal.shapes[0]), cache=tmp)
        except ReferenceKernelError as exc:
            return False, text + f"reference kernel: {exc}\n"
        text += f"reference kernel {op.spec.reference_source_name} compiled for sm_80\n"
    return True, text


def _preview_c(goal: Goal, op: Any, config: dict[str, Any], head: str) -> tuple[bool, str]:
    from app.gpu.cpu import compile_library, toolchain

    tc = toolchain()
    with tempfile.TemporaryDirectory() as tmp:
        ok, log = compile_library(op.template(), config, Path(tmp) / "kernel.so", tc, 120)
        flags = " ".join(tc.flags)
        text = head + (f"compiled with {tc.identity} ({flags})\n" if ok else "compile failed\n") + log
        if ok and op.spec.reference_source:  # the reference kernel must compile too
            from app.gpu.cpu.reference_kernel import reference_defines

            defines = reference_defines(op, goal.shapes[0])
            ref_ok, ref_log = compile_library(op.spec.reference_source, defines,
                                              Path(tmp) / "reference.so", tc, 120)
            name = op.spec.reference_source_name
            text += (f"reference kernel {name} compiled\n" if ref_ok
                     else f"reference kernel {name} does not compile\n{ref_log}")
            ok = ref_ok
    return ok, text


def main(argv: list[str]) -> int:
    try:
        ok, text = preview(Goal.load(argv[0]))
    except GoalError as exc:
        ok, text = False, f"goal: {exc}"
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
