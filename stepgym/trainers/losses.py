"""Torch versions of the clipped policy loss (clip-higher + dual clip) and verl's loss aggregation modes.

The maths is :mod:`stepgym.shapers.dapo` (docs/shapers.md §6.1–6.2), where the NumPy reference versions live and are
tested against the worked values; ``tests/test_shapers_worked.py`` checks these against them. This module imports
torch, so only the trainer imports it; the shapers never do.

Typical use in a trainer step::

    adv = torch.as_tensor(shaped.token_advantages, dtype=torch.float32, device=log_prob.device)
    loss_tok, stats = policy_loss(log_prob, old_log_prob, adv, response_mask, clip_low=0.2, clip_high=0.28)
    loss = agg_loss(loss_tok, response_mask, "token-mean")
"""

from __future__ import annotations

import torch

from stepgym.shapers.dapo import AGG_MODES, DAPO_CLIP_HIGH, DAPO_CLIP_LOW, LOG_RATIO_CLAMP, AggMode

__all__ = ["agg_loss", "clipped_surrogate", "policy_loss"]


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = DAPO_CLIP_LOW,
    clip_high: float = DAPO_CLIP_HIGH,
    clip_c: float | None = 3.0,
) -> torch.Tensor:
    """ℓ = max(−Aρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high)); for A < 0 also min(ℓ, −A·c). Same shapes in and out."""
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip ranges must be >= 0, got {clip_low}, {clip_high}")
    loss = torch.maximum(
        -advantages * ratio, -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    )
    if clip_c is not None:
        if clip_c <= 1.0:
            raise ValueError(f"dual-clip constant c must be > 1, got {clip_c}")
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * clip_c), loss)
    return loss


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    clip_low: float = DAPO_CLIP_LOW,
    clip_high: float = DAPO_CLIP_HIGH,
    clip_c: float | None = 3.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token clipped policy loss (verl ``compute_policy_loss``) and clip statistics over ``mask``.

    ``log_prob`` (B, L) differentiable; ``old_log_prob`` and ``advantages`` (B, L) are treated as constants.
    ρ = exp(clamp(log π − log π_old, ±20)). Plain GRPO / GiGPO use ``clip_low = clip_high = 0.2``; DAPO 0.2/0.28.
    Returns (loss (B, L), {"clipfrac", "dual_clipfrac", "ppo_kl"}) with the fractions over masked tokens.
    """
    if log_prob.shape != old_log_prob.shape or log_prob.shape != advantages.shape:
        raise ValueError(
            f"shape mismatch: log_prob {tuple(log_prob.shape)}, old_log_prob {tuple(old_log_prob.shape)}, "
            f"advantages {tuple(advantages.shape)}"
        )
    adv = advantages.detach()
    log_ratio = torch.clamp(log_prob - old_log_prob.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss = clipped_surrogate(ratio, adv, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)
    with torch.no_grad():
        m = torch.ones_like(loss) if mask is None else mask.to(loss.dtype)
        denom = m.sum().clamp_min(1.0)
        clipped = loss != -adv * ratio
        if clip_c is None:
            dual = torch.zeros_like(clipped)
        else:
            single = clipped_surrogate(ratio, adv, clip_low=clip_low, clip_high=clip_high, clip_c=None)
            dual = (adv < 0) & (single > -adv * clip_c)
        stats = {
            "clipfrac": float((clipped.to(m.dtype) * m).sum() / denom),
            "dual_clipfrac": float((dual.to(m.dtype) * m).sum() / denom),
            "ppo_kl": float((-log_ratio * m).sum() / denom),
        }
    return loss, stats


def agg_loss(loss: torch.Tensor, mask: torch.Tensor, mode: AggMode = "token-mean") -> torch.Tensor:
    """verl ``agg_loss`` over a (B, L) per-token loss (docs/shapers.md §6.2); the NumPy reference is
    :func:`stepgym.shapers.agg_loss_np` (same edge cases: an all-masked batch gives 0, sequences without a
    valid token are skipped by seq-mean-token-mean). Returns a 0-d tensor."""
    if loss.ndim != 2 or loss.shape != mask.shape:
        raise ValueError(
            f"loss and mask must be equal 2-D shapes, got {tuple(loss.shape)} and {tuple(mask.shape)}"
        )
    m = mask.to(loss.dtype)
    lm = torch.where(m != 0, loss * m, torch.zeros_like(loss))
    if mode == "token-mean":
        total = m.sum()
        return lm.sum() / total if total > 0 else lm.sum() * 0.0
    if mode == "seq-mean-token-mean":
        per_len = m.sum(dim=-1)
        ok = per_len > 0
        if not bool(ok.any()):
            return lm.sum() * 0.0
        return (lm.sum(dim=-1)[ok] / per_len[ok]).mean()
    if mode == "seq-mean-token-sum":
        return lm.sum(dim=-1).mean() if loss.shape[0] else lm.sum() * 0.0
    if mode == "seq-mean-token-sum-norm":
        return lm.sum() / loss.shape[-1] if loss.shape[-1] else lm.sum() * 0.0
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {AGG_MODES}")
