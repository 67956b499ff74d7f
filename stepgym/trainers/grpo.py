"""The bundled GRPO trainer: a short controller over roles.

One iteration (:meth:`GRPOTrainer.step`)::

    collect      N tasks × G rollouts through GroupEnv, one row per model turn       (collector.Collector)
    old log-probs  θ_old on every row's response tokens                              (teacher.Scorer)
    rescore      AHEAD / StepOPSD teacher contexts, batched                          (teacher)
    label        ProAS: ARG labels against the graph as it stands                    (arg_labeler.ArgLabeler)
    shape        the shapers' §0 pipeline → per-token advantages                      (advantages → shapers)
    update       clipped policy loss (+KL), gradient accumulation, AdamW             (actor.Actor → losses)
    after        stale-teacher refresh, ARG growth with verified successes, weight sync to the backend

No advantage maths happens here; every number that becomes an advantage is computed by
``stepgym.trainers.shapers``. The λ schedules (AHEAD 0.5 → 0 over 50, StepOPSD 0.2 → 0 over 50) are the shaper
config's, evaluated with ``update_index`` = completed iterations (verl's ``global_steps - 1``).

Departures from verl-agent worth knowing: the loss aggregation is exact over the mini-batch (see
:mod:`stepgym.trainers.actor`); old log-probs are recomputed by the trainer (never taken from the rollout engine),
so the ratio starts at 1 whichever backend sampled; one "update" in the schedules is one iteration (one batch),
however many optimizer steps ``optim.mini_batches`` splits it into.
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
from stepgym.trainers.backends import make_backend
from stepgym.trainers.checkpoint import CheckpointError, find_latest, read_state, save_checkpoint
from stepgym.trainers.collector import Collector, Rollouts
from stepgym.trainers.config import TrainConfig
from stepgym.trainers.diagnostics import credit_payload, gap_stats, rollout_metrics, shaping_metrics
from stepgym.trainers.evaluate import evaluate
from stepgym.trainers.formats import reply_renderer, resolve_format
from stepgym.trainers.metrics import MetricsLogger
from stepgym.trainers.samples import PromptEncoder
from stepgym.trainers.shapers import TokenLayout, dynamic_sampling_keep, scatter_span_deltas
from stepgym.trainers.teacher import Scorer, StaleTeacher, TeacherStats, ahead_items, opsd_items, timed

__all__ = ["GRPOTrainer", "resolve_device"]


def resolve_device(name: str) -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _precision(name: str, device: Any) -> tuple[str, Any]:
    """(weights dtype name, autocast dtype or None) for a ``ModelConfig.precision``."""
    import torch

    if name == "auto":
        name = "bf16-autocast" if device.type == "cuda" else "fp32"
    if name == "fp32":
        return "fp32", None
    if name == "bf16-autocast":
        return "fp32", torch.bfloat16
    if name == "bf16":
        return "bf16", None
    raise ValueError(f"unknown precision {name!r}")


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
        self.device = resolve_device(config.model.device)
        self.weights_dtype, self.autocast = _precision(config.model.precision, self.device)
        self.rng = np.random.default_rng(config.run.seed)
        self.fmt = resolve_format(config.env.id, config.env.text_format)
        self.history = None if config.env.history < 0 else config.env.history
        self.iteration = 0
        self.evals: list[dict[str, Any]] = []
        resume_from = self._resume_path()
        state = read_state(resume_from) if resume_from is not None else None
        self._build_model(resume_from)
        tok = self.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.encoder = PromptEncoder(
            tok, max_prompt_tokens=config.rollout.max_prompt_tokens, system=config.model.system_prompt
        )
        self.backend = backend if backend is not None else self._make_backend()
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
        )
        self.scorer = Scorer(
            self.pad_id, microbatch_tokens=config.teacher.microbatch_tokens, autocast_dtype=self.autocast
        )
        self._build_teachers()
        self.arg = self._build_arg()
        self._eval_collectors: dict[str, Collector] = {}
        if state is not None:
            self._load(resume_from, state)  # type: ignore[arg-type]
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
            if self.stale is not None:
                self.stale.load_from(self.model)
            if self.reference is not None:
                self.reference.load_from(self.model)
        self.metrics = MetricsLogger(
            self.out,
            tensorboard=config.run.tensorboard,
            resume_from=self.iteration if state is not None else None,
        )
        (self.out / "config.json").write_text(
            json.dumps(config.to_dict(), indent=1, default=str), encoding="utf-8"
        )

    # -- construction ---------------------------------------------------------------------------------------
    def _resume_path(self) -> Path | None:
        r = self.cfg.run.resume
        if r == "auto":
            return find_latest(self.ckpt_dir)
        if r:
            p = Path(r)
            if p.name == "checkpoints" or (p / "checkpoints").is_dir():
                p = find_latest(p if p.name == "checkpoints" else p / "checkpoints") or p
            return p
        if find_latest(self.ckpt_dir) is not None:
            raise CheckpointError(
                f"{self.out} already holds checkpoints: pass --run.resume auto to continue that run, or choose "
                "another --run.output-dir"
            )
        return None

    def _build_model(self, resume_from: Path | None) -> None:
        from stepgym.trainers.models import build_tiny_model, load_model

        mc = self.cfg.model
        tiny = dict(
            hidden_size=mc.tiny_hidden,
            num_layers=mc.tiny_layers,
            num_heads=mc.tiny_heads,
            num_kv_heads=max(1, mc.tiny_heads // 2),
            intermediate_size=mc.tiny_intermediate,
        )
        is_tiny = mc.name == "tiny" or mc.name.startswith("tiny:")
        if is_tiny and resume_from is not None and (resume_from / "tokenizer").is_dir():
            import transformers

            tokenizer = transformers.AutoTokenizer.from_pretrained(str(resume_from / "tokenizer"))
            shape = mc.name.split(":", 1)[1] if ":" in mc.name else ""
            model = build_tiny_model(tokenizer, shape=shape, seed=self.cfg.run.seed, **tiny)
            self.model_source = f"{mc.name} (tokenizer from {resume_from})"
        else:
            corpus: list[str] = []
            if is_tiny:
                from stepgym.trainers.warmup import env_corpus

                corpus = env_corpus(
                    self.cfg.env.id,
                    self.cfg.env.make_kwargs(self.cfg.env.train_split),
                    self.fmt,
                    history=self.history,
                    episodes=mc.tokenizer_corpus_episodes,
                    seed=self.cfg.run.seed,
                )
            lm = load_model(
                mc.name,
                corpus=corpus,
                tiny={**tiny, "vocab_size": mc.tiny_vocab},
                dtype=self.weights_dtype,
                seed=self.cfg.run.seed,
            )
            tokenizer, model, self.model_source = lm.tokenizer, lm.model, lm.source
        if self.weights_dtype == "bf16":
            import torch

            model = model.to(torch.bfloat16)
        model = model.to(self.device)
        if mc.lora_rank > 0:
            from stepgym import _deps

            peft = _deps.require("peft", "train", what="LoRA")
            lcfg = peft.LoraConfig(
                r=mc.lora_rank,
                lora_alpha=mc.lora_alpha,
                lora_dropout=mc.lora_dropout,
                target_modules="all-linear",
                task_type="CAUSAL_LM",
            )
            model = peft.get_peft_model(model, lcfg)
        if mc.gradient_checkpointing:  # transformers 5 renamed it; keep working on both names
            enable = (
                getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            )
            enable()
            if mc.lora_rank > 0:  # frozen embeddings: checkpointed blocks need an input that requires grad
                model.enable_input_require_grads()
        self.model, self.tokenizer = model, tokenizer

    def _make_backend(self) -> Any:
        rc = self.cfg.rollout
        if rc.backend == "scripted":
            return make_backend(
                "scripted",
                tokenizer=self.tokenizer,
                policy=rc.scripted_policy,
                render=reply_renderer(self.fmt),
            )
        if rc.backend == "vllm":
            if self.cfg.model.lora_rank > 0:
                raise ValueError("the vLLM backend syncs full weights; use --rollout.backend hf with LoRA")
            return make_backend(
                "vllm",
                model=self.model,
                tokenizer=self.tokenizer,
                max_new_tokens=rc.max_response_tokens,
                temperature=rc.temperature,
                top_p=rc.top_p,
                gpu_memory_utilization=rc.vllm_gpu_memory_utilization,
            )
        return make_backend(
            "hf",
            model=self.model,
            tokenizer=self.tokenizer,
            max_new_tokens=rc.max_response_tokens,
            temperature=rc.temperature,
            top_p=rc.top_p,
            batch_size=rc.generate_batch_size,
            autocast_dtype=self.autocast,
        )

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
        if self.cfg.run.progress:
            from tqdm.auto import tqdm

            bar = tqdm(desc=f"rollout it {self.iteration + 1}", unit="turn", leave=False)
        try:
            if not rc.dynamic_sampling:
                return self.collector.collect(self._sample_tasks(rc.n_tasks), seed_rng=self.rng, progress=bar)
            parts: list[Rollouts] = []
            kept = 0
            for attempt in range(rc.max_gen_batches):
                ro = self.collector.collect(self._sample_tasks(rc.n_tasks), seed_rng=self.rng, progress=bar)
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

    def _ahead_gaps(
        self, ro: Rollouts, old: list[np.ndarray], stats: TeacherStats
    ) -> tuple[Any, dict[str, float]]:
        from stepgym.wrappers.hints import ahead_privileged_text, analyze_many

        analyses = analyze_many(ro.trajectories, self.analyzer, failure_only=True)
        rows = ro.rows
        pis = [ahead_privileged_text(ro.trajectories[r.traj], r.t, analyses[r.traj].hints) for r in rows]
        items = ahead_items(
            rows,
            pis,
            self.encoder,
            max_context_tokens=self._context_budget(),
            min_pi_tokens=self.cfg.teacher.min_pi_tokens,
            stats=stats,
        )
        t_lp = self.scorer.score(self.model, [it.context for it in items], [it.target for it in items])
        stats.items, stats.tokens = len(items), sum(len(it.target) for it in items)
        width = max(len(r.response_ids) for r in rows)
        delta = np.zeros((len(rows), width))
        hinted = np.zeros(len(rows), dtype=bool)
        for it, lp in zip(items, t_lp, strict=True):
            delta[it.row, : len(lp)] = lp - old[it.row][: len(lp)]
            r = rows[it.row]
            hinted[it.row] = r.t in analyses[r.traj].hints
        extra = gap_stats(delta, rows, hinted, "hinted")
        return delta, extra

    def _opsd_gaps(
        self, ro: Rollouts, old: list[np.ndarray], stats: TeacherStats, lam: float
    ) -> tuple[Any, ...]:
        tc = self.cfg.teacher
        rows = ro.rows
        mode = (
            tc.span_mode
            if tc.span_mode != "auto"
            else ("clean_step_no_observation" if self.fmt.name == "qa" else "action_only")
        )
        blocks = [ro.hindsight[r.traj] for r in rows]
        live = tc.opsd_teacher == "live"
        items, spans = opsd_items(
            rows,
            blocks,
            self.tokenizer,
            span_mode=mode,
            max_context_tokens=self._context_budget(),
            min_pi_tokens=tc.min_pi_tokens,
            stats=stats,
            score_plain=not live,
        )
        width = max(len(r.response_ids) for r in rows)
        target = TokenLayout.from_spans([[tuple(s) for s in sp] for sp in spans], width)
        if lam <= 0 and not tc.score_after_decay:
            return None, None, target, {}
        teacher_model = self.model if live else self.stale.model  # type: ignore[union-attr]
        t_lp = self.scorer.score(teacher_model, [it.context for it in items], [it.target for it in items])
        stats.items, stats.tokens = len(items), sum(len(it.target) for it in items)
        got = {
            it.row: lp - old[it.row][it.start : it.start + len(lp)]
            for it, lp in zip(items, t_lp, strict=True)
        }
        per_row = [[got.get(b, np.zeros(sp[0][1] - sp[0][0]))] if sp else [] for b, sp in enumerate(spans)]
        delta, dmask = scatter_span_deltas(spans, per_row, (len(rows), width))
        with_block = np.array([bool(b) for b in blocks])
        return delta, dmask, target, gap_stats(delta, rows, with_block, "hindsight", mask=dmask)

    def _context_budget(self) -> int:
        tc, rc = self.cfg.teacher, self.cfg.rollout
        return tc.max_context_tokens or (rc.max_prompt_tokens + rc.max_response_tokens)

    def rescore(self, ro: Rollouts, old: list[np.ndarray]) -> dict[str, Any]:
        """Teacher gaps for AHEAD / StepOPSD (``{}`` when the shaper needs none)."""
        tr = self.cfg.shaper.token_reweight
        if tr is None:
            return {}
        lam = self.cfg.shaper.mixing_lambda(self.iteration)
        stats = TeacherStats()
        with timed(stats):
            if tr == "ahead":
                if lam <= 0 and not self.cfg.teacher.score_after_decay:
                    return {"metrics": {"teacher/lambda": lam}}
                delta, extra = self._ahead_gaps(ro, old, stats)
                out = {"delta": delta}
            else:
                delta, dmask, target, extra = self._opsd_gaps(ro, old, stats, lam)
                out = {"delta": delta, "delta_mask": dmask, "target": target}
        stats.extra = {**extra, "teacher/lambda": lam}
        out["metrics"] = stats.as_metrics()
        return out

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
        if self.arg is not None:
            self.arg.grow(ro)
        t_end = time.perf_counter()
        m = rollout_metrics(ro)
        m.update(shaping_metrics(shaping, self.cfg.method))
        m.update(teacher.get("metrics", {}))
        m.update(actor_stats)
        if self.arg is not None:
            m.update(self.arg.metrics())
        n_train_tok = sum(len(r.prompt_ids) + len(r.response_ids) for r in rows)
        m.update(
            {
                "time/iteration_s": t_end - t_start,
                "time/rollout_s": t_roll - t_start,
                "time/old_logp_s": t_old - t_roll,
                "time/shape_s": t_shape,
                "time/update_s": t_upd,
                "perf/rollout_tokens_per_s": ro.stats["gen_tokens"] / max(ro.stats["gen_seconds"], 1e-9),
                "perf/train_tokens_per_s": n_train_tok * cfg.optim.epochs / max(t_upd, 1e-9),
                "perf/teacher_share": m.get("time/teacher_s", 0.0) / max(t_end - t_start, 1e-9),
            }
        )
        self._write_credit(ro, shaping)
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
        if k > 0:
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
        m: dict[str, float] = {}
        for r in results:
            m[f"eval/{r['split']}/success"] = r["success"]
            m[f"eval/{r['split']}/valid_action_ratio"] = r["valid_action_ratio"]
            for b, v in r["within"].items():
                m[f"eval/{r['split']}/within_{b}"] = v
            for tt, row in r["per_type"].items():
                m[f"eval/{r['split']}/type/{tt}"] = row["success"]
        if results:
            m["eval/success"] = float(np.mean([r["success"] for r in results]))
        return m

    # -- the loop -------------------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run the configured iterations (from where a resumed run stopped), evaluate, checkpoint, report."""
        rc, ec = self.cfg.run, self.cfg.eval
        bar = None
        if rc.progress:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=rc.iterations, initial=self.iteration, desc=f"{self.cfg.method} train", unit="it"
            )
        try:
            if ec.at_start and self.iteration == 0:
                self.metrics.log(0, self.eval_metrics(self.evaluate()))
            while self.iteration < rc.iterations:
                m = self.step()
                last = self.iteration == rc.iterations
                if (ec.every and self.iteration % ec.every == 0) or last:
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
        if rc.report:
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
    def save(self, extra_parts: dict[str, Any] | None = None) -> Path:
        """Write a checkpoint of the current state (atomically; see :mod:`stepgym.trainers.checkpoint`)."""
        import torch
        from safetensors.torch import save_model

        def rng_part(d: Path) -> None:
            (d / "rng.json").write_text(json.dumps(self.rng.bit_generator.state), encoding="utf-8")
            states = {"cpu": torch.get_rng_state()}
            if torch.cuda.is_available():
                states["cuda"] = torch.cuda.get_rng_state_all()
            torch.save(states, d / "torch_rng.pt")

        parts: dict[str, Any] = {
            "model": lambda d: save_model(self.model, str(d / "model.safetensors")),
            "optimizer": lambda d: torch.save(
                {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                d / "optimizer.pt",
            ),
            "rng": rng_part,
            "tokenizer": lambda d: self.tokenizer.save_pretrained(str(d / "tokenizer")),
        }
        if self.stale is not None:
            parts["teacher"] = lambda d: save_model(self.stale.model, str(d / "teacher.safetensors"))
        if self.reference is not None:
            parts["reference"] = lambda d: save_model(self.reference.model, str(d / "reference.safetensors"))
        if self.arg is not None:
            parts["arg"] = lambda d: self.arg.save(d / "arg")
        parts.update(extra_parts or {})
        state = {
            "iteration": self.iteration,
            "method": self.cfg.method,
            "model_source": self.model_source,
            "stale_version": self.stale.version if self.stale is not None else None,
            "evals": self.evals,
            "config": self.cfg.to_dict(),
        }
        return save_checkpoint(
            self.ckpt_dir, self.iteration, state, parts, keep=self.cfg.run.keep_checkpoints
        )

    def _load(self, path: Path, state: dict[str, Any]) -> None:
        import torch
        from safetensors.torch import load_model

        load_model(self.model, str(path / "model.safetensors"), device=str(self.device))
        opt = torch.load(path / "optimizer.pt", map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(opt["optimizer"])
        self.scheduler.load_state_dict(opt["scheduler"])
        self.rng.bit_generator.state = json.loads((path / "rng.json").read_text(encoding="utf-8"))
        rs = torch.load(path / "torch_rng.pt", weights_only=True)
        torch.set_rng_state(rs["cpu"])
        if "cuda" in rs and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rs["cuda"])
        if self.stale is not None:
            if not (path / "teacher.safetensors").is_file():
                raise CheckpointError(f"{path} has no stale teacher but this config needs one")
            load_model(self.stale.model, str(path / "teacher.safetensors"), device=str(self.device))
            self.stale.version = int(state.get("stale_version") or 0)
        if self.reference is not None:
            load_model(self.reference.model, str(path / "reference.safetensors"), device=str(self.device))
        if self.arg is not None:
            self.arg.load(path / "arg")
        self.iteration = int(state["iteration"])
        self.evals = list(state.get("evals") or [])
        self.backend.sync_weights(self.model)

    def close(self) -> None:
        self.collector.close()
        for c in self._eval_collectors.values():
            c.close()
        with contextlib.suppress(Exception):
            self.metrics.close()
