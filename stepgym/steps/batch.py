"""The one :class:`~stepgym.shapers.StepBatch` builder: the bundled trainer, every adapter and a loop of one's own.

The bundled trainer (:func:`stepgym.steps.advantages.shape_rows` in its one-row-per-step layout), TRL
(:mod:`stepgym.integrations.trl`), verl (:mod:`stepgym.integrations.verl`), SkyRL (:mod:`stepgym.integrations.skyrl`)
and OpenRLHF (:mod:`stepgym.integrations.openrlhf_train`) (one token row per episode) all hand the shapers the same
thing: per row of steps, the token span of each model reply (one env step each) and the step records of
:func:`stepgym.steps.record.step_annotations` (built once per step from its info). :func:`build_step_batch` turns
them into a ``StepBatch`` under one rule:

* group id = ``str(group)`` of the row's group (an object array: a TRL block index ``3`` and a verl uid ``"3"``
  are the same group; the shapers code groups by first appearance, so the type never changes an advantage);
* trajectory id = the row index (``int64``);
* reward = the given per-step rewards, else each record's ``reward`` × ``reward_scale``;
* the per-step annotation fields come from :data:`RECORD_FIELDS`, one entry per ``StepBatch`` field: validity by
  :func:`~stepgym.steps.record.valid_flags`; GiGPO's anchor and the graph methods' state after the step keyed as
  :class:`StepBatchOptions` says (``anchor="state_key"``: the state key, else the observation text when the caller
  gives them, else ``"<row>:<step>"`` / ``"<row>:<step + 1>"``, keys no other step shares, so a row's states still
  chain: ``next_obs[t] == anchor_obs[t + 1]``; ``anchor="observation"``: the observation texts);
* the graph methods' fields: ``next_obs``, ``dones`` (the step terminated the episode), ``step_index``, ``actions``
  and, when every step has one, ``true_gain`` (``ValueWrapper``'s ``VALUE_GAIN``); ``success`` is each method's own
  rule on the episode return, or (``success="won"``, the bundled trainer's rule) each record's ``won`` when every
  record has one;
* the token layout: spans in one row per episode (``layout="spans"``, the adapters), one row per step
  (``"step_rows"``, the bundled trainer: step i's span lies in row i), or none (``"none"``: per-step advantages);
* ``aborted`` (per row, docs/failures.md): an episode an infrastructure failure cut off. Its rows are carried as
  ``StepBatch.aborted`` (advantage 0, out of every statistic; the caller masks them out of its loss), and its
  spans and records need not line up: missing records are :data:`~stepgym.steps.record.ABORTED_STEP`, surplus ones
  dropped, and a row without a reply gets one empty step.

:func:`step_batch_from_trajectories` is the same builder for a loop of one's own: the recorded
:class:`~stepgym.schema.Trajectory` of each episode (``GroupEnv.trajectories``, ``EpisodeRecorder``) and its
group become a ``StepBatch`` through the same step records and rules.

:func:`mask_runs` finds the reply spans in a loss mask when an adapter has no recorded spans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from stepgym import schema
from stepgym.errors import StepRecordError
from stepgym.shapers import StepBatch, TokenLayout
from stepgym.steps.record import (
    ABORTED_STEP,
    FORMAT_OR_INADMISSIBLE,
    INVALID_RULES,
    arg_labels,
    episode_annotations,
    valid_flags,
)

__all__ = [
    "RECORD_FIELDS",
    "REWARD_SCALE",
    "RecordContext",
    "StepBatchOptions",
    "build_step_batch",
    "mask_runs",
    "step_batch_from_trajectories",
]

ANCHORS: tuple[str, ...] = ("state_key", "observation")
SUCCESS_RULES: tuple[str, ...] = ("method", "won")
LAYOUTS: tuple[str, ...] = ("spans", "step_rows", "none")

#: The one default reward scale (every trainer's: the bundled one's ``env.reward_scale``, TRL, SkyRL, OpenRLHF,
#: verl): env rewards × 10, verl-agent's 10·won, so the recipes' invalid-action penalty (0.1) has the papers'
#: relative size.
REWARD_SCALE = 10.0


@dataclass(frozen=True)
class StepBatchOptions:
    """How :func:`build_step_batch` reads the step records: the rules in which callers differ, each named."""

    reward_scale: float = REWARD_SCALE
    """Multiplies the records' env rewards (the bundled trainer's ``env.reward_scale``)."""
    invalid_rule: str = FORMAT_OR_INADMISSIBLE
    """How validity is read (:data:`~stepgym.steps.record.INVALID_RULES`)."""
    anchor: Literal["state_key", "observation"] = "state_key"
    """The states' keying (``EnvConfig.anchor``): the env's state key (the observation text, when given, for a step
    without one) or the observation text (the methods' own keying; needs ``observations``)."""
    success: Literal["method", "won"] = "method"
    """``"method"``: ``success`` is left to each method's own rule on the return; ``"won"``: each record's ``won``
    when every record has one (the bundled trainer's rule)."""
    layout: Literal["spans", "step_rows", "none"] = "spans"
    """The token layout: the spans in one row per episode, one row per step (step i's span in row i), or none."""

    def __post_init__(self) -> None:
        for name, allowed in (
            ("invalid_rule", INVALID_RULES),
            ("anchor", ANCHORS),
            ("success", SUCCESS_RULES),
            ("layout", LAYOUTS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")


def mask_runs(row: Any) -> list[tuple[int, int]]:
    """The ``(start, stop)`` runs of non-zero entries in one mask row: one per model reply, i.e. one per env
    step (a reply's tokens are 1, the env's turns and padding 0)."""
    padded = np.concatenate([[0], (np.asarray(row) > 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


class RecordContext(NamedTuple):
    """What a :data:`RECORD_FIELDS` reader gets besides the flat list of step records."""

    options: StepBatchOptions
    before: list[Any]  #: per record: the fallback key (or observation text) of the state it was taken in
    after: list[Any]  #: per record: the same for the state it led to
    step_index: list[int]  #: the record's position in its row


def _states(recs: list[Mapping[str, Any]], ctx: RecordContext, field: str, keys: list[Any]) -> list[Any]:
    """Each record's state ``field`` (``"state_key"`` / ``"next_state_key"``) keyed as the options say: the state
    key, else ``keys[i]``; or (``anchor="observation"``) ``keys[i]``, the observation text."""
    if ctx.options.anchor == "observation":
        return list(keys)
    return [r.get(field) if r.get(field) is not None else k for r, k in zip(recs, keys, strict=True)]


#: ``StepBatch`` field → its value read from the batch's step records (flat, in step-row order). A new per-step
#: field is one entry here (its reader returns an (N,) array, a list, or ``None`` when the records lack it).
RECORD_FIELDS: dict[str, Callable[[list[Mapping[str, Any]], RecordContext], Any]] = {
    "valid": lambda recs, ctx: valid_flags(recs, ctx.options.invalid_rule),
    "anchor_obs": lambda recs, ctx: _states(recs, ctx, "state_key", ctx.before),
    "reasonable": lambda recs, ctx: arg_labels(recs, "arg_reasonable"),
    "progress": lambda recs, ctx: arg_labels(recs, "arg_progress"),
    "next_obs": lambda recs, ctx: _states(recs, ctx, "next_state_key", ctx.after),
    "dones": lambda recs, ctx: np.asarray([bool(r.get("terminated", False)) for r in recs], dtype=bool),
    "step_index": lambda recs, ctx: np.asarray(ctx.step_index, dtype=np.int64),
    "actions": lambda recs, ctx: ["" if r.get("action") is None else str(r["action"]) for r in recs],
    "true_gain": lambda recs, ctx: (
        np.asarray([float(r["value_gain"]) for r in recs], dtype=np.float64)
        if recs and all(r.get("value_gain") is not None for r in recs)
        else None
    ),
}


def _success(recs: list[Mapping[str, Any]], options: StepBatchOptions) -> np.ndarray | None:
    """``success`` under ``options.success``: each record's ``won`` when every record has one (``"won"``)."""
    if options.success == "method" or not recs or any(r.get("won") is None for r in recs):
        return None
    return np.asarray([bool(r["won"]) for r in recs], dtype=bool)


def _pad_aborted(
    spans: Sequence[Sequence[tuple[int, int]]],
    per_row: Sequence[Sequence[Any]] | None,
    cut: list[bool],
    filler: Any,
) -> list[Sequence[Any]] | None:
    """An aborted row's values cut or padded (with ``filler``) to its spans: they are never read."""
    if per_row is None:
        return None
    return [
        [*row[: len(sp)], *[filler] * (len(sp) - len(row))] if c else row
        for row, sp, c in zip(per_row, spans, cut, strict=True)
    ]


def _check_rows(
    spans: Sequence[Sequence[tuple[int, int]]],
    records: Sequence[Sequence[Any]] | None,
    rewards: Sequence[Sequence[Any]] | None,
) -> None:
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


def _state_keys(
    n: list[int], observations: Sequence[Sequence[Any]] | None, options: StepBatchOptions
) -> tuple[list[Any], list[Any]]:
    """Per step: the key of the state before and after it when the records have no state key (or always, keyed
    by observation): row b's observation texts when given, else ``"<row>:<step>"``."""
    if observations is None:
        if options.anchor == "observation":
            raise ValueError("anchor='observation' needs the observation texts (observations=)")
        return (
            [f"{b}:{t}" for b, k in enumerate(n) for t in range(k)],
            [f"{b}:{t + 1}" for b, k in enumerate(n) for t in range(k)],
        )
    if len(observations) != len(n):
        raise StepRecordError(f"observations has {len(observations)} rows for {len(n)} rows of spans")
    before, after = [], []
    for b, (k, obs) in enumerate(zip(n, observations, strict=True)):
        # an aborted row's steps beyond its texts get keys no other step shares
        texts = [*obs, *[f"{b}:{t}" for t in range(len(obs), k + 1)]]
        before += texts[:k]
        after += texts[1 : k + 1]
    return before, after


def _layout(spans: Sequence[Sequence[tuple[int, int]]], width: int, kind: str) -> TokenLayout | None:
    if kind == "none":
        return None
    if kind == "spans":
        return TokenLayout.from_spans([list(sp) for sp in spans], int(width))
    flat = [(int(s), int(e)) for sp in spans for s, e in sp]  # one row per step: step i's span in row i
    token_step = np.full((len(flat), int(width)), -1, dtype=np.int64)
    for i, (s, e) in enumerate(flat):
        if not 0 <= s <= e <= width:
            raise ValueError(f"step {i}: span [{s}, {e}) is outside [0, {width}) or reversed")
        token_step[i, s:e] = i
    return TokenLayout(
        token_step=token_step, n_steps=len(flat), step_row=np.arange(len(flat), dtype=np.int64)
    )


def build_step_batch(
    spans: Sequence[Sequence[tuple[int, int]]],
    groups: Sequence[Any],
    width: int,
    *,
    records: Sequence[Sequence[Mapping[str, Any]]] | None = None,
    rewards: Sequence[Sequence[float]] | None = None,
    aborted: Sequence[bool] | None = None,
    observations: Sequence[Sequence[Any]] | None = None,
    options: StepBatchOptions | None = None,
) -> StepBatch:
    """The shapers' batch for rows of steps (see the module docstring for the rule).

    Args:
        spans: ``spans[b]`` the ``(start, stop)`` token span of each of row b's steps, in step order.
        groups: the GRPO group of each row.
        width: the token rows' padded length (the layout's L).
        records: ``records[b]`` row b's step records (:class:`~stepgym.steps.record.StepRecord`), one per span;
            ``None``: no annotation fields (the GRPO-family bases only).
        rewards: ``rewards[b]`` row b's per-step rewards, one per span; ``None``: the records' ``reward`` ×
            ``reward_scale``.
        aborted: per row, whether its episode was aborted (``None``: none was).
        observations: ``observations[b]`` the texts of the states row b went through (one per step and the last
            one): the keys of ``anchor="observation"`` and the fallback of ``anchor="state_key"``.
        options: the reading rules (:class:`StepBatchOptions`; ``None``: its defaults).
    """
    opts = options or StepBatchOptions()
    if len(groups) != len(spans):
        raise StepRecordError(f"{len(groups)} group ids for {len(spans)} rows")
    if records is None and rewards is None:
        raise ValueError("build_step_batch needs the step records or the per-step rewards")
    cut = [False] * len(spans) if aborted is None else [bool(a) for a in aborted]
    if len(cut) != len(spans):
        raise StepRecordError(f"aborted has {len(cut)} rows for {len(spans)} rows of spans")
    if any(cut):  # an aborted row's spans and records need not line up: its values are never read
        spans = [list(sp) or [(0, 0)] if c else sp for sp, c in zip(spans, cut, strict=True)]
        records = _pad_aborted(spans, records, cut, ABORTED_STEP)
        rewards = _pad_aborted(spans, rewards, cut, 0.0)
    _check_rows(spans, records, rewards)
    n = [len(sp) for sp in spans]
    flat = [rec for row in records for rec in row] if records is not None else None
    step_rewards = (
        [float(x) for row in rewards for x in row]
        if rewards is not None
        else [float(r["reward"]) * opts.reward_scale for r in flat or []]
    )
    fields: dict[str, Any] = {}
    if flat is not None:
        before, after = _state_keys(n, observations, opts)
        ctx = RecordContext(opts, before, after, [t for k in n for t in range(k)])
        fields = {name: read(flat, ctx) for name, read in RECORD_FIELDS.items()}
        fields["success"] = _success(flat, opts)
    return StepBatch(
        group_ids=np.asarray(
            [str(g) for g, k in zip(groups, n, strict=True) for _ in range(k)], dtype=object
        ),
        traj_ids=np.repeat(np.arange(len(spans), dtype=np.int64), n),
        rewards=np.asarray(step_rewards, dtype=np.float64),
        layout=_layout(spans, width, opts.layout),
        aborted=np.repeat(np.asarray(cut, dtype=bool), n) if any(cut) else None,
        **fields,
    )


def step_batch_from_trajectories(
    trajectories: Sequence[schema.Trajectory],
    groups: Sequence[Any],
    *,
    reward_scale: float = REWARD_SCALE,
    invalid_rule: str = FORMAT_OR_INADMISSIBLE,
    spans: Sequence[Sequence[tuple[int, int]]] | None = None,
    width: int = 0,
    anchor: Literal["state_key", "observation"] = "state_key",
) -> StepBatch:
    """The shapers' :class:`~stepgym.shapers.StepBatch` for recorded episodes, for a training loop of one's own.

    Each trajectory's steps become records (:func:`~stepgym.steps.record.episode_annotations`) and go through
    :func:`build_step_batch`, the builder the bundled trainer and every adapter use: group ids, trajectory ids (the
    index in ``trajectories``), rewards (× ``reward_scale``), validity, state keys and the before/after chain the
    graph methods read (``anchor_obs`` / ``next_obs``, ``dones``, ``step_index``, ``actions``, ``true_gain``).
    ``success`` is each step's ``schema.WON`` when every step reports it (the bundled trainer's rule), else
    ``None`` (each method's own rule on the return).

    Args:
        trajectories: finished episodes, e.g. ``GroupEnv.trajectories`` after each group's episode.
        groups: the GRPO group of each trajectory (any hashable: a task id, a group counter).
        reward_scale: multiplies the env rewards (the bundled trainer's ``env.reward_scale``).
        invalid_rule: how validity is read (``step_record.INVALID_RULES``).
        spans, width: the token span of each step in a token row per trajectory, and the rows' padded length,
            when the loop has tokens (the batch then has a :class:`~stepgym.shapers.TokenLayout` and
            ``shape_advantages`` returns token advantages); ``None``: per-step advantages only.
        anchor: the states' keying, as the bundled trainer's ``--env.anchor``: the env's state key (the observation
            text for a step without one) or the observation text.

    A step no text interface parsed (an env driven directly: no ``schema.FORMAT_VALID``) counts as format-valid. An
    unaborted episode with no step is a :class:`~stepgym.errors.StepRecordError` (nothing to credit).
    """
    if len(groups) != len(trajectories):
        raise StepRecordError(f"{len(groups)} group ids for {len(trajectories)} trajectories")
    # an env driven directly (no text interface parsed its steps) has no format to break: format-valid
    records = [
        [
            r if r["format_valid"] is not None else {**r, "format_valid": True}
            for r in episode_annotations(t)["steps"]
        ]
        for t in trajectories
    ]
    unit = [[(t, t + 1) for t in range(len(r))] for r in records]
    return build_step_batch(
        unit if spans is None else spans,
        groups,
        width,
        records=records,
        aborted=[t.aborted for t in trajectories],  # docs/failures.md: advantage 0, out of every statistic
        observations=[[t.initial_observation, *(s.next_observation for s in t.steps)] for t in trajectories],
        options=StepBatchOptions(
            reward_scale, invalid_rule, anchor, success="won", layout="none" if spans is None else "spans"
        ),
    )
