"""Data-parallel training under ``torchrun``: who collects which groups, and the collectives the trainer needs.

``torchrun --nproc_per_node W -m stepgym.cli train ...`` starts W ranks (gloo on CPU, NCCL on GPU). Every rank
holds the whole model and the same NumPy generator, so every rank draws the same global batch of tasks; rank r then
collects only its contiguous share of **whole groups** (a group is never split, since the shapers normalise within
a group), shapes them, and computes gradients on its own rows. The trainer sums the ranks' gradients; what makes
the sum *the* gradient of the global batch is that every rank weights its rows by the **global** normaliser (the
global token count for token-mean), not its own (docs/scale_out.md). Rank 0 alone writes metrics,
reports, credit pictures and checkpoints; every rank reads the same checkpoint to resume.

Randomness that would depend on how the batch is split is derived per group instead: under ``torchrun`` each
group's generation requests carry seeds from a generator keyed by (the iteration's draw, the group's global index),
so every bundled backend (scripted, HF ``generate`` with one generator per row, vLLM seeded per request) produces
the same rollouts on W ranks as on 1, and the update equals one rank's up to float summation order. The run
records its world size and each rank's share of groups (:func:`world_record`: ``config.json``, the trainer state,
the metrics).

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) :func:`context_from_env` returns a single-process
context whose collectives are identities, and the trainer behaves exactly as it always has.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

__all__ = ["DistContext", "context_from_env", "group_shard", "resolve_world_size", "world_record"]

#: How long a rank waits in a collective (rank 0 evaluates and saves alone while the others wait).
COLLECTIVE_TIMEOUT = timedelta(hours=2)


def group_shard(n_groups: int, rank: int, world: int) -> range:
    """Rank ``rank``'s contiguous share of ``n_groups`` whole groups (sizes differ by at most one)."""
    if n_groups < world:
        raise ValueError(
            f"rollout.n_tasks={n_groups} groups cannot be shared by {world} ranks: every rank needs a whole group"
        )
    base, extra = divmod(n_groups, world)
    lo = rank * base + min(rank, extra)
    return range(lo, lo + base + (1 if rank < extra else 0))


def world_record(world: int, n_groups: int) -> dict[str, Any]:
    """What a run records about its data parallelism (``config.json``, the trainer state): the world size and
    each rank's contiguous share of the batch's ``n_groups`` groups, as ``[first, stop)`` group indices."""
    shares = [group_shard(n_groups, r, world) for r in range(world)]
    return {"world_size": int(world), "rank_groups": [[s.start, s.stop] for s in shares]}


def resolve_world_size(config: Any, dist: DistContext) -> Any:
    """``config`` with ``run.world_size`` set to the ranks this run has, after the checks a data-parallel run
    needs: a world size the config insists on, a whole group per rank, no dynamic sampling under ``torchrun``."""
    from dataclasses import replace

    asked = config.run.world_size
    if asked > 0 and asked != dist.world:
        how = "torchrun --nproc_per_node N" if asked > 1 else "a plain `stepgym train` (no torchrun)"
        raise ValueError(
            f"run.world_size={asked} but this run has {dist.world} rank(s): start it with {how}, or set "
            "--run.world-size 0 to take whatever the launcher gives"
        )
    if dist.active and config.rollout.dynamic_sampling:
        raise ValueError("rollout.dynamic_sampling is not supported under torchrun (data-parallel) yet")
    if dist.active:
        group_shard(config.rollout.n_tasks, dist.rank, dist.world)  # every rank gets a whole group
    return replace(config, run=replace(config.run, world_size=dist.world))


@dataclass
class DistContext:
    """The rank's place in the job. ``active`` is False for a plain single-process run (collectives are no-ops)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    active: bool = False
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- collectives ----------------------------------------------------------------------------------------
    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        if not self.active:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def all_reduce_sum(self, tensor: Any) -> Any:
        """Sum ``tensor`` over the ranks, in place (returned for convenience)."""
        if self.active:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def sum_floats(self, values: list[float], device: Any) -> list[float]:
        """Sum a list of Python floats over the ranks (float64)."""
        if not self.active:
            return list(values)
        import torch

        t = torch.tensor(values, dtype=torch.float64, device=device)
        return [float(v) for v in self.all_reduce_sum(t).cpu()]

    def broadcast_model(self, model: Any) -> None:
        """Copy rank 0's parameters and buffers to every rank (identical starting weights, whatever the init)."""
        if not self.active:
            return
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t.data, src=0)

    def sum_gradients(self, params: list[Any]) -> None:
        """Sum the gradients of ``params`` over the ranks. A parameter keeps ``grad=None`` only if it has no
        gradient on any rank (as one process would see it), so the optimizer treats it the same way."""
        if not self.active:
            return
        import torch

        device = params[0].device
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params]
        )
        self.all_reduce_sum(has)
        self.all_reduce_sum(flat)
        offset = 0
        for p, flag in zip(params, has.tolist(), strict=True):
            n = p.numel()
            if flag > 0:
                p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
            offset += n

    def check_same(self, what: str, value: Any) -> None:
        """Raise if ``value`` (JSON-able) differs between ranks, naming ``what``."""
        if not self.active:
            return
        digest = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
        digests = self.all_gather_object(digest)
        if len(set(digests)) > 1:
            raise RuntimeError(f"the ranks disagree on the {what}: {digests}")

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier()

    def group_rngs(self, base: int, groups: range) -> list[np.random.Generator]:
        """One generator per group, keyed by the iteration's draw and the group's global index."""
        return [np.random.default_rng([base, g]) for g in groups]

    def close(self) -> None:
        if self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.owns_group = False
            self.active = False


def context_from_env(device: str = "auto") -> DistContext:
    """Join the ``torchrun`` job this process belongs to (``WORLD_SIZE``/``RANK`` in the environment), or return the
    single-process context. NCCL when the model runs on CUDA, gloo otherwise; each rank uses ``cuda:LOCAL_RANK``."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return DistContext()
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and not device.startswith("cpu")
    if use_cuda:
        torch.cuda.set_device(local)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return DistContext(rank=rank, world=world, local_rank=local, active=True, owns_group=owns)
