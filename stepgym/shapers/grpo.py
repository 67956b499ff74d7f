"""GRPO and Dr.GRPO outcome advantages (docs/shapers.md §1), on trajectory rows or multi-turn step rows.

Source: verl ``core_algos.py::compute_grpo_outcome_advantage`` (GRPO: DeepSeekMath, Shao et al. 2024, Eq. in
§4.1.2 "outcome supervision"; Dr.GRPO: Liu et al. 2025, which drops the std division), and verl-agent's multi-turn
variant with ``traj_index`` / ``compute_mean_std_cross_steps``. The row scores it normalises (episode return minus
the invalid-action penalty) are stage "reward", in :mod:`stepgym.shapers.rewards` (re-exported here).

Departures from the public code, all documented in docs/shapers.md:
* float64 NumPy instead of float32 torch;
* a group whose members are all equal gets advantage *exactly* 0 (verl's float32 mean can leave ~1e-8 noise
  that the 1e-6 epsilon then amplifies);
* ``singleton="zero"`` is offered besides verl's ``r/(1+ε)`` for a group of one (docs/shapers.md §8.1);
* a non-finite score is a ``ValueError`` (verl would silently give the whole group NaN; docs/shapers.md §0).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import (
    Groups,
    as_float_array,
    check_same_length,
    check_traj_in_one_group,
)
from stepgym.shapers.registry import BaseAdvantage, register

__all__ = [
    "drgrpo_advantage",
    "group_normalize",
    "grpo_advantage",
]

Singleton = Literal["verl", "zero"]


def group_normalize(
    scores: np.ndarray,
    groups: Groups,
    *,
    norm_by_std: bool,
    eps: float = 1e-6,
    singleton: Singleton = "verl",
    stats_rows: np.ndarray | None = None,
) -> np.ndarray:
    """``(s - μ_g)/(σ_g + ε)`` or ``s - μ_g`` per row, μ/σ over ``stats_rows`` (default all rows) of each group.

    A group with one statistics row gets μ = 0, σ = 1 (verl) or advantage 0 (``singleton="zero"``). σ is the
    sample std (n - 1). Shapes: ``scores`` (N,), result (N,).
    """
    if singleton not in ("verl", "zero"):
        raise ValueError(f"singleton must be 'verl' or 'zero', got {singleton!r}")
    if stats_rows is None:
        sg = groups
        sx = scores
    else:
        sg = Groups(codes=groups.codes[stats_rows], n_groups=groups.n_groups)
        sx = scores[stats_rows]
    mean = sg.exact_mean(sx)
    std = sg.sample_std(sx, mean)
    single = sg.counts == 1
    mean[single] = 0.0
    std[single] = 1.0
    adv = scores - mean[groups.codes]
    if norm_by_std:
        adv /= std[groups.codes] + eps
    if singleton == "zero" and single.any():
        adv[single[groups.codes]] = 0.0
    return adv


def grpo_advantage(
    scores: Any,
    group_ids: Any,
    *,
    traj_ids: Any = None,
    cross_steps: bool = True,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    singleton: Singleton = "verl",
) -> np.ndarray:
    """GRPO outcome advantage per row (docs/shapers.md §1.1, §1.2; verl ``compute_grpo_outcome_advantage``).

    Args:
        scores: (N,) float, the row's scalar score: the trajectory's outcome reward (sum of its token rewards),
            minus the invalid-action penalty for step rows (:func:`apply_invalid_action_penalty`).
        group_ids: (N,) hashable, the GRPO group (task / prompt uid) of each row.
        traj_ids: (N,) hashable or None. None: every row is one trajectory (Search-R1 layout). Given: rows are
            steps (verl-agent layout) and ``cross_steps`` decides the statistics; an id whose rows carry several
            group ids is refused (``ValueError``), as for every base.
        cross_steps: True (verl-agent default): μ, σ over *all step rows* of the group, so a trajectory counts
            once per step. False: over the first row seen of each trajectory.
        norm_by_std: True = GRPO ``(s - μ)/(σ + ε)``; False = Dr.GRPO ``s - μ``.
        eps: added to σ (not inside the square root).
        singleton: a group with one statistics row: "verl" → μ = 0, σ = 1 (A = r/(1+ε), or r for Dr.GRPO);
            "zero" → A = 0.

    Returns (N,) float64: each row normalised with its *own* score. Rows with no response tokens still count in
    the statistics (they simply carry no token later). N = 0 gives an empty array.
    """
    s = as_float_array(scores, "scores", ndim=1, finite=True)
    check_same_length(len(s), group_ids=group_ids, traj_ids=traj_ids)
    groups = Groups(group_ids)
    stats_rows = None
    traj = None if traj_ids is None else Groups(traj_ids)
    if traj is not None:
        check_traj_in_one_group(groups, traj, traj_ids)
    if traj is not None and not cross_steps:
        pair = groups.codes * max(traj.n_groups, 1) + traj.codes
        _, first = np.unique(pair, return_index=True)  # first row seen of each (group, trajectory)
        stats_rows = np.sort(first)
    return group_normalize(
        s, groups, norm_by_std=norm_by_std, eps=eps, singleton=singleton, stats_rows=stats_rows
    )


def drgrpo_advantage(
    scores: Any,
    group_ids: Any,
    *,
    traj_ids: Any = None,
    cross_steps: bool = True,
    singleton: Singleton = "verl",
) -> np.ndarray:
    """Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): ``A = s - μ_g``, no std division
    (verl ``norm_adv_by_std_in_grpo=False``). Same arguments and shapes as :func:`grpo_advantage`."""
    return grpo_advantage(
        scores, group_ids, traj_ids=traj_ids, cross_steps=cross_steps, norm_by_std=False, singleton=singleton
    )


@register("grpo", stage="base", summary="GRPO: (s - μ_g)/(σ_g + ε) per row (docs/shapers.md §1).")
def _grpo_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    return BaseAdvantage(_grouped(batch, config, scores, norm_by_std=True))


@register("drgrpo", stage="base", summary="Dr.GRPO: s - μ_g per row, no std division (docs/shapers.md §1.1).")
def _drgrpo_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    return BaseAdvantage(_grouped(batch, config, scores, norm_by_std=False))


register(
    "dapo", stage="base", summary="DAPO's advantage is GRPO's (docs/shapers.md §3.4, §6): alias of 'grpo'."
)(_grpo_stage)


def _grouped(batch: Any, config: Any, scores: np.ndarray, *, norm_by_std: bool) -> np.ndarray:
    return grpo_advantage(
        scores,
        batch.group_ids,
        traj_ids=batch.traj_ids,
        cross_steps=config.cross_steps,
        norm_by_std=norm_by_std,
        eps=config.eps,
        singleton=config.singleton,
    )
