"""Headless entry point: `kernelswarm run | history | show | export | devices`; bare opens the GUI.

Bad input (a malformed goal, a missing space, an unknown run, a database that is not ours) gets
one line on stderr naming the problem and a non-zero exit, never a traceback. Exit codes: 0 done,
1 an error, 2 a usage error, 3 a run in which no candidate succeeded, 130 stopped by Ctrl-C.
The commands live by job in app.cli_run (run) and app.cli_show (history, show, export, devices).
"""

from __future__ import annotations

import argparse
import os
import sys

from app import __version__
from app.cli_cases import add_parser as add_cases_parser
from app.cli_common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NOTHING_SUCCEEDED, CliError
from app.cli_run import Progress, TraceWriter, cmd_run
from app.cli_show import available_devices, cmd_devices, cmd_export, cmd_history, cmd_show
from app.core.errors import GoalError

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_NOTHING_SUCCEEDED", "CliError", "Progress",
           "TraceWriter", "available_devices", "build_parser", "main"]


# ---- parser and entry -----------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelswarm",
        description="A swarm of search agents that optimises GPU kernels. Without a command, "
                    "opens the desktop app.")
    parser.add_argument("--version", action="version", version=f"kernelswarm {__version__}")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", metavar="PATH",
                    help="history database (default: $KERNELSWARM_DB or the user data directory)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", parents=[db], help="run a goal headless",
                         description="Run a goal (TOML) headless, or resume an interrupted run.")
    run.add_argument("goal", nargs="?", metavar="GOAL.toml", help="goal file")
    run.add_argument("--seed", type=int, help="swarm seed (overrides the goal)")
    run.add_argument("--max-evals", type=_positive_int, metavar="N",
                     help="evaluation budget, counting those of a resumed run")
    run.add_argument("--time-budget", type=_non_negative_float, metavar="S",
                     help="wall-clock budget in seconds (run clock; 0 = none)")
    run.add_argument("--workers", type=_positive_int, metavar="N", help="evaluation threads")
    run.add_argument("--agents", metavar="A,B,...",
                     help="agents to use (explorer, local, evolution, model, llm); overrides the goal")
    run.add_argument("--llm-base-url", metavar="URL",
                     help="OpenAI-compatible endpoint for the llm agents (key from "
                          "KERNELSWARM_LLM_API_KEY or OPENAI_API_KEY)")
    run.add_argument("--llm-model", metavar="NAME", help="model for the llm agents")
    run.add_argument("--trust-goal-endpoint", action="store_true",
                     help="send the API key to the goal file's [llm] base_url even though it is "
                          "not your configured endpoint")
    run.add_argument("--trust-goal-llm", action="store_true",
                     help="let the goal file's [llm] table raise your spending: a larger token "
                          "or cost budget, another model, more agents or retries")
    run.add_argument("--trace", metavar="FILE.jsonl", help="write every event as a JSON line")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--resume", type=int, metavar="RUN_ID",
                     help="continue an interrupted run without re-evaluating anything")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="evaluate on a Ray cluster: auto, host:port or ray://host:10001")
    run.add_argument("--cluster-fallback", choices=("wait", "local"),
                     help="when the cluster disappears: wait for it, or go on here")
    run.set_defaults(func=cmd_run)

    hist = sub.add_parser("history", parents=[db], help="list recorded runs")
    hist.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    hist.set_defaults(func=cmd_history)

    show = sub.add_parser("show", parents=[db], help="show one run")
    show.add_argument("run_id", type=int, metavar="RUN_ID")
    show.add_argument("--top", type=_positive_int, default=10, metavar="N")
    show.set_defaults(func=cmd_show)

    exp = sub.add_parser("export", parents=[db], help="export a run as json, csv or T4")
    exp.add_argument("run_id", type=int, metavar="RUN_ID")
    exp.add_argument("--format", choices=("json", "csv", "t4", "html"), default="json")
    exp.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    exp.set_defaults(func=cmd_export)

    dev = sub.add_parser("devices", help="which backends can run here")
    dev.add_argument("--cluster", metavar="ADDRESS", help="list a Ray cluster's nodes and devices")
    dev.set_defaults(func=cmd_devices)

    kt = sub.add_parser("import-kt", help="turn a Kernel Tuner script into a goal directory")
    kt.add_argument("script", metavar="SCRIPT.py", help="a script that calls kernel_tuner.tune_kernel")
    kt.add_argument("-o", "--output", metavar="DIR", help="goal directory (default: SCRIPT_goal)")
    kt.add_argument("--trust-script", action="store_true",
                    help="run the script with your own rights (files, API keys, network) where "
                         "this machine cannot run it in a sandbox cell")
    kt.set_defaults(func=cmd_import_kt)

    add_cases_parser(sub, db)

    selftest = sub.add_parser("selftest", help="check this installation (storage, replay, CPU, NVRTC)",
                              add_help=False)
    selftest.add_argument("selftest_args", nargs=argparse.REMAINDER)
    selftest.set_defaults(func=cmd_selftest)
    return parser


def cmd_import_kt(args: argparse.Namespace) -> int:
    from app.kt_import.importer import ImportRefused, import_script

    if args.trust_script:
        print(f"warning: import-kt runs {args.script} with your rights: it can read your files "
              "and API keys and use the network (--trust-script)", file=sys.stderr)
    try:
        done = import_script(args.script, args.output, trust=args.trust_script)
    except ImportRefused as exc:
        raise CliError(f"import-kt {args.script}: {exc}") from None
    for note in done.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {done.goal_path}; run it with: kernelswarm run {done.goal_path}")
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from app.selftest import main as selftest_main

    return selftest_main(args.selftest_args)


def _open_gui(parser: argparse.ArgumentParser) -> int:
    try:
        from app.ui.app import run_gui
    except ImportError:
        parser.print_help()
        return 0
    return int(run_gui() or 0)


def _known_errors() -> tuple[type[BaseException], ...]:
    from app.core.evaluator import BackendUnavailable
    from app.core.restrictions import RestrictionError
    from app.gpu.replay import CacheFileError
    from app.store import StoreError

    return (CliError, GoalError, StoreError, CacheFileError, RestrictionError, BackendUnavailable,
            FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    from app.session.registries import wire

    wire()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        return _open_gui(parser)
    known = _known_errors()
    from app.store import DatabaseError

    try:
        return args.func(args)
    except known as exc:
        print(f"kernelswarm: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except DatabaseError as exc:
        print(f"kernelswarm: error: history database: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `kernelswarm export 3 | head`
        return 0
    except Exception as exc:
        if os.environ.get("KERNELSWARM_DEBUG"):
            raise
        print(f"kernelswarm: error: {type(exc).__name__}: {exc} "
              "(set KERNELSWARM_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
