"""``TeacherGaps``: the AHEAD / StepOPSD teacher rescoring for :class:`StepGRPOTrainer`, its contexts built by
:mod:`stepgym.steps.teacher_context` (the module the bundled trainer and verl's trainer use too)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from stepgym import _deps
from stepgym.shapers import StepBatch
from stepgym.steps.teacher_context import (
    ContextBudget,
    TeacherContexts,
    TeacherStats,
    ahead_gaps,
    opsd_gaps,
    peer_blocks,
    span_rule,
)

_deps.require("trl", "trl", what="the TRL integration")


from stepgym.integrations.trl._common import gather_all  # noqa: E402

TokenGapFn = Callable[[Any, list[dict[str, Any]], dict[str, Any], StepBatch], Mapping[str, Any]]


class TeacherGaps:
    """The teacher rescoring AHEAD and StepOPSD need, for :class:`StepGRPOTrainer` (its default ``token_gaps``).

    The same teachers and contexts as the bundled trainer (:mod:`stepgym.steps.teacher_context`), on TRL's layout of
    one token row per episode (prompt, then the model's replies between the env's turns):

    * AHEAD: teacher = the policy before the update (θ_old, the trainer's model when the batch is scored); each
      reply is scored again with the privileged text (the env's feedback to it, plus the oracle analyzer's
      corrective hint on the error steps of failed episodes) inserted at the end of the user turn it answers,
      before the template's end-of-turn and assistant header. δ = teacher − student on every reply token.
    * StepOPSD: teacher = a stale snapshot (:class:`~stepgym.trainers.teacher.StaleTeacher`, refreshed every
      ``refresh_every`` updates); each reply's target span (its ``<action>…</action>`` tag; the whole reply for
      Search-QA) is scored after ``prompt ⊕ earlier turns ⊕ reply before the span ⊕ hindsight block`` (the first
      successful peer of the group, :func:`stepgym.hindsight.peer_hindsight`). Δ on the target spans.

    The privileged text is cut (middle first) or dropped to fit ``max_context_tokens`` (default: the prompt plus
    TRL's ``max_completion_length``), as in the bundled trainer. ``last_metrics`` holds the teacher's counters.
    """

    def __init__(
        self,
        *,
        refresh_every: int = 10,
        max_context_tokens: int | None = None,
        min_pi_tokens: int = 32,
        microbatch_tokens: int = 16384,
        analyzer: Any = None,
    ) -> None:
        self.refresh_every = int(refresh_every)
        self.max_context_tokens = max_context_tokens
        self.min_pi_tokens = int(min_pi_tokens)
        self.microbatch_tokens = int(microbatch_tokens)
        self.analyzer = analyzer
        self.stale: Any = None
        self.last_metrics: dict[str, float] = {}

    def __call__(
        self, trainer: Any, inputs: list[dict[str, Any]], outputs: dict[str, Any], batch: StepBatch
    ) -> dict[str, Any]:
        from stepgym.trainers.teacher import Scorer, StaleTeacher

        kind = trainer.shape_config.token_reweight
        if kind not in ("ahead", "stepopsd"):
            raise ValueError(f"TeacherGaps scores AHEAD and StepOPSD only, not token_reweight={kind!r}")
        lam = trainer.shape_config.mixing_lambda(int(trainer.state.global_step))
        if lam <= 0 and kind == "ahead":
            return {}
        tok = trainer.processing_class
        rows = _token_rows(outputs)
        if "stepgym_trajectory" not in inputs[0]:
            raise ValueError("TeacherGaps needs GroupRollout's stepgym_trajectory records")
        trajs = [x["stepgym_trajectory"] for x in inputs]
        steps = [x["stepgym_steps"] for x in inputs]
        width = int(outputs["completion_ids"].shape[1])
        budget = self.max_context_tokens or (
            max(len(p) for p, _ in rows) + int(trainer.max_completion_length or width)
        )
        scorer = Scorer(tok.pad_token_id, microbatch_tokens=self.microbatch_tokens)
        model = trainer.model
        student = scorer.score(model, [p for p, _ in rows], [c for _, c in rows]) if lam > 0 else None
        stats = TeacherStats()
        ctx = TeacherContexts(
            prompts=[p for p, _ in rows],
            responses=[c for _, c in rows],
            steps=[list(r) for r in steps],
            trajectories=list(trajs),
            groups=[int(r[0]["group"]) for r in steps],
            old_log_probs=_student_grid(student, len(rows), width),
            budget=ContextBudget(budget, self.min_pi_tokens),
        )
        if kind == "ahead":
            delta = ahead_gaps(ctx, tok, lambda c, t: scorer.score(model, c, t), stats, self.analyzer)
            out: dict[str, Any] = {"delta": delta}
        else:
            if self.stale is None:
                self.stale = StaleTeacher(model, self.refresh_every)
            self.stale.maybe_refresh(model, int(trainer.state.global_step))
            teacher = self.stale.model
            delta, mask, target = opsd_gaps(
                ctx,
                tok,
                None if student is None else (lambda c, t: scorer.score(teacher, c, t)),
                stats,
                span=span_rule(getattr(trainer.rollout_func, "fmt", None)),
                blocks=self._hindsight_blocks(trainer, ctx.trajectories, ctx.groups),
            )
            out = (
                {"target": target}
                if delta is None
                else {"delta": delta, "delta_mask": mask, "target": target}
            )
        self.last_metrics = {**stats.as_metrics(), "teacher/lambda": lam}
        return out

    @staticmethod
    def _hindsight_blocks(trainer: Any, trajs: list[Any], groups: list[int]) -> list[str | None]:
        """Each local row's hindsight block from its group's first successful peer; peers on other processes
        count (every process's trajectories are gathered, in global row order)."""
        parts = gather_all(trainer, (trajs, groups))
        all_trajs = [t for p in parts for t in p[0]]
        all_groups = [g for p in parts for g in p[1]]
        offset = int(trainer.accelerator.process_index) * len(trajs)
        return peer_blocks(all_trajs, all_groups)[offset : offset + len(trajs)]


def _student_grid(student: list[np.ndarray] | None, n_rows: int, width: int) -> np.ndarray:
    """The student's per-completion log-probs as a (B, width) grid (NaN past a completion's end; zeros when λ = 0
    leaves the student unscored: no gap is taken then)."""
    grid = np.full((n_rows, width), np.nan if student is not None else 0.0)
    for b, lp in enumerate(student or []):
        lp = np.asarray(lp, dtype=np.float64).ravel()[:width]
        grid[b, : len(lp)] = lp
    return grid


def _token_rows(outputs: Mapping[str, Any]) -> list[tuple[list[int], list[int]]]:
    """Each completion's (prompt ids without padding, completion ids without padding) from TRL's batch."""
    rows = []
    for p, pm, c, cm in zip(
        outputs["prompt_ids"].tolist(),
        outputs["prompt_mask"].tolist(),
        outputs["completion_ids"].tolist(),
        outputs["completion_mask"].tolist(),
        strict=True,
    ):
        rows.append(([t for t, m in zip(p, pm, strict=True) if m], c[: int(sum(cm))]))
    return rows
