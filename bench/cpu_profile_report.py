"""The text report of bench/cpu_profile.py, one function per table. The tables also add their
derived figures (cycles, IPC, ceilings, share of peak) to the rows, for `--json`: the DRAM
table and the last line read the ceilings the in-core table sets, so the order matters."""

from __future__ import annotations

import math
import os

from cpu_profile_cachegrind import D1, LL, openblas_arch
from cpu_profile_configs import MEMORY_OPS
from cpu_profile_measure import CG_SHAPE, DRAM_SHAPE, GEMM_CG

FMA_FLOP_PER_CYCLE = 32  # 2 FMA pipes x 16 fp32 lanes (Zen 4 runs 512-bit FMAs as 2 x 256)


def f(v, d=2, w=7) -> str:
    return f"{v:>{w}.{d}f}" if v is not None and isinstance(v, (int, float)) and math.isfinite(v) else f"{'-':>{w}}"


def report(rows: list[dict], roofs, ghz: float, load: tuple, args) -> list[str]:
    out: list[str] = []
    mem = [r for r in rows if r["operator"] in MEMORY_OPS]
    tags = ["before", "now"] if args.before else ["now"]
    header(out.append, rows, roofs, ghz, load, args)
    cachegrind_table(out.append, mem, tags, ghz)
    incore_table(out.append, mem, tags, roofs, ghz)
    dram_table(out.append, mem, tags)
    streams_table(out.append, rows)
    gemm_table(out.append, rows, ghz)
    if mem:
        out.append("")
        out.append(summary_line(mem, roofs))
    return out


def header(p, rows: list[dict], roofs, ghz: float, load: tuple, args) -> None:
    p(f"machine: {os.cpu_count()} cores, clock {ghz:.2f} GHz (dependent add chain), load average "
      f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
      f"{openblas_arch()}")
    p("roofs (cached copy probe, p90) GB/s: 1 thread " +
      " ".join(f"{k} {v:.0f}" for k, v in roofs.one_thread.items()) + "; all threads " +
      " ".join(f"{k} {v:.0f}" for k, v in roofs.all_threads.items()))
    p(f"configurations: {args.configs}" + {"previous": " (bench/README.md run of 1 December 2026)",
                                             "defaults": " (template defaults)",
                                             "good": " (GOOD: chosen from this profile's sweeps; GEMM: previous)"}.get(args.configs, " (best of that bench/cpu_kernels.py run)"))
    for r in rows:
        if r["operator"] == "streams":
            continue
        p(f"  {r['operator']}: " + (" | ".join(f"{t} thr {' '.join(f'{k}={v}' for k, v in c.items())}" for t, c in r["config"].items())
                                   if r["operator"] != "gemm" else " ".join(f"{k}={v}" for k, v in r["config"].items())))


def cachegrind_table(p, mem: list[dict], tags: list[str], ghz: float) -> None:
    if not any("cg" in r for r in mem):
        return
    p("")
    p(f"cachegrind (AVX2 build, 1 thread, {'x'.join(map(str, CG_SHAPE))} = 8 MB working set, "
      f"D1 {D1}, LL {LL} = L2; one steady-state call); IPC = instructions / cycles of the same "
      f"binary natively at the L2 working set")
    p(f"{'operator':<10} {'build':<7} {'instr/el':>8} {'loads/el':>8} {'D1 miss/el':>10} "
      f"{'LL miss/el':>10} {'(ideal)':>7} {'cyc/el':>7} {'IPC':>5}")
    for r in mem:
        for tag in tags:
            c = r.get("cg", {}).get(tag)
            if not c:
                continue
            ideal = 0.125  # one 64-byte line of x and one of y per 16 floats
            cyc = c["avx2_sec_per_elem_l2"] * ghz * 1e9
            c["avx2_cycles_per_elem_l2"], c["ipc"] = cyc, c["instr_per_elem"] / cyc
            p(f"{r['operator']:<10} {tag:<7} {f(c['instr_per_elem'], 2, 8)} {f(c['loads_per_elem'], 2, 8)} "
              f"{f(c['d1_per_elem'], 3, 10)} {f(c['ll_per_elem'], 3, 10)} {f(ideal, 3, 7)} "
              f"{f(cyc, 2, 7)} {f(c['ipc'], 2, 5)}")


def incore_table(p, mem: list[dict], tags: list[str], roofs, ghz: float) -> None:
    """Sets r["ceiling"][tag], the best in-core rate, which the DRAM table and the last line read."""
    if not mem:
        return
    p("")
    p("in-core, 1 thread (-march=native build), best-sample GB/s of op.bytes_moved, copy probe interleaved on the same bytes")
    p(f"{'operator':<10} {'build':<7} {'L1 GB/s':>8} {'cyc/el':>7} {'copy L1':>8} {'L2 GB/s':>8} {'cyc/el':>7} "
      f"{'copy L2':>8} {'ceiling':>8} {'/DRAM1':>7} {'/L2 roof':>8} {'call us 1/2 thr':>16}")
    for r in mem:
        for tag in tags:
            l1, l2 = r["incore"]["L1"], r["incore"]["L2"]
            for lv in (l1, l2):
                lv[f"{tag}_cyc_per_elem"] = lv[f"{tag}_sec_per_elem"] * ghz * 1e9
            ceiling = max(l1[f"{tag}_gbs"], l2[f"{tag}_gbs"])
            r.setdefault("ceiling", {})[tag] = ceiling
            p(f"{r['operator']:<10} {tag:<7} {f(l1[f'{tag}_gbs'], 1, 8)} {f(l1[f'{tag}_cyc_per_elem'], 2, 7)} "
              f"{f(l1['copy_gbs'], 1, 8)} {f(l2[f'{tag}_gbs'], 1, 8)} {f(l2[f'{tag}_cyc_per_elem'], 2, 7)} "
              f"{f(l2['copy_gbs'], 1, 8)} {f(ceiling, 1, 8)} "
              f"{f(100 * ceiling / roofs.one_thread['DRAM'], 0, 6)}% {f(100 * ceiling / roofs.one_thread['L2'], 0, 7)}% "
              f"{f(r['empty_us'][1], 2, 7)} {f(r['empty_us'][2], 2, 7)}")


def dram_table(p, mem: list[dict], tags: list[str]) -> None:
    if not any("dram" in r for r in mem):
        return
    p("")
    p(f"DRAM working set {'x'.join(map(str, DRAM_SHAPE))} (512 MB), best-sample GB/s (± = p10-p90 spread / median), copy probe interleaved on the same bytes")
    p(f"{'operator':<10} {'thr':>3} {'build':<7} {'GB/s':>7} {'±':>4} {'copy GB/s':>9} {'% copy':>7} "
      f"{'roof':>5} {'% roof':>7} {'serial model':>12}")
    for r in mem:
        for t in (1, 2):
            d = r.get("dram", {}).get(t)
            if not d:
                continue
            for tag in tags:
                gbs = d[f"{tag}_gbs"]
                c = r["ceiling"][tag]
                # no overlap of compute and memory: 1 / (1/roof + 1/ceiling) (per thread)
                serial = 1.0 / (1.0 / d["roof_gbs"] + 1.0 / (c * t))
                p(f"{r['operator']:<10} {t:>3} {tag:<7} {f(gbs, 1, 7)} {100 * d[f'{tag}_spread']:>3.0f}% "
                  f"{f(d['copy_gbs'], 1, 9)} {f(100 * gbs / d['copy_gbs'], 0, 6)}% {f(d['roof_gbs'], 0, 5)} "
                  f"{f(100 * gbs / d['roof_gbs'], 0, 6)}% {f(100 * serial / d['roof_gbs'], 0, 11)}%")


def streams_table(p, rows: list[dict]) -> None:
    streams = next((r for r in rows if r["operator"] == "streams"), None)
    if not streams:
        return
    p("")
    p("streaming loops at DRAM size (512 MB), best-sample GB/s, interleaved with the copy probe")
    p(f"{'loop':<32} {'1 thread':>9} {'2 threads':>10}")
    for k in streams["figures"][1]:
        p(f"{k:<32} {f(streams['figures'][1][k], 1, 9)} {f(streams['figures'][2][k], 1, 10)}")


def gemm_table(p, rows: list[dict], ghz: float) -> None:
    g = next((r for r in rows if r["operator"] == "gemm"), None)
    if not g:
        return
    p("")
    if "cg" in g:
        p(f"GEMM {'x'.join(map(str, GEMM_CG))} under cachegrind (AVX2: tuned with "
          f"{' '.join(f'{k}={v}' for k, v in g['cg_config'].items())}; OpenBLAS OPENBLAS_CORETYPE=Haswell, 1 thread)")
        p(f"{'kernel':<9} {'instr/FLOP':>10} {'loads/FLOP':>10} {'D1 miss/kFLOP':>13} {'LL miss/kFLOP':>13} "
          f"{'GFLOP/s':>8} {'FLOP/cyc':>8} {'IPC':>5}")
        for tag, c in g["cg"].items():
            c["flop_per_cycle"] = c["gflops"] / ghz
            c["ipc"] = c["instr"] / (c["sec"] * ghz * 1e9)
            p(f"{tag:<9} {f(c['instr_per_flop'], 4, 10)} {f(c['loads_per_flop'], 4, 10)} {f(c['d1_per_kflop'], 3, 13)} "
              f"{f(c['ll_per_kflop'], 4, 13)} {f(c['gflops'], 1, 8)} {f(c['flop_per_cycle'], 1, 8)} {f(c['ipc'], 2, 5)}")
    p(f"GEMM native, 1 thread, interleaved (tuned AVX-512 vs numpy/OpenBLAS); FMA peak "
      f"{FMA_FLOP_PER_CYCLE} FLOP/cycle x {ghz:.2f} GHz = {FMA_FLOP_PER_CYCLE * ghz:.0f} GFLOP/s")
    for size, d in g["native"].items():
        for v in d.values():
            v["peak"] = v["gflops"] / (ghz * FMA_FLOP_PER_CYCLE)
        p(f"  {size}^3: tuned {d['tuned']['gflops']:.1f} GFLOP/s ({100 * d['tuned']['peak']:.0f}% of peak), "
          f"OpenBLAS {d['openblas']['gflops']:.1f} ({100 * d['openblas']['peak']:.0f}%), "
          f"tuned/OpenBLAS {d['tuned']['gflops'] / d['openblas']['gflops']:.2f}x")


def summary_line(mem: list[dict], roofs) -> str:
    """The last line: the lowest in-core ceiling against the DRAM and L2 roofs, and the lowest
    measured share of the DRAM roof."""
    tag = "now"
    worst = min(mem, key=lambda r: r["ceiling"][tag] / roofs.one_thread["DRAM"])
    worst_l2 = min(mem, key=lambda r: r["ceiling"][tag] / roofs.one_thread["L2"])
    line = (f"memory-bound: in-core ceiling / roof min "
            f"{100 * worst['ceiling'][tag] / roofs.one_thread['DRAM']:.0f}% ({worst['operator']}; DRAM 1 thread), "
            f"{100 * worst_l2['ceiling'][tag] / roofs.one_thread['L2']:.0f}% ({worst_l2['operator']}; L2 1 thread)")
    fr = [(r["dram"][t][f"{tag}_gbs"] / r["dram"][t]["roof_gbs"], r["operator"], t)
          for r in mem if "dram" in r for t in (1, 2)]
    if fr:
        m = min(fr)
        line += f"; measured DRAM min {100 * m[0]:.0f}% of roof ({m[1]}, {m[2]} thr)"
    return line
