"""From collected rows to shaped token advantages — by calling the shapers, never by doing their maths.

This module only *arranges arrays*: it turns the rows of a batch into the shapers' :class:`StepBatch` (per-step
arrays in row order, a one-row-per-step :class:`TokenLayout` over the (B, R) response grid, the teacher gaps) and
calls :func:`stepgym.shapers.shape_advantages`, the §0 pipeline. It also runs plain GRPO on the same batch
for comparison (metrics and the report's credit picture) and summarises both.

Reward scale: env rewards are multiplied by ``EnvConfig.reward_scale`` (10: verl-agent's 10·won) so the
invalid-action penalty of the recipes (0.1, set by the ALFWorld/WebShop presets) has the papers' relative size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.shapers import ShapeConfig, ShapedAdvantages, StepBatch, TokenLayout, shape_advantages
from stepgym.trainers.samples import StepRow, response_matrix

__all__ = ["ShapingResult", "advantage_stats", "build_step_batch", "shape_rows", "step_means"]


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


def step_valid(rows: Sequence[StepRow], rule: str) -> np.ndarray:
    """The validity flag the invalid-action penalty reads, per row (see ``EnvConfig.invalid_rule``)."""
    if rule == "format":
        return np.array([r.format_valid for r in rows], dtype=bool)
    return np.array([r.format_valid and r.admissible for r in rows], dtype=bool)


def build_step_batch(
    rows: Sequence[StepRow],
    *,
    reward_scale: float,
    invalid_rule: str,
    pad_id: int,
    reasonable: Any = None,
    progress: Any = None,
    delta: Any = None,
    delta_mask: Any = None,
    target: TokenLayout | None = None,
) -> tuple[StepBatch, np.ndarray]:
    """The shapers' input for ``rows`` (one row per step, in (trajectory, step) order) and the (B, R) mask.

    Graph credit fields (docs/shapers.md §14.2): ``anchor_obs`` / ``next_obs`` are the states before / after each
    step keyed by ``EnvConfig.anchor`` ("state_key": ``schema.STATE_KEY``, exact; "observation": the text, the
    methods' own keying); ``success`` is ``schema.WON``, ``true_gain`` ``schema.VALUE_GAIN`` (ValueWrapper), each
    None unless every row's info has it; ``dones`` is the step's ``terminated`` (a cut at the step limit is not done).
    """
    _, mask = response_matrix([r.response_ids for r in rows], pad_id)
    batch = StepBatch(
        group_ids=np.array([r.group for r in rows], dtype=np.int64),
        traj_ids=np.array([r.traj for r in rows], dtype=np.int64),
        rewards=np.array([r.reward * reward_scale for r in rows], dtype=np.float64),
        valid=step_valid(rows, invalid_rule),
        anchor_obs=[r.anchor for r in rows],
        next_obs=_column(rows, "next_anchor"),
        success=_info_column(rows, schema.WON, bool),
        step_index=np.array([r.t for r in rows], dtype=np.int64),
        dones=np.array([r.terminated for r in rows], dtype=bool),
        true_gain=_info_column(rows, schema.VALUE_GAIN, float),
        actions=[r.action for r in rows],
        aborted=np.array([r.aborted for r in rows], dtype=bool),
        reasonable=reasonable,
        progress=progress,
        layout=TokenLayout.from_step_rows(mask),
        delta=delta,
        delta_mask=delta_mask,
        target=target,
    )
    return batch, mask


def _column(rows: Sequence[StepRow], attr: str) -> list[Any] | None:
    """``[getattr(r, attr)]``, or None when any row lacks it (rows built without it)."""
    col = [getattr(r, attr) for r in rows]
    return None if any(v is None for v in col) else col


def _info_column(rows: Sequence[StepRow], key: str, kind: type) -> np.ndarray | None:
    """An env-info value per row (e.g. ``schema.VALUE_GAIN`` from ValueWrapper), or None unless every row has it."""
    if not rows or any(r.info.get(key) is None for r in rows):
        return None
    return np.array([kind(r.info[key]) for r in rows])


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
