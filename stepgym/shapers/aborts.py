"""Aborted episodes out of every statistic: restrict a batch to its finished rows, shape, scatter back.

An episode cut off by an infrastructure failure (``stepgym.schema.ABORT_CAUSES``: an env exception, a dead worker,
a step timeout, an unavailable service) has no outcome. Scoring it as a failure (reward 0) biases the group's
baseline, and for step credit it also enters anchor groups, graphs and hindsight peers. Rather than teach every
stage about aborts, :func:`stepgym.shapers.shape_advantages` shapes the batch *restricted to the finished rows*
(every per-row array, the token layout, the teacher gaps and StepOPSD's target spans) and scatters the result back:
the finished rows' advantages are then, by construction, exactly those of the batch with the aborted episodes
removed, for every base and every token stage, registered ones included. Aborted rows get advantage 0 and a loss
mask of 0. A group an abort left with fewer than two finished episodes gets advantage 0 on its survivors (counted
in :class:`AbortCounts`): one episode has no group to be compared with.

These functions are NumPy only, like the rest of :mod:`stepgym.shapers` (docs/failures.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepgym.shapers._common import Groups, as_bool_array
from stepgym.shapers.tokens import TokenLayout

__all__ = ["AbortCounts", "abort_mask", "depleted_rows", "restrict_layout", "take_rows", "token_rows_of"]


@dataclass(frozen=True)
class AbortCounts:
    """What the aborts of one batch cost (all 0 for a batch without aborts)."""

    aborted_episodes: int = 0  #: episodes that ended aborted
    aborted_rows: int = 0  #: their step rows (advantage 0, loss mask 0)
    zeroed_groups: int = 0  #: groups an abort left with fewer than two finished episodes (advantage 0)
    zeroed_episodes: int = 0  #: finished episodes in those groups (advantage 0, still in the loss mask)


def abort_mask(aborted: Any, n: int, trajs: Groups) -> np.ndarray | None:
    """(N,) bool, or None when nothing is aborted. An episode is aborted as a whole: a trajectory whose rows
    disagree is a ``ValueError``."""
    if aborted is None:
        return None
    mask = as_bool_array(aborted, "aborted")
    if len(mask) != n:
        raise ValueError(f"per-row arrays must all have length {n}; got {{'aborted': {len(mask)}}}")
    if not mask.any():
        return None
    if not trajs.is_constant(mask.astype(np.int64)).all():
        raise ValueError(
            "aborted must be equal on every row of a trajectory: an episode is aborted as a whole"
        )
    return mask


def depleted_rows(aborted: np.ndarray, groups: Groups, trajs: Groups) -> tuple[np.ndarray, int, int]:
    """Finished rows whose group an abort left with fewer than two finished episodes.

    Returns ((N,) bool, number of such groups, number of finished episodes in them). A group that had no abort
    keeps its usual treatment (a group of one: ``ShapeConfig.singleton``)."""
    n_traj = trajs.n_groups
    traj_group = np.zeros(n_traj, dtype=np.int64)
    traj_group[trajs.codes] = groups.codes
    traj_aborted = np.zeros(n_traj, dtype=bool)
    traj_aborted[trajs.codes] = aborted
    finished = np.bincount(traj_group[~traj_aborted], minlength=groups.n_groups)
    lost = np.bincount(traj_group[traj_aborted], minlength=groups.n_groups) > 0
    bad = lost & (finished < 2)
    rows = bad[groups.codes] & ~aborted
    return rows, int(bad.sum()), int(finished[bad].sum())


def take_rows(x: Any, idx: np.ndarray) -> Any:
    """Rows ``idx`` of a per-row array or sequence (None stays None; a list stays a list)."""
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x[idx]
    seq = list(x)
    return [seq[i] for i in idx.tolist()]


def token_rows_of(layout: TokenLayout, aborted: np.ndarray) -> np.ndarray:
    """(B,) bool: the token rows that hold aborted steps. A row mixing aborted and finished steps is a
    ``ValueError`` (a token row holds one episode's turns, or one turn)."""
    b = layout.shape[0]
    dropped = np.zeros(b, dtype=bool)
    dropped[layout.step_row[aborted]] = True
    if dropped[layout.step_row[~aborted]].any():
        raise ValueError(
            "a token row holds both aborted and finished steps; a row must hold one episode's steps"
        )
    return dropped


def restrict_layout(layout: TokenLayout, keep_rows: np.ndarray) -> TokenLayout:
    """The layout on the kept token rows, its steps (those whose ``step_row`` is kept) renumbered in order."""
    keep_step = keep_rows[layout.step_row]
    new_id = np.full(layout.n_steps + 1, -1, dtype=np.int64)  # last entry: -1 → -1
    new_id[np.flatnonzero(keep_step)] = np.arange(int(keep_step.sum()), dtype=np.int64)
    new_row = np.cumsum(keep_rows) - 1
    return TokenLayout(
        token_step=new_id[layout.token_step[keep_rows]],
        n_steps=int(keep_step.sum()),
        step_row=new_row[layout.step_row[keep_step]].astype(np.int64),
    )


def scatter(values: np.ndarray, keep: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """Put ``values`` (one per kept row) back on the full (N,) or (B, ...) grid; the others get ``fill``."""
    out = np.full((len(keep), *values.shape[1:]), fill, dtype=values.dtype)
    out[keep] = values
    return out


def token_take(x: Any, keep_rows: np.ndarray) -> Any:
    return None if x is None else np.asarray(x)[keep_rows]
