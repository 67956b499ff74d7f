"""GraphGPO: step returns from reverse shortest paths to success on a per-group state graph (docs/shapers.md §10).

Public code: verl-agent ``recipe/GraphGPO/core_graph.py`` (``ComplexGraph.from_data``,
``all_to_target_shortest_paths``, ``compute_graph_path_returns``, ``compute_graphgpo_outcome_advantage``) and its
trainer ``graphgpo_ray_trainer.py`` (the invalid-action penalty). Per episode group (task uid):

* graph: one edge anchor → next state per step row; the next state of the last row of a trajectory that succeeded
  is the group's literal success node (failed trajectories keep their real next state);
* d(n): fewest edges from n to success; a node that cannot reach it gets (largest finite d in the group) + 1, so
  in a group without any success every node gets 0 + 1 = 1;
* step return r = 10·γ^d(next) (``normalize_distance``: 10·γ^(d(next) − d(cur) + 1)), minus c(1 − v);
* A = w_E·A^E + w_S·A^S: A^E GiGPO's episode term on the row score, A^S GiGPO's step term of r in *exact* anchor
  groups (upstream ignores the similarity flag there even when the graph used it), both in ``mode``.

Departures (docs/shapers.md §10): states are keyed per group (no cross-group node sharing, as upstream's per-uid
graphs); success comes from ``StepBatch.success`` when given, else episode return > 0 on the trajectory's last row
(upstream's rollout loop writes the literal next state 'success'); the similarity canonicaliser is GiGPO's greedy
first-member clustering, fed as upstream's ``StateCanonicalizer`` is: per group, row by row, anchor then next state
(the literal 'success' for a success row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import (
    Groups,
    check_mode,
    coded_groups,
    episode_inputs,
)
from stepgym.shapers._graph import (
    chained_states,
    graph_stage,
    require_next,
    reverse_hops,
    success_rows,
)
from stepgym.shapers.gigpo import GiGPOTerms, build_step_groups, step_relative_advantage
from stepgym.shapers.grpo import group_normalize
from stepgym.shapers.registry import BaseAdvantage, register
from stepgym.shapers.rewards import apply_invalid_action_penalty, episode_scores
from stepgym.shapers.shared import SharedOptions

__all__ = [
    "GraphGPOOptions",
    "graph_distances",
    "graphgpo_terms",
]


def graph_distances(
    group_ids: Any,
    traj_ids: Any,
    anchor_obs: Sequence[Any],
    next_obs: Sequence[Any],
    success: np.ndarray,
    *,
    similarity: bool = False,
    tau: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """(d(cur), d(next)) per row: hop distances to the group's success node with upstream's fill rule
    (unreachable → largest finite distance in the group + 1; no success → 1). ``success`` (N,) bool marks the
    last rows whose next node is success. Raises ``ValueError`` if next_obs[t] != anchor_obs[t+1]."""
    eg = Groups(group_ids)
    tg = Groups(traj_ids)
    n = len(eg.codes)
    if similarity:  # canonical state = cluster code; upstream canonicalises anchor then next, row by row
        both = [None] * (2 * n)
        both[0::2] = list(anchor_obs)
        both[1::2] = ["success" if s else o for o, s in zip(next_obs, success.tolist(), strict=True)]
        codes = build_step_groups(np.repeat(eg.codes, 2), both, similarity=True, tau=tau)
        anchor_obs, next_obs = codes[0::2].tolist(), codes[1::2].tolist()
    a, b, node_group = chained_states(eg, tg, anchor_obs, next_obs, success)
    n_nodes = len(node_group)
    targets = np.unique(b[success])
    dist = reverse_hops(n_nodes, a, b, targets)
    finite = np.where(np.isfinite(dist), dist, -np.inf)
    best = np.full(eg.n_groups, -np.inf)
    np.maximum.at(best, node_group, finite)
    fill = np.where(np.isfinite(best), best, 0.0) + 1.0
    dist = np.where(np.isfinite(dist), dist, fill[node_group])
    return dist[a], dist[b]


def graphgpo_terms(
    batch: Any, *, options: GraphGPOOptions | None = None, shared: SharedOptions | None = None
) -> GiGPOTerms:
    """GraphGPO's terms per step row (docs/shapers.md §10). ``episode`` is already multiplied by
    ``options.episode_weight`` (0 skips it), so ``terms.combined(shared.step_weight)`` is the advantage.

    ``batch``: a :class:`~stepgym.shapers.StepBatch` with ``rewards``, ``group_ids``, ``traj_ids``, ``anchor_obs``,
    ``next_obs`` and optionally ``valid`` and ``success`` ((N,) bool, True on the last row of a successful
    trajectory; None: episode return > 0 on the trajectory's last row, upstream). ``options``:
    :class:`GraphGPOOptions` (``step_mode`` "mean_std_norm", upstream default, or "mean_norm", both terms);
    ``shared``: :class:`~stepgym.shapers.SharedOptions` (γ, c, ε, singleton); None: their defaults.
    """
    opts = GraphGPOOptions() if options is None else options
    sh = SharedOptions() if shared is None else shared
    next_obs = require_next(batch, "graphgpo")
    group_ids, traj_ids, anchor_obs, valid = batch.group_ids, batch.traj_ids, batch.anchor_obs, batch.valid
    gamma, scale, mode, eps = sh.gamma, opts.scale, opts.step_mode, sh.eps
    r, eg, tg = episode_inputs(
        batch.rewards, group_ids, traj_ids, mode, "GraphGPO", anchor_obs=anchor_obs, next_obs=next_obs
    )
    if not (np.isfinite(gamma) and np.isfinite(scale)):
        raise ValueError(f"gamma and the return scale must be finite, got {gamma}, {scale}")
    episode_r = episode_scores(r, tg)
    succ = success_rows(batch.success, tg, episode_r, "positive")
    d_cur, d_next = graph_distances(
        eg.codes, tg.codes, anchor_obs, next_obs, succ, similarity=opts.similarity, tau=opts.similarity_tau
    )
    expo = d_next - d_cur + 1.0 if opts.normalize_distance else d_next
    returns = apply_invalid_action_penalty(scale * np.power(gamma, expo), valid, sh.invalid_penalty)
    scores = apply_invalid_action_penalty(episode_r, valid, sh.invalid_penalty)
    std = mode == "mean_std_norm"
    if opts.episode_weight == 0:
        episode = np.zeros(len(r))
    else:
        episode = opts.episode_weight * group_normalize(
            scores, eg, norm_by_std=std, eps=eps, singleton=sh.singleton
        )
    sgc = build_step_groups(eg.codes, anchor_obs)
    step = step_relative_advantage(returns, coded_groups(sgc), mode=mode, eps=eps)
    return GiGPOTerms(episode=episode, step=step, scores=scores, returns=returns, step_groups=sgc)


@dataclass(frozen=True)
class GraphGPOOptions:
    """GraphGPO's own options (``ShapeConfig.options["graphgpo"]``; docs/shapers.md §10)."""

    step_mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    """Normalisation of the episode and step terms (upstream: mean_std_norm)."""
    episode_weight: float = 1.0
    """Upstream ``episode_advantage_w`` (0 skips the episode term)."""
    scale: float = 10.0
    """Step return scale: r = scale·γ^d (upstream 10)."""
    normalize_distance: bool = False
    """r = scale·γ^(d(next) − d(cur) + 1) instead of scale·γ^d(next)."""
    similarity: bool = False
    """Merge near-identical state texts (difflib ratio ≥ ``similarity_tau``) before building the graph."""
    similarity_tau: float = 0.95

    def __post_init__(self) -> None:
        check_mode(self.step_mode)


@register(
    "graphgpo",
    stage="base",
    summary="GraphGPO: episode term + graph shortest-path step term (§10).",
    options=GraphGPOOptions,
    needs=("state_keys", "state_chain"),
)
def _graphgpo_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    return graph_stage(batch, config, "graphgpo", graphgpo_terms, with_next=True)
