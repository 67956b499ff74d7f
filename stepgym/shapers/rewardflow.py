"""RewardFlow: decay-propagated state values on a group's state graph, step reward V(s') − V(s) (docs/shapers.md §12).

Public code: ``tmlr-group/RewardFlow`` ``rewardflow/core_rewardflow.py`` and ``propagation.py``
(``propagate_reward_decay``), with the state lists of ``agent_system/multi_turn_rollout/utils.py``. Per episode
group: each trajectory contributes its states s_0 (reward 0), s_1 .. s_{T-1} (each with the reward of the step that
entered it) and, only when the episode ended before the row horizon (``StepBatch.dones``), the state after its last
step with that step's reward. States are merged exactly; edges join consecutive states, self-loops dropped (or
ALFWorld's cleaning, ``clean=True``); a state's initial value is the reward it was *first* seen with on an edge
(edges in trajectory-of-first-appearance then time order, source before destination); a state on no edge is 0. Then ``rounds`` synchronous rounds of V(n) ← max(V(n), γ·V(successor)) (1000 upstream; stepgym stops at the
first round that changes nothing, after which every further round is the identity, so the result is the same).
Step reward r̃_t = V(s_{t+1}) − V(s_t); a row whose next state is not in the graph (the last row of a trajectory cut
at the horizon) keeps its raw env reward (upstream quirk, kept and documented); then the invalid-action penalty.
A = A^E + w·A^S with GiGPO's episode and exact-anchor step terms, both in "mean_norm" by default.

Departures: groups are the episode group ids (upstream slices the batch into contiguous equal parts, which equals
the uids only for a batch ordered by group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import (
    Groups,
    as_bool_array,
    as_float_array,
    check_mode,
    check_same_length,
    episode_inputs,
)
from stepgym.shapers._graph import (
    chained_states,
    graph_stage,
    prev_next_rows,
    require_next,
)
from stepgym.shapers.gigpo import GiGPOTerms, step_relative_advantage
from stepgym.shapers.grpo import group_normalize
from stepgym.shapers.registry import BaseAdvantage, register
from stepgym.shapers.rewards import apply_invalid_action_penalty, episode_scores
from stepgym.shapers.shared import SharedOptions

__all__ = [
    "RewardFlowOptions",
    "propagate_decay",
    "rewardflow_terms",
]


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


def _edges(r: np.ndarray, tg: Groups, a: np.ndarray, b: np.ndarray, ended: np.ndarray):
    """The transitions s_t → s_{t+1} whose next state is in the trajectory's state list, in (trajectory of first
    appearance, time) order: (rows, src, dst, src reward, dst reward) and the per-row ``has_next`` mask."""
    prev, nxt = prev_next_rows(tg)
    order, _ = tg._sorted()
    enter = np.where(
        prev >= 0, r[np.maximum(prev, 0)], 0.0
    )  # reward of the step that entered the anchor state
    has_next = (nxt >= 0) | ended
    rows = order[has_next[order]]
    return rows, a[rows], b[rows], enter[rows], r[rows], has_next


def _noise(action: Any, text: Any) -> bool:
    """ALFWorld manager's transitions to skip: look / inventory, any examine, or a "Nothing happens" result."""
    act = "" if action is None else str(action)
    return act in ("inventory", "look") or "examine" in act or "Nothing happens" in str(text)


def alfworld_clean(rows, src, dst, sr, dr, traj, actions, next_text):
    """RewardFlow's ``AlfWorldEnvironmentManager.clean_trajectory`` on one batch's ordered edges: a run of noise
    transitions (or ones that return to the state the run started from) is spliced into one edge from the run's
    first state to the first state reached by a non-noise transition, carrying that transition's rewards."""
    out: list[tuple[int, int, float, float]] = []
    j, n = 0, len(rows)
    while j < n:
        f, t = int(src[j]), int(dst[j])
        if not (_noise(actions[rows[j]], next_text[rows[j]]) or f == t):
            out.append((f, t, sr[j], dr[j]))
            j += 1
            continue
        cur, tr = f, traj[rows[j]]
        while j < n and traj[rows[j]] == tr:
            t = int(dst[j])
            j += 1
            if not (_noise(actions[rows[j - 1]], next_text[rows[j - 1]]) or cur == t):
                out.append((cur, t, sr[j - 1], dr[j - 1]))
                break
    arr = np.array(out, dtype=np.float64).reshape(-1, 4)
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3]


def first_seen_values(
    n_nodes: int, src: np.ndarray, dst: np.ndarray, sr: np.ndarray, dr: np.ndarray
) -> np.ndarray:
    """``propagate_reward_decay``'s initial values: over the edges in order, src then dst, the reward a node is
    first seen with; a node on no edge is 0 (upstream fills missing states with 0.0)."""
    seq = np.column_stack([src, dst]).ravel()
    vals = np.column_stack([sr, dr]).ravel()
    init = np.zeros(n_nodes)
    if len(seq):
        nodes, first = np.unique(seq, return_index=True)
        init[nodes] = vals[first]
    return init


def rewardflow_terms(
    batch: Any, *, options: RewardFlowOptions | None = None, shared: SharedOptions | None = None
) -> GiGPOTerms:
    """RewardFlow's episode and step terms per row (docs/shapers.md §12); ``returns`` holds the penalised r̃.

    ``batch``: a :class:`~stepgym.shapers.StepBatch` with ``rewards``, ``group_ids``, ``traj_ids``, ``anchor_obs``,
    ``next_obs`` and optionally ``valid``, ``dones`` and ``actions`` (read by ``options.alfworld_clean``).
    ``options``: :class:`RewardFlowOptions` (None: its defaults); ``shared``: :class:`~stepgym.shapers.SharedOptions`
    (γ, c, ε, singleton; None: its defaults with RewardFlow's upstream γ = 0.9).
    """
    opts = RewardFlowOptions() if options is None else options
    sh = SharedOptions(gamma=0.9) if shared is None else shared
    next_obs = require_next(batch, "rewardflow")
    group_ids, traj_ids, anchor_obs, valid = batch.group_ids, batch.traj_ids, batch.anchor_obs, batch.valid
    gamma, rounds, mode = sh.gamma, opts.rounds, opts.step_mode
    eps, invalid_penalty = sh.eps, sh.invalid_penalty
    r, eg, tg = episode_inputs(
        batch.rewards, group_ids, traj_ids, mode, "RewardFlow", anchor_obs=anchor_obs, next_obs=next_obs
    )
    n = len(r)
    if not (np.isfinite(gamma) and rounds >= 0):
        raise ValueError(f"RewardFlow needs a finite gamma and rounds >= 0, got {gamma}, {rounds}")
    ended = np.ones(n, dtype=bool) if batch.dones is None else as_bool_array(batch.dones, "dones")
    check_same_length(n, dones=ended)
    a, b, node_group = chained_states(eg, tg, anchor_obs, next_obs)
    rows, src, dst, sr, dr, has_next = _edges(r, tg, a, b, ended)
    if opts.alfworld_clean:
        actions = batch.actions
        if actions is None:
            raise ValueError(
                "RewardFlow's alfworld_clean option needs StepBatch.actions (the action text of each step); fill it or "
                'set options={"rewardflow": {"alfworld_clean": False}}'
            )
        check_same_length(n, actions=actions)
        src, dst, sr, dr = alfworld_clean(rows, src, dst, sr, dr, tg.codes, actions, next_obs)
    else:  # the base environment manager drops self-loops
        keep = src != dst
        src, dst, sr, dr = src[keep], dst[keep], sr[keep], dr[keep]
    init = first_seen_values(len(node_group), src, dst, sr, dr)
    v = propagate_decay(init, src, dst, gamma, rounds)
    step_r = np.where(has_next, v[b] - v[a], r)
    returns = apply_invalid_action_penalty(step_r, valid, invalid_penalty)
    scores = apply_invalid_action_penalty(episode_scores(r, tg), valid, invalid_penalty)
    std = mode == "mean_std_norm"
    episode = group_normalize(scores, eg, norm_by_std=std, eps=eps, singleton=sh.singleton)
    step = step_relative_advantage(returns, Groups(a), mode=mode, eps=eps)
    return GiGPOTerms(episode=episode, step=step, scores=scores, returns=returns, step_groups=a)


@dataclass(frozen=True)
class RewardFlowOptions:
    """RewardFlow's own options (``ShapeConfig.options["rewardflow"]``; docs/shapers.md §12)."""

    step_mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    """Normalisation of the episode and step terms (upstream: mean_norm)."""
    rounds: int = 1000
    """Propagation rounds of V ← max(V, γ·V(successor))."""
    alfworld_clean: bool = False
    """ALFWorld trajectory cleaning (splice out look / inventory / examine / "Nothing happens" transitions; needs
    ``StepBatch.actions``). Off by default, as the base environment manager."""

    def __post_init__(self) -> None:
        check_mode(self.step_mode)
        if self.rounds < 0:
            raise ValueError(f"RewardFlow's rounds must be >= 0, got {self.rounds}")


@register(
    "rewardflow",
    stage="base",
    summary="RewardFlow: episode term + propagated state-value step term (§12).",
    options=RewardFlowOptions,
    needs=("state_keys", "state_chain"),
)
def _rewardflow_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    return graph_stage(batch, config, "rewardflow", rewardflow_terms, with_next=True)
