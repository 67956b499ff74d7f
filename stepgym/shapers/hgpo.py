"""HGPO: history-context group advantages of several lengths, weighted (docs/shapers.md §11).

Public code: verl-agent ``recipe/hgpo/core_hgpo.py`` (``hgpo_advantage_estimate``). Step returns are GiGPO's
discounted returns G (γ = ``algorithm.gamma``) minus the invalid-action penalty. For the row at position t and each
k = 1..min(H + 1, t + 1), its context group is (k, the last k anchors ending at t) inside the episode group. A
context group of more than one row normalises its returns, (G − μ)/(σ + ε) with the **population** σ, or G − μ;
each row collects one item (k, a) per context; items with a == 0 exactly are dropped; the rest are combined with
weights w_k = (k + 1)^α as Σ w_k a_k / (Σ w_k + ε). ``base_group=True`` adds the episode advantage as an item
with k = 0; by default HGPO has **no episode term**. A row with no item gets 0.

Departures: anchors are compared exactly after the same hashable conversion as GiGPO; computed in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import (
    Groups,
    check_mode,
    episode_inputs,
)
from stepgym.shapers._graph import prev_next_rows, require_anchor, require_states
from stepgym.shapers.gigpo import build_step_groups, step_discounted_returns
from stepgym.shapers.grpo import group_normalize
from stepgym.shapers.registry import BaseAdvantage, register
from stepgym.shapers.rewards import apply_invalid_action_penalty, episode_scores
from stepgym.shapers.shared import SharedOptions

__all__ = [
    "HGPOOptions",
    "context_normalize",
    "hgpo_advantage",
]


def context_normalize(x: np.ndarray, codes: np.ndarray, *, std: bool, eps: float = 1e-6) -> np.ndarray:
    """Per context group (int codes): x − μ, or (x − μ)/(σ_pop + ε); groups of one give 0."""
    g = Groups(codes)
    mean = g.exact_mean(x)
    out = x - mean[g.codes]
    if std:
        pop = np.sqrt(g.sum(out * out) / g.counts)
        out = out / (pop[g.codes] + eps)
    out[g.counts[g.codes] == 1] = 0.0
    return out


def _pair_codes(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Codes of the pairs (left, right) (both non-negative int64)."""
    return np.unique(left * (int(right.max(initial=0)) + 1) + right, return_inverse=True)[1].reshape(-1)


def hgpo_advantage(
    batch: Any, *, options: HGPOOptions | None = None, shared: SharedOptions | None = None
) -> np.ndarray:
    """HGPO advantage per step row (docs/shapers.md §11).

    ``batch``: a :class:`~stepgym.shapers.StepBatch` with ``rewards``, ``group_ids``, ``traj_ids``, ``anchor_obs``
    and optionally ``valid``. ``options``: :class:`HGPOOptions` (``history``, ``alpha``, ``base_group``,
    ``step_mode``); ``shared``: :class:`~stepgym.shapers.SharedOptions` (γ, c, ε, singleton); None: their defaults.
    """
    opts = HGPOOptions() if options is None else options
    sh = SharedOptions() if shared is None else shared
    require_anchor(batch, "hgpo")
    group_ids, traj_ids, anchor_obs, valid = batch.group_ids, batch.traj_ids, batch.anchor_obs, batch.valid
    history, alpha, mode = opts.history, opts.alpha, opts.step_mode
    eps, invalid_penalty = sh.eps, sh.invalid_penalty
    r, eg, tg = episode_inputs(
        batch.rewards, group_ids, traj_ids, mode, "HGPO", anchor_obs=anchor_obs, valid=valid
    )
    if history < 0 or not np.isfinite(alpha):
        raise ValueError(f"HGPO needs history >= 0 and a finite alpha, got {history}, {alpha}")
    std = mode == "mean_std_norm"
    returns = apply_invalid_action_penalty(
        step_discounted_returns(r, tg.codes, sh.gamma), valid, invalid_penalty
    )
    anchor = build_step_groups(eg.codes, anchor_obs)
    prev, _ = prev_next_rows(tg)
    num = np.zeros(len(r))
    den = np.zeros(len(r))
    if opts.base_group:
        scores = apply_invalid_action_penalty(episode_scores(r, tg), valid, invalid_penalty)
        a0 = group_normalize(scores, eg, norm_by_std=std, eps=eps, singleton=sh.singleton)
        keep = a0 != 0
        num += np.where(keep, a0, 0.0)
        den += keep
    key, back, rows = anchor.copy(), prev.copy(), np.ones(len(r), dtype=bool)
    for k in range(1, history + 2):
        if k > 1:  # extend each context by the anchor k-1 steps back
            rows &= back >= 0
            key = np.where(rows, _pair_codes(key, np.where(rows, anchor[np.maximum(back, 0)], 0)), -1)
            back = np.where(back >= 0, prev[np.maximum(back, 0)], -1)
        if not rows.any():
            break
        idx = np.flatnonzero(rows)
        ak = np.zeros(len(r))
        ak[idx] = context_normalize(returns[idx], key[idx], std=std, eps=eps)
        keep = ak != 0
        w = float(k + 1) ** alpha
        num += np.where(keep, w * ak, 0.0)
        den += w * keep
    return num / (den + eps)


@dataclass(frozen=True)
class HGPOOptions:
    """HGPO's own options (``ShapeConfig.options["hgpo"]``; docs/shapers.md §11)."""

    step_mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    history: int = 2
    """Upstream ``history_length`` H: context groups of k = 1..H+1 anchors."""
    alpha: float = 1.0
    """Weight exponent: an item of length k weighs (k+1)^α."""
    base_group: bool = False
    """Upstream ``base_group``: add the episode advantage as item k = 0 (upstream default False)."""

    def __post_init__(self) -> None:
        check_mode(self.step_mode)
        if self.history < 0:
            raise ValueError(f"HGPO's history must be >= 0, got {self.history}")


@register(
    "hgpo",
    stage="base",
    summary="HGPO: weighted history-context group advantages (docs/shapers.md §11).",
    options=HGPOOptions,
    needs=("state_keys", "state_chain"),
    proas=(
        "HGPO's advantage is a weighted mix of history-group step advantages with no trajectory-level term "
        "(base_group adds one only as a renormalised item), and ProAS branches on the trajectory advantage"
    ),
)
def _hgpo_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    opts = config.options_for("hgpo")
    require_states(batch, "hgpo", with_next=False)
    return BaseAdvantage(hgpo_advantage(batch, options=opts, shared=SharedOptions.of(config)))
