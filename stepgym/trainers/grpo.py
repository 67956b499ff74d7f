"""The bundled GRPO trainer: a short controller over roles.

One iteration (:meth:`GRPOTrainer.step`)::

    collect      N tasks × G rollouts through GroupEnv, one row per model turn       (collector.Collector)
    old log-probs  θ_old on every row's response tokens                              (teacher.Scorer)
    rescore      AHEAD / StepOPSD teacher contexts, batched                          (teacher)
    label        ProAS: ARG labels against the graph as it stands                    (arg_labeler.ArgLabeler)
    shape        the shapers' §0 pipeline → per-token advantages                      (advantages → shapers)
    update       clipped policy loss (+KL), gradient accumulation, AdamW             (actor.Actor → losses)
    after        stale-teacher refresh, ARG growth with verified successes, weight sync to the backend

Building the roles is delegated too: the policy (:func:`stepgym.trainers.models.build_policy`), the rollout backend
(:func:`stepgym.trainers.backends.backend_from_config`), the teacher gaps
(:class:`stepgym.trainers.teacher.TeacherRescorer`), checkpoints (:func:`stepgym.trainers.checkpoint.save_trainer` /
``load_trainer``). No advantage maths happens here; every number that becomes an advantage is computed by
``stepgym.trainers.shapers``. The λ schedules (AHEAD 0.5 → 0 over 50, StepOPSD 0.2 → 0 over 50) are the shaper
config's, evaluated with ``update_index`` = completed iterations (verl's ``global_steps - 1``).

Departures from verl-agent worth knowing: the loss aggregation is exact over the mini-batch (see
:mod:`stepgym.trainers.actor`); old log-probs are recomputed by the trainer (never taken from the rollout engine),
so the ratio starts at 1 whichever backend sampled; one "update" in the schedules is one iteration (one batch),
however many optimizer steps ``optim.mini_batches`` splits it into.

Under ``torchrun`` the same controller runs on every rank (:mod:`stepgym.trainers.distributed`): each rank collects,
scores and shapes its share of whole groups, the actor sums the ranks' gradients with globally normalised weights,
the rollouts are gathered for the metrics and the ARG, and only rank 0 evaluates and writes anything.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from stepgym.trainers.actor import Actor, UpdateRow
from stepgym.trainers.advantages import ShapingResult, build_step_batch, shape_rows
from stepgym.trainers.backends import backend_from_config
from stepgym.trainers.checkpoint import load_trainer, read_state, resume_path, save_trainer
from stepgym.trainers.collector import Collector, Rollouts
from stepgym.trainers.config import TrainConfig
from stepgym.trainers.diagnostics import credit_payload, rollout_metrics, shaping_arrays, shaping_metrics
from stepgym.trainers.distributed import context_from_env, group_shard
from stepgym.trainers.evaluate import eval_metrics, evaluate
from stepgym.trainers.formats import resolve_format
from stepgym.trainers.metrics import MetricsLogger
from stepgym.trainers.models import build_policy, precision, resolve_device
from stepgym.trainers.samples import PromptEncoder
from stepgym.trainers.shapers import dynamic_sampling_keep
from stepgym.trainers.teacher import Scorer, StaleTeacher, TeacherRescorer

__all__ = ["GRPOTrainer", "resolve_device"]


class GRPOTrainer:
    """Build every role from a :class:`TrainConfig`, then :meth:`train` (or :meth:`step` one iteration at a time).

    ``backend`` overrides the configured rollout backend (any :class:`~stepgym.trainers.backends.RolloutBackend`).
    With ``config.run.resume`` set, everything is restored from the checkpoint (the format warm-up is skipped).
    """

    def __init__(self, config: TrainConfig, *, backend: Any = None) -> None:
        import torch

        self.cfg = config
        self._t_created = time.perf_counter()
        if config.run.threads > 0:
            torch.set_num_threads(config.run.threads)
        self.out = Path(config.run.output_dir)
        self.ckpt_dir = self.out / "checkpoints"
        self.dist = context_from_env(config.model.device)
        if self.dist.active and config.rollout.dynamic_sampling:
            raise ValueError("rollout.dynamic_sampling is not supported under torchrun (data-parallel) yet")
        if self.dist.active:
            group_shard(config.rollout.n_tasks, self.dist.rank, self.dist.world)  # every rank gets a group
        self.device = resolve_device(config.model.device)
        if self.dist.active and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
        self.weights_dtype, self.autocast = precision(config.model.precision, self.device)
        self.rng = np.random.default_rng(config.run.seed)
        self.fmt = resolve_format(config.env.id, config.env.text_format)
        self.history = None if config.env.history < 0 else config.env.history
        self.iteration = 0
        self.evals: list[dict[str, Any]] = []
        resume_from = resume_path(config.run.resume, self.ckpt_dir)
        state = read_state(resume_from) if resume_from is not None else None
        if not self.dist.is_main:  # rank 0 first: a download or conversion cache is filled once, not raced
            self.dist.barrier()
        lm = build_policy(
            config,
            resume_from,
            fmt=self.fmt,
            history=self.history,
            weights_dtype=self.weights_dtype,
            device=self.device,
        )
        if self.dist.is_main:
            self.dist.barrier()
        self.model, self.tokenizer, self.model_source = lm.model, lm.tokenizer, lm.source
        tok = self.tokenizer
        self.dist.check_same("tokenizer vocabulary", tok.get_vocab())
        self.dist.broadcast_model(self.model)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.encoder = PromptEncoder(
            tok, max_prompt_tokens=config.rollout.max_prompt_tokens, system=config.model.system_prompt
        )
        if backend is None:
            backend = backend_from_config(
                config, model=self.model, tokenizer=tok, autocast_dtype=self.autocast
            )
        self.backend = backend
        self.collector = self._collector(
            config.env.make_kwargs(config.env.train_split), config.rollout.group_size
        )
        self.train_task_ids = self.collector.task_ids()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        o = config.optim
        self.optimizer = torch.optim.AdamW(
            trainable, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
        )
        warm = max(0, o.warmup_updates)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0
        )
        self.actor = Actor(
            self.model,
            self.optimizer,
            self.scheduler,
            loss=config.loss,
            optim=o,
            pad_id=self.pad_id,
            autocast_dtype=self.autocast,
            dist=self.dist,
        )
        self.scorer = Scorer(
            self.pad_id, microbatch_tokens=config.teacher.microbatch_tokens, autocast_dtype=self.autocast
        )
        self._build_teachers()
        self.rescorer = TeacherRescorer(
            config,
            scorer=self.scorer,
            encoder=self.encoder,
            fmt_name=self.fmt.name,
            analyzer=self.analyzer,
            stale=self.stale,
        )
        self.arg = self._build_arg()
        self._eval_collectors: dict[str, Collector] = {}
        if state is not None:
            load_trainer(self, resume_from, state)  # type: ignore[arg-type]
        elif config.warmup.steps > 0:
            from stepgym.trainers.warmup import format_warmup

            self.warmup_stats = format_warmup(
                self.model,
                self.collector,
                config.warmup,
                rng=self.rng,
                pad_id=self.pad_id,
                micro_batch_tokens=o.micro_batch_tokens,
                progress=config.run.progress,
            )
            self.dist.broadcast_model(self.model)
            if self.stale is not None:
                self.stale.load_from(self.model)
            if self.reference is not None:
                self.reference.load_from(self.model)
        self.metrics: Any = _NoMetrics()
        if self.dist.is_main:
            self.metrics = MetricsLogger(
                self.out,
                tensorboard=config.run.tensorboard,
                resume_from=self.iteration if state is not None else None,
            )
            (self.out / "config.json").write_text(
                json.dumps(config.to_dict(), indent=1, default=str), encoding="utf-8"
            )
        from stepgym.recording.trainer import TrainerRecorder  # episodes.jsonl.gz for `stepgym view`

        # Rank 0 records its share of each batch (under torchrun the other ranks' groups are not gathered).
        self.recorder = TrainerRecorder.create(self) if self.dist.is_main else None

    # -- construction ---------------------------------------------------------------------------------------
    def _collector(self, kwargs: dict[str, Any], group_size: int) -> Collector:
        return Collector(
            self.cfg.env.id,
            kwargs,
            self.fmt,
            history=self.history,
            group_size=group_size,
            encoder=self.encoder,
            backend=self.backend,
            anchor=self.cfg.env.anchor,
            **self.cfg.rollout.executor_options(),
        )

    def _build_teachers(self) -> None:
        cfg = self.cfg
        need_stale = (cfg.shaper.token_reweight == "stepopsd" and cfg.teacher.opsd_teacher == "stale") or (
            cfg.loss.kl_coef > 0 and cfg.loss.kl_anchor == "stale"
        )
        self.stale = StaleTeacher(self.model, cfg.teacher.refresh_every) if need_stale else None
        self.reference = None
        if cfg.loss.kl_coef > 0 and cfg.loss.kl_anchor == "initial":
            self.reference = StaleTeacher(self.model, every=1)
        self.analyzer = None
        if cfg.shaper.token_reweight == "ahead":
            from stepgym.wrappers.hints import OracleAnalyzer

            self.analyzer = OracleAnalyzer(max_error_steps=cfg.teacher.max_error_steps or None)

    def _build_arg(self) -> Any:
        if not self.cfg.shaper.proas:
            return None
        from stepgym.trainers.arg_labeler import ArgLabeler

        return ArgLabeler(
            self.cfg.env.id,
            self.cfg.env.make_kwargs(self.cfg.env.train_split),
            seed=self.cfg.teacher.arg_seed,
        )

    # -- one iteration --------------------------------------------------------------------------------------
    def _sample_tasks(self, n: int) -> list[tuple[str, int]]:
        ids = self.train_task_ids
        pick = self.rng.choice(len(ids), size=n, replace=n > len(ids))
        return [(ids[int(i)], int(self.rng.integers(2**31 - 1))) for i in pick]

    def collect(self) -> Rollouts:
        """One batch of groups (with DAPO dynamic sampling when configured)."""
        rc = self.cfg.rollout
        bar = None
        if self.cfg.run.progress and self.dist.is_main:
            from tqdm.auto import tqdm

            bar = tqdm(desc=f"rollout it {self.iteration + 1}", unit="turn", leave=False)
        try:
            if self.dist.active or not rc.dynamic_sampling:
                return self._play(self._sample_tasks(rc.n_tasks), bar)
            parts: list[Rollouts] = []
            kept = 0
            for attempt in range(rc.max_gen_batches):
                ro = self._play(self._sample_tasks(rc.n_tasks), bar)
                if attempt < rc.max_gen_batches - 1:
                    rewards = [t.total_reward for t in ro.trajectories]
                    keep = dynamic_sampling_keep(rewards, ro.traj_group, keep_singletons=False)
                    ro = ro.subset_groups(sorted({ro.traj_group[i] for i in np.flatnonzero(keep)}))
                parts.append(ro)
                kept += len(ro.task_ids)
                if kept >= rc.n_tasks:
                    break
            merged = Rollouts.concat(parts)
            return merged.subset_groups(range(min(rc.n_tasks, len(merged.task_ids))))
        finally:
            if bar is not None:
                bar.close()

    def _play(self, tasks: list[tuple[str, int]], bar: Any) -> Rollouts:
        """Play a batch of groups. Group-seeded (under torchrun, with overlap, or ``rollout.group_seeds``): every
        rank draws the same global batch and plays its contiguous share of whole groups, with per-group request
        seeds keyed by one draw of the shared generator, so W ranks replay 1 rank and overlapped waves replay one
        call. Otherwise every call's seed comes from the trainer's generator."""
        rc = self.cfg.rollout
        if not (self.dist.active or rc.group_seeds or rc.overlaps):
            return self.collector.collect(tasks, seed_rng=self.rng, progress=bar)
        base = int(self.rng.integers(2**31 - 1))
        share = group_shard(len(tasks), self.dist.rank, self.dist.world)
        return self.collector.collect(
            [tasks[i] for i in share],
            seed_rng=np.random.default_rng([base, self.dist.rank, 1]),
            group_rngs=self.dist.group_rngs(base, share),
            progress=bar,
        )

    def _pooled(self, ro: Rollouts) -> Rollouts:
        """All ranks' rollouts as one batch, in rank order (the global batch; ``ro`` itself when single)."""
        if not self.dist.active:
            return ro
        return Rollouts.concat(self.dist.all_gather_object(ro))

    def rescore(self, ro: Rollouts, old: list[np.ndarray]) -> dict[str, Any]:
        """Teacher gaps for AHEAD / StepOPSD (``{}`` when the shaper needs none): :class:`TeacherRescorer`."""
        return self.rescorer.rescore(ro, old, self.model, self.iteration)

    def step(self) -> dict[str, float]:
        """One iteration; returns its metrics (also logged)."""
        cfg = self.cfg
        t_start = time.perf_counter()
        ro = self.collect()
        t_roll = time.perf_counter()
        rows = ro.rows
        old = self._old_logprobs(rows)
        t_old = time.perf_counter()
        teacher = self.rescore(ro, old)
        labels = self.arg.label(ro) if self.arg is not None else (None, None)
        batch, mask = build_step_batch(
            rows,
            reward_scale=cfg.env.reward_scale,
            invalid_rule=cfg.env.invalid_rule,
            pad_id=self.pad_id,
            reasonable=labels[0],
            progress=labels[1],
            delta=teacher.get("delta"),
            delta_mask=teacher.get("delta_mask"),
            target=teacher.get("target"),
        )
        t_shape0 = time.perf_counter()
        shaping = shape_rows(batch, cfg.shaper, update_index=self.iteration, mask=mask)
        t_shape = time.perf_counter() - t_shape0
        ref = self._reference_logprobs(rows)
        t_upd0 = time.perf_counter()
        upd = [
            UpdateRow(
                r.prompt_ids,
                r.response_ids,
                None if old is None else old[i],
                shaping.row_advantages(i),
                None if ref is None else ref[i],
            )
            for i, r in enumerate(rows)
        ]
        actor_stats = self.actor.update(upd, self.rng)
        t_upd = time.perf_counter() - t_upd0
        self.iteration += 1
        if self.stale is not None:
            self.stale.maybe_refresh(self.model, self.iteration)
        self.backend.sync_weights(self.model)
        full = self._pooled(ro)
        if self.arg is not None:
            self.arg.grow(full)
        t_end = time.perf_counter()
        m = rollout_metrics(full)
        m.update(shaping_metrics(self.dist.all_gather_object(shaping_arrays(shaping)), self.cfg.method))
        m.update(teacher.get("metrics", {}))
        m.update(actor_stats)
        if self.arg is not None:
            m.update(self.arg.metrics())
            if self.dist.active:  # the label ratios over all ranks' rows
                rea, prog = labels
                s_r, s_p, n = self.dist.sum_floats(
                    [float(rea.sum()), float(prog.sum()), rea.size], self.device
                )
                m.update({"arg/reasonable_ratio": s_r / max(n, 1.0), "arg/progress_ratio": s_p / max(n, 1.0)})
        n_train_tok = sum(len(r.prompt_ids) + len(r.response_ids) for r in full.rows)
        m.update(
            {
                "time/iteration_s": t_end - t_start,
                "time/rollout_s": t_roll - t_start,
                "time/old_logp_s": t_old - t_roll,
                "time/shape_s": t_shape,
                "time/update_s": t_upd,
                "perf/rollout_tokens_per_s": full.stats["gen_tokens"] / max(full.stats["gen_seconds"], 1e-9),
                "perf/train_tokens_per_s": n_train_tok * cfg.optim.epochs / max(t_upd, 1e-9),
                "perf/teacher_share": m.get("time/teacher_s", 0.0) / max(t_end - t_start, 1e-9),
            }
        )
        self._write_credit(ro, shaping)
        if self.recorder is not None:
            self.recorder.record(self.iteration, ro, batch, shaping, labels)
        self.last = (ro, shaping)
        return m

    def _old_logprobs(self, rows: list[Any]) -> list[np.ndarray] | None:
        """θ_old log-probs of every row, or None when nothing needs them before the update (the actor then uses
        its own detached forward pass: one mini-batch, one epoch, no teacher gap to compute)."""
        oc = self.cfg.optim
        if self.cfg.shaper.token_reweight is None and oc.mini_batches == 1 and oc.epochs == 1:
            return None
        return self.scorer.score(self.model, [r.prompt_ids for r in rows], [r.response_ids for r in rows])

    def _reference_logprobs(self, rows: list[Any]) -> list[np.ndarray] | None:
        if self.cfg.loss.kl_coef <= 0:
            return None
        ref_model = (self.reference or self.stale).model  # type: ignore[union-attr]
        return self.scorer.score(ref_model, [r.prompt_ids for r in rows], [r.response_ids for r in rows])

    def _write_credit(self, ro: Rollouts, sh: ShapingResult) -> None:
        k = self.cfg.run.credit_trajectories
        if k > 0 and self.dist.is_main:  # data-parallel: rank 0's groups
            payload = credit_payload(ro, sh, k, iteration=self.iteration, method=self.cfg.method)
            (self.out / "credit.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")

    # -- evaluation -----------------------------------------------------------------------------------------
    def evaluate(self, splits: Any = None) -> list[dict[str, Any]]:
        """Evaluate the current policy on ``splits`` (default: the configured eval splits)."""
        ec = self.cfg.eval
        results = []
        for split in splits if splits is not None else self.cfg.env.eval_splits:
            if split not in self._eval_collectors:
                kw = self.cfg.env.make_kwargs(split)
                if ec.max_steps > 0:
                    kw["max_steps"] = ec.max_steps
                self._eval_collectors[split] = self._collector(kw, 1)
            res = evaluate(
                self._eval_collectors[split],
                budgets=ec.budgets,
                limit=ec.limit,
                greedy=ec.greedy,
                parallel=ec.parallel,
                seed=self.cfg.run.seed,
                progress=self.cfg.run.progress,
            )
            res.update(split=split, iteration=self.iteration)
            results.append(res)
        self.evals += results
        return results

    @staticmethod
    def eval_metrics(results: list[dict[str, Any]]) -> dict[str, float]:
        return eval_metrics(results)

    # -- the loop -------------------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run the configured iterations (from where a resumed run stopped), evaluate, checkpoint, report."""
        rc, ec = self.cfg.run, self.cfg.eval
        main = self.dist.is_main
        bar = None
        if rc.progress and main:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=rc.iterations, initial=self.iteration, desc=f"{self.cfg.method} train", unit="it"
            )
        try:
            if ec.at_start and self.iteration == 0 and main:
                self.metrics.log(0, self.eval_metrics(self.evaluate()))
            while self.iteration < rc.iterations:
                m = self.step()
                last = self.iteration == rc.iterations
                if ((ec.every and self.iteration % ec.every == 0) or last) and main:
                    m.update(self.eval_metrics(self.evaluate()))
                self.metrics.log(self.iteration, m)
                if (rc.save_every and self.iteration % rc.save_every == 0) or last:
                    self.save()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        success=f"{m['rollout/success']:.2f}", valid=f"{m['rollout/valid_action_ratio']:.2f}"
                    )
        finally:
            if bar is not None:
                bar.close()
            self.metrics.close()
        report = None
        if rc.report and main:
            from stepgym.trainers.report import write_report

            report = write_report(
                self.out,
                config=self.cfg.to_dict(),
                method=self.cfg.method,
                evals=self.evals,
                wall_seconds=time.perf_counter() - self._t_created,
            )
        return {"iterations": self.iteration, "evals": self.evals, "report": report}

    # -- checkpoints ----------------------------------------------------------------------------------------
    def save(self, extra_parts: dict[str, Any] | None = None) -> Path | None:
        """Write a checkpoint of the current state (atomically; see :func:`stepgym.trainers.checkpoint.save_trainer`).
        Data-parallel: rank 0 writes (every rank holds the same state) and the others return None."""
        if not self.dist.is_main:
            return None
        return save_trainer(self, extra_parts)

    def close(self) -> None:
        self.collector.close()
        for c in self._eval_collectors.values():
            c.close()
        with contextlib.suppress(Exception):
            self.metrics.close()
        self.dist.close()


class _NoMetrics:
    """The metrics sink of a rank other than 0 (rank 0 alone writes metrics.jsonl and TensorBoard)."""

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        return None

    def close(self) -> None:
        return None
