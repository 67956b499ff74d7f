"""Playing and scoring agents: ``play_episode`` records one episode, ``evaluate`` runs a whole split in its fixed
order, and ``stepgym rollout`` prints success per task type.

Evaluation never samples: it iterates ``env.unwrapped.task_ids`` in order (ALFWorld valid_seen 140, valid_unseen
134 games), resetting each with ``options={"task_id": ...}``, which is the papers' protocol.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from stepgym import schema
from stepgym.agents import Agent, make_agent
from stepgym.schema import Trajectory
from stepgym.wrappers._recording import EpisodeRecorder

__all__ = ["EvalResult", "evaluate", "main", "play_episode"]


def play_episode(
    env: gym.Env,
    agent: Agent,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    max_steps: int | None = None,
) -> Trajectory:
    """Reset ``env``, let ``agent`` act until the episode ends, and return the recorded :class:`Trajectory`.

    An agent may return ``None`` to stop before the episode ends (a replay that ran out of actions); the
    trajectory is then returned unfinished. ``max_steps`` stops the recording the same way.
    """
    obs, info = env.reset(seed=seed, options=options)
    agent.reset()
    recorder = EpisodeRecorder()
    traj = recorder.start(obs, info)
    while max_steps is None or len(traj.steps) < max_steps:
        action = agent.act(obs, info)
        if action is None:
            break
        obs, reward, terminated, truncated, info = env.step(action)
        recorder.add(action, obs, reward, terminated, truncated, info)
        if terminated or truncated:
            break
    return traj


@dataclass
class EvalResult:
    """Per-episode outcomes of an evaluation run, with per-task-type aggregation."""

    episodes: list[dict[str, Any]] = field(default_factory=list)

    def success_by_type(self) -> dict[str, tuple[int, int]]:
        """task type -> (successes, episodes), plus ``"all"``."""
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for ep in self.episodes:
            for key in (ep["task_type"], "all"):
                out[key][0] += int(ep["won"])
                out[key][1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items(), key=lambda kv: (kv[0] == "all", kv[0]))}

    def table(self) -> str:
        rows = ["| task type | success | episodes | rate |", "|---|---|---|---|"]
        for k, (s, n) in self.success_by_type().items():
            rows.append(f"| {k} | {s} | {n} | {100.0 * s / max(n, 1):.1f}% |")
        return "\n".join(rows)


def evaluate(
    env: gym.Env,
    agent: Agent,
    *,
    task_ids: list[str] | None = None,
    limit: int | None = None,
    progress: bool = True,
    on_episode: Any = None,
) -> EvalResult:
    """Play every task of the env's split once, in the fixed order of ``env.unwrapped.task_ids``."""
    ids = list(task_ids if task_ids is not None else env.unwrapped.task_ids)
    if limit is not None:
        ids = ids[:limit]
    result = EvalResult()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(ids), desc="episodes", unit="ep", file=sys.stderr)
    for task_id in ids:
        traj = play_episode(env, agent, options={"task_id": task_id})
        ep = {
            "task_id": task_id,
            "task_type": str(traj.initial_info.get(schema.TASK_TYPE, "")),
            "won": traj.won,
            "steps": len(traj.steps),
            "reward": traj.total_reward,
        }
        result.episodes.append(ep)
        if on_episode is not None:
            on_episode(ep, traj)
        if bar is not None:
            done = len(result.episodes)
            bar.set_postfix(success=f"{sum(e['won'] for e in result.episodes) / done:.2f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    return result


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="stepgym rollout", description="Run an agent on a stepgym env and print success per task type."
    )
    ap.add_argument("--env", default="StepGym/ALFWorld-v0", help="a registered env id")
    ap.add_argument("--split", default="valid_seen", help="the split to evaluate (whole split, fixed order)")
    ap.add_argument("--agent", default="expert", choices=["expert", "random", "noisy"])
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
    try:

        def write(ep: dict[str, Any], _traj: Trajectory) -> None:
            if sink is not None:
                sink.write(json.dumps(ep) + "\n")
                sink.flush()

        result = evaluate(env, agent, limit=args.limit, progress=not args.no_progress, on_episode=write)
    finally:
        if sink is not None:
            sink.close()
        env.close()
    print(f"{args.agent} on {args.env} ({args.split}):")
    print(result.table())
    return 0
