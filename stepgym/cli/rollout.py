"""``stepgym rollout``: play an agent on every task of a split, in its fixed order, and print success per task type."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import gymnasium as gym

from stepgym.agents import make_agent
from stepgym.rollout import evaluate
from stepgym.schema import Trajectory

__all__ = ["main"]


def _parse_kv(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--env-kwarg expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _llm_requested(argv: list[str] | None) -> bool:
    """``--agent llm`` is played by :mod:`stepgym.llm_eval` (concurrent, resumable, its own options)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return any(
        a == "--agent=llm" or (a == "--agent" and i + 1 < len(args) and args[i + 1] == "llm")
        for i, a in enumerate(args)
    )


def main(argv: list[str] | None = None) -> int:
    if _llm_requested(argv):
        from stepgym.llm_eval import main as llm_main

        return llm_main(argv, prog="stepgym rollout")
    ap = argparse.ArgumentParser(
        prog="stepgym rollout", description="Run an agent on a stepgym env and print success per task type."
    )
    ap.add_argument("--env", default="StepGym/ALFWorld-v0", help="a registered env id")
    ap.add_argument("--split", default="valid_seen", help="the split to evaluate (whole split, fixed order)")
    ap.add_argument(
        "--agent",
        default="expert",
        choices=["expert", "random", "noisy", "llm"],
        help="llm: a model behind an OpenAI-compatible endpoint (`stepgym rollout --agent llm --help`)",
    )
    ap.add_argument(
        "--error-rate", type=float, default=0.2, help="noisy expert: probability of a random action"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the agent's random choices")
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks of the split")
    ap.add_argument("--max-steps", type=int, default=None, help="step limit (env default if omitted)")
    ap.add_argument("--data-root", default=None, help="data folder (default: $STEPGYM_DATA / user cache)")
    ap.add_argument(
        "--env-kwarg", action="append", default=[], metavar="KEY=VALUE", help="extra env kwargs (JSON values)"
    )
    ap.add_argument("--out", default=None, help="write one JSON line per episode here")
    ap.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="record the episodes for `stepgym view` (DIR/episodes.jsonl.gz)",
    )
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    import stepgym  # noqa: F401 - registers the envs

    kwargs = {"split": args.split, **_parse_kv(args.env_kwarg)}
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    if args.data_root is not None:
        kwargs["data_root"] = args.data_root
    env = gym.make(args.env, **kwargs)
    agent = make_agent(args.agent, seed=args.seed, error_rate=args.error_rate)
    sink = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115 - closed below
    recorder = None
    if args.record:
        from stepgym.recording import GroupRecorder

        recorder = GroupRecorder(
            args.record, meta={"source": "rollout", "method": args.agent, "env_id": args.env}
        )
    try:

        def write(ep: dict[str, Any], traj: Trajectory) -> None:
            if sink is not None:
                sink.write(json.dumps(ep) + "\n")
                sink.flush()
            if recorder is not None:
                recorder.record_trajectories([traj])

        result = evaluate(env, agent, limit=args.limit, progress=not args.no_progress, on_episode=write)
    finally:
        if sink is not None:
            sink.close()
        env.close()
    print(f"{args.agent} on {args.env} ({args.split}):")
    print(result.table())
    return 0
