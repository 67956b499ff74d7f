"""One :class:`~stepgym.shapers.StepBatch` builder for every adapter that keeps one token row per episode.

TRL (:mod:`stepgym.integrations.trl`), verl (:mod:`stepgym.integrations.verl`), SkyRL
(:mod:`stepgym.integrations.skyrl`) and OpenRLHF (:mod:`stepgym.integrations.openrlhf_train`) all hand the shapers
the same thing: per row, the token span of each model reply (one env step each) and, when the adapter has them,
the step records of :func:`stepgym.integrations.annotations.step_annotations`. :func:`build_step_batch` turns them
into a ``StepBatch`` under one rule:

* group id = ``str(group)`` of the row's group (an object array: a TRL block index ``3`` and a verl uid ``"3"``
  are the same group);
* trajectory id = the row index (``int64``);
* reward = the given per-step rewards, else each record's ``reward`` × ``reward_scale``;
* the per-step annotation fields come from :data:`RECORD_FIELDS`, one entry per ``StepBatch`` field; GiGPO's
  fallback anchor for a step without a state key is ``"<row>:<step>"`` (a key no other step shares), and the
  graph methods' state after a step without one is ``"<row>:<step + 1>"`` (so a row's states still chain:
  ``next_obs[t] == anchor_obs[t + 1]``);
* the graph methods' fields: ``next_obs`` (the state key after the step), ``dones`` (the step terminated the
  episode), ``step_index``, ``actions`` and, when every step has one, ``true_gain`` (``ValueWrapper``'s
  ``VALUE_GAIN``); ``success`` is left to each method's own rule on the episode return;
* ``aborted`` (per row, docs/failures.md): an episode an infrastructure failure cut off. Its rows are carried as
  ``StepBatch.aborted`` (advantage 0, out of every statistic; the adapter masks them out of its loss), and its
  spans and records need not line up: missing records are :data:`~stepgym.integrations.annotations.ABORTED_STEP`,
  surplus ones dropped, and a row without a reply gets one empty step.

:func:`mask_runs` finds the reply spans in a loss mask when an adapter has no recorded spans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from stepgym.errors import StepRecordError
from stepgym.integrations.annotations import ABORTED_STEP, arg_labels, state_anchors, valid_flags
from stepgym.shapers import StepBatch, TokenLayout

__all__ = ["RECORD_FIELDS", "RecordContext", "build_step_batch", "mask_runs"]


def mask_runs(row: Any) -> list[tuple[int, int]]:
    """The ``(start, stop)`` runs of non-zero entries in one mask row: one per model reply, i.e. one per env
    step (a reply's tokens are 1, the env's turns and padding 0)."""
    padded = np.concatenate([[0], (np.asarray(row) > 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


class RecordContext(NamedTuple):
    """What a :data:`RECORD_FIELDS` reader gets besides the flat list of step records."""

    invalid_rule: str  #: ``annotations.INVALID_RULES``
    fallback_keys: list[str]  #: ``"<row>:<step>"`` per record
    next_fallback_keys: list[str]  #: ``"<row>:<step + 1>"`` per record
    step_index: list[int]  #: the record's position in its row


#: ``StepBatch`` field → its value read from the batch's step records (flat, in step-row order). A new per-step
#: field is one entry here (its reader returns an (N,) array, a list, or ``None`` when the records lack it).
RECORD_FIELDS: dict[str, Callable[[list[Mapping[str, Any]], RecordContext], Any]] = {
    "valid": lambda recs, ctx: valid_flags(recs, ctx.invalid_rule),
    "anchor_obs": lambda recs, ctx: state_anchors(recs, ctx.fallback_keys),
    "reasonable": lambda recs, ctx: arg_labels(recs, "arg_reasonable"),
    "progress": lambda recs, ctx: arg_labels(recs, "arg_progress"),
    "next_obs": lambda recs, ctx: [
        r["next_state_key"] if r.get("next_state_key") is not None else fb
        for r, fb in zip(recs, ctx.next_fallback_keys, strict=True)
    ],
    "dones": lambda recs, ctx: np.asarray([bool(r.get("terminated", False)) for r in recs], dtype=bool),
    "step_index": lambda recs, ctx: np.asarray(ctx.step_index, dtype=np.int64),
    "actions": lambda recs, ctx: ["" if r.get("action") is None else str(r["action"]) for r in recs],
    "true_gain": lambda recs, ctx: (
        np.asarray([float(r["value_gain"]) for r in recs], dtype=np.float64)
        if recs and all(r.get("value_gain") is not None for r in recs)
        else None
    ),
}


def build_step_batch(
    spans: Sequence[Sequence[tuple[int, int]]],
    groups: Sequence[Any],
    width: int,
    *,
    records: Sequence[Sequence[Mapping[str, Any]]] | None = None,
    rewards: Sequence[Sequence[float]] | None = None,
    reward_scale: float = 1.0,
    invalid_rule: str = "format_or_inadmissible",
    aborted: Sequence[bool] | None = None,
) -> StepBatch:
    """The shapers' batch for rows of replies (see the module docstring for the rule).

    Args:
        spans: ``spans[b]`` the ``(start, stop)`` token span of each of row b's steps, in step order.
        groups: the GRPO group of each row.
        width: the token rows' padded length (the layout's L).
        records: ``records[b]`` row b's step records, one per span; ``None``: no annotation fields (the
            GRPO-family bases only).
        rewards: ``rewards[b]`` row b's per-step rewards, one per span; ``None``: the records' ``reward`` ×
            ``reward_scale``.
        invalid_rule: how validity is read (``annotations.INVALID_RULES``).
        aborted: per row, whether its episode was aborted (``None``: none was).
    """
    if len(groups) != len(spans):
        raise StepRecordError(f"{len(groups)} group ids for {len(spans)} rows")
    if records is None and rewards is None:
        raise ValueError("build_step_batch needs the step records or the per-step rewards")
    cut = [False] * len(spans) if aborted is None else [bool(a) for a in aborted]
    if len(cut) != len(spans):
        raise StepRecordError(f"aborted has {len(cut)} rows for {len(spans)} rows of spans")
    if any(cut):  # an aborted row's spans and records need not line up: its values are never read
        spans = [list(sp) or [(0, 0)] if c else sp for sp, c in zip(spans, cut, strict=True)]
        if records is not None:
            records = [
                [*row[: len(sp)], *[ABORTED_STEP] * (len(sp) - len(row))] if c else row
                for row, sp, c in zip(records, spans, cut, strict=True)
            ]
        if rewards is not None:
            rewards = [
                [*row[: len(sp)], *[0.0] * (len(sp) - len(row))] if c else row
                for row, sp, c in zip(rewards, spans, cut, strict=True)
            ]
    for name, per_row in (("records", records), ("rewards", rewards)):
        if per_row is None:
            continue
        if len(per_row) != len(spans):
            raise StepRecordError(f"{name} has {len(per_row)} rows for {len(spans)} rows of spans")
        for b, (row, sp) in enumerate(zip(per_row, spans, strict=True)):
            if len(row) != len(sp):
                raise StepRecordError(f"row {b}: {len(row)} {name} for {len(sp)} step spans")
    for b, sp in enumerate(spans):
        if not sp:
            raise StepRecordError(f"row {b} has no step to credit (no reply token)")
    n = [len(sp) for sp in spans]
    flat = [rec for row in records for rec in row] if records is not None else None
    step_rewards = (
        [float(x) for row in rewards for x in row]
        if rewards is not None
        else [float(r["reward"]) * reward_scale for r in flat or []]
    )
    fields: dict[str, Any] = {}
    if flat is not None:
        ctx = RecordContext(
            invalid_rule,
            [f"{b}:{t}" for b, k in enumerate(n) for t in range(k)],
            [f"{b}:{t + 1}" for b, k in enumerate(n) for t in range(k)],
            [t for k in n for t in range(k)],
        )
        fields = {name: read(flat, ctx) for name, read in RECORD_FIELDS.items()}
    return StepBatch(
        group_ids=np.asarray(
            [str(g) for g, k in zip(groups, n, strict=True) for _ in range(k)], dtype=object
        ),
        traj_ids=np.repeat(np.arange(len(spans), dtype=np.int64), n),
        rewards=np.asarray(step_rewards, dtype=np.float64),
        layout=TokenLayout.from_spans([list(sp) for sp in spans], int(width)),
        aborted=np.repeat(np.asarray(cut, dtype=bool), n) if any(cut) else None,
        **fields,
    )
