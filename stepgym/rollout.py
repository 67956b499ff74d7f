"""Playing and scoring agents: ``play_episode`` records one episode, ``evaluate_agent`` runs a whole split in its fixed
order (``stepgym rollout``, in :mod:`stepgym.cli.rollout`, prints its success per task type).

Evaluation never samples: it iterates ``env.unwrapped.task_ids`` in order (ALFWorld valid_seen 140, valid_unseen
134 games), resetting each with ``options={"task_id": ...}``, which is the papers' protocol.

Failure semantics (docs/failures.md) live in :func:`play_episode`, the one loop every single-env phase plays
through (the tiny model's tokenizer corpus, ``stepgym rollout``, the endpoint evaluation, the reference graph's
seeding, the benchmarks): an exception from the env's ``reset`` or ``step`` ends the episode **aborted** with its
cause (:func:`stepgym.errors.abort_cause_of`), never as a failure, and the caller goes on with the next episode.
An exception from the agent (the policy, e.g. an endpoint that stopped answering) is not the env's: it propagates.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from stepgym import schema
from stepgym.agents import Agent
from stepgym.episodes import EpisodeRecorder
from stepgym.errors import abort_cause_of
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

    An exception from ``env.reset`` / ``env.step`` (an infrastructure failure) ends the episode aborted: the
    trajectory says so (``aborted``, ``abort_cause``; a failed reset gives one with no steps) and holds the steps
    taken before it; the env must be reset before it is stepped again (the next episode's reset does that).
    """
    try:
        obs, info = env.reset(seed=seed, options=options)
    except Exception as exc:  # the env could not start the task: an aborted episode with no steps
        tid = (options or {}).get("task_id")
        traj = Trajectory("" if tid is None else str(tid), "", {})
        traj.abort(abort_cause_of(exc))
        return traj
    agent.reset()
    recorder = EpisodeRecorder()
    traj = recorder.start(obs, info)
    while max_steps is None or len(traj.steps) < max_steps:
        action = agent.act(obs, info)
        if action is None:
            break
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as exc:  # no transition happened: nothing is recorded for this action
            traj.abort(abort_cause_of(exc))
            break
        recorder.add(action, obs, reward, terminated, truncated, info)
        if terminated or truncated:
            break
    return traj


@dataclass
class EvalResult:
    """Per-episode outcomes of an evaluation run, with per-task-type aggregation."""

    episodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> list[dict[str, Any]]:
        """The episodes that ended (terminated or truncated): the aborted ones have no outcome."""
        return [ep for ep in self.episodes if not ep.get("aborted")]

    def abort_counts(self) -> dict[str, int]:
        """Aborted episodes per cause (empty when none was aborted)."""
        out: dict[str, int] = {}
        for ep in self.episodes:
            if ep.get("aborted"):
                out[ep["abort_cause"]] = out.get(ep["abort_cause"], 0) + 1
        return out

    def success_by_type(self) -> dict[str, tuple[int, int]]:
        """task type -> (successes, finished episodes) (:func:`stepgym.schema.success_by_type`), plus ``"all"``;
        aborted episodes are left out (:meth:`abort_counts` counts them)."""
        done = self.finished
        out = schema.success_by_type((ep["task_type"], ep["won"]) for ep in done)
        if done:
            out["all"] = (sum(s for s, _ in out.values()), len(done))
        return out

    def table(self) -> str:
        rows = ["| task type | success | episodes | rate |", "|---|---|---|---|"]
        for k, (s, n) in self.success_by_type().items():
            rows.append(f"| {k} | {s} | {n} | {100.0 * s / max(n, 1):.1f}% |")
        aborts = self.abort_counts()
        if aborts:
            causes = ", ".join(f"{c} {n}" for c, n in sorted(aborts.items()))
            rows.append(
                f"\n{sum(aborts.values())} of {len(self.episodes)} episodes aborted by an infrastructure failure "
                f"({causes}): not counted above"
            )
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
            # an aborted episode says so (docs/failures.md); the keys are absent on the others
            **({"aborted": True, "abort_cause": traj.abort_cause} if traj.aborted else {}),
        }
        result.episodes.append(ep)
        if on_episode is not None:
            on_episode(ep, traj)
        if bar is not None:
            done = result.finished
            bar.set_postfix(success=f"{sum(e['won'] for e in done) / max(len(done), 1):.2f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    return result
