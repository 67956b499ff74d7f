"""G2PO: group-aggregation state values and two step terms on top of the episode term (docs/shapers.md §13).

Public code: ``Nala-YN/G2PO`` ``g2po/core_g2po.py`` (``compute_group_aggregation_values``,
``compute_step_level_advantage``, ``compute_g2po_outcome_advantage``). Per episode group (uid):

* groups: exact anchors; each row adds 0.95^(T − t)·R (T its trajectory's length, t its 0-based step, R the
  trajectory's episode reward) to its group; a group's value V(g) is that sum over its member count;
* next group: the next row's group; after a trajectory's last row the success terminal (V = 10) if R == 10.0
  exactly, else the failure terminal (V = 0);
* term 1: inside each anchor group of more than one row, normalise V(next) − 0.1·(1 − v) (0 for a group of one);
* term 2: over all rows of the uid, normalise V(next) − V(cur);
* A = A^E + w·(term 1 + term 2), A^E GiGPO's episode term of the penalised row score; sample std (n − 1).

Quirks kept: the discount 0.95 is fixed upstream (``ShapeConfig.gamma``, default 0.95, sets it here); the success
test is an exact equality with 10.0 (``G2POOptions.success_reward``; ``StepBatch.success`` overrides it).
Departure: a uid with a single step row would give NaN upstream (std of one value) in term 2; stepgym raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import (
    Groups,
    as_bool_array,
    check_mode,
    coded_groups,
    episode_inputs,
)
from stepgym.shapers._graph import (
    graph_stage,
    prev_next_rows,
    require_anchor,
    success_rows,
)
from stepgym.shapers.gigpo import GiGPOTerms, build_step_groups
from stepgym.shapers.grpo import group_normalize
from stepgym.shapers.registry import BaseAdvantage, register
from stepgym.shapers.rewards import apply_invalid_action_penalty, episode_scores
from stepgym.shapers.shared import SharedOptions

__all__ = [
    "G2POOptions",
    "g2po_group_values",
    "g2po_terms",
]


def g2po_group_values(
    episode: np.ndarray,
    tg: Groups,
    groups: Groups,
    success: np.ndarray,
    *,
    gamma: float,
    success_value: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(V(cur), V(next)) per row (``compute_group_aggregation_values`` with the terminal values)."""
    t = tg.position()
    length = tg.counts[tg.codes]
    value = groups.mean(np.power(gamma, length - t) * episode)
    _, nxt = prev_next_rows(tg)
    v_cur = value[groups.codes]
    term = np.where(success, success_value, 0.0)
    v_next = np.where(nxt >= 0, v_cur[np.maximum(nxt, 0)], term)
    return v_cur, v_next


def _norm(x: np.ndarray, g: Groups, std: bool, eps: float) -> np.ndarray:
    mean = g.exact_mean(x)
    out = x - mean[g.codes]
    if std:
        out /= g.sample_std(x, mean)[g.codes] + eps
    return out


def g2po_terms(
    batch: Any, *, options: G2POOptions | None = None, shared: SharedOptions | None = None
) -> GiGPOTerms:
    """G2PO's episode term and step term (term 1 + term 2) per row; ``returns`` holds V(next).

    ``batch``: a :class:`~stepgym.shapers.StepBatch` with ``rewards``, ``group_ids``, ``traj_ids``, ``anchor_obs``
    and optionally ``valid`` and ``success``. ``options``: :class:`G2POOptions` (``success_reward``,
    ``step_penalty``, ``step_mode``); ``shared``: :class:`~stepgym.shapers.SharedOptions` (γ, c, ε, singleton);
    None: their defaults.
    """
    opts = G2POOptions() if options is None else options
    sh = SharedOptions() if shared is None else shared
    require_anchor(batch, "g2po")
    group_ids, traj_ids, anchor_obs, valid = batch.group_ids, batch.traj_ids, batch.anchor_obs, batch.valid
    success_reward, mode, eps = opts.success_reward, opts.step_mode, sh.eps
    r, eg, tg = episode_inputs(
        batch.rewards, group_ids, traj_ids, mode, "G2PO", anchor_obs=anchor_obs, valid=valid
    )
    if len(r) == 0:
        empty = np.zeros(0)
        return GiGPOTerms(empty, empty, empty, empty, np.zeros(0, dtype=np.int64))
    std = mode == "mean_std_norm"
    episode_r = episode_scores(r, tg)
    succ = success_rows(batch.success, tg, episode_r, "equal", success_reward)
    sg = build_step_groups(eg.codes, anchor_obs)
    groups = coded_groups(sg)
    v_cur, v_next = g2po_group_values(
        episode_r, tg, groups, succ, gamma=sh.gamma, success_value=success_reward
    )
    invalid = 0.0 if valid is None else (~as_bool_array(valid, "valid")).astype(np.float64)
    term1 = _norm(v_next - opts.step_penalty * invalid, groups, std, eps)
    term1[groups.counts[groups.codes] == 1] = 0.0
    term2 = _norm(v_next - v_cur, eg, std, eps)
    # A group with one step row (one short episode, e.g. what an abort left) has no std (upstream gives NaN): it
    # has nothing to be compared with, so its term 2 is 0, as term 1's singleton step groups.
    term2[eg.counts[eg.codes] == 1] = 0.0
    scores = apply_invalid_action_penalty(episode_r, valid, sh.invalid_penalty)
    episode = group_normalize(scores, eg, norm_by_std=std, eps=eps, singleton=sh.singleton)
    return GiGPOTerms(episode=episode, step=term1 + term2, scores=scores, returns=v_next, step_groups=sg)


@dataclass(frozen=True)
class G2POOptions:
    """G2PO's own options (``ShapeConfig.options["g2po"]``; docs/shapers.md §13)."""

    step_mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    success_reward: float = 10.0
    """An episode reward equal to this (exactly) marks success (upstream ``SUCCESS_REWARD``)."""
    step_penalty: float = 0.1
    """Term 1's own invalid-action penalty (upstream ``compute_step_level_advantage`` default 0.1)."""

    def __post_init__(self) -> None:
        check_mode(self.step_mode)


@register(
    "g2po",
    stage="base",
    summary="G2PO: episode term + group-aggregation step terms (docs/shapers.md §13).",
    options=G2POOptions,
    needs=("state_keys", "state_chain"),
)
def _g2po_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    return graph_stage(batch, config, "g2po", g2po_terms, with_next=False)
