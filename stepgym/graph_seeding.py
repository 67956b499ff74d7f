"""Seeding a reference graph by playing known-good policies: an agent, the env's expert, stored walkthroughs.

The graph (:mod:`stepgym.reference_graph`) is a data structure and plays nothing; these loops sit one layer up,
beside :func:`stepgym.rollout.play_episode`, which records each episode. Every one plays each task once, in the
order given (default: ``env.unwrapped.task_ids``), and adds the episodes the graph's ``success_fn`` counts as
successes through :meth:`~stepgym.reference_graph.AgenticReferenceGraph.add_trajectory`.

Example (stepgym's credit-assignment toy)::

    >>> import gymnasium as gym, stepgym
    >>> from stepgym.reference_graph import AgenticReferenceGraph
    >>> graph = AgenticReferenceGraph()
    >>> seed_graph_from_expert(graph, gym.make("StepGym/CreditToy-v0"), ["credit-train-00000"])
    1
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from stepgym import schema
from stepgym.agents import Agent
from stepgym.rollout import play_episode

if TYPE_CHECKING:
    from stepgym.reference_graph import AgenticReferenceGraph

__all__ = ["seed_graph_from_agent", "seed_graph_from_expert", "seed_graph_from_walkthroughs"]


def seed_graph_from_agent(
    graph: AgenticReferenceGraph,
    env: gym.Env,
    agent: Agent,
    task_ids: Iterable[str] | None = None,
    *,
    seed: int | None = None,
) -> int:
    """Play ``agent`` once per task and add its successful trajectories to ``graph``; returns the number added.

    ``seed``: the i-th task's episode is reset with ``seed + i``, so the env's own random choices (ALFWorld's
    expert breaks ties with the env's generator) and hence the graph are the same on every run; ``None`` leaves the
    env's generator as it is (seeded from the OS on a first reset).
    """
    added = 0
    for i, tid in enumerate(task_ids if task_ids is not None else env.unwrapped.task_ids):
        traj = play_episode(env, agent, seed=None if seed is None else seed + i, options={"task_id": tid})
        if graph.success_fn(traj):
            graph.add_trajectory(traj)
            added += 1
    return added


def seed_graph_from_walkthroughs(
    graph: AgenticReferenceGraph,
    env: gym.Env,
    task_ids: Iterable[str] | None = None,
    *,
    seed: int | None = None,
) -> int:
    """Replay each task's stored walkthrough (``env.unwrapped.walkthrough``, ALFWorld) and add the wins."""
    return seed_graph_from_agent(graph, env, _Walkthrough(env), task_ids, seed=seed)


def seed_graph_from_expert(
    graph: AgenticReferenceGraph,
    env: gym.Env,
    task_ids: Iterable[str] | None = None,
    *,
    seed: int | None = None,
) -> int:
    """Play the env's ``stepgym/expert_action`` until it has none, per task, and add the wins."""
    return seed_graph_from_agent(graph, env, _Expert(), task_ids, seed=seed)


class _Walkthrough:
    """Replays the env's stored walkthrough of the current task, then stops (returns None)."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self._actions: list[str] = []

    def reset(self) -> None:
        self._actions = list(self.env.unwrapped.walkthrough)[::-1]

    def act(self, observation: str, info: dict[str, Any]) -> str | None:
        return self._actions.pop() if self._actions else None


class _Expert:
    """Plays the env's expert action; stops when the expert has none (unlike ``ExpertAgent``, no fallback)."""

    def reset(self) -> None:
        return None

    def act(self, observation: str, info: dict[str, Any]) -> str | None:
        return info.get(schema.EXPERT_ACTION)
