"""Teacher rescoring: the sampled response tokens scored again under a privileged context (AHEAD, StepOPSD).

Only *scoring* happens here — building the privileged contexts, batching the forward passes, keeping the stale
snapshot. The gaps become advantages in the shapers (``stepgym.shapers``), never here.

**AHEAD** (docs/shapers.md §4): teacher = θ_old (the rollout policy itself, before the update), context = the
step's prompt with privileged information appended *inside* the user turn (docs/shapers.md §8.18): the env's feedback to the
action on every step, plus the corrective hint on the error steps of failed trajectories
(``stepgym.wrappers.hints.ahead_privileged_text``; hints from the oracle analyzer, failure-only). All generated
tokens of the step are scored; δ = teacher − student log-prob, student = θ_old on the normal prompt.

**StepOPSD** (docs/shapers.md §5.2, §5.6, §5.7): teacher = the stale reference policy (a snapshot refreshed every
``refresh_every`` updates; the initial weights for updates 1..10), target = the step's span (``action_only``: the
``<action>…</action>`` tag with its tags, ALFWorld; ``clean_step_no_observation``: the whole turn, QA), context =
``prompt ⊕ response tokens before the span ⊕ hindsight block ⊕ span`` — the first successful peer's trajectory
(``GroupEnv``'s peer hindsight) inserted right before the step's tokens. Rows without a block are scored too
(c^T = c^S): with a stale teacher their Δ is staleness drift, which the paper's code keeps (docs/shapers.md §8.26).

**Truncation policy** (privileged prompt longer than ``max_context_tokens``, default prompt + response budget):
the student context and the target are never cut (they are exactly what generated the tokens); the privileged
text is cut to the room left, keeping its first quarter and its last three quarters (a peer trajectory's start
and its winning end, with its closing tags; the feedback sentence and the hint); when less than ``min_pi_tokens``
remain, the privileged text is dropped and the row is scored with the student context. Both events are counted
(``teacher/pi_truncated``, ``teacher/pi_dropped``).

:class:`TeacherRescorer` runs all of it for one batch (what ``GRPOTrainer.rescore`` calls); the gaps δ / Δ are
formed by :func:`stepgym.shapers.ahead_delta` and :func:`stepgym.shapers.opsd_span_gaps`.

Span token positions use the row's *actual* token ids: the token count of a text prefix is the fewest leading
tokens whose decoding covers it (binary search over ``decode(ids[:k])``), instead of re-tokenising the prefix as
the Search-R1 code does (exact where that is approximate; the spans are otherwise those of docs/shapers.md §5.1).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepgym.shapers.ahead import ahead_delta
from stepgym.shapers.stepopsd import opsd_span_gaps
from stepgym.shapers.stepopsd_text import structural_target_span
from stepgym.shapers.tokens import TokenLayout
from stepgym.text_format import TextFormat
from stepgym.trainers.samples import (
    PromptEncoder,
    StepRow,
    pack,
    response_logprobs,
    token_budget_batches,
    truncate_middle,
)

__all__ = [
    "ScoreItem",
    "Scorer",
    "StaleTeacher",
    "TeacherRescorer",
    "TeacherStats",
    "ahead_items",
    "fit_privileged",
    "opsd_items",
    "prefix_token_counter",
    "span_mode_for",
]


@dataclass
class ScoreItem:
    """Score ``target`` tokens after ``context``; the result lands on ``row``'s response columns ``start…``."""

    row: int
    context: list[int]
    target: list[int]
    start: int = 0
    privileged: bool = False


@dataclass
class TeacherStats:
    items: int = 0
    privileged: int = 0
    pi_truncated: int = 0
    pi_dropped: int = 0
    tokens: int = 0
    seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, float]:
        out = {
            "teacher/items": float(self.items),
            "teacher/privileged_rows": float(self.privileged),
            "teacher/pi_truncated": float(self.pi_truncated),
            "teacher/pi_dropped": float(self.pi_dropped),
            "teacher/tokens": float(self.tokens),
            "time/teacher_s": self.seconds,
        }
        out.update(self.extra)
        return out


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


def prefix_token_counter(tokenizer: Any, ids: Sequence[int]) -> Callable[[str], int]:
    """``count(prefix)`` = the fewest leading tokens of ``ids`` whose decoded text covers ``prefix``: the smallest
    k with ``len(decode(ids[:k])) >= len(prefix)`` (binary search; ``len(ids)`` if none does).

    Used to map a character span of the decoded response onto the row's real tokens: a token straddling the span
    start is left out of the span, one straddling its end is kept, and zero-width tokens after the end (EOS) are
    not part of it.
    """
    ids = list(ids)
    cache: dict[int, int] = {}

    def dec_len(k: int) -> int:
        if k not in cache:
            cache[k] = len(tokenizer.decode(ids[:k], skip_special_tokens=True))
        return cache[k]

    def count(prefix: str) -> int:
        n = len(prefix)
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if dec_len(mid) >= n:
                hi = mid
            else:
                lo = mid + 1
        return lo

    return count


def span_mode_for(fmt: str | TextFormat | None) -> str:
    """StepOPSD's span mode for a text format (``span_mode="auto"``): ``action_only`` (the ``<action>`` tag, the
    paper's ALFWorld choice) for a format whose replies carry an ``<action>`` tag; else the whole reply
    (``clean_step_no_observation``, the paper's Search-QA choice). So the Search-QA formats (``qa``, ``qa-lenient``,
    ``qa-stepgym``) and an env's own format without the tag get the whole reply as their target, not no target at
    all (an ``action_only`` span finds nothing in a reply without ``<action>``)."""
    from stepgym.trainers.formats import has_action_tag
    from stepgym.wrappers.text import get_format

    if fmt is None:
        return "action_only"
    return (
        "action_only" if has_action_tag(get_format(fmt)) else "clean_step_no_observation"
    )  # (unknown: raises)


def fit_privileged(pi_ids: list[int], room: int, min_tokens: int, stats: TeacherStats) -> list[int]:
    """``pi_ids`` fitted into ``room`` tokens: unchanged when they fit, cut in the middle when at least
    ``min_tokens`` fit, else dropped (``stats`` counts truncations and drops)."""
    if len(pi_ids) <= room:
        return pi_ids
    if room < min_tokens:
        stats.pi_dropped += 1
        return []
    stats.pi_truncated += 1
    cut, _ = truncate_middle(pi_ids, room)
    return cut


def ahead_items(
    rows: Sequence[StepRow],
    privileged: Sequence[str],
    encoder: PromptEncoder,
    *,
    max_context_tokens: int,
    min_pi_tokens: int,
    stats: TeacherStats,
) -> list[ScoreItem]:
    """AHEAD teacher inputs: the row's prompt with ``privileged[i]`` appended inside the user turn.

    The prompt is re-rendered with the privileged text and tokenised; if it no longer fits, the privileged text is
    shortened (token-level, middle cut) or dropped as the module docstring describes.
    """
    tok = encoder.tokenizer
    items = []
    for i, (row, pi) in enumerate(zip(rows, privileged, strict=True)):
        text = "\n\n" + pi if pi else ""
        room = max_context_tokens - len(row.prompt_ids) - len(row.response_ids)
        pi_ids = list(tok(text, add_special_tokens=False)["input_ids"]) if text else []
        fitted = fit_privileged(pi_ids, room, min_pi_tokens, stats)
        if fitted and fitted != pi_ids:
            text = tok.decode(fitted, skip_special_tokens=True)
        elif not fitted:
            text = ""
        if text:
            # Re-rendered so the text sits inside the user turn; a prompt already cut for the student is cut the
            # same way (middle first), so the privileged text at the end survives.
            ctx, cut = encoder.encode(
                row.prompt, text, limit=max(1, max_context_tokens - len(row.response_ids))
            )
            if cut and not row.prompt_truncated:
                stats.pi_truncated += 1
        else:
            ctx = list(row.prompt_ids)
        items.append(ScoreItem(i, ctx, list(row.response_ids), 0, bool(text)))
        stats.privileged += int(bool(text))
    return items


def opsd_items(
    rows: Sequence[StepRow],
    blocks: Sequence[str | None],
    tokenizer: Any,
    *,
    span_mode: str,
    max_context_tokens: int,
    min_pi_tokens: int,
    stats: TeacherStats,
    score_plain: bool = True,
) -> tuple[list[ScoreItem], list[list[tuple[int, int]]]]:
    """StepOPSD teacher inputs and each row's target span (``[]`` for a row without a parsable action).

    ``blocks[i]`` is row i's hindsight block (its trajectory's peer hindsight) or None. ``score_plain=False`` skips
    rows without a block (a live teacher gives them Δ = 0 exactly).
    """
    items: list[ScoreItem] = []
    spans: list[list[tuple[int, int]]] = []
    for i, (row, block) in enumerate(zip(rows, blocks, strict=True)):
        n = len(row.response_ids)
        count = prefix_token_counter(tokenizer, row.response_ids)
        span = structural_target_span(row.response_text, count, n, mode=span_mode)  # type: ignore[arg-type]
        if span is None:
            spans.append([])
            continue
        s, e = span
        spans.append([span])
        if not block and not score_plain:
            continue
        room = max_context_tokens - len(row.prompt_ids) - e
        block_ids = list(tokenizer(block, add_special_tokens=False)["input_ids"]) if block else []
        block_ids = fit_privileged(block_ids, room, min_pi_tokens, stats)
        ctx = list(row.prompt_ids) + list(row.response_ids[:s]) + block_ids
        items.append(ScoreItem(i, ctx, list(row.response_ids[s:e]), s, bool(block_ids)))
        stats.privileged += int(bool(block_ids))
    return items, spans


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


def timed(stats: TeacherStats) -> Any:
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
            span mode, :func:`span_mode_for`).
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

    def context_budget(self) -> int:
        tc, rc = self.cfg.teacher, self.cfg.rollout
        return tc.max_context_tokens or (rc.max_prompt_tokens + rc.max_response_tokens)

    def rescore(self, ro: Any, old: list[np.ndarray], model: Any, update_index: int) -> dict[str, Any]:
        """Teacher gaps for AHEAD / StepOPSD (``{}`` when the token stage is neither: a token stage of your own
        gets no gap from the bundled trainer). ``old`` are θ_old log-probs of every row, ``model`` the policy."""
        tr = self.cfg.shaper.token_reweight
        if tr not in ("ahead", "stepopsd"):
            return {}
        lam = self.cfg.shaper.mixing_lambda(update_index)
        stats = TeacherStats()
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
        self, ro: Any, old: list[np.ndarray], model: Any, stats: TeacherStats
    ) -> tuple[np.ndarray, dict[str, float]]:
        """AHEAD: θ_old rescored with the privileged text (feedback everywhere, hints on failed error steps)."""
        from stepgym.trainers.diagnostics import gap_stats
        from stepgym.wrappers.hints import ahead_privileged_text, analyze_many

        analyses = analyze_many(ro.trajectories, self.analyzer, failure_only=True)
        rows = ro.rows
        pis = [ahead_privileged_text(ro.trajectories[r.traj], r.t, analyses[r.traj].hints) for r in rows]
        items = ahead_items(
            rows,
            pis,
            self.encoder,
            max_context_tokens=self.context_budget(),
            min_pi_tokens=self.cfg.teacher.min_pi_tokens,
            stats=stats,
        )
        t_lp = self.scorer.score(model, [it.context for it in items], [it.target for it in items])
        stats.items, stats.tokens = len(items), sum(len(it.target) for it in items)
        width = max(len(r.response_ids) for r in rows)
        delta = ahead_delta([it.row for it in items], t_lp, [old[it.row] for it in items], (len(rows), width))
        hinted = np.array([r.t in analyses[r.traj].hints for r in rows], dtype=bool)
        return delta, gap_stats(delta, rows, hinted, "hinted")

    def opsd_gaps(
        self, ro: Any, old: list[np.ndarray], model: Any, stats: TeacherStats, lam: float
    ) -> tuple[Any, Any, TokenLayout, dict[str, float]]:
        """StepOPSD: each row's target span rescored after its trajectory's hindsight block (stale or live)."""
        from stepgym.trainers.diagnostics import gap_stats

        tc = self.cfg.teacher
        rows = ro.rows
        mode = tc.span_mode if tc.span_mode != "auto" else span_mode_for(self.fmt_name)
        blocks = [ro.hindsight[r.traj] for r in rows]
        live = tc.opsd_teacher == "live"
        items, spans = opsd_items(
            rows,
            blocks,
            self.encoder.tokenizer,
            span_mode=mode,
            max_context_tokens=self.context_budget(),
            min_pi_tokens=tc.min_pi_tokens,
            stats=stats,
            score_plain=not live,
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
