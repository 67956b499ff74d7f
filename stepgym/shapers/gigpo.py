"""GiGPO: episode-relative plus anchor-state-relative advantages (docs/shapers.md §2).

Paper: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978):
Eq. 3 (episode advantage), Eq. 5 (discounted step return), Eq. 6 (anchor-state groups), Eq. 7 (step advantage),
Eq. 8 (joint advantage). Public code: verl-agent ``gigpo/core_gigpo.py`` (``episode_norm_reward``,
``build_step_group``, ``step_norm_reward``, ``compute_step_discounted_returns``) and the trainer's
``apply_invalid_action_penalty``.

Layout: one row per *active* step (verl-agent). Rows of one trajectory must appear in time order (they need not
be contiguous). Everything is vectorised except similarity grouping, which is inherently sequential.

Departures from the public code:
* the invalid-action penalty is applied *inside* (rather than by the trainer in between), with the same result:
  the episode score of the row is ``R_i - c(1 - v)`` and its step return ``G - c(1 - v)`` (docs/shapers.md §2.1, §2.3, §8.4),
  both through :func:`stepgym.shapers.rewards.apply_invalid_action_penalty`; c defaults to
  ``DEFAULT_INVALID_PENALTY`` (0, as ``ShapeConfig``; verl-agent's recipes pass 0.1);
* constant groups give exactly 0 (float64; verl-agent computes in float32);
* anchors that are arrays are compared with their shape (verl-agent flattens them, so a 2×3 and a 3×2 array with
  the same values would collide);
* similarity grouping first checks difflib's cheap upper bounds (``real_quick_ratio``, ``quick_ratio``) before
  ``ratio()`` (ratio ≤ quick_ratio ≤ real_quick_ratio), and remembers the cluster of every text already placed in
  the episode group (clusters are only appended and compared through their fixed first member, so a repeated text
  lands where its first occurrence did): same clusters as the reference, far fewer ``ratio()`` calls;
* ``adjust_batch``'s random duplicate padding is not reproduced (docs/shapers.md §2.8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Literal, NamedTuple

import numpy as np

from stepgym.shapers._common import (
    Groups,
    as_float_array,
    check_mode,
    check_same_length,
    coded_groups,
    episode_inputs,
    hashable,
)
from stepgym.shapers.grpo import group_normalize
from stepgym.shapers.registry import BaseAdvantage, register
from stepgym.shapers.rewards import apply_invalid_action_penalty, episode_scores
from stepgym.shapers.shared import SharedOptions

__all__ = [
    "GiGPOOptions",
    "GiGPOTerms",
    "build_step_groups",
    "gigpo_advantage",
    "gigpo_terms",
    "step_discounted_returns",
    "step_relative_advantage",
]

Mode = Literal["mean_norm", "mean_std_norm"]


class GiGPOTerms(NamedTuple):
    """The pieces of Eq. 8, per step row (all (N,) float64 except ``step_groups``)."""

    episode: np.ndarray  #: A^E, Eq. 3, on the penalised row score
    step: np.ndarray  #: A^S, Eq. 7, on the penalised step return
    scores: np.ndarray  #: s = R_i - c(1 - v), the row score
    returns: np.ndarray  #: G' = G - c(1 - v), the penalised discounted return
    step_groups: np.ndarray  #: (N,) int64 anchor-state group code (never crosses episode groups)

    def combined(self, step_weight: float = 1.0) -> np.ndarray:
        """A = A^E + w·A^S (Eq. 8)."""
        return self.episode + step_weight * self.step


def step_discounted_returns(rewards: Any, traj_ids: Any, gamma: float = 0.95) -> np.ndarray:
    """G_{i,t} = r_{i,t} + γ·G_{i,t+1}, G_{i,T+1} = 0, on the raw env rewards (Eq. 5; docs/shapers.md §2.3).

    ``rewards`` (N,) per step row, ``traj_ids`` (N,); rows of a trajectory in time order. Result (N,).
    The recursion runs over the step axis of a padded (trajectories × T_max) matrix, so the arithmetic is exactly
    the reference's ``r + γ·running`` and the cost is T_max vector operations.
    """
    r = as_float_array(rewards, "rewards", ndim=1, finite=True)
    check_same_length(len(r), traj_ids=traj_ids)
    if not np.isfinite(gamma):
        raise ValueError(f"gamma must be finite, got {gamma}")
    if len(r) == 0:
        return r.copy()
    tg = Groups(traj_ids)
    pos = tg.position()
    t_max = int(tg.counts.max())
    mat = np.zeros((tg.n_groups, t_max + 1))
    mat[tg.codes, pos] = r
    for t in range(t_max - 1, -1, -1):
        mat[:, t] += gamma * mat[:, t + 1]
    return mat[tg.codes, pos]


def _similar(a: str, b: str, tau: float) -> bool:
    sm = SequenceMatcher(None, a, b)
    return sm.real_quick_ratio() >= tau and sm.quick_ratio() >= tau and sm.ratio() >= tau


def build_step_groups(
    group_ids: Any, anchor_obs: Sequence[Any], *, similarity: bool = False, tau: float = 0.95
) -> np.ndarray:
    """Anchor-state groups (Eq. 6; verl-agent ``build_step_group``), as int64 codes (N,).

    Exact mode: rows of one episode group with equal anchors (arrays, lists, dicts compared after conversion to a
    hashable form) share a step group. Similarity mode (``tau`` in (0, 1), text anchors only): rows, in order,
    join the first cluster of their episode group whose *first member* has
    ``difflib.SequenceMatcher(None, a, b).ratio() >= tau``, else start a cluster (order-dependent, as upstream).
    Step groups never cross episode groups.
    """
    check_same_length(len(anchor_obs), group_ids=group_ids)
    eg = Groups(group_ids)
    if not similarity:
        mapping: dict[tuple[int, Any], int] = {}
        keys = zip(eg.codes.tolist(), anchor_obs, strict=True)
        return np.fromiter(
            (mapping.setdefault((g, hashable(o)), len(mapping)) for g, o in keys),
            dtype=np.int64,
            count=len(anchor_obs),
        )
    if not (0.0 < tau < 1.0):
        raise ValueError(f"similarity threshold tau must lie in (0, 1), got {tau}")
    codes = np.empty(len(anchor_obs), dtype=np.int64)
    next_code = 0
    for rows in eg.segments():
        clusters: list[tuple[str, int]] = []  # (first member's text, code)
        seen: dict[str, int] = {}  # exact memo: a text's cluster never changes once assigned (see below)
        for i in rows.tolist():
            obs = anchor_obs[i]
            if not isinstance(obs, str):
                raise ValueError(
                    f"similarity grouping supports text anchors only; row {i} has {type(obs).__name__}"
                )
            if obs in seen:
                codes[i] = seen[obs]
                continue
            for rep, code in clusters:
                if obs == rep or _similar(obs, rep, tau):
                    codes[i] = code
                    break
            else:
                clusters.append((obs, next_code))
                codes[i] = next_code
                next_code += 1
            seen[obs] = int(codes[i])
    return codes


def step_relative_advantage(
    returns: Any, step_groups: Any, *, mode: Mode = "mean_norm", eps: float = 1e-6
) -> np.ndarray:
    """A^S (Eq. 7; verl-agent ``step_norm_reward``): ``G' - mean_S`` or ``(G' - mean_S)/(std_S + ε)`` per anchor
    group; a singleton step group gets exactly 0 (its mean is itself). Shapes (N,) → (N,)."""
    g = as_float_array(returns, "returns", ndim=1, finite=True)
    check_same_length(len(g), step_groups=step_groups)
    sg = step_groups if isinstance(step_groups, Groups) else Groups(np.asarray(step_groups))
    mean = sg.exact_mean(g)
    adv = g - mean[sg.codes]
    if _check_mode(mode) == "mean_std_norm":
        std = sg.sample_std(g, mean)
        std[sg.counts == 1] = 1.0
        adv /= std[sg.codes] + eps
    return adv


def _check_mode(mode: str) -> str:
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"GiGPO mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")
    return mode


def gigpo_terms(
    rewards: Any,
    group_ids: Any,
    traj_ids: Any,
    anchor_obs: Sequence[Any],
    valid: Any = None,
    *,
    options: GiGPOOptions | None = None,
    shared: SharedOptions | None = None,
) -> GiGPOTerms:
    """Both GiGPO terms per step row (docs/shapers.md §2.1–2.5). See :func:`gigpo_advantage` for the arguments
    (``shared.step_weight`` is not read: ``terms.combined(w)`` applies it)."""
    opts = GiGPOOptions() if options is None else options
    sh = SharedOptions() if shared is None else shared
    mode = opts.mode
    r, eg, tg = episode_inputs(
        rewards, group_ids, traj_ids, mode, "GiGPO", anchor_obs=anchor_obs, valid=valid
    )
    scores = apply_invalid_action_penalty(
        episode_scores(r, tg), valid, sh.invalid_penalty
    )  # R_i − c(1 − v) (§2.1)
    episode = group_normalize(
        scores, eg, norm_by_std=(mode == "mean_std_norm"), eps=sh.eps, singleton=sh.singleton
    )
    # §2.3: the penalty is subtracted from the row's own return after discounting (never propagated)
    returns = apply_invalid_action_penalty(
        step_discounted_returns(r, tg.codes, sh.gamma), valid, sh.invalid_penalty
    )
    sgc = build_step_groups(eg.codes, anchor_obs, similarity=opts.similarity, tau=opts.similarity_tau)
    step = step_relative_advantage(returns, coded_groups(sgc), mode=mode, eps=sh.eps)
    return GiGPOTerms(episode=episode, step=step, scores=scores, returns=returns, step_groups=sgc)


def gigpo_advantage(
    rewards: Any,
    group_ids: Any,
    traj_ids: Any,
    anchor_obs: Sequence[Any],
    valid: Any = None,
    *,
    options: GiGPOOptions | None = None,
    shared: SharedOptions | None = None,
) -> np.ndarray:
    """GiGPO joint advantage per step row, ``A = A^E + w·A^S`` (Eq. 8; docs/shapers.md §2).

    Args:
        rewards: (N,) env reward r_{i,t} of each active step row (verl-agent ``non_tensor_batch['rewards']``).
        group_ids: (N,) episode group (task uid); traj_ids: (N,) trajectory; rows of a trajectory in time order.
        anchor_obs: (N,) the raw current observation of each row (no history), any hashable-convertible value.
        valid: (N,) bool action validity, or None (all valid).
        options: :class:`GiGPOOptions` (None: its defaults): ``mode`` "mean_norm" (WebShop scripts) or
            "mean_std_norm" (ALFWorld scripts), for *both* levels (``norm_adv_by_std_in_grpo`` plays no role);
            ``similarity`` / ``similarity_tau``: similarity anchor grouping (text only).
        shared: :class:`~stepgym.shapers.SharedOptions` (None: its defaults): ``gamma``, the discount of Eq. 5
            (0.95 in the ALFWorld/WebShop scripts); ``step_weight``, w of Eq. 8; ``invalid_penalty``, c, subtracted
            from an invalid row's score and its own step return (not discounted), default
            ``DEFAULT_INVALID_PENALTY`` (0, as ``ShapeConfig``; verl-agent's recipes use 0.1); ``eps``, added to
            the std; ``singleton``, an episode group of one row: "verl" → μ = 0, σ = 1 (raw score, or s/(1+ε) in
            mean_std_norm), "zero" → A^E = 0.

    Returns (N,) float64. Use :func:`gigpo_terms` for the separate terms (ProAS shapes A^E only).
    """
    sh = SharedOptions() if shared is None else shared
    terms = gigpo_terms(rewards, group_ids, traj_ids, anchor_obs, valid, options=options, shared=sh)
    return terms.combined(sh.step_weight)


@dataclass(frozen=True)
class GiGPOOptions:
    """GiGPO's own options (``ShapeConfig.options["gigpo"]``); the discount γ and the step weight w are shared."""

    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    """Normalisation of both levels (ALFWorld scripts: mean_std_norm; WebShop: mean_norm)."""
    similarity: bool = False
    """Similarity anchor groups (text anchors; difflib ratio ≥ ``similarity_tau``)."""
    similarity_tau: float = 0.95

    def __post_init__(self) -> None:
        check_mode(self.mode, "GiGPO's mode")


@register(
    "gigpo",
    stage="base",
    summary="GiGPO: A^E + w·A^S per step row (docs/shapers.md §2).",
    options=GiGPOOptions,
    needs=("state_keys",),
)
def _gigpo_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    if batch.anchor_obs is None:
        raise ValueError("base='gigpo' needs StepBatch.anchor_obs")
    terms = gigpo_terms(
        batch.rewards,
        batch.group_ids,
        batch.traj_ids,
        batch.anchor_obs,
        batch.valid,
        options=config.options_for("gigpo"),
        shared=SharedOptions.of(config),
    )
    return BaseAdvantage(terms.combined(config.step_weight), terms)
