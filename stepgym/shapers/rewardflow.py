"""RewardFlow: decay-propagated state values on a group's state graph, step reward V(s') − V(s) (docs/shapers.md §12).

Public code: ``tmlr-group/RewardFlow`` ``rewardflow/core_rewardflow.py`` and ``propagation.py``
(``propagate_reward_decay``), with the state lists of ``agent_system/multi_turn_rollout/utils.py``. Per episode
group: each trajectory contributes its states s_0 (reward 0), s_1 .. s_{T-1} (each with the reward of the step that
entered it) and, only when the episode ended before the row horizon (``StepBatch.dones``), the state after its last
step with that step's reward. States are merged exactly; a state's initial value is the reward it was *first* seen
with (trajectories in order of first appearance, states in time order); edges join consecutive states, self-loops
dropped. Then ``rounds`` synchronous rounds of V(n) ← max(V(n), γ·V(successor)) (1000 upstream; stepgym stops at the
first round that changes nothing, after which every further round is the identity, so the result is the same).
Step reward r̃_t = V(s_{t+1}) − V(s_t); a row whose next state is not in the graph (the last row of a trajectory cut
at the horizon) keeps its raw env reward (upstream quirk, kept and documented); then the invalid-action penalty.
A = A^E + w·A^S with GiGPO's episode and exact-anchor step terms, both in "mean_norm" by default.

Departures: groups are the episode group ids (upstream slices the batch into contiguous equal parts, which equals
the uids only for a batch ordered by group); ALFWorld's environment-side trajectory cleaning is not part of the
shaper (a producer drops those transitions before building the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stepgym.shapers._common import (
    Groups,
    as_bool_array,
    as_float_array,
    check_same_length,
    check_traj_in_one_group,
)
from stepgym.shapers._graph import (
    check_chain,
    check_step_index,
    code_states,
    coded_groups,
    prev_next_rows,
    require_next,
)
from stepgym.shapers.gigpo import GiGPOTerms, step_relative_advantage
from stepgym.shapers.grpo import Singleton, group_normalize
from stepgym.shapers.registry import BaseAdvantage, register
from stepgym.shapers.rewards import DEFAULT_INVALID_PENALTY, apply_invalid_action_penalty, episode_scores

__all__ = ["propagate_decay", "rewardflow_terms"]


def propagate_decay(values: Any, src: Any, dst: Any, gamma: float, rounds: int = 1000) -> np.ndarray:
    """``rounds`` synchronous rounds of V(n) ← max(V(n), γ·V(m)) over the edges n → m (``propagate_reward_decay``)."""
    v = as_float_array(values, "values", ndim=1, finite=True).copy()
    s, d = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    for _ in range(int(rounds)):
        new = v.copy()
        np.maximum.at(new, s, gamma * v[d])
        if np.array_equal(new, v):
            break
        v = new
    return v


def _state_graph(r, tg, a, b, ended, n_nodes):
    """Initial node values (first seen wins) and the deduplicated edges without self-loops."""
    prev, nxt = prev_next_rows(tg)
    order, _ = tg._sorted()
    enter = np.where(
        prev >= 0, r[np.maximum(prev, 0)], 0.0
    )  # reward of the step that entered the anchor state
    last_end = (nxt < 0) & ended
    seq_pos = np.empty(len(r), dtype=np.int64)
    seq_pos[order] = np.arange(len(r))
    nodes = np.concatenate([a, b[last_end]])
    vals = np.concatenate([enter, r[last_end]])
    pos = np.concatenate([2 * seq_pos, 2 * seq_pos[last_end] + 1])
    first = np.lexsort((pos, nodes))
    nodes_sorted = nodes[first]
    head = np.concatenate(([True], nodes_sorted[1:] != nodes_sorted[:-1]))
    init = np.zeros(n_nodes)
    init[nodes_sorted[head]] = vals[first][head]
    src = np.concatenate([a[nxt >= 0], a[last_end]])
    dst = np.concatenate([a[nxt[nxt >= 0]], b[last_end]])
    loop = src != dst
    return init, src[loop], dst[loop], last_end | (nxt >= 0)


def rewardflow_terms(
    rewards: Any,
    group_ids: Any,
    traj_ids: Any,
    anchor_obs: Sequence[Any],
    next_obs: Sequence[Any],
    valid: Any = None,
    dones: Any = None,
    *,
    gamma: float = 0.9,
    rounds: int = 1000,
    invalid_penalty: float = DEFAULT_INVALID_PENALTY,
    mode: str = "mean_norm",
    eps: float = 1e-6,
    singleton: Singleton = "verl",
) -> GiGPOTerms:
    """RewardFlow's episode and step terms per row (docs/shapers.md §12); ``returns`` holds the penalised r̃."""
    r = as_float_array(rewards, "rewards", ndim=1, finite=True)
    n = len(r)
    check_same_length(n, group_ids=group_ids, traj_ids=traj_ids, anchor_obs=anchor_obs, next_obs=next_obs)
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"RewardFlow mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")
    if not (np.isfinite(gamma) and rounds >= 0):
        raise ValueError(f"RewardFlow needs a finite gamma and rounds >= 0, got {gamma}, {rounds}")
    eg, tg = Groups(group_ids), Groups(traj_ids)
    check_traj_in_one_group(eg, tg, traj_ids)
    ended = np.ones(n, dtype=bool) if dones is None else as_bool_array(dones, "dones")
    check_same_length(n, dones=ended)
    a, b, node_group = code_states(eg, anchor_obs, next_obs)
    _, nxt = prev_next_rows(tg)
    check_chain(a, b, nxt)
    init, src, dst, has_next = _state_graph(r, tg, a, b, ended, len(node_group))
    v = propagate_decay(init, src, dst, gamma, rounds)
    step_r = np.where(has_next, v[b] - v[a], r)
    returns = apply_invalid_action_penalty(step_r, valid, invalid_penalty)
    scores = apply_invalid_action_penalty(episode_scores(r, tg), valid, invalid_penalty)
    std = mode == "mean_std_norm"
    episode = group_normalize(scores, eg, norm_by_std=std, eps=eps, singleton=singleton)
    step = step_relative_advantage(returns, Groups(a), mode=mode, eps=eps)
    return GiGPOTerms(episode=episode, step=step, scores=scores, returns=returns, step_groups=a)


@register(
    "rewardflow", stage="base", summary="RewardFlow: episode term + propagated state-value step term (§12)."
)
def _rewardflow_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    next_obs = require_next(batch, "rewardflow")
    check_step_index(batch.step_index, coded_groups(batch.traj_ids))
    terms = rewardflow_terms(
        batch.rewards,
        batch.group_ids,
        batch.traj_ids,
        batch.anchor_obs,
        next_obs,
        batch.valid,
        batch.dones,
        gamma=config.gamma,
        rounds=config.rewardflow_rounds,
        invalid_penalty=config.invalid_penalty,
        mode=config.step_mode or "mean_norm",
        eps=config.eps,
        singleton=config.singleton,
    )
    return BaseAdvantage(terms.combined(config.step_weight), terms)
