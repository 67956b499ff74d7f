"""Playing and scoring agents: ``play_episode`` records one episode, ``evaluate_agent`` runs a whole split in its fixed
order (``stepgym rollout``, in :mod:`stepgym.cli.rollout`, prints its success per task type).

Evaluation never samples: it iterates ``env.unwrapped.task_ids`` in order (ALFWorld valid_seen 140, valid_unseen
134 games), resetting each with ``options={"task_id": ...}``, which is the papers' protocol.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from stepgym import schema
from stepgym.agents import Agent
from stepgym.episodes import EpisodeRecorder
from stepgym.schema import Trajectory

__all__ = ["EvalResult", "evaluate_agent", "play_episode"]


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
        """task type -> (successes, episodes) (:func:`stepgym.schema.success_by_type`), plus ``"all"``."""
        out = schema.success_by_type((ep["task_type"], ep["won"]) for ep in self.episodes)
        if self.episodes:
            out["all"] = (sum(s for s, _ in out.values()), len(self.episodes))
        return out

    def table(self) -> str:
        rows = ["| task type | success | episodes | rate |", "|---|---|---|---|"]
        for k, (s, n) in self.success_by_type().items():
            rows.append(f"| {k} | {s} | {n} | {100.0 * s / max(n, 1):.1f}% |")
        return "\n".join(rows)


def evaluate_agent(
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
            "task_type": traj.task_type,
            "won": traj.success,  # the recorded field name; its value is Trajectory.success
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
