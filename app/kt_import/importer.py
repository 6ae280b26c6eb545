"""`kernelswarm import-kt SCRIPT.py [-o DIR]`: a Kernel Tuner tuning script becomes a goal
directory (goal.toml, the kernel source, inputs.npz, expected.npz).

The script runs in a child process (app.kt_import.runner) inside a sandbox cell
(app.kt_import.cell: no keys, no network, writes only its scratch) with `tune_kernel` and
`run_kernel` intercepted; the child writes JSON and plain arrays, which this side turns into a [kernel]
table (app.goal.KernelTable). What cannot be carried over is refused in one line (ImportRefused).
"""

from __future__ import annotations

import json
import re
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.catalog.custom.toml_text import goal_text
from app.catalog.protocol import INT_OUTPUTS
from app.goal import Goal, GoalError, KernelTable

DIMS = {1: ["n"], 2: ["nx", "ny"], 3: ["nx", "ny", "nz"]}


class ImportRefused(RuntimeError):
    """The script cannot be imported; the message says what is not supported."""


@dataclass
class Imported:
    goal_path: Path
    notes: list[str] = field(default_factory=list)


def run_script(script: Path, work: Path, timeout_s: float = 600.0, trust: bool = False
               ) -> dict[str, Any]:
    """Run the script with Kernel Tuner intercepted: in a sandbox cell, or with the user's
    rights when `trust` (the user's explicit --trust-script)."""
    from app.kt_import import cell

    if trust:
        proc = cell.run_trusted(script, work, timeout_s)
    else:
        try:
            proc = cell.run_in_cell(script, work, timeout_s)
        except cell.CellUnavailable as exc:
            raise ImportRefused(
                f"this machine cannot run the script in a sandbox cell ({exc}); it would run "
                "with your rights (your files, your API keys, the network): read the script, "
                "then pass --trust-script to run it anyway") from None
    result_file = work / "result.json"
    if not result_file.exists():
        if proc.returncode == -signal.SIGSYS:
            raise ImportRefused("the script was stopped by its sandbox cell: it tried to start a "
                                "program or process, open a socket or signal another process")
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ImportRefused(f"the script's process ended without a result: {_printable(tail[0])}")
    result = json.loads(result_file.read_text())
    if "error" in result:
        raise ImportRefused(_printable(str(result["error"])))
    return json.loads((work / "capture.json").read_text())


def _printable(text: str) -> str:
    """The script's words as one plain line (no terminal control sequences)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:2000]


def _c_source(text: str) -> str:
    """Kernel Tuner builds C kernels with a C++ compiler behind extern "C"; KernelSwarm builds C11."""
    if re.search(r'extern\s+"C"\s*\{', text):
        raise ImportRefused('the C kernel uses an extern "C" { } block; KernelSwarm compiles C11: '
                            'remove the block (keep the functions)')
    return re.sub(r'extern\s+"C"\s*', "", text)


def write_goal(cap: dict[str, Any], arrays: dict[str, np.ndarray], script: Path, out: Path) -> Imported:
    out.mkdir(parents=True, exist_ok=True)
    notes = list(cap["notes"])
    language = cap["language"]
    suffix = ".cu" if language == "cuda" else ".c"
    source_name = Path(cap["source_name"] or f"{cap['kernel_name']}{suffix}").stem + suffix
    source = cap["source"] if language == "cuda" else _c_source(cap["source"])
    (out / source_name).write_text(source, encoding="utf-8")
    sizes = cap["problem_size"]
    dims = DIMS[len(sizes)]
    outputs = [a for a in cap["args"] if a["kind"] == "array" and a.get("answer")]
    self_reference = not cap["has_answer"]
    from app.kt_import import self_reference as self_ref  # it names ImportRefused from here

    if self_reference:
        outputs = self_ref.unanswered_outputs(cap, arrays)
    dtypes = {a["dtype"] for a in outputs} - set(INT_OUTPUTS)
    if len(dtypes) > 1 or not dtypes <= {"float32", "float64"}:
        raise ImportRefused(f"outputs of dtype {', '.join(sorted(dtypes))}: KernelSwarm verifies "
                            f"float32 or float64 (one per goal) or integer ({', '.join(INT_OUTPUTS)}) outputs")
    dtype = dtypes.pop() if dtypes else "float32"
    out_names = {a["name"] for a in outputs}
    args, inputs, expected = [], {}, {}
    for a in cap["args"]:
        name = a["name"]
        if a["kind"] == "scalar":
            args.append({"name": name, "role": "scalar", "dtype": a["dtype"], "value": repr(a["value"])})
            continue
        initial = arrays[f"in_{name}"]
        entry: dict[str, Any] = {"name": name, "dtype": a["dtype"], "shape": a["shape"]}
        if a.get("constant"):  # cmem_args: the kernel reads its __constant__ array
            entry["role"] = "constant"
        elif name in out_names:
            entry["role"] = "inout" if initial.any() else "output"
            if cap["has_answer"]:
                expected[name] = arrays[f"out_{name}"].astype(np.float64)
                entry["atol"] = cap["atol"]
                entry["rtol"] = 1e-5  # Kernel Tuner compares like numpy.allclose
        else:
            entry["role"] = "input"
        if entry["role"] != "output":
            entry["fill"] = "file"
            entry["file"] = "inputs.npz"
            inputs[name] = initial
        args.append(entry)
    np.savez(out / "inputs.npz", **inputs)
    if expected:
        np.savez(out / "expected.npz", **expected)
    defines = dict(cap["defines"])
    options = []
    for opt in cap["compiler_options"]:
        if opt.startswith("-D"):
            options.append(opt)
        else:
            notes.append(f"compiler option {opt} is not imported (the backend chooses its flags)")
    table = KernelTable(source=source_name, entry=cap["kernel_name"], language=language,
                        compiler_options=options, tune_params=cap["tune_params"],
                        restrictions=cap["restrictions"], defines=defines, dims=dims, args=args,
                        expected="expected.npz" if expected else "",
                        reference_source=source_name if self_reference else "")
    if language == "cuda":
        table.problem_size = list(dims)
        table.block_size_names = cap["block_size_names"]
        grid = cap["grid"]
        table.grid_div_x = grid.get("grid_div_x", [])
        table.grid_div_y = grid.get("grid_div_y", [])
        table.grid_div_z = grid.get("grid_div_z", [])
    goal = Goal(name=f"{cap['kernel_name']} (imported from {script.name})",
                backend="cuda" if language == "cuda" else "cpu", dtype=dtype, shapes=[sizes],
                kernel=table)  # [stop] and the rest: the goal's defaults (app.goal.ranges)
    goal_path = out / "goal.toml"
    goal_path.write_text(goal_text(goal, ""), encoding="utf-8")
    try:
        if self_reference:  # it loads the goal itself
            notes += self_ref.settle(goal, goal_path, outputs, self_ref.param_names(cap))
        else:
            self_ref.load_check(goal_path, goal.backend)
    except (GoalError, ImportRefused) as exc:
        goal_path.unlink()  # no goal file that does not load
        raise ImportRefused(f"the script's kernel makes no valid goal: {exc}") from None
    header = (f"# Imported by `kernelswarm import-kt {script.name}` from Kernel Tuner's tune_kernel.\n"
              + "".join(f"# note: {n}\n" for n in notes))
    goal_path.write_text(goal_text(goal, header), encoding="utf-8")
    return Imported(goal_path, notes)


def import_script(script: str | Path, out: str | Path | None = None, trust: bool = False
                  ) -> Imported:
    """Run the script with Kernel Tuner intercepted (in a sandbox cell unless `trust`) and
    write the goal directory."""
    script = Path(script).resolve()
    if not script.is_file():
        raise ImportRefused(f"script {str(script)!r} does not exist")
    out = Path(out) if out else script.parent / f"{script.stem}_goal"
    with tempfile.TemporaryDirectory(prefix="kernelswarm-kt-") as tmp:
        cap = run_script(script, Path(tmp), trust=trust)
        arrays = {f.stem: np.load(f, allow_pickle=False)
                  for f in (Path(tmp) / "arrays").glob("*.npy")}
    return write_goal(cap, arrays, script, out)
