"""AHEAD: token log-prob gap under privileged information → clipped, sign-preserving advantage reweight (docs/shapers.md §4).

Paper: Jin, Wang, Lingam and Kumar 2026, "AHEAD: Adaptive Hindsight with Environment-Augmented Distillation for
Agentic RL" (under review; no arXiv id known, see docs/shapers.md "Sources"), its two displayed equations:

    δ_{t,ℓ} = log π_θold(y | h̃_t, ·) − log π_θold(y | h_t, ·)
    w_{t,ℓ} = clip(exp(sgn(A^ep)·sg(δ_{t,ℓ})), 1 − ε, 1 + ε),   Ã_{t,ℓ} = A^ep·[(1 − λ_k) + λ_k·w_{t,ℓ}]

The mixing Ψ = 1 + λ(w − 1) (:func:`reweight_tokens`) and the sign rule (:func:`signed_delta`) are written here
once and reused by StepOPSD, whose Eq. 4 has the same form with 2σ in place of exp. The teacher and student
log-probs are computed by the trainer (:mod:`stepgym.trainers.teacher`); :func:`ahead_delta` turns them into δ.

No public code. Resolutions (docs/shapers.md §4.3, §8.12–16): ε = 0.2 (SERL / StepOPSD), λ_k = λ_0·max(0, 1 − k/K) with
λ_0 = 0.5, K = 50 and k = completed policy updates (0 at the first update, SERL's counter); all generated tokens
are reweighted unless a ``mask`` restricts it (SERL's action-token mask, for parity).

Numerics: the multiplier is computed as Ψ = 1 + λ(w − 1), algebraically equal to (1 − λ) + λw but exact where
w = 1 (so tokens without a gap keep A bit-for-bit). The ±20 clamp of sign(A)·δ before exp (docs/shapers.md §0) is replaced
by suppressing the overflow warning: w is clipped right after, so the weights are identical and a pass is saved.
A NaN gap gives w = 1; a ±inf gap saturates at the bound its sign selects (§0, §4.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepgym.shapers._common import (
    as_float_array,
    check_clip,
    check_lambda,
    check_same_shape,
    linear_decay,
    quiet,
    scatter_flat,
)
from stepgym.shapers.registry import register

__all__ = [
    "AHEADOptions",
    "advantages_and_gaps",
    "ahead_delta",
    "ahead_lambda",
    "ahead_reweight",
    "ahead_weights",
    "exp_weight",
    "masked_weights",
    "reweight_tokens",
    "signed_delta",
]


def ahead_lambda(update_index: int, lam0: float = 0.5, decay_steps: int = 50) -> float:
    """λ_k = λ_0·max(0, 1 − k/K); k = completed policy updates, **0 at the first update** (docs/shapers.md §4.3, §8.13).

    λ(0) = λ_0, λ(K) = 0; ``decay_steps <= 0`` keeps λ_0 constant. Once λ = 0 the teacher need not be run.
    """
    if update_index < 0:
        raise ValueError(f"update_index counts completed updates and must be >= 0, got {update_index}")
    return linear_decay(update_index, lam0, decay_steps)


def exp_weight(eps: float) -> Any:
    """The weight ``(A, δ) -> clip(exp(sign(A)·δ), 1 − eps, 1 + eps)`` per token (AHEAD's; StepOPSD's ``"exp"``)."""

    def fn(a: np.ndarray, d: np.ndarray) -> np.ndarray:
        w = signed_delta(a, d)
        with quiet():
            np.exp(w, out=w)
        np.clip(w, 1.0 - eps, 1.0 + eps, out=w)
        return w

    return fn


def advantages_and_gaps(advantages: Any, delta: Any, **masks: Any) -> tuple[np.ndarray, np.ndarray]:
    """The token advantages A (finite) and the teacher's gaps δ as float arrays, checked to have one shape with
    the ``masks`` (each an array or None)."""
    a = as_float_array(advantages, "advantages", finite=True)
    d = as_float_array(delta, "delta")
    check_same_shape(a.shape, delta=d, **masks)
    return a, d


def masked_weights(advantages: Any, delta: Any, weight: Any, mask: Any = None) -> np.ndarray:
    """``weight(A, δ)`` per token (a clipped weight of sign(A)·δ), 1 where ``mask`` is false."""
    a, d = advantages_and_gaps(advantages, delta, mask=mask)
    w = weight(a, d)
    if mask is not None:
        np.copyto(w, 1.0, where=~np.asarray(mask, dtype=bool))
    return w


def ahead_weights(advantages: Any, delta: Any, eps: float = 0.2, mask: Any = None) -> np.ndarray:
    """w = clip(exp(sign(A)·δ), 1 − ε, 1 + ε) per token; 1 where ``mask`` is false or δ is NaN.

    ``advantages`` and ``delta`` (any equal shape, typically (B, L)); ``mask`` the same shape or None.
    """
    return masked_weights(advantages, delta, exp_weight(check_clip(eps, "eps")), mask)


def ahead_reweight(
    advantages: Any, delta: Any, lam: Any, *, eps: float = 0.2, mask: Any = None
) -> np.ndarray:
    """AHEAD's shaped token advantages Ã = A·[(1 − λ) + λ·w] (the paper's w/Ã equation; docs/shapers.md §4.1).

    Args:
        advantages: (B, L) float, the base advantage broadcast onto tokens (0 on untrained tokens); finite.
        delta: (B, L) float, the teacher − student log-prob gap δ (θ_old with and without privileged
            information); NaN/±inf allowed (NaN → weight 1, ±inf → 1 ± ε).
        lam: λ_k in [0, 1], a scalar or an array broadcastable to (B, L) (e.g. (B, 1) to turn the reweight off
            for successful trajectories: reading B of the "failure-only" ablation, docs/shapers.md §8.16).
        eps: the clip ε (default 0.2).
        mask: optional (B, L) bool, the tokens that may be reweighted (SERL parity: action tokens of rows that
            received privileged context); elsewhere w = 1 and Ã = A.

    Returns (B, L) float64. Invariants: sign(Ã) = sign(A); Ã/A ∈ [1 − λε, 1 + λε]; λ = 0 gives Ã = A.
    """
    lam = check_lambda(lam)
    a, d = advantages_and_gaps(advantages, delta, mask=mask)
    return reweight_tokens(a, d, lam, exp_weight(check_clip(eps, "eps")), mask)


def ahead_delta(
    rows: Sequence[int],
    teacher_logprobs: Sequence[Any],
    student_logprobs: Sequence[Any],
    shape: tuple[int, int],
) -> np.ndarray:
    """δ_{t,ℓ} = log π_θold(y | h̃_t) − log π_θold(y | h_t) on the (B, L) response grid (the first equation).

    ``teacher_logprobs[k]`` are the log-probs of row ``rows[k]``'s generated tokens under the privileged context,
    ``student_logprobs[k]`` those under the normal prompt (both θ_old, the policy before the update); a teacher
    array may be shorter than the response (its first n tokens get a gap). Tokens never scored keep δ = 0, so
    their weight is exp(0) = 1. Returns (B, L) float64.
    """
    delta = np.zeros(shape)
    for b, t_lp, s_lp in zip(rows, teacher_logprobs, student_logprobs, strict=True):
        t_lp = np.asarray(t_lp, dtype=np.float64)
        n = len(t_lp)
        delta[b, :n] = t_lp - np.asarray(s_lp, dtype=np.float64)[:n]
    return delta


def signed_delta(adv: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``sign(A)·δ`` with NaN (no information: NaN δ, or A = 0 with δ = ±inf) mapped to 0.

    §0: a NaN gap means weight 1 (s = 0 gives weight 1 for both exp and 2σ); ±inf saturates at the clip bound its
    sign selects. The public code's clamp of s to ±20 before exp/sigmoid changes nothing because the weight is clipped
    right after; it only silences overflow warnings. Here the warnings are silenced with ``np.errstate`` instead
    (callers wrap the exp in :func:`quiet`), which gives bit-identical weights and saves a pass over the tokens.
    """
    s = np.sign(adv)
    with np.errstate(invalid="ignore"):
        np.multiply(s, delta, out=s)
    nan = np.isnan(s)
    if nan.any():
        s[nan] = 0.0
    return s


def reweight_tokens(
    adv: np.ndarray,
    delta: np.ndarray,
    lam: float | np.ndarray,
    weight_fn: Any,
    mask: Any = None,
    keep: Any = None,
) -> np.ndarray:
    """Ã = A·Ψ with Ψ = 1 + λ(w − 1), w = ``weight_fn(A, δ)`` on the ``mask`` tokens (all when None) and 1 elsewhere.

    With a mask, only the masked tokens are touched (a copy plus a gather/scatter), which is what makes StepOPSD's
    span-restricted shaping cost little more than a copy. ``lam`` is a scalar or broadcastable to ``adv``.
    ``keep`` (same shape, bool) zeroes the result outside it (the response mask), fused into the same pass.
    """
    if mask is None:
        w = weight_fn(adv, delta)
        w -= 1.0
        w *= lam
        w += 1.0
        w *= adv
        if keep is not None:
            w *= np.asarray(keep, dtype=bool)
        return w
    flat = np.flatnonzero(np.asarray(mask, dtype=bool))  # flat indices: 3× cheaper than 2-D np.nonzero
    a_sub = adv.reshape(-1)[flat]
    w = weight_fn(a_sub, delta.reshape(-1)[flat])
    w -= 1.0
    w *= lam if np.ndim(lam) == 0 else np.broadcast_to(lam, adv.shape)[np.unravel_index(flat, adv.shape)]
    w += 1.0
    w *= a_sub
    return scatter_flat(adv, flat, w, keep)


@dataclass(frozen=True)
class AHEADOptions:
    """AHEAD's own options (``ShapeConfig.options["ahead"]``; docs/shapers.md §4): the clip ε, λ_0 and the horizon
    K of λ_k = λ_0·max(0, 1 − k/K), k = completed updates (0 first)."""

    eps: float = 0.2
    lambda0: float = 0.5
    decay_steps: int = 50


@register("ahead_lambda", stage="schedule", summary="λ_k = λ_0·max(0, 1 − k/K), k = completed updates.")
def _ahead_schedule(config: Any, update_index: int) -> float:
    opts = config.options_for("ahead")
    return ahead_lambda(update_index, opts.lambda0, opts.decay_steps)


@register(
    "ahead",
    stage="token",
    schedule="ahead_lambda",
    summary="AHEAD: Ã = A·[(1 − λ) + λ·clip(e^{sgn(A)δ})].",
    options=AHEADOptions,
    needs=("teacher",),
)
def _ahead_stage(batch: Any, config: Any, tokens: np.ndarray, lam: float) -> np.ndarray:
    if batch.delta is None:
        raise ValueError(f"token_reweight='ahead' with λ = {lam} needs StepBatch.delta")
    eps = config.options_for("ahead").eps
    return ahead_reweight(tokens, batch.delta, lam, eps=eps, mask=batch.delta_mask)
