"""Teacher rescoring: the sampled response tokens scored again under a privileged context (AHEAD, StepOPSD).

Only *scoring* happens here: batching the forward passes (:class:`Scorer`), keeping StepOPSD's stale snapshot
(:class:`StaleTeacher`), and running one batch (:class:`TeacherRescorer`, what ``GRPOTrainer.rescore`` calls). What
the teacher reads (the privileged text of a step, its fitting into ``max_context_tokens``, StepOPSD's target span,
the context of a step row) is :mod:`stepgym.steps.teacher_context`, the one module the TRL and verl adapters use too. The
gaps become advantages in the shapers (:func:`stepgym.shapers.ahead_delta`, :func:`stepgym.shapers.opsd_span_gaps`),
never here.

**AHEAD** (docs/shapers.md §4): teacher = θ_old (the rollout policy itself, before the update); all generated tokens
of the step are scored with the privileged text inside the user turn; δ = teacher − student log-prob, student =
θ_old on the normal prompt.

**StepOPSD** (docs/shapers.md §5.2, §5.6, §5.7): teacher = the stale reference policy (a snapshot refreshed every
``refresh_every`` updates; the initial weights for updates 1..10), or the live policy (``opsd_teacher="live"``);
the step's target span is scored after its trajectory's hindsight block (``GroupEnv``'s peer hindsight). Rows
without a block are scored too (c^T = c^S): with a stale teacher their Δ is staleness drift, which the paper's code
keeps (docs/shapers.md §8.26).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from stepgym.shapers.ahead import ahead_delta
from stepgym.shapers.stepopsd import opsd_span_gaps
from stepgym.shapers.tokens import TokenLayout
from stepgym.steps import teacher_context as tcx  # what the teacher reads: one module for every layout
from stepgym.text_format import TextFormat
from stepgym.trainers.samples import PromptEncoder, pack, response_logprobs, token_budget_batches

__all__ = ["Scorer", "StaleTeacher", "TeacherRescorer"]


class Scorer:
    """Batched log-prob scoring of ``(context, target)`` pairs under a model (no gradients).

    Items are sorted by length and cut into micro-batches of at most ``microbatch_tokens`` padded tokens.
    """

    def __init__(self, pad_id: int, *, microbatch_tokens: int = 16384, autocast_dtype: Any = None) -> None:
        self.pad_id = int(pad_id)
        self.microbatch_tokens = int(microbatch_tokens)
        self.autocast_dtype = autocast_dtype

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        return token_budget_batches(lengths, self.microbatch_tokens)

    def score(
        self, model: Any, contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        import torch

        if not contexts:
            return []
        device = next(model.parameters()).device
        lengths = [len(c) + len(t) for c, t in zip(contexts, targets, strict=True)]
        result: list[np.ndarray | None] = [None] * len(contexts)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for idx in self.batches(lengths):
                    batch = pack(
                        [contexts[i] for i in idx],
                        [targets[i] for i in idx],
                        pad_id=self.pad_id,
                        device=device,
                    )
                    if self.autocast_dtype is not None:
                        with torch.autocast(device.type, dtype=self.autocast_dtype):
                            logp, _ = response_logprobs(model, batch)
                    else:
                        logp, _ = response_logprobs(model, batch)
                    arr = logp.float().cpu().numpy()
                    for k, i in enumerate(idx):
                        result[i] = arr[k, : len(targets[i])].astype(np.float64)
        finally:
            model.train(was_training)
        return result  # type: ignore[return-value]


class StaleTeacher:
    """StepOPSD's stale reference policy (docs/shapers.md §5.7): a frozen copy refreshed after every ``every``-th update.

    The teacher used for update k (1-based) is the policy after update ``every·⌊(k−1)/every⌋`` — the initial
    weights for updates 1..every. Its weights and ``version`` (the update it was copied at) are checkpointed.
    """

    def __init__(self, model: Any, every: int = 10) -> None:
        if every < 1:
            raise ValueError(f"refresh_every must be >= 1, got {every}")
        self.every = int(every)
        self.model = self._copy(model)
        self.version = 0

    @staticmethod
    def _copy(model: Any) -> Any:
        snap = copy.deepcopy(model)
        snap.eval()
        for p in snap.parameters():
            p.requires_grad_(False)
        return snap

    def maybe_refresh(self, model: Any, completed_updates: int) -> bool:
        """After update ``completed_updates``: refresh when it is a multiple of ``every``."""
        if (
            completed_updates > 0
            and completed_updates % self.every == 0
            and completed_updates != self.version
        ):
            self.load_from(model)
            self.version = int(completed_updates)
            return True
        return False

    def load_from(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            src = dict(model.named_parameters())
            for name, p in self.model.named_parameters():
                p.copy_(src[name].detach())
            src_b = dict(model.named_buffers())
            for name, b in self.model.named_buffers():
                if name in src_b:
                    b.copy_(src_b[name])

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def load_state_dict(self, state: dict[str, Any], version: int) -> None:
        self.model.load_state_dict(state)
        self.version = int(version)


def timed(stats: tcx.TeacherStats) -> Any:
    """Context manager adding the elapsed wall time to ``stats.seconds``."""

    class _T:
        def __enter__(self) -> None:
            self.t = time.perf_counter()

        def __exit__(self, *exc: Any) -> None:
            stats.seconds += time.perf_counter() - self.t

    return _T()


class TeacherRescorer:
    """Teacher gaps of one batch for the configured token reweighting (AHEAD or StepOPSD), with their metrics.

    Args:
        cfg: the :class:`~stepgym.trainers.config.TrainConfig` (its ``shaper``, ``teacher`` and ``rollout``).
        scorer: the batched :class:`Scorer`. encoder: the trainer's :class:`PromptEncoder` (AHEAD re-renders
            prompts with the privileged text). fmt_name: the text format, by name or as the object (picks StepOPSD's
            span rule, :func:`stepgym.steps.teacher_context.span_rule`).
        analyzer: AHEAD's hint analyzer (``stepgym.wrappers.hints``). stale: StepOPSD's :class:`StaleTeacher`.
    """

    def __init__(
        self,
        cfg: Any,
        *,
        scorer: Scorer,
        encoder: PromptEncoder,
        fmt_name: str | TextFormat,
        analyzer: Any = None,
        stale: StaleTeacher | None = None,
    ) -> None:
        self.cfg = cfg
        self.scorer = scorer
        self.encoder = encoder
        self.fmt_name = fmt_name
        self.analyzer = analyzer
        self.stale = stale

    def budget(self) -> tcx.ContextBudget:
        """``teacher.max_context_tokens`` (default: the prompt + response budget) and ``teacher.min_pi_tokens``."""
        tc, rc = self.cfg.teacher, self.cfg.rollout
        most = tc.max_context_tokens or (rc.max_prompt_tokens + rc.max_response_tokens)
        return tcx.ContextBudget(most, tc.min_pi_tokens)

    def rescore(self, ro: Any, old: list[np.ndarray], model: Any, update_index: int) -> dict[str, Any]:
        """Teacher gaps for AHEAD / StepOPSD (``{}`` when the token stage is neither: a token stage of your own
        gets no gap from the bundled trainer). ``old`` are θ_old log-probs of every row, ``model`` the policy."""
        tr = self.cfg.shaper.token_reweight
        if tr not in ("ahead", "stepopsd"):
            return {}
        lam = self.cfg.shaper.mixing_lambda(update_index)
        stats = tcx.TeacherStats()
        with timed(stats):
            if tr == "ahead":
                if lam <= 0 and not self.cfg.teacher.score_after_decay:
                    return {"metrics": {"teacher/lambda": lam}}
                delta, extra = self.ahead_gaps(ro, old, model, stats)
                out: dict[str, Any] = {"delta": delta}
            else:
                delta, dmask, target, extra = self.opsd_gaps(ro, old, model, stats, lam)
                out = {"delta": delta, "delta_mask": dmask, "target": target}
        stats.extra = {**extra, "teacher/lambda": lam}
        out["metrics"] = stats.as_metrics()
        return out

    def ahead_gaps(
        self, ro: Any, old: list[np.ndarray], model: Any, stats: tcx.TeacherStats
    ) -> tuple[np.ndarray, dict[str, float]]:
        """AHEAD: θ_old rescored with the privileged text (feedback everywhere, hints on failed error steps)."""
        from stepgym.trainers.diagnostics import gap_stats

        texts = tcx.AheadTexts(ro.trajectories, self.analyzer)
        rows = ro.rows
        pis = [texts.text(r.traj, r.t) for r in rows]
        items = tcx.ahead_items(rows, pis, self.encoder, self.budget(), stats)
        t_lp = self.scorer.score(model, [it.context for it in items], [it.target for it in items])
        stats.items, stats.tokens = len(items), sum(len(it.target) for it in items)
        width = max(len(r.response_ids) for r in rows)
        delta = ahead_delta([it.row for it in items], t_lp, [old[it.row] for it in items], (len(rows), width))
        hinted = np.array([texts.hinted(r.traj, r.t) for r in rows], dtype=bool)
        return delta, gap_stats(delta, rows, hinted, "hinted")

    def opsd_gaps(
        self, ro: Any, old: list[np.ndarray], model: Any, stats: tcx.TeacherStats, lam: float
    ) -> tuple[Any, Any, TokenLayout, dict[str, float]]:
        """StepOPSD: each row's target span rescored after its trajectory's hindsight block (stale or live)."""
        from stepgym.trainers.diagnostics import gap_stats

        tc = self.cfg.teacher
        rows = ro.rows
        rule = tcx.span_rule(self.fmt_name, tc.span_mode)  # the format's declared span, unless overridden
        blocks = [ro.hindsight[r.traj] for r in rows]
        live = tc.opsd_teacher == "live"
        items, spans = tcx.opsd_items(
            rows, blocks, self.encoder.tokenizer, self.budget(), stats, span=rule, score_plain=not live
        )
        width = max(len(r.response_ids) for r in rows)
        target = TokenLayout.from_spans([[tuple(s) for s in sp] for sp in spans], width)
        if lam <= 0 and not tc.score_after_decay:
            return None, None, target, {}
        teacher_model = model if live else self.stale.model  # type: ignore[union-attr]
        t_lp = self.scorer.score(teacher_model, [it.context for it in items], [it.target for it in items])
        stats.items, stats.tokens = len(items), sum(len(it.target) for it in items)
        scored = {it.row: (it.start, lp) for it, lp in zip(items, t_lp, strict=True)}
        delta, dmask = opsd_span_gaps(spans, scored, old, (len(rows), width))
        with_block = np.array([bool(b) for b in blocks])
        return delta, dmask, target, gap_stats(delta, rows, with_block, "hindsight", mask=dmask)
