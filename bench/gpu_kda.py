"""GPU benchmark of the KDA forward (issue 18): the catalog's multi-kernel CUDA operator 'kda'
(app/catalog/cuda/kda.py) against flash-linear-attention's chunk_kda, at B in 1..8, T in 4K..32K,
H in 16..32, D = 128, bf16.

For each configuration (the operator's recommended ones, or --configs), on this device, through
the product's own harness in this process (CudaWorker + CudaKernelBackend: NVRTC build, per-kernel
resources against the device, the workspaces the harness allocates, every kernel of the pipeline
in one timed call):
  1. correctness: o and the final state against the float64 recurrent reference (computed on the
     GPU) by the worst per-head relative Frobenius error, fixed-length and packed (cu_seqlens);
     fla's chunk_kda measured the same way when it imports;
  2. timing at each benchmark shape: CUDA events, L2 flushed before every sample, candidates and
     fla interleaved (app.gpu.cuda.timing.Timer); the speedup is fla's median / ours.
Writes gpu_kda.json and gpu_kda.md to --out; the last line printed is

    KDA forward: best X.XXx fla chunk_kda (worst shape Y.YYx); error Z.Ze-03 (tolerance 1e-02)

--dry-run (no GPU needed): compiles every configuration for sm_90a and sm_80 with NVRTC, prints
registers / spills / shared memory per kernel, says whether fla imports, and prints the plan.
fla needs the wheels flash-linear-attention (or fla-core, its kernels: pure Python over Triton)
and einops; torch and triton must already be on the machine.

Usage: python bench/gpu_kda.py [--out DIR] [--budget-s 110] [--shapes 1x4096x16,...]
                               [--configs BT=64,NT=256,VT=64,FUSE_GATE=1,FUSE_OUTPUT=0;...] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog import get_operator
from app.catalog.kda import TOLERANCE

DTYPE = "bfloat16"
SHAPES = [[1, 4096, 16, 128], [2, 8192, 32, 128], [8, 32768, 32, 128]]  # B x T x H, D = 128
CHECK_SHAPES = [[1, 1024, 16, 128], [1, 2048, 16, 128, 5]]  # verified against float64
FULL_SHAPES = [[b, t, h, 128] for b in (1, 8) for t in (4096, 32768) for h in (16, 32)]


def parse_shapes(text: str) -> list[list[int]]:
    return [[int(x) for x in s.split("x")] + [128] for s in text.split(",") if s]


def parse_configs(text: str) -> list[dict[str, int]]:
    return [{k: int(v) for k, v in (kv.split("=") for kv in c.split(","))} for c in text.split(";") if c]


def label(cfg: dict[str, int]) -> str:
    return ("BT{BT}/NT{NT}/VT{VT}".format(**cfg) + ("+gate" if cfg["FUSE_GATE"] else "")
            + ("+out" if cfg["FUSE_OUTPUT"] else "") + f"/S{cfg.get('STAGES', 1)}")


def fla_kda() -> tuple[Any, str]:
    """fla's chunk_kda, or None and why not."""
    try:
        from fla.ops.kda import chunk_kda  # type: ignore
    except Exception as exc:  # noqa: BLE001 - not installed, or its import needs what is missing
        return None, (f"fla not importable ({type(exc).__name__}: {exc}); install the "
                     "flash-linear-attention (or fla-core) wheel with einops")
    return chunk_kda, "fla.ops.kda.chunk_kda"


# ---- dry run: compile only ------------------------------------------------------------------
def dry_run(args, configs: list[dict[str, int]], shapes: list[list[int]]) -> int:
    from app.gpu.cuda import nvrtc

    op = get_operator("cuda", "kda")
    rows = []
    for arch in ("sm_90a", "sm_80"):
        for cfg in configs:
            shape = shapes[0]
            problem = op.static_check(cfg, shape, DTYPE)
            if problem:
                rows.append({"arch": arch, "config": label(cfg), "error": problem})
                continue
            built = nvrtc.compile_source(op.render(cfg, shape, DTYPE), op.kernel_for(DTYPE), arch)
            for st in op.steps(cfg, shape, DTYPE):
                r = built.resource(st.kernel)
                rows.append({"arch": arch, "config": label(cfg), "kernel": st.kernel, "registers": r.registers,
                             "spill_bytes": r.spill_stores + r.spill_loads,
                             "shared_bytes": r.shared_bytes + st.launch.shared_bytes})
    for r in rows:
        if "error" in r:
            print(f"  {r['arch']:6s} {r['config']:24s} refused: {r['error']}")
        else:
            print(f"  {r['arch']:6s} {r['config']:24s} {r['kernel']:16s} {r['registers']:3d} regs "
                  f"{r['spill_bytes']} B spills {r['shared_bytes']:6d} B smem")
    fn, why = fla_kda()
    print(f"baseline: {why if fn is None else 'fla chunk_kda imports'}")
    print(f"plan: verify at {CHECK_SHAPES}, time at {shapes} ({len(configs)} configurations + fla)")
    spills = sum(r.get("spill_bytes", 0) for r in rows)
    report = {"dry_run": True, "compiled": rows, "fla": why, "shapes": shapes}
    write(args.out, report, [f"dry run: {len(rows)} kernels compiled, {spills} B of spills"])
    print(f"KDA forward (dry run): {len(rows)} kernels compiled for sm_90a and sm_80, "
          f"{'no spills' if spills == 0 else f'{spills} B of spills'}; no GPU, nothing timed")
    return 0 if spills == 0 else 1


# ---- on the GPU -------------------------------------------------------------------------------
class Harness:
    """The product's CUDA harness in this process for one configuration."""

    def __init__(self, worker, op, cfg: dict[str, int]) -> None:
        from app.gpu.cascade import CascadeRequest
        from app.gpu.cuda.worker import CudaKernelBackend

        self.worker, self.op, self.cfg = worker, op, cfg
        self.request = CascadeRequest(key=label(cfg), config=cfg, source=None,
                                      template=op.template_source(DTYPE), goal_shapes=[],
                                      params=op.space(DTYPE).params, dtype=DTYPE,
                                      options={"operator": "kda"})
        self.backend = CudaKernelBackend(worker, op, self.request)

    def call(self, shape: list[int], inputs: dict[str, Any], outputs: dict[str, Any]):
        built = self.backend.build(self.request.template, self.cfg, [shape])
        resources = self.backend.check_resources(built, self.cfg)
        self.backend.load(built)
        return self.backend.launcher(inputs, outputs, tuple(shape)), resources


def worst_error(cp, name: str, got, expected, keep) -> float:
    reduce = tuple(i for i in range(expected.ndim) if i not in keep)
    err = cp.sqrt(((got - expected) ** 2).sum(axis=reduce)) / cp.maximum(
        cp.sqrt((expected * expected).sum(axis=reduce)), 1e-30)
    return float(err.max())


def fla_call(fn, cp, op, inputs: dict[str, Any], shape: list[int]):
    """A zero-argument call of chunk_kda on the same inputs (bf16 bits viewed as torch bf16; g
    and the initial state in fp32, as fla takes them) and a fetch of (o, ht) as float64 CuPy."""
    import torch

    def t(x, dtype=torch.bfloat16):
        return torch.from_dlpack(x).view(torch.bfloat16).to(dtype)

    q, k, v, beta = (t(inputs[n]) for n in ("q", "k", "v", "beta"))
    g, h0 = t(inputs["g"], torch.float32), t(inputs["h0"], torch.float32)
    cu = None
    if len(shape) == 5:
        from app.catalog.cuda.kda import cu_seqlens

        cu = torch.as_tensor(cu_seqlens(shape[1], shape[4]).astype(np.int64), device="cuda")
    box: dict[str, Any] = {}

    def run() -> None:
        box["out"] = fn(q=q, k=k, v=v, g=g, beta=beta, scale=128 ** -0.5, initial_state=h0,
                        output_final_state=True, cu_seqlens=cu)

    def fetch():
        o, ht = box["out"]
        return (cp.asarray(torch.utils.dlpack.to_dlpack(o.float().contiguous())).astype(cp.float64),
                cp.asarray(torch.utils.dlpack.to_dlpack(ht.float().contiguous())).astype(cp.float64))

    return run, fetch


def gpu_run(args, configs: list[dict[str, int]], shapes: list[list[int]]) -> int:
    import cupy as cp

    from app.catalog.protocol import from_storage
    from app.gpu.cuda.timing import Protocol
    from app.gpu.cuda.worker import CudaWorker
    from app.gpu.verify import CheckCase, make_inputs, make_outputs

    t0 = time.perf_counter()
    worker = CudaWorker(0)
    op = get_operator("cuda", "kda")
    fn, why = fla_kda()
    report: dict[str, Any] = {"device": worker.info["name"], "cc": worker.info["compute_capability"],
                              "fla": why, "checks": [], "timings": [], "resources": {}}
    lines = [f"device {worker.info['name']} (sm_{worker.info['compute_capability']}); baseline: {why}"]
    print(lines[0], flush=True)
    harnesses = {label(c): Harness(worker, op, c) for c in configs}
    tol = TOLERANCE[DTYPE]
    worst_ours = 0.0
    try:
        for shape in args.check_shapes:  # ---- correctness against float64
            inputs = make_inputs(cp, op, CheckCase(shape, "normal", 11), DTYPE)
            x64 = {k: from_storage(cp, v, DTYPE) for k, v in inputs.items()}
            ref = op.reference(cp, x64, shape)
            for name, h in harnesses.items():
                outputs = make_outputs(cp, op, shape, DTYPE)
                call, res = h.call(shape, inputs, {k: v for k, v in outputs.items()})
                report["resources"][name] = res.get("kernels", "")
                call()
                cp.cuda.Device().synchronize()
                e_o = worst_error(cp, "o", from_storage(cp, outputs["o"].view, DTYPE), ref["o"], (0, 2))
                e_h = worst_error(cp, "ht", outputs["ht"].view.astype(cp.float64), ref["ht"], (0, 1))
                worst_ours = max(worst_ours, e_o, e_h)
                report["checks"].append({"who": name, "shape": shape, "o": e_o, "ht": e_h})
                print(f"  check {name:24s} {shape}: o {e_o:.2e}, ht {e_h:.2e} (tolerance {tol:.0e})", flush=True)
            if fn is not None:
                try:
                    run, fetch = fla_call(fn, cp, op, inputs, shape)
                    run()
                    o, ht = fetch()
                    e_o = worst_error(cp, "o", o, ref["o"], (0, 2))
                    e_h = worst_error(cp, "ht", ht, ref["ht"], (0, 1))
                    report["checks"].append({"who": "fla", "shape": shape, "o": e_o, "ht": e_h})
                    print(f"  check fla chunk_kda {shape}: o {e_o:.2e}, ht {e_h:.2e}", flush=True)
                except Exception as exc:  # noqa: BLE001 - report and go on without the baseline
                    report["fla"] = why = f"fla chunk_kda failed: {type(exc).__name__}: {exc}"
                    print(f"  {why}", flush=True)
                    fn = None
            del inputs, x64, ref
            worker.release()
        ok = {n for n in harnesses if all(c["o"] <= tol and c["ht"] <= tol
                                          for c in report["checks"] if c["who"] == n)}
        protocol = Protocol(min_samples=5, max_samples=30, max_seconds=1.5, warmup=2, batch=3)
        for shape in shapes:  # ---- timing
            if time.perf_counter() - t0 > args.budget_s:
                lines.append(f"budget spent before {shape}")
                break
            inputs = make_inputs(cp, op, CheckCase(shape, "normal", 5), DTYPE)
            calls, outs = {}, {}
            for name in ok:
                outs[name] = make_outputs(cp, op, shape, DTYPE)
                calls[name], _ = harnesses[name].call(shape, inputs, outs[name])
            if fn is not None:
                calls["fla"], fetch = fla_call(fn, cp, op, inputs, shape)
            m = worker.timer.measure(calls, protocol)
            row = {"shape": shape, "ms": {n: st.median for n, st in m.stats.items()}}
            if fn is not None:  # ours against fla on the benchmark shape itself
                o_fla, _ = fetch()
                row["vs_fla"] = {n: worst_error(cp, "o", from_storage(cp, outs[n]["o"].view, DTYPE), o_fla, (0, 2))
                                 for n in outs}
            best = min((n for n in row["ms"] if n != "fla"), key=row["ms"].get, default=None)
            row["best"] = best
            if best and "fla" in row["ms"]:
                row["speedup"] = row["ms"]["fla"] / row["ms"][best]
            report["timings"].append(row)
            text = ", ".join(f"{n} {ms:.3f} ms" for n, ms in sorted(row["ms"].items(), key=lambda x: x[1]))
            print(f"  time {shape}: {text}" + (f"; speedup {row['speedup']:.2f}x" if "speedup" in row else ""),
                  flush=True)
            del inputs, calls, outs
            worker.release()
    except KeyboardInterrupt:
        lines.append("interrupted: partial results")
    speedups = [r["speedup"] for r in report["timings"] if "speedup" in r]
    if speedups:
        summary = (f"KDA forward: best {max(speedups):.2f}x fla chunk_kda (worst shape {min(speedups):.2f}x); "
                   f"error {worst_ours:.1e} (tolerance {tol:.0e})")
    else:
        best_ms = [r["ms"][r["best"]] for r in report["timings"] if r.get("best")]
        summary = (f"KDA forward: {len(best_ms)} shapes timed, no fla speedup ({report['fla']}); "
                   f"error {worst_ours:.1e} (tolerance {tol:.0e})")
    write(args.out, report, lines + [summary])
    print(summary)
    return 0 if worst_ours <= tol else 1


def write(out: str, report: dict[str, Any], lines: list[str]) -> None:
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / "gpu_kda.json").write_text(json.dumps(report, indent=1, default=str))
    md = ["# KDA forward vs flash-linear-attention chunk_kda", ""] + [f"- {x}" for x in lines]
    for r in report.get("timings", []):
        md.append(f"- {r['shape']}: " + ", ".join(f"{n} {ms:.3f} ms" for n, ms in r["ms"].items())
                  + (f" — speedup {r['speedup']:.2f}x" if "speedup" in r else ""))
    for c in report.get("checks", []):
        md.append(f"- check {c['who']} {c['shape']}: o {c['o']:.2e}, ht {c['ht']:.2e}")
    (d / "gpu_kda.md").write_text("\n".join(md) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="out/gpu-kda")
    p.add_argument("--budget-s", type=float, default=110.0)
    p.add_argument("--shapes", default="", help="BxTxH,... (D = 128); 'full' for the whole grid")
    p.add_argument("--configs", default="")
    p.add_argument("--check-shapes", default="", help="BxTxH[xN],... verified against float64")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    args.check_shapes = ([[int(x) for x in s.split("x")[:3]] + [128] + [int(x) for x in s.split("x")[3:]]
                          for s in args.check_shapes.split(",") if s] or CHECK_SHAPES)
    op = get_operator("cuda", "kda")
    shapes = FULL_SHAPES if args.shapes == "full" else (parse_shapes(args.shapes) if args.shapes else SHAPES)
    configs = parse_configs(args.configs) if args.configs else op.recommended(DTYPE, shapes[0])
    if args.dry_run:
        return dry_run(args, configs, shapes)
    return gpu_run(args, configs, shapes)


if __name__ == "__main__":
    sys.exit(main())
