# Over 400 lines: the trainer's controller, one short method per phase of an iteration; splitting it would scatter the loop.
"""The bundled GRPO trainer: a short controller over roles.

One iteration (:meth:`GRPOTrainer.step`)::

    collect      N tasks × G rollouts through GroupEnv, one row per model turn       (collector.Collector)
    old log-probs  θ_old on every row's response tokens                              (teacher.Scorer)
    rescore      AHEAD / StepOPSD teacher contexts, batched                          (teacher)
    label        ProAS: ARG labels against the graph as it stands                    (arg_labeler.ArgLabeler)
    shape        the shapers' §0 pipeline → per-token advantages                      (advantages → shapers)
    update       clipped policy loss (+KL), gradient accumulation, AdamW             (actor.Actor → losses)
    after        stale-teacher refresh, ARG growth with verified successes, weight sync to the backend

Building the roles is :mod:`stepgym.trainers.builder`'s job (policy, backend, optimizer, teachers, ARG, warm-up,
outputs), checkpoints :mod:`stepgym.trainers.checkpoint`'s. No advantage maths happens here; every number that
becomes an advantage is computed by ``stepgym.shapers``. The λ schedules (AHEAD 0.5 → 0 over 50, StepOPSD
0.2 → 0 over 50) are the shaper config's, evaluated with ``update_index`` = completed iterations (verl's
``global_steps - 1``).

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

from stepgym.envs import env_has_splits
from stepgym.errors import AbortRateError
from stepgym.shapers import dynamic_sampling_keep
from stepgym.steps.advantages import RowSettings, Shaped, TokenGaps, shape_rows
from stepgym.steps.batch import StepBatchOptions
from stepgym.steps.row import TRAINER_LAYOUT, trainer_rows
from stepgym.trainers.actor import UpdateRow
from stepgym.trainers.backends import backend_from_config
from stepgym.trainers.builder import (
    build_actor,
    build_arg,
    build_scoring,
    load_policy,
    make_collector,
    open_outputs,
    rank_device,
    warm_up,
)
from stepgym.trainers.checkpoint import load_trainer, read_state, resume_path, save_trainer
from stepgym.trainers.collector import Collector, Rollouts, draw_tasks
from stepgym.trainers.config import TrainConfig
from stepgym.trainers.diagnostics import credit_payload, rollout_metrics, shaping_arrays, shaping_metrics
from stepgym.trainers.distributed import context_from_env, group_shard, resolve_world_size
from stepgym.trainers.evaluate import SEEDED_EVAL, eval_metrics, evaluate_policy
from stepgym.trainers.metrics import timing_metrics, world_metrics
from stepgym.trainers.models import precision
from stepgym.trainers.phases import phase
from stepgym.trainers.samples import PromptEncoder
from stepgym.wrappers.text import resolve_format

__all__ = ["GRPOTrainer"]


class GRPOTrainer:
    """Build every role from a :class:`TrainConfig`, then :meth:`train` (or :meth:`step` one iteration at a time).

    ``backend`` overrides the configured rollout backend (any :class:`~stepgym.trainers.backends.RolloutBackend`).
    With ``config.run.resume`` set, everything is restored from the checkpoint (the format warm-up is skipped).
    """

    def __init__(self, config: TrainConfig, *, backend: Any = None) -> None:
        import torch

        self._t_created = time.perf_counter()
        if config.run.threads > 0:
            torch.set_num_threads(config.run.threads)
        self.dist = context_from_env(config.model.device)
        self.cfg = config = resolve_world_size(config, self.dist)
        self.out = Path(config.run.output_dir)
        self.ckpt_dir = self.out / "checkpoints"
        self.device = rank_device(config.model.device, self.dist)
        self.weights_dtype, self.autocast = precision(config.model.precision, self.device)
        self.rng = np.random.default_rng(config.run.seed)
        # the env id, its options and the training split are checked first: a refusal is one line, before any log
        train_kwargs = config.env.make_kwargs(config.env.train_split)
        self.fmt = resolve_format(config.env.id, config.env.text_format)
        #: the splits evaluated: the configured ones, or one pass named "seeded" for an env without splits
        #: (its evaluation tasks are drawn by seed, :func:`~stepgym.trainers.evaluate.evaluate_policy`)
        self.eval_splits: tuple[str, ...] = (
            tuple(config.env.eval_splits) if env_has_splits(config.env.id) else (SEEDED_EVAL,)
        )
        for split in self.eval_splits:  # a misspelled evaluation split is refused now, not after training
            if split != SEEDED_EVAL:
                config.env.make_kwargs(split, config.eval.max_steps)
        self.history = None if config.env.history < 0 else config.env.history
        self.iteration = 0
        self.evals: list[dict[str, Any]] = []
        #: aborted episodes per cause over the whole run, episodes included (checkpointed: a resume goes on counting)
        self.abort_totals: dict[str, int] = {}
        resume_from = resume_path(config.run.resume, self.ckpt_dir)
        #: the checkpoint this run resumed from (None: a fresh run); outputs are cut back to its iteration
        self.resumed_from = resume_from
        state = read_state(resume_from) if resume_from is not None else None
        with phase(
            "model (tiny: tokenizer corpus of random episodes first)"
            if config.model.name.startswith("tiny")
            else "model"
        ):
            self.model, self.tokenizer, self.model_source = load_policy(
                config,
                resume_from,
                self.dist,
                fmt=self.fmt,
                history=self.history,
                weights_dtype=self.weights_dtype,
                device=self.device,
            )
        tok = self.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.encoder = PromptEncoder(
            tok, max_prompt_tokens=config.rollout.max_prompt_tokens, system=config.model.system_prompt
        )
        if backend is None:
            backend = backend_from_config(
                config, model=self.model, tokenizer=tok, autocast_dtype=self.autocast
            )
        self.backend = backend
        self.collector = self._collector(train_kwargs, config.rollout.group_size)
        self.train_task_ids = self.collector.task_ids()
        self.optimizer, self.scheduler, self.actor = build_actor(
            config, self.model, self.dist, pad_id=self.pad_id, autocast=self.autocast
        )
        self.scorer, self.stale, self.reference, self.analyzer, self.rescorer = build_scoring(
            config, self.model, pad_id=self.pad_id, autocast=self.autocast, encoder=self.encoder, fmt=self.fmt
        )
        self.arg = build_arg(config)
        self._eval_collectors: dict[str, Collector] = {}
        if state is not None:
            load_trainer(self, resume_from, state)  # type: ignore[arg-type]
        elif config.warmup.steps > 0:
            with phase(f"format warm-up ({config.warmup.steps} SFT steps)"):
                self.warmup_stats = warm_up(self)
        self.metrics = open_outputs(
            config, self.out, self.dist, resume_iteration=self.iteration if state is not None else None
        )
        from stepgym.trainers.recorder import TrainerRecorder  # episodes.jsonl.gz for `stepgym view`

        # Rank 0 records its share of each batch (under torchrun the other ranks' groups are not gathered).
        self.recorder = TrainerRecorder.create(self) if self.dist.is_main else None

    # -- construction ---------------------------------------------------------------------------------------
    def _collector(self, kwargs: dict[str, Any], group_size: int) -> Collector:
        return make_collector(
            self.cfg,
            kwargs,
            group_size,
            fmt=self.fmt,
            history=self.history,
            encoder=self.encoder,
            backend=self.backend,
        )

    # -- one iteration --------------------------------------------------------------------------------------
    def _sample_tasks(self, n: int) -> list[tuple[str | None, int]]:
        return draw_tasks(self.train_task_ids, n, self.rng)

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
                    aborted = [t.aborted for t in ro.trajectories]  # judged on finished episodes only
                    keep = dynamic_sampling_keep(
                        rewards, ro.traj_group, keep_singletons=False, aborted=aborted
                    )
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

    def _pooled(self, ro: Rollouts) -> tuple[Rollouts, list[int]]:
        """All ranks' rollouts as one batch, in rank order (the global batch; ``ro`` itself when single), and each
        rank's number of rows."""
        if not self.dist.active:
            return ro, [len(ro.rows)]
        parts = self.dist.all_gather_object(ro)
        return Rollouts.concat(parts), [len(p.rows) for p in parts]

    def rescore(self, ro: Rollouts, old: list[np.ndarray]) -> dict[str, Any]:
        """Teacher gaps for AHEAD / StepOPSD (``{}`` when the shaper needs none): :class:`TeacherRescorer`."""
        return self.rescorer.rescore(ro, old, self.model, self.iteration)

    def step(self) -> dict[str, float]:
        """One iteration; returns its metrics (also logged)."""
        t = {"start": time.perf_counter()}
        where = f"iteration {self.iteration + 1}/{self.cfg.run.iterations}"
        with phase("rollout", where):
            ro = self.collect()
        t["rollout"] = time.perf_counter()
        self._check_aborts(ro)
        rows = ro.rows
        with phase("scoring", where):
            old = self._old_logprobs(rows)
            t["old_logp"] = time.perf_counter()
            teacher = self.rescore(ro, old)
        labels = self.arg.label(ro) if self.arg is not None else (None, None)
        t_shape0 = time.perf_counter()
        with phase("shaping", where):
            shaping = shape_rows(  # what the records do not hold: the ARG's labels, the teacher's gaps
                trainer_rows(rows, self.pad_id, labels), self.row_settings(), teacher_gaps(teacher)
            )
        batch = shaping.batch
        t["shape"] = time.perf_counter() - t_shape0
        ref = self._reference_logprobs(rows)
        t_upd0 = time.perf_counter()
        upd = [  # an aborted episode's rows leave the loss (docs/failures.md)
            UpdateRow(
                r.prompt_ids,
                r.response_ids,
                None if old is None else old[i],
                shaping.row_advantages(i),
                None if ref is None else ref[i],
            )
            for i, r in enumerate(rows)
            if not r.aborted
        ]
        with phase("update", where):
            actor_stats = self.actor.update(upd, self.rng) if upd else {}
        t["update"] = time.perf_counter() - t_upd0
        self.iteration += 1
        if self.stale is not None:
            self.stale.maybe_refresh(self.model, self.iteration)
        self.backend.sync_weights(self.model)
        full, rank_rows = self._pooled(ro)
        if self.arg is not None:
            self.arg.grow(full)
        t["end"] = time.perf_counter()
        m = self._metrics(full, shaping, {**teacher.get("metrics", {}), **actor_stats}, labels, rank_rows, t)
        self._write_credit(ro, shaping)
        if self.recorder is not None:
            self.recorder.record(self.iteration, ro, batch, shaping, labels)
        self.last = (ro, shaping)
        return m

    def row_settings(self) -> RowSettings:
        """How this trainer's rows are credited: one token row per step, ``success`` from ``won``, the env config's
        reward scale, validity rule and state keying, the iteration as the schedules' update index, and plain GRPO
        on the same batch for the metrics."""
        env = self.cfg.env
        options = StepBatchOptions(env.reward_scale, env.invalid_rule, env.anchor, **TRAINER_LAYOUT)  # type: ignore[arg-type]
        return RowSettings(self.cfg.shaper, options, update_index=self.iteration, grpo_reference=True)

    def _check_aborts(self, ro: Rollouts) -> None:
        """Count the batch's aborted episodes (over all ranks) and stop the run, before this batch updates anything
        or is checkpointed, when their share is above ``rollout.max_abort_rate`` (one line naming the causes)."""
        from stepgym.schema import ABORT_CAUSES

        counts = ro.abort_counts()
        local = [float(len(ro.trajectories))] + [float(counts.get(c, 0)) for c in ABORT_CAUSES]
        total = self.dist.sum_floats(local, self.device) if self.dist.active else local
        episodes, per_cause = (
            int(total[0]),
            {c: int(n) for c, n in zip(ABORT_CAUSES, total[1:], strict=True) if n},
        )
        self.abort_totals["episodes"] = self.abort_totals.get("episodes", 0) + episodes
        for c, n in per_cause.items():
            self.abort_totals[c] = self.abort_totals.get(c, 0) + n
        aborted = sum(per_cause.values())
        limit = self.cfg.rollout.max_abort_rate
        if episodes and aborted / episodes > limit:
            causes = ", ".join(f"{c} {n}" for c, n in sorted(per_cause.items(), key=lambda x: -x[1]))
            raise AbortRateError(
                f"iteration {self.iteration + 1}: {aborted} of {episodes} episodes aborted "
                f"({aborted / episodes:.0%} > rollout.max_abort_rate {limit:.0%}; {causes}); stopped before this "
                "batch updated the policy or was checkpointed. Fix the failing service or raise rollout.max_abort_rate"
            )

    def _metrics(
        self, full: Rollouts, shaping: Shaped, stats: dict, labels: tuple, rank_rows: list, t: dict
    ) -> dict[str, float]:
        """The iteration's metrics: rollouts, advantages, teachers and actor (``stats``), ARG (over all ranks),
        times and rates, and the data parallelism (``dist/world_size``, each rank's groups and rows)."""
        m = rollout_metrics(full)
        ab = shaping.shaped.aborts
        m["rollout/abort_zeroed_groups"] = float(ab.zeroed_groups)
        tot = self.abort_totals
        m["rollout/abort_rate_total"] = sum(v for k, v in tot.items() if k != "episodes") / max(
            tot.get("episodes", 0), 1
        )
        m.update(shaping_metrics(self.dist.all_gather_object(shaping_arrays(shaping)), self.cfg.method))
        m.update(stats)
        if self.arg is not None:
            m.update(self.arg.metrics())
            if self.dist.active:  # the label ratios over all ranks' rows
                rea, prog = labels
                s_r, s_p, n = self.dist.sum_floats(
                    [float(rea.sum()), float(prog.sum()), rea.size], self.device
                )
                m.update({"arg/reasonable_ratio": s_r / max(n, 1.0), "arg/progress_ratio": s_p / max(n, 1.0)})
        m.update(
            timing_metrics(t, full, epochs=self.cfg.optim.epochs, teacher_s=m.get("time/teacher_s", 0.0))
        )
        m.update(world_metrics(self.dist.world, self.cfg.rollout.n_tasks, rank_rows))
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

    def _write_credit(self, ro: Rollouts, sh: Shaped) -> None:
        k = self.cfg.run.credit_trajectories
        if k > 0 and self.dist.is_main:  # data-parallel: rank 0's groups
            payload = credit_payload(ro, sh, k, iteration=self.iteration, method=self.cfg.method)
            (self.out / "credit.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")

    # -- evaluation -----------------------------------------------------------------------------------------
    def evaluate(self, splits: Any = None) -> list[dict[str, Any]]:
        """Evaluate the current policy on ``splits`` (default: the configured eval splits)."""
        ec = self.cfg.eval
        results = []
        for split in splits if splits is not None else self.eval_splits:
            if split not in self._eval_collectors:
                self._eval_collectors[split] = self._collector(
                    self.cfg.env.make_kwargs(split, ec.max_steps), 1
                )
            with phase(f"eval {split}", f"iteration {self.iteration}" if self.iteration else ""):
                res = evaluate_policy(
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


def teacher_gaps(teacher: dict[str, Any]) -> TokenGaps | None:
    """The rescorer's output (``{}`` when the shaper needs no teacher) as :func:`shape_rows`' gaps."""
    if not teacher:
        return None
    return TokenGaps(teacher.get("delta"), teacher.get("delta_mask"), teacher.get("target"))
