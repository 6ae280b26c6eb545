"""Leave-one-out reports for bench/search_efficiency.py (`--leave-one-out`).

Nothing here chooses a strategy for a space with that space's own runs. For every held-out
group (one space; or every space of one GPU vendor), a choice is made on the *other* spaces
(the best mean P over their budgets) and judged on the held-out ones:

- the swarm against the single agent the other spaces would pick (the virtual best agent
  without hindsight);
- a change (every other swarm variant that ran, e.g. `swarm@decay`) against the baseline:
  the other spaces choose between the two, and the effect on the held-out space is the chosen
  one's P minus the baseline's (0 where the other spaces keep the baseline).

Each cell is a mean over seeds ± one standard error (runs of two strategies are independent,
so their variances add). The worst space (the most negative margin, mean over budgets) is
named. With `--previous FILE` each space's swarm is also compared with an earlier report
(`--json`), and a space whose P falls as the budget grows is listed.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable

# Vendors from the GPU in a space's file name (kernel_DEVICE.json.gz); "other" otherwise.
_AMD = re.compile(r"(^|_)(MI\d+\w*|W\d{4}\w*|RX_?\d+\w*|Radeon\w*|gfx\d+\w*|AMD\w*)$", re.IGNORECASE)
_NVIDIA = re.compile(r"(^|_)(A\d{2,4}\w*|H\d{3}\w*|V100\w*|T4|L4\w*|L40\w*|P100\w*|"
                     r"(RTX|GTX|Titan|Tesla|Quadro)(_\w+)?|NVIDIA\w*)$", re.IGNORECASE)


def vendor(space: str) -> str:
    """'AMD', 'NVIDIA' or 'other', read from the device part of a space's name."""
    device = space.split("_", 1)[1] if "_" in space else space
    if _AMD.search(device) or _AMD.search(space):
        return "AMD"
    if _NVIDIA.search(device) or _NVIDIA.search(space):
        return "NVIDIA"
    return "other"


def _cell(report: dict, space: str, strategy: str, m: str) -> tuple[float, float] | None:
    row = report["spaces"][space]["strategies"].get(strategy) or {}
    cell = row.get(m)
    return (cell["P"], cell.get("se", 0.0)) if cell else None


def _mean_p(report: dict, spaces: list[str], strategy: str, budgets: list[str]) -> float | None:
    values = [c[0] for s in spaces for m in budgets if (c := _cell(report, s, strategy, m))]
    return sum(values) / len(values) if values else None


def _choose(report: dict, others: list[str], candidates: list[str], budgets: list[str]) -> str:
    """The candidate with the best mean P on the other spaces (ties: the first listed)."""
    scored = [(c, _mean_p(report, others, c, budgets)) for c in candidates]
    scored = [(c, v) for c, v in scored if v is not None]
    best = max(v for _, v in scored)
    # the first listed within rounding of the best (the baseline, for a change): sums of the
    # same runs taken in another order differ in the last bits
    return next(c for c, v in scored if v >= best - 1e-12)


def holdouts(spaces: list[str], by: str) -> list[tuple[str, list[str]]]:
    """(label, held-out spaces): one per space, or one per vendor (only when 2+ vendors)."""
    if by == "space":
        return [(s, [s]) for s in spaces]
    groups: dict[str, list[str]] = {}
    for s in spaces:
        groups.setdefault(vendor(s), []).append(s)
    return list(groups.items()) if len(groups) > 1 else []


def judge(report: dict, baseline: str, candidates: list[str], by: str,
          keep_baseline: bool = False) -> list[dict]:
    """Per held-out space and budget: the baseline, the candidate chosen on the other spaces
    (with keep_baseline the baseline is a candidate too: a change judged against it), and the
    margin baseline - chosen (for a change: chosen - baseline, the effect of adopting it)."""
    budgets = [str(m) for m in report["budgets"]]
    spaces = [s for s, v in report["spaces"].items()
              if v["strategies"].get(baseline) and all(v["strategies"].get(c) for c in candidates)]
    rows = []
    for label, held in holdouts(spaces, by):
        others = [s for s in spaces if s not in held]
        if not others:
            continue
        pool = ([baseline] if keep_baseline else []) + candidates
        chosen = _choose(report, others, pool, budgets)
        for space in held:
            row = {"space": space, "held_out": label, "chosen": chosen, "budgets": {}}
            for m in budgets:
                base, pick = _cell(report, space, baseline, m), _cell(report, space, chosen, m)
                if base is None or pick is None:
                    continue
                sign = 1.0 if keep_baseline else -1.0  # change: chosen - base; else base - chosen
                se = 0.0 if chosen == baseline else math.hypot(base[1], pick[1])
                row["budgets"][m] = {"baseline": base, "chosen": pick,
                                     "margin": sign * (pick[0] - base[0]), "se": se}
                change = _cell(report, space, candidates[0], m) if keep_baseline else None
                if change is not None:  # the change's own effect here, adopted or not
                    row["budgets"][m]["raw"] = (change[0] - base[0], math.hypot(base[1], change[1]))
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per budget: the mean over spaces of the baseline, the chosen and the margin (± s.e.)."""
    out: dict[str, dict[str, float]] = {}
    budgets = sorted({m for r in rows for m in r["budgets"]}, key=int)
    for m in budgets:
        cells = [r["budgets"][m] for r in rows if m in r["budgets"]]
        n = len(cells)
        out[m] = {"baseline": sum(c["baseline"][0] for c in cells) / n,
                  "chosen": sum(c["chosen"][0] for c in cells) / n,
                  "margin": sum(c["margin"] for c in cells) / n,
                  "se": math.sqrt(sum(c["se"] ** 2 for c in cells)) / n, "spaces": n}
        if all("raw" in c for c in cells):
            out[m]["raw"] = sum(c["raw"][0] for c in cells) / n
            out[m]["raw_se"] = math.sqrt(sum(c["raw"][1] ** 2 for c in cells)) / n
    return out


def worst(rows: list[dict]) -> dict | None:
    """The space with the most negative margin, averaged over its budgets (for a change,
    ties, e.g. nowhere adopted, go to the space the change itself hurts most)."""
    def key(r: dict) -> tuple[float, float]:
        cells = r["budgets"].values()
        return (sum(c["margin"] for c in cells) / len(cells),
                sum(c.get("raw", (0.0, 0.0))[0] for c in cells) / len(cells))
    scored = [r for r in rows if r["budgets"]]
    return min(scored, key=key) if scored else None


def falls_with_budget(report: dict, strategy: str) -> list[str]:
    """Spaces where the strategy's P at a larger budget is below a smaller budget's by more
    than one standard error of the difference."""
    out = []
    for space, v in report["spaces"].items():
        row = v["strategies"].get(strategy) or {}
        ms = sorted(row, key=int)
        for a, b in itertools.pairwise(ms):
            drop = row[a]["P"] - row[b]["P"]
            if drop > math.hypot(row[a].get("se", 0.0), row[b].get("se", 0.0)):
                out.append(f"{space} P({a}) {row[a]['P']:.3f} > P({b}) {row[b]['P']:.3f}")
    return out


def against_previous(report: dict, previous: dict, strategy: str, before: str = "") -> list[dict]:
    """Per space and budget: the strategy's P now and `before`'s in the previous report (the
    same name by default), ± s.e., and whether it fell by more than one standard error of
    the difference."""
    rows = []
    for space, v in report["spaces"].items():
        now = v["strategies"].get(strategy) or {}
        then = (previous.get("spaces", {}).get(space, {}).get("strategies", {})
                .get(before or strategy) or {})
        for m in sorted(set(now) & set(then), key=int):
            se = math.hypot(now[m].get("se", 0.0), then[m].get("se", 0.0))
            diff = now[m]["P"] - then[m]["P"]
            rows.append({"space": space, "budget": m, "now": now[m]["P"], "before": then[m]["P"],
                         "now_se": now[m].get("se", 0.0), "before_se": then[m].get("se", 0.0),
                         "diff": diff, "se": se, "fell": diff < -se})
    return rows


def _fmt(c: tuple[float, float]) -> str:
    return f"{c[0]:6.3f} ± {c[1]:.3f}"


def print_rows(title: str, rows: list[dict], baseline: str, out: Callable[[str], None] = print
               ) -> None:
    if not rows:
        return
    out(f"\n{title}")
    out(f"  {'space':<22}{'held out':<12}{'M':>5}  {baseline:<16}  {'chosen on the others':<34}"
        f"  margin" + ("           (change - baseline here)" if any(
            "raw" in c for r in rows for c in r["budgets"].values()) else ""))
    for r in rows:
        for m, c in r["budgets"].items():
            held = "itself" if r["held_out"] == r["space"] else r["held_out"][:11]
            out(f"  {r['space']:<22}{held:<12}{m:>5}  {_fmt(c['baseline']):<16}  "
                f"{r['chosen'][:17]:<18}{_fmt(c['chosen']):<16}  {c['margin']:+.3f} ± {c['se']:.3f}"
                + (f"    ({c['raw'][0]:+.3f} ± {c['raw'][1]:.3f})" if "raw" in c else ""))
    for m, s in summary(rows).items():
        out(f"  mean over {s['spaces']} spaces M={m:<5} {baseline} {s['baseline']:.3f}  chosen "
            f"{s['chosen']:.3f}  margin {s['margin']:+.3f} ± {s['se']:.3f}"
            + (f"  (change - baseline {s['raw']:+.3f} ± {s['raw_se']:.3f})" if "raw" in s else ""))
    w = worst(rows)
    if w is not None:
        mean = sum(c["margin"] for c in w["budgets"].values()) / len(w["budgets"])
        raw = [c["raw"][0] for c in w["budgets"].values() if "raw" in c]
        out(f"  worst space: {w['space']} (margin {mean:+.3f} over its budgets, chosen on the "
            f"others: {w['chosen']}"
            + (f"; the change itself {sum(raw) / len(raw):+.3f} there)" if raw else ")"))


def report_leave_one_out(report: dict, baseline: str = "swarm", previous: dict | None = None,
                         out: Callable[[str], None] = print, previous_strategy: str = "") -> dict:
    """Prints and returns every leave-one-out comparison the report's strategies allow."""
    strategies = {s for v in report["spaces"].values() for s, r in v["strategies"].items() if r}
    if baseline not in strategies:
        out(f"leave-one-out: no runs of the baseline {baseline!r}")
        return {}
    agents = sorted(s for s in strategies if s.startswith("swarm-"))
    changes = sorted(s for s in strategies if s.startswith("swarm") and s != baseline
                     and not s.startswith("swarm-"))
    result: dict = {"baseline": baseline}
    for by in ("space", "vendor"):
        what = "one-space" if by == "space" else "one-GPU-vendor"
        if agents:
            rows = judge(report, baseline, agents, by)
            print_rows(f"leave-{what}-out: {baseline} vs the single agent chosen on the other "
                       "spaces (margin = baseline - chosen)", rows, baseline, out)
            result[f"agents_by_{by}"] = {"rows": rows, "summary": summary(rows)}
        for change in changes:
            rows = judge(report, baseline, [change], by, keep_baseline=True)
            print_rows(f"leave-{what}-out: the change {change} against {baseline} (effect = "
                       "chosen - baseline; 0 where the others keep the baseline)", rows,
                       baseline, out)
            result[f"{change}_by_{by}"] = {"rows": rows, "summary": summary(rows)}
    for strategy in [baseline, *changes]:
        fell = falls_with_budget(report, strategy)
        out(f"\n{strategy}: P falls as the budget grows on "
            + ("; ".join(fell) if fell else "no space (beyond one standard error)"))
        result[f"falls_{strategy}"] = fell
    if previous is not None:
        before = previous_strategy or baseline
        rows = against_previous(report, previous, baseline, before)
        fell = [r for r in rows if r["fell"]]
        out(f"\n{baseline} now against {before} before (diff ± one s.e. of the difference):")
        for r in rows:
            out(f"  {r['space']:<22}{r['budget']:>5}  {r['before']:6.3f} ± {r['before_se']:.3f}  ->"
                f"  {r['now']:6.3f} ± {r['now_se']:.3f}  {r['diff']:+.3f} ± {r['se']:.3f}"
                + ("  FELL" if r["fell"] else ""))
        out(f"{baseline} against {before} before: "
            + ("; ".join(f"{r['space']} M={r['budget']} {r['before']:.3f} -> {r['now']:.3f} "
                         f"(± {r['se']:.3f})" for r in fell)
               if fell else "no space below its previous P by more than one standard error"))
        result["previous"] = rows
    return result
