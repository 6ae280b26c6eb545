"""The ablation report of bench/search_efficiency.py (`--ablation`): the swarm against the
virtual best single agent (chosen per space with hindsight) and the per-budget oracle."""

from __future__ import annotations

import math


def virtual_best(report: dict) -> dict[str, dict[str, float]]:
    """Per budget, the mean over spaces of the swarm's P, of the virtual best single agent's
    (per space the agent with the best mean P over the budgets, chosen with hindsight) and of
    the oracle that picks the best agent per space and budget (stricter still)."""
    out: dict[str, dict[str, float]] = {}
    cells: dict[str, list[tuple[float, float, float, float]]] = {str(m): [] for m in report["budgets"]}
    for space in report["spaces"].values():
        rows = space["strategies"]
        alone = {s: r for s, r in rows.items() if s.startswith("swarm-") and r}
        if not alone or not rows.get("swarm"):
            continue
        chosen = max(alone, key=lambda s: sum(v["P"] for v in alone[s].values()) / len(alone[s]))
        for m, column in cells.items():
            if m in rows["swarm"] and all(m in r for r in alone.values()):
                # the margin's variance on this space: independent runs of the two
                var = rows["swarm"][m].get("se", 0.0) ** 2 + alone[chosen][m].get("se", 0.0) ** 2
                column.append((rows["swarm"][m]["P"], alone[chosen][m]["P"],
                               max(r[m]["P"] for r in alone.values()), var))
    for m, c in cells.items():
        if c:
            out[m] = {"swarm": sum(x[0] for x in c) / len(c),
                      "virtual_best": sum(x[1] for x in c) / len(c),
                      "oracle_per_budget": sum(x[2] for x in c) / len(c), "spaces": len(c),
                      "margin_se": math.sqrt(sum(x[3] for x in c)) / len(c)}
    return out


def print_ablation(report: dict) -> None:
    vb = virtual_best(report)
    report["virtual_best"] = vb
    if not vb:
        return
    print("\nablation (mean P over spaces; virtual best: per space the single agent with the best "
          "mean P, chosen with hindsight; ± one standard error of the margin over the seeds; "
          "oracle: the best agent per space and budget):")
    for m, row in vb.items():
        print(f"  M={m:<6} swarm {row['swarm']:7.3f}   virtual best agent {row['virtual_best']:7.3f}"
              f"   margin {row['swarm'] - row['virtual_best']:+.3f} ± {row['margin_se']:.3f}"
              f"   (oracle {row['oracle_per_budget']:.3f})")
    swarm = sum(r["swarm"] for r in vb.values()) / len(vb)
    best = sum(r["virtual_best"] for r in vb.values()) / len(vb)
    print(f"swarm vs virtual best agent {swarm:.3f} vs {best:.3f}")


def share_rows(report: dict) -> list[dict]:
    """Per swarm strategy, space and agent: the evaluations it took at the largest budget
    (mean and most in one run) beside its alone-score (swarm-AGENT's P at that budget and its
    mean over the budgets), when both ran."""
    top = str(max(report["budgets"]))
    rows = []
    for strategy, spaces in report.get("agent_evaluations", {}).items():
        for space, agents in spaces.items():
            runs = report["spaces"].get(space, {}).get("strategies", {})
            for agent, took in agents.items():
                alone = runs.get(f"swarm-{agent}") or {}
                rows.append({"strategy": strategy, "space": space, "agent": agent,
                             "mean": took["mean"], "max": took["max"],
                             "alone_top": alone[top]["P"] if top in alone else None,
                             "alone_mean": (sum(v["P"] for v in alone.values()) / len(alone)
                                            if alone else None)})
    return rows


def print_shares(report: dict) -> None:
    """Who took the budget where: per space, each agent's evaluations at the largest budget
    and, where the agent also ran alone, its alone-score (P at that budget; mean P)."""
    rows = share_rows(report)
    top = max(report["budgets"])
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        print(f"\n{strategy}: evaluations each agent took of {top} (mean / most in one run) "
              "and its alone-score (P at that budget / mean P over the budgets)")
        for space in dict.fromkeys(r["space"] for r in rows if r["strategy"] == strategy):
            cells = []
            for r in rows:
                if r["strategy"] != strategy or r["space"] != space:
                    continue
                alone = ("" if r["alone_top"] is None
                         else f" [{r['alone_top']:+.2f} / {r['alone_mean']:+.2f}]")
                cells.append(f"{r['agent']} {r['mean']:.1f}/{r['max']}{alone}")
            print(f"  {space:<22}" + "  ".join(cells))
