"""``stepgym rollout``: play an agent on every task of a split, in its fixed order, and print success per task type."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stepgym.cli._options import add_task_args, check_probability, check_task_args, on_interrupt, parse_kv

__all__ = ["main"]


def _llm_requested(argv: list[str] | None) -> bool:
    """``--agent llm`` is played by :mod:`stepgym.cli.endpoint` (concurrent, resumable, its own options)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return any(
        a == "--agent=llm" or (a == "--agent" and i + 1 < len(args) and args[i + 1] == "llm")
        for i, a in enumerate(args)
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="stepgym rollout",
        description="Run an agent on a stepgym env and print success per task type. The options of "
        "`--agent llm` (a served model) are listed after these.",
    )
    add_task_args(ap)
    ap.add_argument(
        "--agent",
        default="expert",
        choices=["expert", "random", "noisy", "llm"],
        help="llm: a model behind an OpenAI-compatible endpoint (its options follow)",
    )
    ap.add_argument(
        "--error-rate", type=float, default=0.2, help="noisy expert: probability of a random action"
    )
    ap.add_argument(
        "--seed", type=int, default=0, help="seed of the agent's random choices and of the --limit sample"
    )
    ap.add_argument("--out", default=None, help="write one JSON line per episode here")
    ap.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="record the episodes for `stepgym view` (DIR/episodes.jsonl.gz)",
    )
    ap.add_argument(
        "--no-progress",
        "--run.no-progress",
        dest="no_progress",
        action="store_true",
        help="no progress bar (--run.no-progress, the flag of `stepgym train`, is the same)",
    )
    return ap


def _help_with_llm_options(ap: argparse.ArgumentParser) -> int:
    from stepgym.cli.endpoint import build_parser as llm_parser

    llm = llm_parser("stepgym rollout --agent llm").format_help()
    print(
        ap.format_help() + "\n--agent llm (a served model; its own flags, and --env/--split/--limit/... as "
        "above):\n\n" + llm
    )
    return 0


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    from stepgym.envs import check_split

    check_task_args(args)
    check_probability("--error-rate", args.error_rate)
    kwargs: dict[str, Any] = {"split": check_split(args.env, args.split), **parse_kv(args.env_kwarg)}
    if not kwargs["split"]:
        del kwargs["split"]
    if args.max_steps > 0:
        kwargs["max_steps"] = args.max_steps
    if args.data_root is not None:
        kwargs["data_root"] = args.data_root
    from stepgym.envs import check_env_kwargs

    return check_env_kwargs(args.env, kwargs)


def main(argv: list[str] | None = None) -> int:
    if _llm_requested(argv):
        from stepgym.cli.endpoint import main as llm_main

        return llm_main(argv, prog="stepgym rollout")
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if "-h" in argv or "--help" in argv:
        return _help_with_llm_options(ap)
    args = ap.parse_args(argv)
    kwargs = _env_kwargs(args)

    import gymnasium as gym

    import stepgym  # noqa: F401 - registers the envs
    from stepgym.agents import make_agent
    from stepgym.data import sample_tasks
    from stepgym.rollout import evaluate_agent

    env = gym.make(args.env, **kwargs)
    agent = make_agent(args.agent, seed=args.seed, error_rate=args.error_rate)
    ids = sample_tasks(env.unwrapped.task_ids, args.limit, seed=args.seed)
    sink = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115 - closed below
    recorder = None
    if args.record:
        from stepgym.recording import GroupRecorder

        recorder = GroupRecorder(
            args.record, meta={"source": "rollout", "method": args.agent, "env_id": args.env}
        )
    saved = [f for f in (args.out, args.record) if f]
    on_interrupt(
        lambda: (
            f"the finished episodes are in {' and '.join(saved)}; a rollout does not resume, run it again"
            if saved
            else "nothing was saved (pass --out FILE or --record DIR to keep the episodes)"
        )
    )
    try:

        def write(ep: dict[str, Any], traj: Any) -> None:
            if sink is not None:
                sink.write(json.dumps(ep) + "\n")
                sink.flush()
            if recorder is not None:
                recorder.record_trajectories([traj])

        result = evaluate_agent(env, agent, task_ids=ids, progress=not args.no_progress, on_episode=write)
    finally:
        if sink is not None:
            sink.close()
        env.close()
    sample = f", a stratified sample of {len(ids)} tasks (seed {args.seed})" if args.limit else ""
    print(f"{args.agent} on {args.env} ({kwargs.get('split', 'no split')}{sample}):")
    print(result.table())
    return 0
