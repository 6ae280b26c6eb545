"""LLM agents: how often their kernels compile, verify, and beat the tuned template.

    KERNELSWARM_LLM_BASE_URL=https://api.openai.com/v1 KERNELSWARM_LLM_MODEL=gpt-4o-mini \\
    KERNELSWARM_LLM_API_KEY=sk-... \\
        python bench/llm_agents.py [--backend cuda|cpu] [--operators softmax,...]
                                   [--tune-evals 40] [--llm-evals 24]

    python bench/llm_agents.py --base-url http://127.0.0.1:11434/v1 --model qwen2.5-coder \
        --backend cpu --roles memory,tiling,fixer      # any endpoint named on the command line

    python bench/llm_agents.py --scripted   # plumbing check: loopback server, canned replies

Per operator, in one process and on one device: first the classical agents tune the template
(`--tune-evals` evaluations); then the LLM agents (every configured role) continue the same run
from that evidence (the coordinator fills idle slots with template draws) for `--llm-evals` more, each LLM kernel going
through the full cascade (policy, compile, verify, time, re-verify). Reported per operator:
LLM candidates, how many compiled, verified, and beat the tuned template's best (same timing
protocol, same run), plus tokens and cost. The last line sums them up:

    llm candidates N: compiled X%, verified Y%, beat the tuned template Z%

and a table per role (memory, tiling, fixer): candidates, compile / verify / beat-the-template
rates, candidates of the role's kernels tuned by the swarm (declared tunables), improvements
of the run's best, tokens, cost and cost per improvement.

Without a reachable endpoint it prints how to point it at one and exits 2. `--scripted` runs the
CPU softmax against tests/llm_server.py with fixed replies: it checks the harness, not a model.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from app.goal import Goal
from app.llm import LLMSettings, make_llm_team
from app.llm.settings import LLMSettingsError, resolve_api_key
from app.session import build_evaluator
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan

SIZES = {"cpu": {"softmax": [1024, 1024], "rmsnorm": [1024, 1024], "transpose": [2048, 2048],
                 "gemm": [256, 256, 256]},
         "cuda": {"softmax": [8192, 4096], "rmsnorm": [8192, 4096], "transpose": [8192, 8192],
                  "layernorm": [8192, 4096]}}
CLASSICAL = ["explorer", "local", "evolution", "model"]

HOW_TO = """No reachable LLM endpoint ({why}).
Point the benchmark at one through the environment, e.g.:
  OpenAI:     KERNELSWARM_LLM_BASE_URL=https://api.openai.com/v1 KERNELSWARM_LLM_MODEL=gpt-4o-mini
              KERNELSWARM_LLM_API_KEY=sk-...   (or OPENAI_API_KEY)
  vLLM:       vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --port 8000
              KERNELSWARM_LLM_BASE_URL=http://127.0.0.1:8000/v1 KERNELSWARM_LLM_MODEL=Qwen/Qwen2.5-Coder-7B-Instruct
  Ollama:     ollama serve; ollama pull qwen2.5-coder
              KERNELSWARM_LLM_BASE_URL=http://127.0.0.1:11434/v1 KERNELSWARM_LLM_MODEL=qwen2.5-coder
Then: python bench/llm_agents.py --backend cuda   (or --backend cpu on a machine without a GPU)
To check the harness without a model: python bench/llm_agents.py --scripted"""


def endpoint_problem(settings: LLMSettings) -> str | None:
    try:  # the official SDK as an independent check of the endpoint (the bench extra)
        import openai
    except ImportError:
        return "the endpoint check needs the official SDK: pip install -e '.[bench]'"

    key = resolve_api_key(settings)
    if not key:
        return "no API key in KERNELSWARM_LLM_API_KEY / OPENAI_API_KEY / the OS keyring"
    try:
        client = openai.OpenAI(base_url=settings.base_url, api_key=key, timeout=10, max_retries=0)
        client.models.list()
    except openai.APIStatusError as exc:
        if exc.status_code in (401, 403):
            return f"{settings.base_url} rejected the key (HTTP {exc.status_code})"
        # some servers have no /models: the endpoint answers, that is enough
    except openai.APIError as exc:
        return f"{settings.base_url} did not answer: {type(exc).__name__}"
    return None


def bench_operator(backend: str, operator: str, settings: LLMSettings, tune_evals: int,
                   llm_evals: int, seed: int) -> dict:
    goal = Goal(name=f"llm bench {operator}", backend=backend, operator=operator,
                shapes=[SIZES[backend][operator]]).validate()
    goal.swarm.seed = seed
    evaluator = build_evaluator(goal)
    t0 = time.perf_counter()
    try:
        goal.stop.max_evals = tune_evals
        tuned = Coordinator(evaluator.space, evaluator, RunPlan(agents=CLASSICAL,
                            max_evals=goal.stop.max_evals, seed=seed, goal_name=goal.name,
                            backend=backend)).run()
        team = make_llm_team(goal, evaluator, settings=settings)
        goal.stop.max_evals = tune_evals + llm_evals
        run = Coordinator(team.evaluator.space, team.evaluator, RunPlan(agents=team.agents,
                          max_evals=goal.stop.max_evals, seed=seed, prior=tuned.history,
                          goal_name=goal.name, backend=backend)).run()
    finally:
        evaluator.close()
    llm = [e for e in run.history if e.agent.startswith("llm-") and e.source is not None]
    print(f"  {operator}: run ended ({run.reason}) after {run.evaluations} evaluations; "
          + ", ".join(f"{a.name} {a.stats}" for a in team.agents), file=sys.stderr)
    passed = lambda e, stage: any(s.name == stage and s.ok for s in e.stages)
    base = tuned.best.value if tuned.best else None
    beat = [e for e in llm if e.ok and base is not None and e.value is not None
            and (e.value < base if goal.objective.minimize else e.value > base)]
    best_llm = min((e.value for e in llm if e.ok and e.value is not None), default=None)
    roles = _per_role(run.history, team, base, goal.objective.minimize, passed)
    return {"operator": operator, "roles": roles, "candidates": len(llm),
            "compiled": sum(passed(e, "compile") for e in llm),
            "verified": sum(passed(e, "verify") and passed(e, "reverify") for e in llm),
            "beat": len(beat), "tuned": base, "best_llm": best_llm,
            "rejected": sum(e.reason == "static_check" for e in llm),
            "tokens": team.totals()["tokens"], "cost": team.totals()["cost"],
            "seconds": time.perf_counter() - t0}


def _per_role(history: list, team, base: float | None, minimize: bool, passed) -> dict:
    """Per LLM agent: candidates and rates, tuned variants, improvements, tokens and cost."""
    better = lambda a, b: b is None or (a < b if minimize else a > b)
    out: dict[str, dict] = {}
    for agent in team.agents:
        recs = [r for r in team.client.records if r.agent == agent.name]
        out[agent.name] = {"candidates": 0, "compiled": 0, "verified": 0, "beat": 0, "tuned": 0,
                           "improvements": 0, "tokens": sum(r.prompt_tokens + r.completion_tokens
                                                            for r in recs),
                           "cost": sum(r.cost for r in recs)}
    best = base
    for e in history:
        role = e.agent.split("+")[0]
        row = out.get(role)
        ok = e.ok and e.value is not None
        if row is not None and e.source is not None:
            if "+" in e.agent:
                row["tuned"] += 1
            else:
                row["candidates"] += 1
                row["compiled"] += passed(e, "compile")
                row["verified"] += passed(e, "verify") and passed(e, "reverify")
                row["beat"] += ok and base is not None and better(e.value, base)
        if ok and better(e.value, best):
            best = e.value
            if row is not None:
                row["improvements"] += 1
    return out


def print_roles(rows: list[dict]) -> None:
    totals: dict[str, dict] = {}
    for r in rows:
        for name, v in r.get("roles", {}).items():
            t = totals.setdefault(name, dict.fromkeys(v, 0))
            for k, x in v.items():
                t[k] += x
    if not totals:
        return
    print(f"\n{'role':<14} {'cands':>5} {'compile':>8} {'verify':>7} {'beat':>6} {'tuned':>5} "
          f"{'impr':>4} {'tokens':>8} {'cost':>8} {'cost/impr':>9}")
    for name, t in totals.items():
        n = t["candidates"]
        pct = lambda k, t=t, n=n: f"{100.0 * t[k] / n:.0f}%" if n else "-"
        per = f"{t['cost'] / t['improvements']:.4f}" if t["improvements"] else "-"
        print(f"{name:<14} {n:>5} {pct('compiled'):>8} {pct('verified'):>7} {pct('beat'):>6} "
              f"{t['tuned']:>5} {t['improvements']:>4} {t['tokens']:>8} {t['cost']:>8.4f} {per:>9}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--operators", default="")
    parser.add_argument("--tune-evals", type=int, default=40)
    parser.add_argument("--llm-evals", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-url", default="", help="OpenAI-compatible endpoint, e.g. "
                        "http://127.0.0.1:11434/v1 (Ollama), :8000/v1 (vLLM), :1234/v1 (LM Studio)")
    parser.add_argument("--model", default="")
    parser.add_argument("--roles", default="", help="comma list of memory,tiling,fixer")
    parser.add_argument("--scripted", action="store_true",
                        help="CPU softmax against the loopback server with canned replies")
    args = parser.parse_args(argv)
    server = None
    try:
        settings = LLMSettings.from_env()
        overrides = {k: v for k, v in (("base_url", args.base_url), ("model", args.model)) if v}
        if args.roles:
            overrides["roles"] = [r for r in args.roles.split(",") if r]
        if overrides:
            settings = LLMSettings(**{**settings.to_dict(), **overrides}).validate()
    except LLMSettingsError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.scripted:
        from llm_server import ChatServer, Reply
        from test_llm_run import BROKEN, CHEAT, GOOD, NO_CODE

        server = ChatServer(default=Reply(NO_CODE), lifetime_s=3600).start()
        server.add(Reply(CHEAT), Reply(GOOD), Reply(BROKEN))
        settings = LLMSettings(base_url=server.base_url, model="scripted", roles=["memory"])
        os.environ.setdefault("KERNELSWARM_LLM_API_KEY", "scripted")
        args.backend, operators = "cpu", ["softmax"]
        args.tune_evals, args.llm_evals = min(args.tune_evals, 8), min(args.llm_evals, 4)
    else:
        operators = [o for o in args.operators.split(",") if o] or list(SIZES[args.backend])
        problem = endpoint_problem(settings)
        if problem:
            print(HOW_TO.format(why=problem))
            return 2
    print(f"endpoint {settings.base_url} model {settings.model}, roles {', '.join(settings.roles)},"
          f" backend {args.backend}", file=sys.stderr)
    rows = []
    try:
        for op in operators:
            print(f"{op}: tuning the template, then LLM agents ...", file=sys.stderr, flush=True)
            rows.append(bench_operator(args.backend, op, settings, args.tune_evals,
                                       args.llm_evals, args.seed))
    finally:
        if server is not None:
            server.stop()
    print(f"{'operator':<10} {'cands':>5} {'static':>6} {'compiled':>8} {'verified':>8} "
          f"{'beat':>5} {'tuned':>10} {'best llm':>10} {'tokens':>8} {'cost':>7} {'s':>6}")
    for r in rows:
        fmt = lambda v: f"{v:.4g}" if v is not None else "-"
        print(f"{r['operator']:<10} {r['candidates']:>5} {r['rejected']:>6} {r['compiled']:>8} "
              f"{r['verified']:>8} {r['beat']:>5} {fmt(r['tuned']):>10} {fmt(r['best_llm']):>10} "
              f"{r['tokens']:>8} {r['cost']:>7.3f} {r['seconds']:>6.0f}")
    n = sum(r["candidates"] for r in rows)
    pct = lambda k: 100.0 * sum(r[k] for r in rows) / n if n else 0.0
    print_roles(rows)
    print(f"\nllm candidates {n}: compiled {pct('compiled'):.0f}%, verified {pct('verified'):.0f}%, "
          f"beat the tuned template {pct('beat'):.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
