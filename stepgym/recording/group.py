"""Recording groups from a user's own loop over :class:`~stepgym.GroupEnv` (the trainer has its own hook,
:mod:`stepgym.trainers.recorder`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stepgym import schema
from stepgym.recording.episode_file import FILE_NAME, EpisodeWriter
from stepgym.recording.records import RecordExtras, trajectory_records

__all__ = ["GroupRecorder"]


class GroupRecorder:
    """Record :class:`~stepgym.GroupEnv` groups (or plain trajectories) for ``stepgym view``.

    Usage::

        rec = GroupRecorder("runs/mine", meta={"env_id": "StepGym/ALFWorld-v0"})
        for it in range(n):
            ...play the group to the end...
            rec.record_group(group_env, iteration=it)

    ``advantages`` (optional) maps a shaper name to a per-trajectory list of per-step values (or of
    ``{"step": x, "tokens": [...]}`` dicts), in the group's rollout order.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        meta: Mapping[str, Any] | None = None,
        budget_mb: float = 64.0,
        max_text_chars: int = 4000,
    ) -> None:
        p = Path(path)
        if p.suffix == ".jsonl":  # the writer always compresses; a plain .jsonl name would be unreadable
            raise ValueError(
                f"GroupRecorder writes gzip: name the file {p.name}.gz, or pass a folder (got {p})"
            )
        if p.suffix != ".gz":
            p = p / FILE_NAME
        header = {"source": "group", **dict(meta or {})}
        self.writer = EpisodeWriter(p, header, budget_bytes=int(budget_mb * 2**20))
        self.max_text_chars = max_text_chars
        self._next_group: dict[int, int] = {}

    @property
    def path(self) -> Path:
        return self.writer.path

    def record_trajectories(
        self,
        trajectories: Sequence[schema.Trajectory],
        *,
        iteration: int = 0,
        group: int | None = None,
        successes: Sequence[bool] | None = None,
        hindsight: Sequence[str | None] | None = None,
        advantages: Mapping[str, Sequence[Sequence[Any]]] | None = None,
    ) -> bool:
        """Record the trajectories of one group (G rollouts of one task); False once the budget is spent."""
        if group is None:
            group = self._next_group.get(iteration, 0)
        self._next_group[iteration] = max(self._next_group.get(iteration, 0), group + 1)
        records: list[dict[str, Any]] = []
        for r, traj in enumerate(trajectories):
            adv = None
            if advantages:
                adv = {name: [_as_adv(v) for v in per_traj[r]] for name, per_traj in advantages.items()}
            records += trajectory_records(
                traj,
                iteration=iteration,
                group=group,
                rollout=r,
                extras=RecordExtras(
                    won=None if successes is None else bool(successes[r]),
                    peer_hindsight=None if hindsight is None else hindsight[r],
                    advantages=adv,
                ),
                max_text_chars=self.max_text_chars,
            )
        return self.writer.write(records)

    def record_group(self, group_env: Any, *, iteration: int = 0, advantages: Any = None) -> bool:
        """Record a finished :class:`~stepgym.GroupEnv` group."""
        return self.record_trajectories(
            group_env.trajectories,
            iteration=iteration,
            successes=group_env.successes(),
            hindsight=group_env.peer_hindsight(),
            advantages=advantages,
        )


def _as_adv(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {"step": float(value)}
