"""DAPO's knobs in NumPy: clip-higher + dual-clip surrogate, loss aggregation, dynamic sampling, overlong shaping
(docs/shapers.md §6). The torch versions the trainer differentiates through are in :mod:`stepgym.trainers.losses` and are
tested against these. The NumPy twins carry an ``_np`` suffix (``policy_loss_np``, ``agg_loss_np``,
``clipped_surrogate_np``) so a name says which array library it takes (the torch functions keep the plain names
in :mod:`stepgym.trainers.losses`).

Paper: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476):
Eq. 8–10 (clip-higher with ε_low/ε_high, token-level loss, dynamic sampling constraint 0 < #correct < G), Eq. 13
(soft overlong punishment). Dual clip: Ye et al. 2020 ("Mastering complex control in MOBA games", dual-clip PPO).
Public code: verl ``core_algos.py::compute_policy_loss``, ``agg_loss``; ``recipe/dapo/dapo_ray_trainer.py``;
``DAPORewardManager``.

Departures from verl:
* token-mean over an all-masked batch returns 0 (verl divides by mask.sum() + 1e-8 in some versions, which also
  makes 7/4 come out as 1.75 − 4e-9); seq-mean-token-mean skips sequences with no valid token (verl would give
  NaN for them);
* dynamic sampling keeps a group iff its metric is not constant (max > min), which equals verl's ``np.std > 0``
  in exact arithmetic but is immune to the rounding that makes ``np.std([0.1]*3)`` non-zero.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import Groups, as_bool_array, as_float_array, check_same_length, check_same_shape
from stepgym.shapers.registry import register

__all__ = [
    "AGG_MODES",
    "DAPO_CLIP_HIGH",
    "DAPO_CLIP_LOW",
    "agg_loss_np",
    "clipped_surrogate_np",
    "dynamic_sampling_keep",
    "overlong_penalty",
    "policy_loss_np",
]

DAPO_CLIP_LOW = 0.2  #: ε_low (run_dapo_qwen2.5_32b.sh)
DAPO_CLIP_HIGH = 0.28  #: ε_high (run_dapo_qwen2.5_32b.sh); plain GRPO/GiGPO use 0.2 for both
LOG_RATIO_CLAMP = 20.0  #: verl clamps log π − log π_old to ±20 before exp

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def clipped_surrogate_np(
    ratio: Any,
    advantages: Any,
    *,
    clip_low: float = DAPO_CLIP_LOW,
    clip_high: float = DAPO_CLIP_HIGH,
    clip_c: float | None = 3.0,
) -> np.ndarray:
    """Per-token PPO loss with clip-higher and dual clip (docs/shapers.md §6.1):

    ℓ = max(−A·ρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high)); for A < 0: ℓ = min(ℓ, −A·c).

    ``ratio`` ρ and ``advantages`` A of equal shape; ``clip_c`` None disables the dual clip (it must be > 1).
    Worked values (ε 0.2/0.28, c 3): (1.5, +1) → −1.28, (0.5, +1) → −0.5, (0.5, −1) → 0.8, (5, −1) → 3.
    """
    rho = as_float_array(ratio, "ratio")
    a = as_float_array(advantages, "advantages", finite=True)
    check_same_shape(a.shape, ratio=rho)
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip ranges must be >= 0, got {clip_low}, {clip_high}")
    loss = np.maximum(-a * rho, -a * np.clip(rho, 1.0 - clip_low, 1.0 + clip_high))
    if clip_c is not None:
        if clip_c <= 1.0:
            raise ValueError(f"dual-clip constant c must be > 1, got {clip_c}")
        loss = np.where(a < 0, np.minimum(loss, -a * clip_c), loss)
    return loss


@register("policy_loss", stage="loss")
def policy_loss_np(
    log_prob: Any,
    old_log_prob: Any,
    advantages: Any,
    *,
    clip_low: float = DAPO_CLIP_LOW,
    clip_high: float = DAPO_CLIP_HIGH,
    clip_c: float | None = 3.0,
) -> np.ndarray:
    """verl ``compute_policy_loss``: ρ = exp(clamp(log π − log π_old, ±20)), then :func:`clipped_surrogate_np`.
    Arrays of equal shape, typically (B, L); returns the per-token loss (aggregate with :func:`agg_loss_np`)."""
    lp = as_float_array(log_prob, "log_prob")
    olp = as_float_array(old_log_prob, "old_log_prob")
    check_same_shape(lp.shape, old_log_prob=olp)
    ratio = np.exp(np.clip(lp - olp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return clipped_surrogate_np(ratio, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)


@register("agg_loss", stage="loss")
def agg_loss_np(loss: Any, mask: Any, mode: AggMode = "token-mean", *, keep_rows: Any = None) -> float:
    """verl ``agg_loss`` (docs/shapers.md §6.2) over a (B, L) per-token loss and its 0/1 mask:

    * "token-mean" (DAPO; what every token shaper here assumes): Σ m·ℓ / Σ m;
    * "seq-mean-token-mean": mean over sequences of each sequence's token mean;
    * "seq-mean-token-sum": mean over sequences of each sequence's token sum;
    * "seq-mean-token-sum-norm": Σ m·ℓ / L (the padded length).

    Worked case: ℓ = [[1, 1, 1], [4, ·, ·]] → token-mean 7/4.

    ``keep_rows`` (B,) bool: the rows of finished episodes (``~aborted``; docs/failures.md). The others leave the
    aggregate entirely, so it equals the aggregate over the kept rows alone (the "seq-mean" modes no longer count
    them in their denominator). Pass the mask :func:`stepgym.shapers.shape_advantages` returns
    (``token_loss_mask``) as ``mask``.
    """
    x = as_float_array(loss, "loss", ndim=2)
    m = as_float_array(mask, "mask", ndim=2)
    check_same_shape(x.shape, mask=m)
    if keep_rows is not None:
        keep = np.asarray(keep_rows, dtype=bool)
        if keep.shape != (x.shape[0],):
            raise ValueError(f"keep_rows must have shape ({x.shape[0]},), got {keep.shape}")
        x, m = x[keep], m[keep]
    xm = np.where(m != 0, x * m, 0.0)  # a masked NaN/inf never leaks
    if mode == "token-mean":
        total = m.sum()
        return float(xm.sum() / total) if total > 0 else 0.0
    if mode == "seq-mean-token-mean":
        per_len = m.sum(axis=-1)
        ok = per_len > 0
        return float(np.mean(xm.sum(axis=-1)[ok] / per_len[ok])) if ok.any() else 0.0
    if mode == "seq-mean-token-sum":
        return float(np.mean(xm.sum(axis=-1))) if x.shape[0] else 0.0
    if mode == "seq-mean-token-sum-norm":
        return float(xm.sum() / x.shape[-1]) if x.shape[-1] else 0.0
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {AGG_MODES}")


@register("dynamic_sampling", stage="sampling")
def dynamic_sampling_keep(
    metric: Any, group_ids: Any, *, keep_singletons: bool = True, aborted: Any = None
) -> np.ndarray:
    """DAPO dynamic sampling filter (docs/shapers.md §6.3): keep a group iff its metric (``acc``, ``seq_final_reward`` or
    ``seq_reward``) is not constant, or it has one member (verl; ``keep_singletons=False`` gives verl-agent's
    ``filter_group_data``, which drops any all-equal group).

    ``metric`` (N,) finite per trajectory, ``group_ids`` (N,). Returns (N,) bool: keep this trajectory. The
    trainer keeps generating until ``train_batch_size`` groups are kept (at most ``max_num_gen_batches``) and
    truncates to ``train_batch_size × n`` trajectories; that loop is trainer state and lives there.

    ``aborted`` (N,) bool (docs/failures.md): aborted trajectories have no outcome, so a group is judged on its
    finished ones only (a group with none is dropped); an aborted trajectory follows its group.
    """
    x = as_float_array(metric, "metric", ndim=1, finite=True)
    check_same_length(len(x), group_ids=group_ids, aborted=aborted)
    if len(x) == 0:
        return np.zeros(0, dtype=bool)
    g = Groups(group_ids)
    if aborted is None or not np.asarray(aborted, dtype=bool).any():
        keep = ~g.is_constant(x)
        if keep_singletons:
            keep |= g.counts == 1
        return keep[g.codes]
    done = ~as_bool_array(aborted, "aborted")
    fin = Groups(codes=g.codes[done], n_groups=g.n_groups)
    n_fin = np.bincount(g.codes[done], minlength=g.n_groups)
    keep = ~fin.is_constant(x[done])
    if keep_singletons:
        keep |= n_fin == 1
    keep &= n_fin > 0
    return keep[g.codes]


@register("overlong_penalty", stage="reward_term")
def overlong_penalty(lengths: Any, max_len: int, buffer_len: int = 4096, factor: float = 1.0) -> np.ndarray:
    """DAPO soft overlong punishment (Eq. 13; docs/shapers.md §6.4): min(−(L − (L_max − L_buf))/L_buf · f, 0) per response.

    Zero inside the budget, −f at L = L_max (e.g. L = 18432 with L_max 20480, L_buf 4096 → −0.5). Add it to the
    reward. Meant for single long responses; off for multi-turn agents (the turn cap bounds length).
    ``lengths`` (N,) response lengths in tokens → (N,) float64.
    """
    n = as_float_array(lengths, "lengths", finite=True)
    if buffer_len <= 0 or buffer_len > max_len:
        raise ValueError(f"need 0 < buffer_len <= max_len, got buffer_len={buffer_len}, max_len={max_len}")
    expected = max_len - buffer_len
    return np.minimum(-(n - expected) / buffer_len * factor, 0.0)
