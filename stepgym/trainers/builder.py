"""The construction half of the bundled trainer: every role of :class:`~stepgym.trainers.grpo.GRPOTrainer` built
from a :class:`~stepgym.trainers.config.TrainConfig`.

Kept apart from the controller (:mod:`stepgym.trainers.grpo`, which only runs iterations) so that each role's
construction reads on its own: the rank's device, the policy with the data-parallel handshake, the optimizer and
schedule, the teachers (stale snapshot, KL reference, AHEAD's analyzer), the ARG labeler, the format warm-up and
the run's output files. Every function returns what it builds; the trainer assigns it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepgym.atomic import atomic_write_text
from stepgym.trainers.distributed import DistContext, world_record
from stepgym.trainers.metrics import MetricsLogger, NoMetrics
from stepgym.trainers.models import build_policy, resolve_device

__all__ = [
    "build_actor",
    "build_arg",
    "build_optimizer",
    "build_scoring",
    "build_teachers",
    "load_policy",
    "make_collector",
    "open_outputs",
    "rank_device",
    "warm_up",
]


def rank_device(name: str, dist: DistContext) -> Any:
    """The device this rank trains on: ``model.device`` resolved, ``cuda:LOCAL_RANK`` for a CUDA rank."""
    import torch

    device = resolve_device(name)
    if dist.active and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    return device


def load_policy(
    config: Any, resume_from: Path | None, dist: DistContext, **kwargs: Any
) -> tuple[Any, Any, str]:
    """``(model, tokenizer, source)`` of :func:`build_policy`, with the data-parallel handshake: rank 0 builds
    first (a download or conversion cache is filled once, not raced), every rank checks it has the same tokenizer,
    and rank 0's weights are broadcast (identical starting weights, whatever the initialisation)."""
    if not dist.is_main:
        dist.barrier()
    lm = build_policy(config, resume_from, **kwargs)
    if dist.is_main:
        dist.barrier()
    dist.check_same("tokenizer vocabulary", lm.tokenizer.get_vocab())
    dist.broadcast_model(lm.model)
    return lm.model, lm.tokenizer, lm.source


def make_collector(
    cfg: Any,
    kwargs: dict[str, Any],
    group_size: int,
    *,
    fmt: Any,
    history: int | None,
    encoder: Any,
    backend: Any,
) -> Any:
    """A :class:`~stepgym.trainers.collector.Collector` of ``cfg.env.id`` made with ``kwargs`` (the training split,
    or an evaluation split), on the configured env executor. Every collector aborts the episodes an infrastructure
    failure cuts off (the collector's rule, whatever the phase) and carries the fault injection of
    ``rollout.faults`` (docs/failures.md)."""
    from stepgym.trainers.collector import Collector, CollectorOptions
    from stepgym.workers import ExecutorSpec

    ex = cfg.rollout.executor_options()
    return Collector(
        cfg.env.id,
        kwargs,
        fmt,
        history=history,
        group_size=group_size,
        encoder=encoder,
        backend=backend,
        options=CollectorOptions(
            executor=ExecutorSpec(ex["executor"], ex["num_workers"], ex["executor_kwargs"]),
            overlap=ex["overlap"],
            value_labels=cfg.env.value_labels,
            faults=cfg.rollout.faults,
        ),
    )


def build_optimizer(model: Any, o: Any) -> tuple[Any, Any]:
    """AdamW over the trainable parameters and the linear LR warm-up over ``o.warmup_updates`` optimizer steps."""
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)
    warm = max(0, o.warmup_updates)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0
    )
    return optimizer, scheduler


def build_actor(
    cfg: Any, model: Any, dist: DistContext, *, pad_id: int, autocast: Any
) -> tuple[Any, Any, Any]:
    """``(optimizer, scheduler, actor)``: the update role (:class:`~stepgym.trainers.actor.Actor`) and what it
    steps."""
    from stepgym.trainers.actor import Actor

    optimizer, scheduler = build_optimizer(model, cfg.optim)
    actor = Actor(
        model,
        optimizer,
        scheduler,
        loss=cfg.loss,
        optim=cfg.optim,
        pad_id=pad_id,
        autocast_dtype=autocast,
        dist=dist,
    )
    return optimizer, scheduler, actor


def build_scoring(
    cfg: Any, model: Any, *, pad_id: int, autocast: Any, encoder: Any, fmt: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """``(scorer, stale, reference, analyzer, rescorer)``: the log-prob scorer (θ_old, teachers, KL reference),
    the teachers of :func:`build_teachers` and the AHEAD / StepOPSD rescorer that uses them."""
    from stepgym.trainers.teacher import Scorer, TeacherRescorer

    scorer = Scorer(pad_id, microbatch_tokens=cfg.teacher.microbatch_tokens, autocast_dtype=autocast)
    stale, reference, analyzer = build_teachers(cfg, model)
    rescorer = TeacherRescorer(
        cfg, scorer=scorer, encoder=encoder, fmt_name=fmt, analyzer=analyzer, stale=stale
    )
    return scorer, stale, reference, analyzer, rescorer


def build_teachers(cfg: Any, model: Any) -> tuple[Any, Any, Any]:
    """``(stale, reference, analyzer)``: StepOPSD's stale teacher (or the KL anchor 'stale'), the KL reference
    (anchor 'initial'), AHEAD's oracle analyzer; None for each one the config does not use."""
    from stepgym.trainers.teacher import StaleTeacher

    need_stale = (cfg.shaper.token_reweight == "stepopsd" and cfg.teacher.opsd_teacher == "stale") or (
        cfg.loss.kl_coef > 0 and cfg.loss.kl_anchor == "stale"
    )
    stale = StaleTeacher(model, cfg.teacher.refresh_every) if need_stale else None
    reference = None
    if cfg.loss.kl_coef > 0 and cfg.loss.kl_anchor == "initial":
        reference = StaleTeacher(model, every=1)
    analyzer = None
    if cfg.shaper.token_reweight == "ahead":
        from stepgym.wrappers.hints import OracleAnalyzer

        analyzer = OracleAnalyzer(max_error_steps=cfg.teacher.max_error_steps or None)
    return stale, reference, analyzer


def build_arg(cfg: Any) -> Any:
    """ProAS's ARG labeler (seeded per the config), or None without ProAS."""
    if not cfg.shaper.proas:
        return None
    from stepgym.trainers.arg_labeler import ArgLabeler

    return ArgLabeler(cfg.env.id, cfg.env.make_kwargs(cfg.env.train_split), seed=cfg.teacher.arg_seed)


def warm_up(tr: Any) -> Any:
    """The format warm-up of a fresh run (``warmup.steps > 0``), then the same weights on every rank and in the
    teachers' snapshots. Returns its statistics."""
    from stepgym.trainers.warmup import format_warmup, load_cached_warmup, save_warmup, warmup_fingerprint

    cfg = tr.cfg
    cache = cfg.warmup.cache_dir if tr.dist.world == 1 else ""  # several ranks: each warms up (no cache)
    key = warmup_fingerprint(tr.model, tr.tokenizer, cfg, tr.rng, tr.pad_id) if cache else ""
    stats = load_cached_warmup(cache, key, tr.model, tr.rng) if cache else None
    if stats is None:
        stats = format_warmup(
            tr.model,
            tr.collector,
            cfg.warmup,
            rng=tr.rng,
            pad_id=tr.pad_id,
            micro_batch_tokens=cfg.optim.micro_batch_tokens,
            progress=cfg.run.progress,
            max_response_tokens=cfg.rollout.max_response_tokens,
        )
        if cache:
            save_warmup(cache, key, tr.model, tr.rng, stats)
    tr.dist.broadcast_model(tr.model)
    for snapshot in (tr.stale, tr.reference):
        if snapshot is not None:
            snapshot.load_from(tr.model)
    return stats


def open_outputs(cfg: Any, out: Path, dist: DistContext, *, resume_iteration: int | None) -> Any:
    """The metrics sink (rank 0: ``metrics.jsonl`` and TensorBoard, truncated to ``resume_iteration`` when
    resuming; other ranks: a no-op) and, on rank 0, ``config.json``: the resolved config (``run.world_size`` is
    the number of ranks the run has) plus ``distributed``, each rank's share of the groups."""
    if not dist.is_main:
        return NoMetrics()
    metrics = MetricsLogger(out, tensorboard=cfg.run.tensorboard, resume_from=resume_iteration)
    payload = {**cfg.to_dict(), "distributed": world_record(dist.world, cfg.rollout.n_tasks)}
    atomic_write_text(out / "config.json", json.dumps(payload, indent=1, default=str))
    return metrics
