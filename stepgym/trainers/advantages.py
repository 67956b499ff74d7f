"""From collected rows to shaped token advantages — by calling the shapers, never by doing their maths.

This module only *arranges arrays*: it hands the rows' step records to the one :class:`StepBatch` builder
(:func:`stepgym.steps.build_step_batch`: per-step arrays in row order, a one-row-per-step :class:`TokenLayout` over
the (B, R) response grid) and calls :func:`stepgym.shapers.shape_advantages`, the §0 pipeline. It also runs plain
GRPO on the same batch for comparison (metrics and the report's credit picture) and summarises both.

Reward scale: env rewards are multiplied by ``EnvConfig.reward_scale`` (10: verl-agent's 10·won) so the
invalid-action penalty of the recipes (0.1, set by the ALFWorld/WebShop presets) has the papers' relative size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from stepgym import schema, steps
from stepgym.shapers import ShapeConfig, ShapedAdvantages, StepBatch, TokenLayout, shape_advantages
from stepgym.step_record import StepRecord, step_annotations
from stepgym.trainers.samples import StepRow, response_matrix

__all__ = ["ShapingResult", "advantage_stats", "rows_step_batch", "shape_rows", "step_means"]


@dataclass
class ShapingResult:
    """The shaped batch, aligned with the rows: ``token_advantages`` (B, R) in response coordinates."""

    shaped: ShapedAdvantages
    grpo_steps: np.ndarray  #: (N,) plain GRPO per-step advantage of the same batch (comparison only)
    layout: TokenLayout
    response_mask: np.ndarray

    @property
    def token_advantages(self) -> np.ndarray:
        assert self.shaped.token_advantages is not None
        return self.shaped.token_advantages

    def row_advantages(self, b: int) -> np.ndarray:
        """Row b's advantage per generated token (length = its response length)."""
        n = int(self.response_mask[b].sum())
        return self.token_advantages[b, :n]


def rows_step_batch(
    rows: Sequence[StepRow],
    *,
    reward_scale: float,
    invalid_rule: str,
    pad_id: int,
    anchor: Literal["state_key", "observation"] = "state_key",
) -> tuple[StepBatch, np.ndarray]:
    """The shapers' input for ``rows`` (one row per step, in (trajectory, step) order) and the (B, R) mask.

    The rows' step records (``StepRow.record``, read once from the step's info by the collector) go through the
    one builder every adapter uses, :func:`stepgym.steps.build_step_batch`, with the bundled trainer's options:
    one token row per step (``layout="step_rows"``), ``success`` from ``schema.WON`` (``success="won"``), states
    keyed by ``EnvConfig.anchor`` (``anchor``: ``"state_key"``, ``schema.STATE_KEY`` exact, the observation text
    for a step without one; ``"observation"``: the text, the methods' own keying). ``true_gain`` is
    ``schema.VALUE_GAIN`` (ValueWrapper) and ``dones`` the step's ``terminated`` (a cut at the step limit is not
    done), as for every caller of the builder. The ARG labels and the teacher gaps are the caller's to add
    (``dataclasses.replace``).

    A row made by hand (no ``record``) is read from its own fields: its ``anchor`` / ``next_anchor`` are the keys
    of the states before and after it.
    """
    _, mask = response_matrix([r.response_ids for r in rows], pad_id)
    trajs: list[list[StepRow]] = []
    for r in rows:
        if trajs and trajs[-1][-1].traj == r.traj:
            trajs[-1].append(r)
        else:
            trajs.append([r])
    batch = steps.build_step_batch(
        [[(0, len(r.response_ids)) for r in tr] for tr in trajs],
        [tr[0].group for tr in trajs],
        mask.shape[1],
        records=[[_record(r) for r in tr] for tr in trajs],
        aborted=[tr[0].aborted for tr in trajs],
        observations=[[*(r.observation for r in tr), tr[-1].next_observation] for tr in trajs],
        options=steps.StepBatchOptions(reward_scale, invalid_rule, anchor, success="won", layout="step_rows"),
    )
    return batch, mask


def _record(row: StepRow) -> StepRecord:
    """The row's step record: the collector's, or (a row made by hand) its fields through the same rule."""
    if row.record is not None:
        return row.record
    before = {schema.STATE_KEY: row.anchor}
    after = {
        **row.info,
        schema.FORMAT_VALID: row.format_valid,
        schema.ADMISSIBLE: row.admissible,
        schema.PARSED_ACTION: row.action,
        schema.STATE_KEY: row.next_anchor,
    }
    return step_annotations(before, row.action, row.reward, after, terminated=row.terminated)


def shape_rows(
    batch: StepBatch, config: ShapeConfig, *, update_index: int, mask: np.ndarray
) -> ShapingResult:
    """Run the configured shaper and plain GRPO (same penalty) on one batch."""
    shaped = shape_advantages(batch, config, update_index=update_index)
    grpo_cfg = ShapeConfig(
        base="grpo",
        invalid_penalty=config.invalid_penalty,
        eps=config.eps,
        singleton=config.singleton,
        cross_steps=config.cross_steps,
    )
    plain = StepBatch(batch.group_ids, batch.traj_ids, batch.rewards, batch.valid, aborted=batch.aborted)
    grpo = shape_advantages(plain, grpo_cfg, update_index=update_index)
    assert batch.layout is not None
    return ShapingResult(shaped, grpo.step_advantages, batch.layout, mask)


def step_means(token_values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row (= per step): the mean over its generated tokens (0 for a row without tokens)."""
    n = mask.sum(axis=1)
    s = np.where(mask, token_values, 0.0).sum(axis=1)
    return np.divide(s, n, out=np.zeros_like(s, dtype=np.float64), where=n > 0)


def advantage_stats(values: np.ndarray, prefix: str) -> dict[str, float]:
    """Summary statistics of a 1-D array of advantages for the metrics log."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {}
    return {
        f"{prefix}/mean": float(v.mean()),
        f"{prefix}/std": float(v.std()),
        f"{prefix}/abs_mean": float(np.abs(v).mean()),
        f"{prefix}/min": float(v.min()),
        f"{prefix}/max": float(v.max()),
        f"{prefix}/pos_frac": float((v > 0).mean()),
        f"{prefix}/neg_frac": float((v < 0).mean()),
        f"{prefix}/zero_frac": float((v == 0).mean()),
    }
