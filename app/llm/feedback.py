"""Compiler feedback a model can use, on CURRENT as the prompt shows it.

C: gcc's vectorisation report (-fopt-info-vec-optimized/-missed) for CURRENT compiled with the
harness's flags and the configuration, one line per loop by its line in CURRENT as shown:
vectorised with which vector width, or not and why. CUDA: what ptxas reports for every kernel of
CURRENT built by NVRTC for the configuration (registers, spill stores and loads, stack, static
shared memory), compile only.

The compiler's messages quote the code (statement dumps with the model's identifiers), so the
prompt gets fixed phrases per kind of message and numbers, never the messages themselves
(the same rule as app.llm.outcome).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

log = logging.getLogger(__name__)

COMPILE_TIMEOUT_S = 30
MAX_LOOPS = 12
# (pattern in gcc's missed-vectorisation message, the phrase the prompt gets)
MISSED = (
    (r"complicated access pattern", "complicated access pattern"),
    (r"clobbers memory|function call|call\b", "a function call in the loop"),
    (r"not profitable|cost model", "not profitable by the cost model"),
    (r"consecutive inner loops", "the nest holds consecutive inner loops"),
    (r"alias|dependence|data ref", "possible aliasing or a loop-carried dependence"),
    (r"control flow|if-conver", "control flow in the loop"),
    (r"number of iterations cannot be computed|iteration count", "unknown trip count"),
    (r"reduction", "a reduction it cannot vectorise"),
    (r"unsupported (use|data-type)|not supported", "an unsupported statement or type"),
    (r"outer-loop|inner-loop|loop nest", "outer loop of a nest"),
)
_LINE = re.compile(r"^[^\n:]*:(\d+):\d+: (optimized|missed): (.*)$", re.MULTILINE)


def vectorisation_report(source: str, config: dict[str, Any]) -> list[str]:
    """One line per `for` loop of `source`: vectorised (vector width) or not and why."""
    items = tuple(sorted((str(k), str(v)) for k, v in (config or {}).items()))
    return list(_c_report(source, items))


@functools.lru_cache(maxsize=32)
def _c_report(source: str, config: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        return ()
    flags = ["-O3", "-march=native", "-std=c11", "-fPIC", "-fopenmp"]
    defines = [f"-D{k}={v}" for k, v in config if k.isidentifier() and re.fullmatch(r"[\w.+-]+", v)]
    with tempfile.TemporaryDirectory(prefix="ks-vec-") as d:
        path = os.path.join(d, "kernel.c")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        try:
            done = subprocess.run([cc, *flags, *defines, "-c", "-o", os.devnull,
                                   "-fopt-info-vec-optimized", "-fopt-info-vec-missed", path],
                                  capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                                  check=False, cwd=d)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.info("vectorisation report: %s", exc)
            return ()
    if done.returncode != 0:
        return ()
    lines = source.split("\n")
    loops: dict[int, dict[str, set[str]]] = {}
    for m in _LINE.finditer(done.stderr):
        n, kind, text = int(m.group(1)), m.group(2), m.group(3)
        if not 0 < n <= len(lines):
            continue
        # a statement's message belongs to the loop around it: the nearest `for` above
        while n > 0 and not re.search(r"\bfor\s*\(", lines[n - 1]):
            n -= 1
        if n == 0 or (kind == "optimized" and int(m.group(1)) != n):
            continue
        got = loops.setdefault(n, {"widths": set(), "why": set()})
        if kind == "optimized":
            w = re.search(r"using (\d+) byte vectors", text)
            got["widths"].add(f"{w.group(1)}-byte" if w else "some")
        elif "couldn't vectorize" not in text:
            got["why"].add(next((p for rx, p in MISSED if re.search(rx, text)), "another reason"))
    out = []
    for n in sorted(loops)[:MAX_LOOPS]:
        got = loops[n]
        if got["widths"]:
            out.append(f"line {n}: vectorised ({', '.join(sorted(got['widths']))} vectors)")
        else:
            why = "; ".join(sorted(got["why"])) or "no reason given"
            out.append(f"line {n}: not vectorised ({why})")
    return tuple(out)


def ptxas_report(rendered: str, kernels: tuple[str, ...], compute_capability: str) -> list[str]:
    """What ptxas reports for each kernel of a CUDA translation unit (compile only)."""
    try:
        from app.gpu.cuda import nvrtc

        arch = nvrtc.target_arch(compute_capability, rendered)
        built = nvrtc.compile_source(rendered, kernels[0], arch)
    except Exception as exc:  # noqa: BLE001 - no NVRTC, or CURRENT does not build here
        log.info("ptxas report: %s", exc)
        return []
    out = []
    for name in kernels:
        r = built.resource(name)
        if not r.registers:
            continue
        out.append(f"{name} ({arch}): {r.registers} registers, spill stores {r.spill_stores} B, "
                   f"spill loads {r.spill_loads} B, stack {r.stack_bytes} B, static shared "
                   f"memory {r.shared_bytes} B")
    return out
