"""Rows of steps to stepgym's token advantages: the one path for the bundled trainer and every adapter.

The bundled trainer (one token row per step, :func:`stepgym.steps.row.trainer_rows`), verl's estimators and
trainer, SkyRL's ``StepAdvantageMixin`` and OpenRLHF's ``StepExperienceMaker`` (one token row per episode) all end
the same way: the replies' token spans, each row's group and step records become a
:class:`~stepgym.shapers.StepBatch` (:func:`stepgym.steps.batch.build_step_batch`, under the trainer's
:class:`~stepgym.steps.batch.StepBatchOptions`: the layout, the reward scale, the validity rule, the state keying),
which :func:`~stepgym.shapers.shape_advantages` shapes; the token advantages go back, zero outside the trained
tokens. :func:`shape_rows` does it once (the bundled trainer also asks for plain GRPO on the same batch, its
comparison metric), after :func:`refuse_missing` has checked, in one line, that the adapter hands the
configured methods what they read (step records for GiGPO / ProAS / the graph methods and the invalid-action
penalty; a teacher's log-prob gaps for AHEAD / StepOPSD). :func:`mask_spans` lines the runs of a loss mask up with
the step records, for the trainers that keep no spans of their own (SkyRL, OpenRLHF).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from stepgym.errors import StepRecordError
from stepgym.shapers import ShapeConfig, ShapedAdvantages, StepBatch, TokenLayout, shape_advantages
from stepgym.shapers.registry import NEEDS
from stepgym.shapers.registry import get as get_shaper
from stepgym.steps.batch import StepBatchOptions, build_step_batch, mask_runs

__all__ = [
    "RowSettings",
    "Rows",
    "Shaped",
    "TokenGaps",
    "check_group_sizes",
    "mask_spans",
    "masked_rows",
    "needs_records",
    "refuse_missing",
    "rows_batch",
    "shape_rows",
    "step_means",
]


@dataclasses.dataclass(frozen=True)
class RowSettings:
    """How a trainer's rows are credited (its settings, the same for every batch)."""

    config: ShapeConfig  #: the shapers' configuration (a preset: ``ShapeConfig.from_preset``)
    #: How the records are read: reward scale (not of ``Rows.rewards``), validity rule, state keying, the token
    #: layout (``"spans"``: one row per episode; ``"step_rows"``: the bundled trainer's one row per step).
    options: StepBatchOptions = dataclasses.field(default_factory=StepBatchOptions)
    update_index: int = 0  #: completed policy updates (schedules such as AHEAD's)
    grpo_reference: bool = False  #: also shape plain GRPO on the same batch (``Shaped.grpo_steps``)


class TokenGaps(NamedTuple):
    """A teacher's log-prob gaps for AHEAD / StepOPSD: ``delta`` (B, L), the tokens that have one
    (``delta_mask``, default: every finite one) and StepOPSD's target spans (default: every reply token)."""

    delta: Any
    delta_mask: Any = None
    target: TokenLayout | None = None


@dataclasses.dataclass
class Rows:
    """A batch of token rows (one per episode, or one per step), as a trainer hands it over (see
    ``build_step_batch``)."""

    spans: Sequence[Sequence[tuple[int, int]]]  #: per row, each step's reply tokens ``(start, stop)``
    groups: Sequence[Any]  #: per row, its GRPO group
    width: int  #: the rows' padded length L
    records: Sequence[Sequence[Mapping[str, Any]]] | None = None  #: per row, one step record per span
    rewards: Sequence[Sequence[float]] | None = None  #: per row, one reward per span (else the records')
    aborted: Sequence[bool] | None = None  #: per row, an episode a failure cut off (docs/failures.md)
    mask: Any = None  #: (B, L): the trained tokens (advantages are zero elsewhere); ``None``: no zeroing
    observations: Sequence[Sequence[Any]] | None = None  #: per row, its states' texts (``build_step_batch``)
    #: ProAS's (reasonable, progress) per step from the caller's ARG, over the records' own; ``None``: the records'
    labels: tuple[Any, Any] | None = None


class Shaped(NamedTuple):
    """:func:`shape_rows`' result: the batch shaped, its (B, L) token advantages (0 outside ``Rows.mask``), the
    shapers' full result, plain GRPO's per-step advantages (``RowSettings.grpo_reference``) and the rows' mask."""

    batch: StepBatch
    token_advantages: np.ndarray
    shaped: ShapedAdvantages
    grpo_steps: np.ndarray | None = None
    mask: np.ndarray | None = None

    def row_advantages(self, b: int) -> np.ndarray:
        """Row b's advantage per trained token (its first ``mask[b].sum()`` entries; the whole row without a mask)."""
        if self.mask is None:
            return self.token_advantages[b]
        return self.token_advantages[b, : int(self.mask[b].sum())]


def needs_records(config: ShapeConfig) -> list[str]:
    """What the configured methods read from step records, as each registered it (``needs``); ``[]``: the token
    rewards and groups suffice (the GRPO family)."""
    names = [config.base, *(["proas"] if config.proas else [])]
    need = [f"{NEEDS[n]} ({name})" for name in names for n in sorted(get_shaper(name).needs)]
    if config.invalid_penalty:
        need.append("format-valid / admissible flags (the invalid-action penalty)")
    return need


def refuse_missing(config: ShapeConfig, *, records: str | None = None, teacher: str | None = None) -> None:
    """One line (``StepRecordError``) when the adapter lacks what ``config`` needs. ``records`` / ``teacher``:
    ``None`` when the adapter has the step records / a teacher's gaps, else why it has none and what to do."""
    if records is not None and needs_records(config):
        raise StepRecordError(f"this method needs {', '.join(needs_records(config))}; {records}")
    if teacher is not None and config.token_reweight is not None:
        raise StepRecordError(
            f"token_reweight={config.token_reweight!r} needs teacher log-prob gaps; {teacher}"
        )


def check_group_sizes(groups: Sequence[Any], size: int, setting: str) -> None:
    """Every group holds ``size`` rows (``setting`` names the trainer's option), else one line: a group was split
    or lost rows before the advantage step."""
    bad = {g: c for g, c in Counter(groups).items() if c != size}
    if bad:
        raise StepRecordError(
            f"groups {sorted(bad)[:5]} do not have {setting}={size} rows: a group was split or lost rows "
            "before the advantage step"
        )


def mask_spans(
    masks: Sequence[Any],
    records: Sequence[Sequence[Mapping[str, Any]]],
    aborted: Sequence[bool],
    what: str = "row",
) -> tuple[list[list[tuple[int, int]]], list[list[Mapping[str, Any]]]]:
    """Each row's steps as the runs of its mask, matched in order with its records: steps the context length cut
    off entirely have no run and take no part; more runs than records (or none) is an error, except in an aborted
    row, whose values are never read."""
    spans, recs = [], []
    for b, (mask, row) in enumerate(zip(masks, records, strict=True)):
        runs = mask_runs(mask)
        if not aborted[b] and (not runs or len(runs) > len(row)):
            raise StepRecordError(
                f"{what} {b}: {len(runs)} reply spans in the mask but {len(row)} step records; the token row and "
                "the episode's steps are out of line"
            )
        spans.append(runs)
        recs.append(list(row) if aborted[b] else list(row[: len(runs)]))
    return spans, recs


def masked_rows(
    masks: Sequence[Any],
    records: Sequence[Sequence[Mapping[str, Any]]],
    groups: Sequence[Any],
    aborted: Sequence[bool],
    *,
    width: int | None = None,
    what: str = "row",
    zero_outside: bool = False,
) -> Rows:
    """The :class:`Rows` of a trainer that marks each row's reply tokens in a mask: the steps are the runs of
    ``masks[b]`` lined up with ``records[b]`` (:func:`mask_spans`); ``width`` (default: the longest mask) is the
    padded length; ``zero_outside``: the masks are also :attr:`Rows.mask` (advantages 0 outside the replies)."""
    spans, recs = mask_spans(masks, records, aborted, what)
    width = max(len(m) for m in masks) if width is None else width
    mask = masks if zero_outside else None
    return Rows(spans, groups, width, records=recs, aborted=aborted, mask=mask)


def rows_batch(rows: Rows, options: StepBatchOptions | None = None) -> StepBatch:
    """The shapers' batch of the rows: :func:`~stepgym.steps.batch.build_step_batch` over their spans, groups,
    records, rewards, abort flags and observations."""
    return build_step_batch(
        rows.spans,
        rows.groups,
        rows.width,
        records=rows.records,
        rewards=rows.rewards,
        aborted=rows.aborted,
        observations=rows.observations,
        options=options,
    )


def shape_rows(rows: Rows, settings: RowSettings, gaps: TokenGaps | None = None) -> Shaped:
    """stepgym's token advantages for the rows: ``build_step_batch`` → (the caller's ARG labels, the teacher's
    gaps) → ``shape_advantages`` → the (B, L) token advantages, zero outside ``rows.mask`` when given."""
    batch = rows_batch(rows, settings.options)
    if rows.labels is not None:
        batch.reasonable, batch.progress = rows.labels
    if gaps is not None and gaps.delta is not None:
        batch.delta = np.asarray(gaps.delta, dtype=np.float64)
        batch.delta_mask = None if gaps.delta_mask is None else np.asarray(gaps.delta_mask, dtype=bool)
    if settings.config.token_reweight == "stepopsd":
        batch.target = gaps.target if gaps is not None and gaps.target is not None else batch.layout
    shaped = shape_advantages(batch, settings.config, update_index=settings.update_index)
    adv = shaped.token_advantages
    mask = None if rows.mask is None else np.asarray(rows.mask) > 0
    return Shaped(
        batch,
        adv if mask is None else adv * mask,
        shaped,
        _grpo_steps(batch, settings) if settings.grpo_reference else None,
        mask,
    )


def _grpo_steps(batch: StepBatch, settings: RowSettings) -> np.ndarray:
    """Plain GRPO's per-step advantages on the same batch, with the same penalty (the trainer's comparison)."""
    c = settings.config
    plain_cfg = ShapeConfig(
        base="grpo",
        invalid_penalty=c.invalid_penalty,
        eps=c.eps,
        singleton=c.singleton,
        cross_steps=c.cross_steps,
    )
    plain = StepBatch(batch.group_ids, batch.traj_ids, batch.rewards, batch.valid, aborted=batch.aborted)
    return shape_advantages(plain, plain_cfg, update_index=settings.update_index).step_advantages


def step_means(token_values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row: the mean over its trained tokens (0 for a row without tokens)."""
    n = mask.sum(axis=1)
    s = np.where(mask, token_values, 0.0).sum(axis=1)
    return np.divide(s, n, out=np.zeros_like(s, dtype=np.float64), where=n > 0)
