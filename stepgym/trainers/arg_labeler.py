"""ProAS labels for the trainer: the Agentic Reference Graph (:mod:`stepgym.reference_graph`) driven batch by batch.

Protocol (docs/shapers.md §8.10): a batch is labelled against the graph **as it stands before the batch** (so a success does
not label itself all-reasonable), then the graph grows by strict union with the batch's verified successes.

Only the graph's public API is used (``label``, ``add_trajectory``; seeding through :mod:`stepgym.graph_seeding`), so what is read from a step is
the graph's own rule (:func:`stepgym.reference_graph.step_edge`): edges carry the *parsed* env command, not the
raw model reply (a reply's ``<think>`` text must not make two identical commands look different), and an
unparsable or inadmissible reply is a rejected step (no edge). States are the graph's ``state_key``
(``SUBGOAL_KEY``, else ``STATE_KEY``); successes are the graph's ``success_fn`` (``stepgym/won`` here).

Seeding, per task and lazily (the first time a task is sampled, so ALFWorld's 3,553 training games are never all
replayed): ``"walkthrough"`` replays the env's stored expert walkthrough (ALFWorld, as the paper seeds it),
``"expert"`` plays the env's ``EXPERT_ACTION`` (the credit toy), ``"none"`` grows from the policy's successes only;
``"auto"`` picks walkthrough when the env has one, else expert when the env gives expert actions, else none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from stepgym.graph_seeding import seed_graph_from_expert, seed_graph_from_walkthroughs
from stepgym.reference_graph import AgenticReferenceGraph
from stepgym.trainers.collector import Rollouts

__all__ = ["ArgLabeler"]


class ArgLabeler:
    """Per-task ARGs for one training env; ``label`` a batch, then ``grow`` it (see the module docstring)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], *, seed: str = "auto") -> None:
        if seed not in ("auto", "walkthrough", "expert", "none"):
            raise ValueError(f"ARG seed must be auto, walkthrough, expert or none, got {seed!r}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.seed_mode = seed
        self.graph = AgenticReferenceGraph()
        self.seeded: set[str] = set()
        self._env: gym.Env | None = None
        self._last: dict[str, float] = {}

    def _seed_env(self) -> gym.Env:
        if self._env is None:
            # The env's own step limit: a seed path must be able to finish even when training episodes are cut short.
            kwargs = {k: v for k, v in self.env_kwargs.items() if k != "max_steps"}
            self._env = gym.make(self.env_id, **kwargs)
            if self.seed_mode == "auto":
                u = self._env.unwrapped
                self.seed_mode = "walkthrough" if hasattr(type(u), "walkthrough") else "expert"
        return self._env

    def _seed_task(self, task_id: str) -> None:
        if task_id in self.seeded or self.seed_mode == "none":
            return
        env = self._seed_env()
        if self.seed_mode == "walkthrough":
            seed_graph_from_walkthroughs(self.graph, env, [task_id])
        elif self.seed_mode == "expert":
            seed_graph_from_expert(self.graph, env, [task_id])
        self.seeded.add(task_id)

    def label(self, ro: Rollouts) -> tuple[np.ndarray, np.ndarray]:
        """(reasonable, progress) per row of ``ro.rows`` against the graph as it stands now."""
        for tid in ro.task_ids:
            self._seed_task(tid)
        rea: dict[tuple[int, int], bool] = {}
        pa: dict[tuple[int, int], bool] = {}
        for k, traj in enumerate(ro.trajectories):
            lab = self.graph.label(traj)
            for t in range(len(traj.steps)):
                rea[(k, t)] = bool(lab.reasonable[t])
                pa[(k, t)] = bool(lab.progress[t])
        r = np.array([rea[(row.traj, row.t)] for row in ro.rows], dtype=bool)
        p = np.array([pa[(row.traj, row.t)] for row in ro.rows], dtype=bool)
        self._last = {
            "arg/reasonable_ratio": float(r.mean()) if r.size else 0.0,
            "arg/progress_ratio": float(p.mean()) if p.size else 0.0,
        }
        return r, p

    def grow(self, ro: Rollouts) -> int:
        """Add the batch's verified successes; returns how many were added. The batch's tasks are seeded first (a
        no-op after :meth:`label`; a data-parallel rank grows from all ranks' groups, not only those it labelled)."""
        for tid in ro.task_ids:
            self._seed_task(tid)
        added = 0
        for traj in ro.trajectories:
            if not traj.aborted and self.graph.success_fn(traj):  # an aborted episode never grows the graph
                self.graph.add_trajectory(traj)
                added += 1
        self._last["arg/added_trajectories"] = float(added)
        return added

    def metrics(self) -> dict[str, float]:
        out = dict(self._last)
        out.update({f"arg/{k}": float(v) for k, v in self.graph.stats().items()})
        return out

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.graph.save(folder / "graph.json")
        (folder / "seeded.json").write_text(
            json.dumps({"mode": self.seed_mode, "tasks": sorted(self.seeded)}), encoding="utf-8"
        )

    def load(self, folder: Path) -> None:
        self.graph = AgenticReferenceGraph.load(folder / "graph.json")
        meta = json.loads((folder / "seeded.json").read_text(encoding="utf-8"))
        self.seed_mode = meta["mode"]
        self.seeded = set(meta["tasks"])
