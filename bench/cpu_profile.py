"""Why the CPU kernels stop short of the memory roof: a profile without hardware counters.

    python bench/cpu_profile.py [--operators softmax,rmsnorm,...,gemm] [--configs previous|defaults]
                                [--before REV] [--rounds 7] [--no-cachegrind] [--no-dram]
                                [--json out.json]

This VM exposes no hardware performance counters (`perf stat -e cycles,instructions` prints
<not supported>), so the profile is built from what can be measured without them:

1. **cachegrind** (`valgrind --tool=cachegrind`, D1 32 KB 8-way, LL = the 1 MB 8-way L2, both
   as the machine reports them): instructions, D1 and LL misses per element (per FLOP for GEMM)
   of one steady-state call (a run with 3 calls minus a run with 1: the same setup and warm-up
   call cancel), on a working set past the L2 (8 MB). valgrind 3.19 does not decode
   AVX-512, so this build is the same source, configuration and compiler flags as the CPU
   backend's plus `-mno-avx512f` (AVX2 code: a VEC=16 loop runs as two 8-lane halves), and
   OpenBLAS runs its Haswell (AVX2) kernel (OPENBLAS_CORETYPE=Haswell). The same binary, run
   natively on an L2-resident working set, gives cycles per element (the clock is measured
   with a dependent add chain), hence an IPC estimate.
2. **in-core ceiling**: the kernel as the backend builds it (-march=native, AVX-512 where the
   configuration asks), 1 thread, on working sets that fit the L1 (16 KB) and the L2 (512 KB),
   in bytes per second with the same byte count the roof uses (op.bytes_moved), next to the
   copy probe of app/gpu/cpu/memory_roof.py on the same working set, measured interleaved. If the
   ceiling is below a level's roof, the kernel is compute-bound there: no memory tuning brings
   it to 90% of that roof.
3. **DRAM**: the kernel and the copy probe on the 512 MB working set of bench/cpu_kernels.py,
   1 thread and all threads, interleaved; and the fixed cost of one call (rows = 0: OpenMP's
   fork/join alone). Next to them, streaming loops with the row kernels' signature (the probe's
   flat loop; y = x * s and y = x * w[col] by rows, 8 and 16 lanes): what one core's stream
   reaches as the loop body grows, with no arithmetic to speak of.

The configurations are the best ones of the last bench/cpu_kernels.py run recorded in
bench/README.md (1 December 2026, tuned per thread count on the templates of that day)
(`--configs previous`), the templates' defaults (`--configs defaults`), the configurations
chosen from this profile's interleaved sweeps of the current templates (`--configs good`), or
the best ones a bench/cpu_kernels.py output printed (`--configs PATH`). `--before REV`
builds the templates of git revision REV with the same configurations and measures them
interleaved with the current ones (before/after of a template change).

The last line is

    memory-bound: in-core ceiling / roof min X% (op; DRAM 1 thread), ... measured DRAM min Z% of roof

GEMM: the tuned kernel against numpy's OpenBLAS, instructions per FLOP and misses per FLOP
under cachegrind (both AVX2), and GFLOP/s natively at 1 thread (AVX-512 tuned kernel vs
OpenBLAS's SkylakeX kernel) against the FMA peak (32 FLOP/cycle x the measured clock).
"""

from __future__ import annotations

import os
import sys

SCRUBBED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if any(v in os.environ for v in SCRUBBED):  # before numpy loads OpenBLAS
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import argparse
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):  # the app, and this profile's sibling modules
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from cpu_profile_build import Builder
from cpu_profile_cachegrind import cachegrind, driver_args  # noqa: F401 (tests)
from cpu_profile_configs import ALL_OPS, BENCH_BEST, read_bench_configs
from cpu_profile_measure import profile_gemm, profile_memory_op, profile_streams
from cpu_profile_report import report
from cpu_profile_timing import Kernel, Workset, clock_ghz, interleave  # noqa: F401 (tests)

from app.gpu.cpu import memory_roof as cpu_roof
from app.gpu.cpu import toolchain
from app.paths import cache_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operators", default=",".join(ALL_OPS))
    parser.add_argument("--configs", default="previous",
                        help="previous (the README's run), defaults (the templates'), good (GOOD), or the path of "
                             "a bench/cpu_kernels.py output whose 'tuned ... best' lines are used")
    parser.add_argument("--before", help="git revision whose templates are measured next to the current ones")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved samples in cache")
    parser.add_argument("--dram-rounds", type=int, default=7, help="interleaved samples at DRAM size")
    parser.add_argument("--no-cachegrind", action="store_true")
    parser.add_argument("--no-dram", action="store_true")
    parser.add_argument("--no-streams", action="store_true", help="skip the streaming loops at DRAM size")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.configs not in ("previous", "defaults", "good"):
        BENCH_BEST.update(read_bench_configs(args.configs))
    ops = [o.strip() for o in args.operators.split(",") if o.strip()]
    bad = [o for o in ops if o not in ALL_OPS]
    if bad:
        parser.error(f"unknown operator(s) {bad}; choose from {', '.join(ALL_OPS)}")
    if not args.no_cachegrind and not shutil.which("valgrind"):
        print("valgrind not found: cachegrind columns skipped", file=sys.stderr)
        args.no_cachegrind = True
    load = os.getloadavg()
    tc = toolchain()
    roofs, _ = cpu_roof.cached(tc.compiler, tc.identity, cache_dir() / "cpu-roofs.json")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ks-cpuprof-") as tmp:
        work = Path(tmp)
        b = Builder(work)
        probe = cpu_roof._build_probe(tc.compiler, work)
        ghz = clock_ghz(b.harness)
        if not args.no_dram and not args.no_streams:
            print("streaming loops ...", file=sys.stderr, flush=True)
            rows.append({"operator": "streams", "figures": profile_streams(b, probe, roofs, args)})
        for name in ops:
            print(f"profiling {name} ...", file=sys.stderr, flush=True)
            ghz = max(ghz, clock_ghz(b.harness))
            if name == "gemm":
                rows.append(profile_gemm(b, args, ghz))
            else:
                rows.append(profile_memory_op(name, b, probe, roofs, args, ghz))
        lines = report(rows, roofs, ghz, load, args)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "ghz": ghz, "load": load,
                                               "roofs": roofs.to_dict()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
