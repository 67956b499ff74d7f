"""Shared pieces of the graph / history credit methods (docs/shapers.md §10–§14).

Every function here is float64 / int64 NumPy over the step rows of a batch. Node keys (anchor and next states)
are coded once per episode group, so a state seen in two groups gives two nodes, as every upstream code builds
one graph per task group (``uid``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.shapers._common import Groups, as_bool_array, check_same_length, coded_groups, hashable
from stepgym.shapers.registry import BaseAdvantage
from stepgym.shapers.shared import SharedOptions

_SUCCESS = ("__stepgym_success__",)


def prev_next_rows(tg: Groups) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the index of the previous and next row of its trajectory (-1 where none)."""
    order, _ = tg._sorted()
    n = len(tg.codes)
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = tg.codes[order[1:]] == tg.codes[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
        nxt[order[:-1][same]] = order[1:][same]
    return prev, nxt


def check_step_index(step_index: Any, tg: Groups) -> None:
    """Rows of a trajectory must appear in time order: ``step_index`` strictly increasing along each one."""
    if step_index is None:
        return
    t = np.asarray(step_index)
    check_same_length(len(tg.codes), step_index=t)
    prev, _ = prev_next_rows(tg)
    has = prev >= 0
    bad = np.flatnonzero(has & (t <= t[np.where(has, prev, 0)]))
    if bad.size:
        raise ValueError(
            f"StepBatch rows out of order: step_index does not increase along trajectory "
            f"(row {int(bad[0])}, {bad.size} such rows). Put the rows of each trajectory in time order."
        )


def success_rows(
    success: Any, tg: Groups, episode: np.ndarray, rule: str = "positive", level: float = 10.0
) -> np.ndarray:
    """Per row: True on the last row of a trajectory that reached success.

    ``success`` (``StepBatch.success``, per row; only last rows are read) wins when given. Otherwise the upstream rule:
    ``"positive"`` → episode return > 0 (GraphGPO), ``"equal"`` → episode return == ``level`` (G2PO).
    """
    _, nxt = prev_next_rows(tg)
    last = nxt < 0
    if success is not None:
        s = as_bool_array(success, "success")
        check_same_length(len(tg.codes), success=s)
        return s & last
    won = episode > 0 if rule == "positive" else episode == level
    return won & last


def require_anchor(batch: Any, method: str) -> Sequence[Any]:
    """``batch.anchor_obs``, or the ``ValueError`` saying that ``base=method`` needs it."""
    if batch.anchor_obs is None:
        raise ValueError(f"base={method!r} needs StepBatch.anchor_obs (the state before each step)")
    return batch.anchor_obs


def require_next(batch: Any, method: str) -> Sequence[Any]:
    if batch.anchor_obs is None or batch.next_obs is None:
        raise ValueError(
            f"base={method!r} needs StepBatch.anchor_obs and StepBatch.next_obs (the state key before and after "
            "each step; the bundled trainer fills them from schema.STATE_KEY). Fill both, e.g. next_obs[i] = "
            f"info[{schema.STATE_KEY!r}] returned by the step of row i."
        )
    check_same_length(len(batch.anchor_obs), next_obs=batch.next_obs)
    return batch.next_obs


def code_states(
    eg: Groups, anchor: Sequence[Any], nxt: Sequence[Any], success: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node codes for (episode group, state): ``(anchor_codes, next_codes, node_group)``. Where ``success`` is
    True the row's next node is its group's literal success node instead of its next state."""
    mapping: dict[tuple[int, Any], int] = {}
    g = eg.codes.tolist()
    a = np.fromiter(
        (mapping.setdefault((gi, hashable(o)), len(mapping)) for gi, o in zip(g, anchor, strict=True)),
        dtype=np.int64,
        count=len(g),
    )
    succ = np.zeros(len(g), dtype=bool) if success is None else success
    keys = (
        (gi, _SUCCESS) if s else (gi, hashable(o)) for gi, o, s in zip(g, nxt, succ.tolist(), strict=True)
    )
    b = np.fromiter((mapping.setdefault(k, len(mapping)) for k in keys), dtype=np.int64, count=len(g))
    node_group = np.fromiter((k[0] for k in mapping), dtype=np.int64, count=len(mapping))
    return a, b, node_group


def check_chain(anchor: np.ndarray, nxt_state: np.ndarray, next_row: np.ndarray) -> None:
    """The state after row t must be the state row t+1 starts in (else rows are out of order or mis-keyed)."""
    has = next_row >= 0
    bad = np.flatnonzero(has & (nxt_state != anchor[np.where(has, next_row, 0)]))
    if bad.size:
        raise ValueError(
            f"StepBatch.next_obs of row {int(bad[0])} differs from anchor_obs of its trajectory's next row "
            f"({bad.size} such rows): rows of a trajectory must be in time order and next_obs[t] must equal "
            "anchor_obs[t+1] (the same keying for both fields)."
        )


def chained_states(
    eg: Groups, tg: Groups, anchor: Sequence[Any], nxt: Sequence[Any], success: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`code_states`, checked by :func:`check_chain` along each trajectory of ``tg`` (a success row's next
    node, the success node, is not compared with a next row)."""
    a, b, node_group = code_states(eg, anchor, nxt, success)
    _, next_row = prev_next_rows(tg)
    check_chain(a, b if success is None else np.where(success, -1, b), next_row)
    return a, b, node_group


def require_states(batch: Any, method: str, *, with_next: bool) -> None:
    """The checks of a graph method's stage: ``batch`` has its states (:func:`require_next` with ``with_next``, else
    :func:`require_anchor`) and its rows in time order along each trajectory (:func:`check_step_index`)."""
    (require_next if with_next else require_anchor)(batch, method)
    check_step_index(batch.step_index, coded_groups(batch.traj_ids))


def graph_stage(batch: Any, config: Any, method: str, terms: Any, *, with_next: bool) -> BaseAdvantage:
    """A graph method's base stage: :func:`require_states`, then ``terms(batch, options=, shared=)`` (its own
    options and the shared ones from ``config``), combined with the step weight into the stage's
    :class:`~stepgym.shapers.registry.BaseAdvantage` (the terms kept beside it)."""
    require_states(batch, method, with_next=with_next)
    t = terms(batch, options=config.options_for(method), shared=SharedOptions.of(config))
    return BaseAdvantage(t.combined(config.step_weight), t)


def reverse_hops(n_nodes: int, src: np.ndarray, dst: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Fewest edges from each node to any of ``targets`` (inf where unreachable), frontier by frontier."""
    dist = np.full(n_nodes, np.inf)
    dist[targets] = 0.0
    frontier = np.zeros(n_nodes, dtype=bool)
    frontier[targets] = True
    d = 0
    while frontier.any():
        d += 1
        cand = src[frontier[dst]]
        cand = cand[np.isinf(dist[cand])]
        frontier = np.zeros(n_nodes, dtype=bool)
        frontier[cand] = True
        dist[cand] = d
    return dist
