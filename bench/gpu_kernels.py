"""GPU kernel benchmark: for each catalog kernel at a realistic size, a short swarm run finds the
best configuration; it is then measured once more, interleaved with the best library baseline
(cuBLAS through cupy.matmul / torch.matmul, CuPy composed ops, PyTorch ops), against measured
copy bandwidth and peak FLOP/s. Planted faulty kernels check that faults are recorded and cost
one worker. Writes gpu_kernels.json and gpu_kernels.md; the last line printed is

    memory-bound min X% of copy bandwidth; GEMM bf16 Y% of cuBLAS (TEMPLATE)

where TEMPLATE is the kernel the GEMM row ran: gemm_wgmma (wgmma + TMA) on compute capability 9.0,
gemm_tc (mma.sync) elsewhere (app.catalog.cuda.gemm, Gemm.for_device).

Usage: python bench/gpu_kernels.py [--out DIR] [--budget-s 200] [--only softmax,gemm]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog.cuda import OPERATORS
from app.catalog.cuda.compiled_baselines import COMPILERS
from app.core.evaluator import BackendUnavailable
from app.core.types import Candidate, Evaluation
from app.goal import Goal
from app.gpu.cuda.evaluator import CudaEvaluator, make_pool, visible_devices
from app.gpu.cuda.timing import Protocol
from app.gpu.worker import Deadlines

KERNELS = [  # name, dtype, shape, share of the time budget; the headline GEMM first (a run cut
    # short by its time limit still has it)
    ("gemm", "bfloat16", [4096, 4096, 4096], 1.6),
    # the mma.sync template on the same GPU: on sm_90 the fallback if wgmma fails, and its yardstick
    ("gemm_mma", "bfloat16", [4096, 4096, 4096], 0.6),
    ("softmax", "bfloat16", [8192, 8192], 1.0),
    ("softmax", "float32", [8192, 8192], 0.8),
    ("rmsnorm", "bfloat16", [8192, 8192], 1.0),
    ("layernorm", "bfloat16", [8192, 8192], 1.0),
    ("bias_gelu", "bfloat16", [8192, 8192], 0.6),
    ("transpose", "float32", [8192, 8192], 0.8),
    ("gemm", "float16", [4096, 4096, 4096], 0.6),
    ("gemm", "float32", [2048, 2048, 2048], 0.6),
]
SEARCH = Protocol(min_samples=5, max_samples=30, max_seconds=0.6, warmup=2, batch=5)
FINAL = Protocol(min_samples=20, max_samples=200, max_seconds=3.0, warmup=5, batch=10)


def swarm(ev: CudaEvaluator, prior: list[Evaluation], max_evals: int, seconds: float) -> list[Evaluation]:
    """A short swarm run seeded with the hand-picked configurations; falls back to a plain
    local search where the swarm cannot be imported (the GPU machine may lack optuna)."""
    try:
        from app.swarm.coordinator import Coordinator
        from app.swarm.plan import RunPlan
    except ImportError as exc:
        print(f"  swarm unavailable ({exc}); using local search", flush=True)
        return local_search(ev, prior, max_evals, seconds)
    agents = ["explorer", "local", "evolution"]
    try:
        import optuna  # noqa: F401
        agents.append("model")
    except ImportError:
        pass
    coord = Coordinator(ev.space, ev, RunPlan(agents=agents, minimize=True,
                        max_evals=max_evals + len(prior), time_budget_s=seconds, workers=1,
                        seed=0, prior=prior, goal_name=ev.goal.name, backend="cuda"))
    result = coord.run()
    return list(result.history)


def local_search(ev: CudaEvaluator, prior: list[Evaluation], max_evals: int, seconds: float) -> list[Evaluation]:
    import random

    rng = random.Random(0)
    history = list(prior)
    seen = {e.key for e in history}
    t0 = time.monotonic()
    while len(history) - len(prior) < max_evals and time.monotonic() - t0 < seconds:
        good = sorted((e for e in history if e.ok), key=lambda e: e.value)
        pool = ev.space.neighbours(good[0].config) if good and rng.random() < 0.7 else []
        cfg = rng.choice(pool) if pool else ev.space.sample(rng)
        if cfg is None:
            break
        key = ev.space.key(cfg)
        if key in seen:
            continue
        seen.add(key)
        history.append(ev.evaluate(Candidate(config=cfg, key=key, agent="local-search")))
    return history


def bench_kernel(name: str, dtype: str, shape: list[int], seconds: float, pool,
                 compilers: tuple[str, ...] = COMPILERS, baseline_factory: str | None = None) -> dict:
    goal = Goal(name=f"bench {name} {dtype} {shape}", operator=name, backend="cuda", dtype=dtype,
                shapes=[shape], device=0).validate()
    ev = CudaEvaluator(goal, protocol=SEARCH, pool=pool, devices=[0],
                       deadlines=Deadlines(compile_s=120, run_s=60), compilers=compilers,
                       baseline_factory=baseline_factory)
    # the operator as the device runs it: gemm on sm_90 is the wgmma + TMA template
    op = ev.op if ev.op.name == name else OPERATORS[name]
    t0 = time.monotonic()
    try:
        baselines = ev.baselines()
        prior = []
        for cfg in op.recommended(dtype, shape):
            e = ev.evaluate(Candidate(config=cfg, key=ev.space.key(cfg), agent="recommended"))
            print(f"  recommended {cfg}: {e.time_ms if e.ok else e.reason} {'' if e.ok else e.detail[:200]}",
                  flush=True)
            prior.append(e)
        left = max(2.0, seconds - (time.monotonic() - t0) - 5.0)
        history = swarm(ev, prior, max_evals=40, seconds=left)
        ok = sorted((e for e in history if e.ok), key=lambda e: e.value)
        failures: dict[str, int] = {}
        for e in history:
            if not e.ok:
                failures[e.reason] = failures.get(e.reason, 0) + 1
        row = {"kernel": name, "dtype": dtype, "shape": shape, "template": op.kernel_for(dtype),
               "evaluations": len(history),
               "failures": failures, "baselines": {k: {"ms": sum(v["ms"]) if v.get("ms") else None,
                                                        "ok": v["ok"], "error": v.get("error", ""),
                                                        "compiled": bool(v.get("compiled"))}
                                                    for k, v in baselines.get("baselines", {}).items()},
               "best_baseline": baselines.get("best"), "anchor_baseline": baselines.get("anchor"),
               "compiled_error": baselines.get("compiled_error", ""), "search_s": time.monotonic() - t0}
        if not ok:
            row["error"] = "no correct candidate"
            detail = next((e.detail for e in history if not e.ok), "")
            row["first_failure"] = detail[:500]
            return row
        best = ok[0]
        ev.protocol = FINAL  # the best, measured again with more samples, interleaved with the baseline
        final = ev.evaluate(Candidate(config=best.config, key=best.key + "-final", agent="final"))
        if not final.ok:
            row["error"] = f"best failed re-measurement: {final.reason} {final.detail[:300]}"
            final = best
        m = final.metrics
        row.update(config=best.config, time_ms=final.time_ms, p10_ms=final.p10_ms, p90_ms=final.p90_ms,
                   samples=int(m.get("samples", 0)), gbps=m.get("gbps"), pct_copy_bw=_pct(m.get("gbps"), ev.limits().copy_bw, 1e9),
                   tflops=m.get("tflops"), pct_peak=_pct(m.get("tflops"), ev.limits().peak.get(dtype), 1e12), baseline_ms=m.get("baseline_ms"),
                   speedup=m.get("speedup"), resources=final.resources, memory_bound=op.memory_bound,
                   copy_bw_gbps=ev.limits().copy_bw / 1e9 if ev.limits().copy_bw else None)
        return row
    finally:
        ev.close()


FAULTS = {
    "illegal_memory_access": r"""
extern "C" __global__ void softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    y[(long)threadIdx.x * (1L << 36)] = x[0];
}""",
    "skipped_work": r"""
extern "C" __global__ void softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    const long row = (long)blockIdx.x * (THREADS / TPR) + threadIdx.x / TPR;
    if (row >= rows / 2) return;
    for (int c = threadIdx.x % TPR; c < COLS; c += TPR) y[row * COLS + c] = from_f<T>(1.0f / COLS);
}""",
    "hang": r"""
extern "C" __global__ void softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    volatile int spin = 1;
    while (spin) { __nanosleep(1000); }
}""",
}
HANG_LAST = ("hang",)  # a hang may wedge the GPU for whatever runs after it: it goes last


def fault_injection(pool, rows: list[dict]) -> list[dict]:
    """Planted faults, each followed by a correct candidate that must still pass; rows are
    appended as they finish (an interrupted run keeps those). Out of memory before the hang, and
    the hang last of all: it may leave the GPU wedged for what follows."""
    shape = [1024, 2048]
    op = OPERATORS["softmax"]
    goal = Goal(name="faults", operator="softmax", backend="cuda", dtype="float32", shapes=[shape],
                device=0).validate()
    ev = CudaEvaluator(goal, protocol=SEARCH, pool=pool, measure_baseline=False, devices=[0],
                       deadlines=Deadlines(compile_s=60, run_s=8))
    cfg = op.recommended("float32", shape)[0]

    def planted(fault: str, source: str) -> None:
        t0 = time.monotonic()
        bad = ev.evaluate(Candidate(config=cfg, key=fault, agent="fault", source=source))
        good = ev.evaluate(Candidate(config=cfg, key=fault + "-after", agent="fault"))
        rows.append({"fault": fault, "reason": bad.reason, "detail": bad.detail[:200],
                     "next_candidate_ok": good.ok, "seconds": time.monotonic() - t0})

    try:
        for fault, source in FAULTS.items():
            if fault not in HANG_LAST:
                planted(fault, source)
        oom_goal = Goal(name="oom", operator="softmax", backend="cuda", dtype="float32",
                        shapes=[[1 << 21, 1 << 16]], device=0).validate()
        oom = CudaEvaluator(oom_goal, protocol=SEARCH, pool=pool, measure_baseline=False, devices=[0])
        t0 = time.monotonic()
        try:
            bad = oom.evaluate(Candidate(config={"THREADS": 1024, "TPR": 1024, "VEC": 4, "FAST_EXP": 1},
                                         key="oom", agent="fault"))
        finally:
            oom.close()
        good = ev.evaluate(Candidate(config=cfg, key="oom-after", agent="fault"))
        rows.append({"fault": "out_of_memory", "reason": bad.reason, "detail": bad.detail[:200],
                     "next_candidate_ok": good.ok, "seconds": time.monotonic() - t0})
        for fault in HANG_LAST:
            planted(fault, FAULTS[fault])
    finally:
        ev.close()
    return rows


def _pct(value, limit, unit):
    """A figure as % of its limit (the evaluator stores one fraction per candidate, issue 27)."""
    return 100.0 * value * unit / limit if value and limit else None


def fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def markdown(device: dict, rows: list[dict], faults: list[dict], summary: str) -> str:
    lines = [(f"# GPU kernel benchmark: {device.get('name')} (cc {device.get('compute_capability')}, "
             f"driver {device.get('driver')}, CuPy {device.get('cupy')})"), "",
             (f"Measured device-to-device copy bandwidth: {fmt(device.get('copy_bw', 0) / 1e9, '.0f')} GB/s. "
             "Times are medians of CUDA-event samples with L2 flushed before each sample."), "",
             ("| kernel | dtype | shape | best time ms (p10-p90, n) | GB/s | % copy BW | TFLOP/s | % peak "
             "| baseline | baseline ms | speedup | evals | failures |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "time_ms" not in r:
            lines.append(f"| {r['kernel']} | {r['dtype']} | {r['shape']} | {r.get('error')} "
                         f"| | | | | {r.get('best_baseline')} | | | {r['evaluations']} | {r['failures']} |")
            continue
        lines.append(
            f"| {r['kernel']} | {r['dtype']} | {'x'.join(map(str, r['shape']))} | {r['time_ms']:.4f} "
            f"({r['p10_ms']:.4f}-{r['p90_ms']:.4f}, {r['samples']}) | {fmt(r['gbps'], '.0f')} "
            f"| {fmt(r['pct_copy_bw'])} | {fmt(r['tflops'])} | {fmt(r['pct_peak'])} | {r.get('best_baseline')} "
            f"| {fmt(r.get('baseline_ms'), '.4f')} | {fmt(r.get('speedup'), '.2f')} | {r['evaluations']} "
            f"| {r['failures'] or ''} |")
    lines += ["", "Best configurations:", ""]
    for r in rows:
        if "config" in r:
            res = r["resources"]
            lines.append(f"- {r['kernel']} {r['dtype']} ({r.get('template', '')}): `{r['config']}` "
                         f"({res.get('registers')} regs, "
                         f"{res.get('static_shared_bytes', 0) + res.get('dynamic_shared_bytes', 0)} B smem, "
                         f"spills {res.get('spill_stores')}, timing {res.get('timing_mode')})")
    lines += ["", ("Baselines (all measured in the same run; compiled ones in the trusted baseline cell, "
                   "the candidate timed beside the anchor and scaled to the best by their measured ratio):"),
              ""]
    for r in rows:
        for name, b in r.get("baselines", {}).items():
            tags = [t for t, on in (("best", name == r.get("best_baseline")),
                                    ("anchor", name == r.get("anchor_baseline")),
                                    ("compiled", b.get("compiled"))) if on]
            lines.append(f"- {r['kernel']} {r['dtype']} {name}: "
                         f"{fmt(b['ms'], '.4f')} ms{' [' + ', '.join(tags) + ']' if tags else ''}"
                         f"{'' if b['ok'] else ' (unusable: ' + b['error'][:120] + ')'}")
        if r.get("compiled_error"):
            lines.append(f"- {r['kernel']} {r['dtype']}: no compiled baselines: {r['compiled_error'][:200]}")
    mem = [r for r in rows if r.get("memory_bound") and r.get("pct_copy_bw")]
    if mem:
        lines += ["", "Memory-bound operators, % of copy bandwidth: " + ", ".join(
            f"{r['kernel']} {r['dtype']} {r['pct_copy_bw']:.1f}%" for r in mem)]
    if faults:
        lines += ["", "## Fault injection", "", "| fault | recorded reason | next candidate ok | seconds | detail |",
                  "|---|---|---|---|---|"]
    for f in faults:
        lines.append(f"| {f['fault']} | {f['reason']} | {f['next_candidate_ok']} | {f['seconds']:.1f} "
                     f"| {f['detail'][:100].replace('|', '/')} |")
    if faults:
        survived = sum(1 for f in faults if f["next_candidate_ok"])
        lines += ["", f"Planted faults survived (next candidate ok): {survived}/{len(faults)}"]
    lines += ["", summary, ""]
    return "\n".join(lines)


def summary_line(rows: list[dict]) -> str:
    mem = [r["pct_copy_bw"] for r in rows if r.get("memory_bound") and r.get("pct_copy_bw")]
    gemms = [r for r in rows if r["kernel"] in ("gemm", "gemm_mma") and r["dtype"] == "bfloat16"
             and r.get("baseline_ms") and r.get("time_ms")]
    gemm = min(gemms, key=lambda r: r["time_ms"], default=None)  # the faster correct template
    mem_txt = f"{min(mem):.1f}%" if mem else "n/a"
    gemm_txt = f"{100.0 * gemm['baseline_ms'] / gemm['time_ms']:.1f}%" if gemm else "n/a"
    which = f" ({gemm['template']})" if gemm and gemm.get("template") else ""
    return f"memory-bound min {mem_txt} of copy bandwidth; GEMM bf16 {gemm_txt} of cuBLAS{which}"


def write_report(out: Path, device: dict, rows: list[dict], faults: list[dict], note: str = "") -> str:
    """gpu_kernels.json and gpu_kernels.md from what was measured so far; `note` says why the
    run stopped early. Returns the markdown."""
    summary = summary_line(rows)
    md = markdown(device, rows, faults, summary)
    if note:
        md = md.replace("\n\n", f"\n\n**Partial report: {note}.**\n\n", 1)
    (out / "gpu_kernels.json").write_text(json.dumps({"device": device, "rows": rows, "faults": faults,
                                                      "summary": summary, "partial": note},
                                                     indent=1, default=str))
    (out / "gpu_kernels.md").write_text(md)
    return md


def device_summary(pool) -> dict:
    """Name, driver, CuPy, copy bandwidth (measured or cached) of device 0."""
    goal = Goal(name="info", operator="softmax", backend="cuda", dtype="float32", shapes=[[8, 8]],
                device=0).validate()
    info_ev = CudaEvaluator(goal, pool=pool, devices=[0])
    try:
        return {k: v for k, v in info_ev.info().items() if k != "ok"}
    finally:
        info_ev.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="directory for gpu_kernels.json / .md")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="seconds for the whole benchmark (searches, final measurements, faults)")
    ap.add_argument("--only", default="", help="comma-separated kernel names or name:dtype")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--faults-only", action="store_true", help="only the planted faults (hang last)")
    ap.add_argument("--compilers", default=",".join(COMPILERS),
                    help="compiled baselines to measure, measured in a trusted cell of their own "
                         "(triton, torch.compile; '' for none): torch.compile takes tens of seconds "
                         "per operator to build")
    ap.add_argument("--worker-factory", default="", help=argparse.SUPPRESS)  # tests: a stand-in GPU
    ap.add_argument("--baseline-factory", default=None, help=argparse.SUPPRESS)  # and baseline cell
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.worker_factory:
        pool = make_pool([0], args.worker_factory)
    else:
        try:
            visible_devices(0)
        except BackendUnavailable as exc:
            print(f"gpu_kernels: {exc}")
            return 2
        pool = make_pool([0])
    wanted = [w for w in args.only.split(",") if w]
    kernels = [] if args.faults_only else [
        k for k in KERNELS if not wanted or k[0] in wanted or f"{k[0]}:{k[1]}" in wanted]
    with_faults = args.faults_only or not args.no_faults
    total_share = sum(k[3] for k in kernels) or 1.0
    # Reserve time for each kernel's final measurement and for the fault injection.
    search_budget = max(5.0 * len(kernels), args.budget_s - 6.0 * len(kernels) - (45 if with_faults else 0))
    rows: list[dict] = []
    faults: list[dict] = []
    compilers = tuple(c for c in args.compilers.split(",") if c)
    # a stand-in GPU worker gets no real baseline cell beside it, unless it names its own
    baseline_factory = args.baseline_factory if args.baseline_factory is not None else (
        "" if args.worker_factory else None)
    device: dict = {}
    note = ""
    doing = "device info"
    t_start = time.monotonic()
    try:
        device = device_summary(pool)
        for name, dtype, shape, share in kernels:
            left = search_budget - (time.monotonic() - t_start)
            seconds = max(5.0, min(left, search_budget * share / total_share))
            print(f"{name} {dtype} {shape}: searching for {seconds:.0f} s", flush=True)
            doing = f"{name} {dtype}"
            try:
                row = bench_kernel(name, dtype, shape, seconds, pool, compilers, baseline_factory)
                if compilers and "baseline cell" in row.get("compiled_error", ""):
                    # it died or hung: the next kernels are not made to wait for it again
                    print(f"  compiled baselines off for the rest of the run: {row['compiled_error'][:200]}",
                          flush=True)
                    compilers = ()
            except Exception as exc:  # noqa: BLE001 - one kernel's trouble must not hide the others
                row = {"kernel": name, "dtype": dtype, "shape": shape, "evaluations": 0, "failures": {},
                       "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            print("  " + json.dumps({k: row.get(k) for k in ("time_ms", "pct_copy_bw", "tflops",
                                                                "best_baseline", "baseline_ms", "speedup",
                                                                "evaluations", "error")}), flush=True)
            write_report(out, device, rows, faults, "still running")
        if with_faults:
            doing = "fault injection"
            fault_injection(pool, faults)
            for f in faults:
                print(f"fault {f['fault']}: {f['reason']} (next ok: {f['next_candidate_ok']})", flush=True)
    except KeyboardInterrupt:  # timeout -s INT: keep everything measured so far
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        note = f"interrupted (SIGINT) after {time.monotonic() - t_start:.0f} s, during {doing}"
        if doing not in ("device info", "fault injection") and not any(
                f"{r['kernel']} {r['dtype']}" == doing for r in rows):
            kernel, dtype = doing.split()
            rows.append({"kernel": kernel, "dtype": dtype, "shape": [], "evaluations": 0, "failures": {},
                         "error": "interrupted"})
        print(f"gpu_kernels: {note}; writing the partial report", flush=True)
    finally:
        md = write_report(out, device, rows, faults, note)
        try:
            pool.close()
        except KeyboardInterrupt:
            pass
    print(md.split("## Fault injection")[0].split("Best configurations")[0])
    print(summary_line(rows))
    return 130 if note else 0


if __name__ == "__main__":
    sys.exit(main())
