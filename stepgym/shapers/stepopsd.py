"""StepOPSD: hindsight-teacher token weights, λ_mix schedule and the ``equal_step_mean_abs`` step budget (docs/shapers.md §5).

Paper: Zhang, Lin and Wu 2026, "StepOPSD: Step-Aware Online Preference Distillation for Agent Reinforcement
Learning" (arXiv 2605.27140): Eq. 3 (``w_raw = 2σ(sign(A)Δ)``, ``w = Π_[1−α, 1+α](w_raw)``), Eq. 4
(``Ã = (1 − λ)A + λwA``), §3.2 (equal_step_mean_abs; λ_mix 0.2 decaying linearly over 50 steps; α_clip 0.2).
Public code: ``yanfei-zhang-95/OPSD_experiment_SearchR1`` @ 79c114c, ``verl/trainer/ppo/ray_trainer.py`` (module
``compute_advantage``; ``RayPPOTrainer.fit`` for the schedule). Text segmentation and the hindsight block are in
:mod:`stepgym.shapers.stepopsd_text`; the first successful peer is :mod:`stepgym.group`'s rule. Eq. 4's
mixing Ψ = 1 + λ(w − 1) is AHEAD's (:func:`stepgym.shapers.ahead.reweight_tokens`, written once for
both); Eq. 3's weight, the λ_mix schedule, the span gaps (:func:`opsd_span_gaps`) and the step budget are here.

Departures / resolutions (docs/shapers.md §5, §8.19–26):
* ``equal_step_mean_abs`` is *active* when configured (in the public snapshot a meta_info bug leaves it off);
* the normalisation unit is the trajectory (all target spans of its row — or, for one-row-per-step layouts, of all
  its rows), with ``target="shaped"`` (the code: mean |Ã|) or ``"modification"`` (the paper's wording: mean |Ã − A|);
* tokens valid for the step means are the *trained* tokens; the code uses the attention mask, which also counts
  observation text that the clean-span quirk merges into a step (docs/shapers.md §5.1). Pass ``valid_mask`` for parity;
* Ψ = 1 + λ(w − 1) (exact where w = 1, so tokens outside spans keep A bit-for-bit); NaN Δ → w = 1; ±inf Δ → 1 ± α;
  no ±20 clamp before the sigmoid/exp (it changes nothing after the clip; the overflow warning is silenced instead);
* with a ``delta_mask`` only the masked tokens are computed (a copy plus a gather/scatter), so span-restricted
  shaping costs about one pass over the token grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import (
    Groups,
    as_float_array,
    check_clip,
    check_lambda,
    check_same_shape,
    linear_decay,
    quiet,
    scatter_flat,
)
from stepgym.shapers.ahead import (
    advantages_and_gaps,
    exp_weight,
    masked_weights,
    reweight_tokens,
    signed_delta,
)
from stepgym.shapers.registry import register
from stepgym.shapers.tokens import TokenLayout

__all__ = [
    "StepNormOptions",
    "StepOPSDOptions",
    "equal_step_mean_abs",
    "opsd_span_gaps",
    "scatter_span_deltas",
    "stepopsd_lambda",
    "stepopsd_reweight",
    "stepopsd_weights",
]

WeightFn = Literal["sigmoid", "exp"]


def stepopsd_lambda(global_step: int, lam0: float = 0.2, decay_steps: int = 50) -> float:
    """λ_mix = λ_0·max(0, 1 − k/D) with k = verl's ``global_steps``, **1 at the first training step** (docs/shapers.md §5.4).

    λ(1) = 0.196 and λ(50) = 0 for the defaults; ``decay_steps <= 0`` keeps λ_0. (A trainer counting completed
    updates from 0 passes ``update_index + 1``.)
    """
    if global_step < 0:
        raise ValueError(f"global_step must be >= 0 (it is 1 at the first update), got {global_step}")
    return linear_decay(global_step, lam0, decay_steps)


def _weight_fn(alpha: float, fn: str) -> Any:
    if fn not in ("sigmoid", "exp"):
        raise ValueError(f"weight fn must be 'sigmoid' or 'exp', got {fn!r}")

    if fn == "exp":
        return exp_weight(alpha)

    def weight(a: np.ndarray, d: np.ndarray) -> np.ndarray:
        w = signed_delta(a, d)
        with quiet():  # 2σ(s) = 2/(1 + e^(−s)); e^(−s) = inf gives 0, clipped to 1 − α
            np.negative(w, out=w)
            np.exp(w, out=w)
            w += 1.0
            np.divide(2.0, w, out=w)
        np.clip(w, 1.0 - alpha, 1.0 + alpha, out=w)
        return w

    return weight


def stepopsd_weights(
    advantages: Any, delta: Any, alpha: float = 0.2, fn: WeightFn = "sigmoid", mask: Any = None
) -> np.ndarray:
    """Eq. 3: w = clip(2σ(sign(A)·Δ) or exp(sign(A)·Δ), 1 − α, 1 + α); 1 where ``mask`` is false or Δ is NaN.

    Shapes: ``advantages``, ``delta`` and ``mask`` equal (typically (B, L)).
    """
    return masked_weights(advantages, delta, _weight_fn(check_clip(alpha, "alpha"), fn), mask)


def stepopsd_reweight(
    advantages: Any,
    delta: Any,
    lam: Any,
    *,
    alpha: float = 0.2,
    fn: WeightFn = "sigmoid",
    delta_mask: Any = None,
    response_mask: Any = None,
) -> np.ndarray:
    """StepOPSD's shaped token advantages, Eq. 4: Ã = [(1 − λ)A + λ·w·A] · response_mask (docs/shapers.md §5.3).

    Args:
        advantages: (B, L) base token advantages (GRPO/GiGPO broadcast, possibly ProAS-shaped); finite.
        delta: (B, L) teacher − student gap Δ on the target spans (0 elsewhere: see :func:`scatter_span_deltas`);
            NaN → w = 1, ±inf → 1 ± α.
        lam: λ_mix in [0, 1] (:func:`stepopsd_lambda`), scalar or broadcastable to (B, L).
        alpha: α_clip. fn: "sigmoid" (2σ, the paper's default) or "exp".
        delta_mask: optional (B, L) bool, where Δ is defined; elsewhere w = 1 (Ã = A: shaping touches only the
            extracted spans, other response tokens keep the base advantage).
        response_mask: optional (B, L) trained-token mask applied at the end.

    Returns (B, L) float64; sign(Ã) = sign(A) and Ã/A ∈ [1 − λα, 1 + λα].
    """
    lam = check_lambda(lam)
    a, d = advantages_and_gaps(advantages, delta, delta_mask=delta_mask, response_mask=response_mask)
    return reweight_tokens(a, d, lam, _weight_fn(check_clip(alpha, "alpha"), fn), delta_mask, response_mask)


def scatter_span_deltas(
    spans: Sequence[Sequence[tuple[int, int]]],
    deltas: Sequence[Sequence[Any]],
    shape: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Write each target span's scored gaps onto the token grid (docs/shapers.md §5.2).

    ``spans[b]`` are row b's target spans as half-open ``(start, stop)``; ``deltas[b][k]`` the 1-D gap of span k
    (teacher minus student log-probs of its tokens). Only the first n = min(len(delta), stop − start) tokens get a
    gap; the rest of the span and every other token keep Δ = 0 (so w = 1, Ã = A). Returns ``(delta, mask)``,
    both (B, L): float64 gaps and the bool mask of tokens that received one. Loops over spans, not tokens.
    """
    delta = np.zeros(shape)
    mask = np.zeros(shape, dtype=bool)
    if len(spans) != shape[0] or len(deltas) != shape[0]:
        raise ValueError(
            f"spans ({len(spans)}) and deltas ({len(deltas)}) need one entry per row ({shape[0]})"
        )
    for b, (row_spans, row_deltas) in enumerate(zip(spans, deltas, strict=True)):
        if len(row_spans) != len(row_deltas):
            raise ValueError(f"row {b}: {len(row_spans)} spans but {len(row_deltas)} gap arrays")
        for (s, e), d in zip(row_spans, row_deltas, strict=True):
            if not (0 <= s <= e <= shape[1]):
                raise ValueError(f"row {b}: span [{s}, {e}) outside [0, {shape[1]})")
            d = np.asarray(d, dtype=np.float64).ravel()
            n = min(len(d), e - s)
            delta[b, s : s + n] = d[:n]
            mask[b, s : s + n] = True
    return delta, mask


def opsd_span_gaps(
    spans: Sequence[Sequence[tuple[int, int]]],
    scored: dict[int, tuple[int, Any]],
    student_logprobs: Sequence[Any],
    shape: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Δ = teacher − student log-prob on each row's target span (paper §3.1), on the (B, L) response grid.

    ``spans[b]``: row b's target span(s) (``[]`` for a row without one); ``scored[b] = (start, teacher_logprobs)``
    for the rows the teacher scored (the span's tokens from ``start``); ``student_logprobs[b]`` the row's
    θ_old log-probs over its whole response. A row with a span but no teacher score gets Δ = 0 on it (weight 1).
    Returns ``(delta, mask)`` as :func:`scatter_span_deltas`.
    """
    per_row = []
    for b, sp in enumerate(spans):
        if not sp:
            per_row.append([])
            continue
        if b in scored:
            start, t_lp = scored[b]
            t_lp = np.asarray(t_lp, dtype=np.float64)
            per_row.append(
                [t_lp - np.asarray(student_logprobs[b], dtype=np.float64)[start : start + len(t_lp)]]
            )
        else:
            per_row.append([np.zeros(sp[0][1] - sp[0][0])])
    return scatter_span_deltas(spans, per_row, shape)


def _step_units(target: TokenLayout | np.ndarray, step_group: Any) -> tuple[np.ndarray, int, Groups]:
    """token_step array, number of target steps and the per-step normalisation unit (trajectory)."""
    if isinstance(target, TokenLayout):
        ts, k = target.token_step, target.n_steps
        default_unit = target.step_row
    else:
        ts = np.asarray(target)
        if ts.ndim != 2 or ts.dtype.kind not in "iu":
            raise ValueError(f"target_step must be a 2-D integer array, got {ts.dtype} {ts.shape}")
        k = int(ts.max(initial=-1)) + 1
        default_unit = None
        if step_group is None:  # the row holding each step; a step split over rows is an error
            rows = np.broadcast_to(np.arange(ts.shape[0])[:, None], ts.shape)[ts >= 0]
            ids = ts[ts >= 0]
            lo = np.full(k, ts.shape[0], dtype=np.int64)
            hi = np.full(k, -1, dtype=np.int64)
            np.minimum.at(lo, ids, rows)
            np.maximum.at(hi, ids, rows)
            if (hi >= 0).any() and (lo[hi >= 0] != hi[hi >= 0]).any():
                raise ValueError("a target step has tokens in several rows; pass step_group explicitly")
            default_unit = np.where(hi >= 0, hi, -1 - np.arange(k))
    unit = default_unit if step_group is None else step_group
    if len(unit) != k:
        raise ValueError(f"step_group has {len(unit)} entries but there are {k} target steps")
    return ts, k, Groups(np.asarray(unit) if isinstance(unit, np.ndarray) else unit)


def equal_step_mean_abs(
    shaped: Any,
    target: TokenLayout | Any,
    *,
    valid_mask: Any = None,
    step_group: Any = None,
    base: Any = None,
    norm_target: Literal["shaped", "modification"] = "shaped",
    coef_clip: float = 2.0,
    eps: float = 1e-6,
) -> np.ndarray:
    """StepOPSD's per-step budget normalisation ``equal_step_mean_abs`` (paper §3.2; docs/shapers.md §5.5).

    For each trajectory: m_k = mean over the valid tokens of target span k of |Ã| (``norm_target="shaped"``, the
    code) or |Ã − A| (``"modification"``, the paper's "modification budget"); spans without a valid token are
    ignored; with fewer than 2 usable spans the trajectory is unchanged; else c_k = clip(m̄/(m_k + eps), 1/C, C)
    with m̄ = mean_k m_k, C = max(coef_clip, 1), and every token of span k is scaled: Ã' = c_k·Ã (shaped) or
    Ã' = A + c_k·(Ã − A) (modification). Tokens outside all spans are unchanged; the result is re-masked.
    Token weights are *not* re-clipped afterwards (only c_k is).

    Args:
        shaped: (B, L) Ã after :func:`stepopsd_reweight`.
        target: the target spans, as a :class:`TokenLayout` (e.g. ``TokenLayout.from_spans(target_spans, L)``)
            or a raw (B, L) int array of target-step ids (-1 outside every span).
        valid_mask: (B, L) bool tokens that count (default: all); the output is multiplied by it.
        step_group: (K,) the normalisation unit (trajectory) of each target step. Default: the row holding the
            step (one row per trajectory). For one-row-per-step layouts pass each row's trajectory id.
        base: (B, L) base advantages A, required for ``norm_target="modification"``.
    """
    x = as_float_array(shaped, "shaped", ndim=2)
    ts, k, units = _step_units(target, step_group)
    check_same_shape(x.shape, target=ts, valid_mask=valid_mask, base=base)
    if norm_target not in ("shaped", "modification"):
        raise ValueError(f"norm_target must be 'shaped' or 'modification', got {norm_target!r}")
    if norm_target == "modification":
        if base is None:
            raise ValueError("norm_target='modification' needs the base advantages (base=...)")
        a = as_float_array(base, "base")
    nz = np.flatnonzero(ts >= 0)  # only span tokens are read or written (flat indices: cheaper than 2-D)
    ts_s = ts.reshape(-1)[nz]
    x_s = x.reshape(-1)[nz]
    if not np.isfinite(x_s).all():  # only span tokens are read; anything else passes through unchanged
        raise ValueError("shaped advantages must be finite on the target spans")
    dev_s = x_s if norm_target == "shaped" else x_s - a.reshape(-1)[nz]
    vm = np.asarray(valid_mask, dtype=bool).reshape(-1)[nz] if valid_mask is not None else slice(None)
    ids = ts_s[vm]
    sums = np.bincount(ids, weights=np.abs(dev_s[vm]), minlength=k).astype(np.float64, copy=False)
    cnt = np.bincount(ids, minlength=k)
    usable = cnt > 0
    m = np.zeros(k)
    m[usable] = sums[usable] / cnt[usable]
    n_usable = np.bincount(units.codes[usable], minlength=units.n_groups)
    m_bar = np.bincount(units.codes[usable], weights=m[usable], minlength=units.n_groups).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        m_bar /= n_usable
    c_max = max(float(coef_clip), 1.0)
    coef = np.ones(k)
    active = usable & (n_usable[units.codes] >= 2)
    coef[active] = np.clip(m_bar[units.codes[active]] / (m[active] + eps), 1.0 / c_max, c_max)
    factor = coef[ts_s]
    if norm_target == "shaped":
        new = x_s * factor
    else:  # A + c·d written as x + (c − 1)·d: bit-exact x where c = 1
        factor -= 1.0
        new = x_s + factor * dev_s
    return scatter_flat(x, nz, new, valid_mask)  # copy and re-mask in one pass


@dataclass(frozen=True)
class StepOPSDOptions:
    """StepOPSD's own options (``ShapeConfig.options["stepopsd"]``; docs/shapers.md §5): α_clip, the weight
    function, λ_0 and the decay D of λ = λ_0·max(0, 1 − g/D) with g = update_index + 1."""

    alpha: float = 0.2
    weight_fn: Literal["sigmoid", "exp"] = "sigmoid"
    lambda0: float = 0.2
    decay_steps: int = 50


@dataclass(frozen=True)
class StepNormOptions:
    """StepOPSD's equal per-step budget (``ShapeConfig.options["equal_step_mean_abs"]``; docs/shapers.md §5.5)."""

    target: Literal["shaped", "modification"] = "shaped"
    coef_clip: float = 2.0
    eps: float = 1e-6


@register("stepopsd_lambda", stage="schedule", summary="λ_mix = λ_0·max(0, 1 − g/D), g = update_index + 1.")
def _stepopsd_schedule(config: Any, update_index: int) -> float:
    opts = config.options_for("stepopsd")
    return stepopsd_lambda(update_index + 1, opts.lambda0, opts.decay_steps)


@register(
    "stepopsd",
    stage="token",
    schedule="stepopsd_lambda",
    summary="StepOPSD Eq. 4: Ã = A·[1 + λ(w − 1)].",
    options=StepOPSDOptions,
    needs=("teacher",),
)
def _stepopsd_stage(batch: Any, config: Any, tokens: np.ndarray, lam: float) -> np.ndarray:
    if batch.delta is None:
        raise ValueError(f"token_reweight='stepopsd' with λ = {lam} needs StepBatch.delta")
    dmask = batch.delta_mask
    if dmask is None and batch.target is not None:
        dmask = batch.target.token_step >= 0
    return stepopsd_reweight(
        tokens,
        batch.delta,
        lam,
        alpha=config.options_for("stepopsd").alpha,
        fn=config.options_for("stepopsd").weight_fn,
        delta_mask=dmask,
        response_mask=batch.layout.response_mask,
    )


@register(
    "equal_step_mean_abs",
    stage="step_norm",
    summary="StepOPSD's equal per-step budget, per trajectory.",
    options=StepNormOptions,
    needs=("target_spans",),
)
def _step_norm_stage(batch: Any, config: Any, shaped: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    layout = batch.layout
    if batch.target is None:
        raise ValueError("step_norm='equal_step_mean_abs' needs StepBatch.target (the StepOPSD target spans)")
    if batch.target.shape != layout.shape:
        raise ValueError(f"target spans grid {batch.target.shape} differs from the layout {layout.shape}")
    row_traj = _row_trajectories(layout, np.asarray(batch.traj_ids))
    return equal_step_mean_abs(
        shaped,
        batch.target,
        valid_mask=layout.response_mask,
        step_group=row_traj[batch.target.step_row],
        base=tokens,
        norm_target=config.options_for("equal_step_mean_abs").target,
        coef_clip=config.options_for("equal_step_mean_abs").coef_clip,
        eps=config.options_for("equal_step_mean_abs").eps,
    )


def _row_trajectories(layout: TokenLayout, traj_codes: np.ndarray) -> np.ndarray:
    """Trajectory code of each layout row (-1 - row for rows without steps); a row may not hold two trajectories.
    This makes the normalisation unit the trajectory in both storage layouts (docs/shapers.md §5.5)."""
    n_rows = layout.shape[0]
    lo = np.full(n_rows, np.iinfo(np.int64).max)
    hi = np.full(n_rows, -1, dtype=np.int64)
    np.minimum.at(lo, layout.step_row, traj_codes)
    np.maximum.at(hi, layout.step_row, traj_codes)
    has = hi >= 0
    if (lo[has] != hi[has]).any():
        bad = np.flatnonzero(has & (lo != hi))[:5].tolist()
        raise ValueError(
            f"layout rows {bad} hold steps of several trajectories; a row belongs to one trajectory"
        )
    return np.where(has, hi, -1 - np.arange(n_rows))
