"""The actor role: old log-probs, and the clipped policy-gradient update with gradient accumulation.

The per-token loss and its aggregation are :mod:`stepgym.trainers.losses` (verl's ``compute_policy_loss`` and
``agg_loss``; DAPO's clip-higher and dual clip). What this module adds is the bookkeeping around them:

* rows are split into ``mini_batches`` (one optimizer step each) and, inside one, into micro-batches of at most
  ``micro_batch_tokens`` padded tokens (gradient accumulation);
* the aggregation is made **exact over the whole mini-batch**: each micro-batch's aggregated loss is weighted by
  its share of the mini-batch's normaliser (tokens for token-mean, valid sequences for seq-mean-token-mean,
  sequences otherwise). verl divides each micro-batch mean by the number of micro-batches instead, which equals
  the global token-mean only when micro-batches hold equal token counts (docs/shapers.md §6.2);
* an optional KL term to a reference policy, verl's ``low_var_kl`` (k3) estimator clamped to ±10, and an optional
  entropy bonus, aggregated the same way;
* bf16 autocast on GPU, gradient-norm clipping, a linear warm-up of the learning rate;
* data-parallel (``dist``, :mod:`stepgym.trainers.distributed`): the mini-batches are cut from the **global**
  batch (every rank draws the same permutation of all ranks' rows and keeps the rows it holds), each normaliser is
  summed over the ranks before any row is weighted, and the ranks' gradients are summed before clipping. The
  weights of all rows of a mini-batch then add up to one across the ranks, so the summed gradient is the one a
  single process computes on the whole batch (exact for token-mean, seq-mean-token-mean and seq-mean-token-sum;
  seq-mean-token-sum-norm divides by the padded width of each micro-batch and is batch-layout dependent anyway);
* with one mini-batch and one epoch the policy being updated *is* θ_old, so the trainer may pass no old
  log-probs and the update uses its own forward pass, detached (ρ = 1 exactly; the same gradient as with a
  separately computed θ_old pass, one forward pass cheaper). With several optimizer steps per batch the old
  log-probs are always computed first, as in verl.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepgym.trainers.config import LossConfig, OptimConfig
from stepgym.trainers.distributed import DistContext
from stepgym.trainers.losses import agg_loss, policy_loss
from stepgym.trainers.samples import pack, response_logprobs, token_budget_batches

__all__ = ["Actor", "UpdateRow", "low_var_kl"]


@dataclass
class UpdateRow:
    """What one training row contributes: context (prompt) ids, response ids, and per-response-token arrays."""

    context: list[int]
    response: list[int]
    old_logp: np.ndarray | None  #: None: the policy is still θ_old (one mini-batch, one epoch), see Actor
    advantages: np.ndarray
    ref_logp: np.ndarray | None = None


def low_var_kl(logp: Any, ref_logp: Any) -> Any:
    """verl's ``kl_penalty(..., "low_var_kl")``: k3 = exp(ref − logp) − (ref − logp) − 1, clamped to [−10, 10]."""
    import torch

    kl = ref_logp - logp
    return torch.clamp(torch.exp(kl) - kl - 1.0, min=-10.0, max=10.0)


def _pad(arrays: Sequence[np.ndarray], width: int, device: Any) -> Any:
    import torch

    out = np.zeros((len(arrays), width), dtype=np.float32)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = a
    return torch.from_numpy(out).to(device)


def _normaliser(rows: Sequence[UpdateRow], mode: str) -> float:
    if mode == "token-mean":
        return float(sum(len(r.response) for r in rows))
    if mode == "seq-mean-token-mean":
        return float(sum(1 for r in rows if r.response))
    return float(len(rows))


class Actor:
    """Owns the optimizer step. ``model`` is trained in place.

    Args:
        model: the policy.
        optimizer, scheduler: torch optimizer and LR scheduler over the trainable parameters.
        loss, optim: the loss and optimisation configs.
        pad_id: padding token id.
        autocast_dtype: ``torch.bfloat16`` for bf16 autocast (GPU), else None.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        scheduler: Any,
        *,
        loss: LossConfig,
        optim: OptimConfig,
        pad_id: int,
        autocast_dtype: Any = None,
        dist: DistContext | None = None,
    ) -> None:
        self.dist = dist or DistContext()
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.loss_cfg = loss
        self.optim_cfg = optim
        self.pad_id = int(pad_id)
        self.autocast_dtype = autocast_dtype

    def _autocast(self, device: Any) -> Any:
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype)

    def micro_batches(self, rows: Sequence[UpdateRow]) -> list[list[int]]:
        """Indices of ``rows`` cut into micro-batches of at most ``micro_batch_tokens`` padded tokens."""
        lengths = [len(r.context) + len(r.response) for r in rows]
        return token_budget_batches(lengths, self.optim_cfg.micro_batch_tokens)

    def update(self, rows: Sequence[UpdateRow], rng: np.random.Generator) -> dict[str, float]:
        """``epochs`` × ``mini_batches`` optimizer steps over ``rows``; returns averaged statistics."""
        cfg = self.optim_cfg
        counts = self.dist.all_gather_object(len(rows))
        if not sum(counts):
            return {}
        offset = sum(counts[: self.dist.rank])
        mine = range(offset, offset + len(rows))  # this rank's rows, as indices of the global batch
        totals: dict[str, float] = {}
        n_steps = 0
        for _ in range(cfg.epochs):
            perm = rng.permutation(sum(counts))
            for part in np.array_split(perm, cfg.mini_batches):
                if len(part) == 0:
                    continue
                stats = self._optimizer_step([rows[i - offset] for i in part if i in mine])
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                n_steps += 1
        out = {k: v / max(n_steps, 1) for k, v in totals.items()}
        out["actor/optimizer_steps"] = float(n_steps)
        return out

    def _optimizer_step(self, rows: Sequence[UpdateRow]) -> dict[str, float]:
        import torch

        lc = self.loss_cfg
        device = next(self.model.parameters()).device
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        norm = max(self.dist.sum_floats([_normaliser(rows, lc.agg)], device)[0], 1.0)
        acc: dict[str, float] = {
            "actor/pg_loss": 0.0,
            "actor/kl": 0.0,
            "actor/entropy": 0.0,
            "actor/clipfrac": 0.0,
            "actor/ppo_kl": 0.0,
            "actor/dual_clipfrac": 0.0,
        }
        n_tok = 0
        for idx in self.micro_batches(rows):
            mb = [rows[i] for i in idx]
            batch = pack([r.context for r in mb], [r.response for r in mb], pad_id=self.pad_id, device=device)
            width = batch.target_ids.shape[1]
            adv = _pad([r.advantages for r in mb], width, device)
            mask = batch.target_mask
            with self._autocast(device):
                logp, ent = response_logprobs(self.model, batch, with_entropy=lc.entropy_coef > 0)
            if any(r.old_logp is None for r in mb):
                old = logp.detach()  # on-policy first pass: θ = θ_old, so ρ = 1 exactly and no extra forward
            else:
                old = _pad([r.old_logp for r in mb], width, device)  # type: ignore[misc]
            loss_tok, st = policy_loss(
                logp, old, adv, mask, clip_low=lc.clip_low, clip_high=lc.clip_high, clip_c=lc.clip_c
            )
            weight = _normaliser(mb, lc.agg) / norm
            total = agg_loss(loss_tok, mask, lc.agg) * weight
            acc["actor/pg_loss"] += float(total.detach())
            if lc.kl_coef > 0:
                if any(r.ref_logp is None for r in mb):
                    raise ValueError("kl_coef > 0 but some rows have no reference log-probs")
                ref = _pad([r.ref_logp for r in mb], width, device)  # type: ignore[misc]
                kl = agg_loss(low_var_kl(logp, ref), mask, lc.agg) * weight
                total = total + lc.kl_coef * kl
                acc["actor/kl"] += float(kl.detach())
            if lc.entropy_coef > 0 and ent is not None:
                e = agg_loss(ent, mask, lc.agg) * weight
                total = total - lc.entropy_coef * e
                acc["actor/entropy"] += float(e.detach())
            if not torch.isfinite(total):
                raise FloatingPointError(f"non-finite loss {float(total)} in a micro-batch of {len(mb)} rows")
            total.backward()
            k = int(mask.sum())
            n_tok += k
            for name in ("clipfrac", "ppo_kl", "dual_clipfrac"):
                acc[f"actor/{name}"] += st[name] * k
        keys = list(acc)
        *summed, n_tok_all = self.dist.sum_floats([acc[k] for k in keys] + [float(n_tok)], device)
        acc = dict(zip(keys, summed, strict=True))
        n_tok = int(n_tok_all)
        for name in ("clipfrac", "ppo_kl", "dual_clipfrac"):
            acc[f"actor/{name}"] /= max(n_tok, 1)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.dist.sum_gradients(params)
        if self.optim_cfg.grad_clip > 0:
            gn = torch.nn.utils.clip_grad_norm_(params, self.optim_cfg.grad_clip)
        else:
            gn = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
        acc["actor/grad_norm"] = float(gn)
        if not np.isfinite(acc["actor/grad_norm"]):
            raise FloatingPointError("non-finite gradient norm; the update was skipped")
        self.optimizer.step()
        self.scheduler.step()
        acc["actor/lr"] = float(self.scheduler.get_last_lr()[0])
        acc["actor/train_tokens"] = float(n_tok)
        return acc
