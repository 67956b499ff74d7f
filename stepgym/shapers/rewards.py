"""Stage "reward" of the pipeline (docs/shapers.md §0, §1.2, §2.1): row scores and the invalid-action penalty.

Every base advantage starts from the same per-row score, s = R_i − c·(1 − v): the trajectory's undiscounted
return written on each of its step rows (verl-agent's ``EpisodeRewardManager``), minus the penalty c on a row
whose action was invalid (verl-agent's ``apply_invalid_action_penalty``). GiGPO subtracts the same penalty from
that row's own discounted step return. This module is the only place the penalty is written; the pipeline
(:func:`stepgym.shapers.shape_advantages`), GiGPO's terms and any trainer use these two functions.

The default c is :data:`DEFAULT_INVALID_PENALTY` = 0: no penalty unless asked for, which is also
:class:`~stepgym.shapers.ShapeConfig`'s default (it reads this constant). verl-agent's recipes
(``ppo_trainer.yaml``, ``examples/gigpo_trainer/run_alfworld.sh``) use c = 0.1 on the 10·won reward scale; the
ALFWorld and WebShop presets set that value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stepgym.shapers._common import Groups, as_bool_array, as_float_array, check_same_length
from stepgym.shapers.registry import register

__all__ = [
    "DEFAULT_INVALID_PENALTY",
    "RECIPE_INVALID_PENALTY",
    "apply_invalid_action_penalty",
    "episode_scores",
]

#: The one default of the invalid-action penalty c (ShapeConfig, SharedOptions and
#: apply_invalid_action_penalty all read it). verl-agent's recipe value is 0.1 (see the module docstring).
DEFAULT_INVALID_PENALTY = 0.0
#: verl-agent's recipe value of c (``invalid_action_penalty_coef``), used by the ALFWorld / WebShop presets.
RECIPE_INVALID_PENALTY = 0.1


def apply_invalid_action_penalty(
    scores: Any, valid: Any, coef: float = DEFAULT_INVALID_PENALTY
) -> np.ndarray:
    """verl-agent ``apply_invalid_action_penalty``: ``s - c·(1 - v)`` per step row (docs/shapers.md §1.2, §2.1).

    ``scores`` (N,) float, ``valid`` (N,) bool or None (every row valid). The penalty is neither discounted nor
    propagated to other rows (§8.4). Returns a new (N,) float64 array.
    """
    s = as_float_array(scores, "scores", ndim=1, finite=True)
    if not np.isfinite(coef):
        raise ValueError(f"invalid-action penalty coefficient must be finite, got {coef}")
    if valid is None:
        return s.copy()
    v = as_bool_array(valid, "valid")
    check_same_length(len(s), valid=v)
    return s - coef * (~v)


@register("invalid_action_penalty", stage="reward", summary="s - c·(1 - valid) per step row (verl-agent).")
def _penalty_stage(batch: Any, config: Any, scores: np.ndarray) -> np.ndarray:
    return apply_invalid_action_penalty(scores, batch.valid, config.invalid_penalty)


def episode_scores(rewards: Any, traj_ids: Any) -> np.ndarray:
    """R_i = Σ_t r_{i,t} (undiscounted) written on every step row of trajectory i (verl-agent
    ``EpisodeRewardManager``, docs/shapers.md §2.1). ``rewards`` (N,) per step row, ``traj_ids`` (N,) ids (or a
    :class:`~stepgym.shapers._common.Groups` over them); result (N,)."""
    r = as_float_array(rewards, "rewards", ndim=1, finite=True)
    check_same_length(len(r), traj_ids=traj_ids)
    tg = traj_ids if isinstance(traj_ids, Groups) else Groups(traj_ids)
    return tg.sum(r)[tg.codes]
