# Over 400 lines: every rule of both teachers' contexts for both token layouts, kept in one place so the layouts share them.
"""What the AHEAD and StepOPSD teachers read: every rule of their contexts, for both token layouts.

The bundled trainer (:mod:`stepgym.trainers.teacher`) keeps **one token row per step** (the step's rendered prompt,
then its reply); TRL (:class:`stepgym.integrations.trl.TeacherGaps`) and verl (:mod:`stepgym.integrations.verl.train`)
keep **one token row per episode** (the prompt, then the response, in which the model's replies alternate with the
env's turns; the adapter records each reply's span ``stepgym_steps[t]["start"/"stop"]`` and the episode
``stepgym_trajectory``). The rules below are written once and both layouts call them; the forward passes are not
here (the trainer's :class:`~stepgym.trainers.teacher.Scorer`, or an adapter's ``score(contexts, targets)``).

* **The privileged text of a step.** AHEAD (docs/shapers.md §4): the env's feedback to the step's action, plus the
  oracle analyzer's corrective hint on the error steps of failed episodes (:class:`AheadTexts`, from
  :func:`stepgym.wrappers.hints.ahead_privileged_text`; failure-only hints), written after ``"\\n\\n"``.
  StepOPSD (docs/shapers.md §5): the first successful peer's hindsight block (:func:`peer_blocks`, from
  :func:`stepgym.hindsight.peer_hindsight`).
* **Its fitting** (:func:`fit_privileged`): the student context and the target are never cut (they are exactly
  what generated the tokens); the privileged text is cut to the room ``max_context_tokens`` leaves, keeping its
  first quarter and its last three quarters, and dropped when fewer than ``min_pi_tokens`` fit (counted in
  :class:`TeacherStats` as ``teacher/pi_truncated`` and ``teacher/pi_dropped``).
* **The target span** (:func:`target_span`): StepOPSD's span of a reply as its text format declares it
  (:func:`span_rule`: ``action_only``, the tag around the action in the format's reply shape, e.g.
  ``<action>…</action>``; ``clean_step_no_observation``: the whole reply) on the reply's *actual* tokens: the token count of a text prefix is the fewest leading tokens whose
  decoding covers it (:func:`prefix_token_counter`), instead of re-tokenising the prefix as the Search-R1 code does.
* **The context.** AHEAD scores every reply token after the student context with the privileged text at the end of
  the user turn the reply answers (docs/shapers.md §8.18): step rows re-render the prompt with it
  (:func:`ahead_items`); episode rows insert it before the chat template's user-turn tail
  (:func:`user_turn_tail`, :func:`ahead_gaps`). StepOPSD scores the target span after
  ``prompt ⊕ response before the span ⊕ hindsight block`` (:func:`opsd_items`, :func:`opsd_gaps`).

On episode rows a reply's span is clamped to the response and an empty one skipped (the response length cut it
off), and the teacher must return one log-prob per target token. Gaps are teacher − student, the student being
θ_old on the row as generated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from stepgym import schema
from stepgym.errors import StepRecordError
from stepgym.shapers import TokenLayout, scatter_span_deltas
from stepgym.shapers.stepopsd_text import structural_target_span
from stepgym.steps.row import truncate_middle
from stepgym.text_format import TextFormat

__all__ = [
    "ACTION_SPAN",
    "AheadTexts",
    "ContextBudget",
    "ScoreFn",
    "ScoreItem",
    "SpanRule",
    "TeacherContexts",
    "TeacherStats",
    "ahead_gaps",
    "ahead_items",
    "ahead_pi_ids",
    "fit_privileged",
    "opsd_gaps",
    "opsd_items",
    "peer_blocks",
    "prefix_token_counter",
    "span_rule",
    "target_span",
    "user_turn_tail",
]

#: ``score(contexts, targets)``: one float array of log-probs per target (its length), under the teacher.
ScoreFn = Callable[[list[list[int]], list[list[int]]], list[np.ndarray]]


@dataclass
class TeacherStats:
    """The teacher's counters for one batch (``as_metrics``: the ``teacher/*`` metrics)."""

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


@dataclass(frozen=True)
class ContextBudget:
    """How long a teacher context may be: ``max_context_tokens`` in all (student context + privileged text +
    target), and the fewest privileged tokens worth keeping (``min_pi_tokens``; fewer fit: it is dropped)."""

    max_context_tokens: int
    min_pi_tokens: int = 32


@dataclass
class ScoreItem:
    """Score ``target`` tokens after ``context``; the result lands on ``row``'s response columns ``start…``."""

    row: int
    context: list[int]
    target: list[int]
    start: int = 0
    privileged: bool = False


# ---------------------------------------------------------------------------------------------------------------
# The rules both layouts share
# ---------------------------------------------------------------------------------------------------------------
class AheadTexts:
    """AHEAD's privileged text of every step of a batch's episodes: the env's feedback to the step's action, plus
    the analyzer's corrective hint on the error steps of failed episodes (``analyzer`` as in
    :func:`stepgym.wrappers.hints.analyze_many`; default: the oracle analyzer)."""

    def __init__(self, trajectories: Sequence[schema.Trajectory], analyzer: Any = None) -> None:
        from stepgym.wrappers.hints import analyze_many

        self.trajectories = list(trajectories)
        self.analyses = analyze_many(self.trajectories, analyzer, failure_only=True)

    def text(self, episode: int, t: int) -> str:
        """The privileged text of step ``t`` of episode ``episode``."""
        from stepgym.wrappers.hints import ahead_privileged_text

        return ahead_privileged_text(self.trajectories[episode], t, self.analyses[episode].hints)

    def hinted(self, episode: int, t: int) -> bool:
        """Whether the text of step ``t`` carries a corrective hint."""
        return t in self.analyses[episode].hints


def ahead_pi_ids(tokenizer: Any, text: str) -> list[int]:
    """The tokens AHEAD's privileged ``text`` adds to the user turn (after a blank line; none for no text)."""
    return _ids(tokenizer, "\n\n" + text) if text else []


def peer_blocks(trajectories: Sequence[schema.Trajectory], groups: Sequence[Any]) -> list[str | None]:
    """StepOPSD's hindsight block of each episode: its group's first successful peer
    (:func:`stepgym.hindsight.peer_hindsight`; rows keep their order inside a group)."""
    from stepgym.hindsight import peer_hindsight

    if len(groups) != len(trajectories):
        raise StepRecordError(f"{len(groups)} groups for {len(trajectories)} episodes")
    blocks: list[str | None] = [None] * len(trajectories)
    for g in dict.fromkeys(groups):
        members = [b for b, x in enumerate(groups) if x == g]
        for b, block in zip(members, peer_hindsight([trajectories[b] for b in members]), strict=True):
            blocks[b] = block
    return blocks


def fit_privileged(pi_ids: list[int], used: int, budget: ContextBudget, stats: TeacherStats) -> list[int]:
    """``pi_ids`` fitted beside ``used`` tokens (student context + target) into ``budget.max_context_tokens``:
    unchanged when they fit, cut in the middle when at least ``budget.min_pi_tokens`` fit, else dropped
    (``stats`` counts truncations and drops)."""
    room = budget.max_context_tokens - used
    if len(pi_ids) <= room:
        return pi_ids
    if room < budget.min_pi_tokens:
        stats.pi_dropped += 1
        return []
    stats.pi_truncated += 1
    cut, _ = truncate_middle(pi_ids, room)
    return cut


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


class SpanRule(NamedTuple):
    """StepOPSD's target span in a reply, as a text format declares it (:attr:`TextFormat.span_mode`, and for
    ``action_only`` the tag around ``{action}`` in its ``reply_shape``, :attr:`TextFormat.action_tag`)."""

    mode: str = "action_only"
    tag: str = "action"


#: ALFWorld's rule (the paper's): the ``<action>…</action>`` tag.
ACTION_SPAN = SpanRule()


def span_rule(fmt: str | TextFormat | None, mode: str = "auto") -> SpanRule:
    """The target-span rule of a text format (a name, ``"module:ATTR"`` or the format; ``None``: ALFWorld's,
    ``action_only`` on ``<action>``): the format's declared ``span_mode``, or ``mode`` when it is not ``"auto"``
    (a trainer's override), on the format's action tag."""
    from stepgym.wrappers.text import get_format

    if fmt is None:
        return ACTION_SPAN if mode == "auto" else SpanRule(mode)
    f = get_format(fmt)  # (unknown: raises)
    return SpanRule(f.span_mode if mode == "auto" else mode, f.action_tag or "action")


def target_span(
    tokenizer: Any, reply_ids: Sequence[int], rule: SpanRule, text: str | None = None
) -> tuple[int, int] | None:
    """StepOPSD's target span ``(start, stop)`` in a reply's tokens under ``rule``, or None (no parsable action:
    no target). ``text``: the reply's text (default: its tokens decoded without special tokens)."""
    if text is None:
        text = tokenizer.decode(list(reply_ids), skip_special_tokens=True)
    count = prefix_token_counter(tokenizer, reply_ids)
    return structural_target_span(text, count, len(reply_ids), mode=rule.mode, tag=rule.tag)  # type: ignore[arg-type]


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ---------------------------------------------------------------------------------------------------------------
# One token row per step (the bundled trainer's StepRow)
# ---------------------------------------------------------------------------------------------------------------
def ahead_items(
    rows: Sequence[Any], privileged: Sequence[str], encoder: Any, budget: ContextBudget, stats: TeacherStats
) -> list[ScoreItem]:
    """AHEAD teacher inputs of step rows (:class:`~stepgym.trainers.samples.StepRow`): the row's prompt re-rendered
    by ``encoder`` (:class:`~stepgym.trainers.samples.PromptEncoder`) with ``privileged[i]`` inside the user turn,
    the whole reply as the target. A prompt already cut for the student is cut the same way (middle first), so the
    privileged text at the end survives."""
    tok = encoder.tokenizer
    items = []
    for i, (row, pi) in enumerate(zip(rows, privileged, strict=True)):
        pi_ids = ahead_pi_ids(tok, pi)
        fitted = fit_privileged(pi_ids, len(row.prompt_ids) + len(row.response_ids), budget, stats)
        text = "\n\n" + pi if pi else ""
        if fitted and fitted != pi_ids:
            text = tok.decode(fitted, skip_special_tokens=True)
        elif not fitted:
            text = ""
        if text:
            limit = max(1, budget.max_context_tokens - len(row.response_ids))
            ctx, cut = encoder.encode(row.prompt, text, limit=limit)
            if cut and not row.prompt_truncated:
                stats.pi_truncated += 1
        else:
            ctx = list(row.prompt_ids)
        items.append(ScoreItem(i, ctx, list(row.response_ids), 0, bool(text)))
        stats.privileged += int(bool(text))
    return items


def opsd_items(
    rows: Sequence[Any],
    blocks: Sequence[str | None],
    tokenizer: Any,
    budget: ContextBudget,
    stats: TeacherStats,
    *,
    span: SpanRule,
    score_plain: bool = True,
) -> tuple[list[ScoreItem], list[list[tuple[int, int]]]]:
    """StepOPSD teacher inputs of step rows and each row's target span (``[]`` for a row without a parsable
    action). ``blocks[i]`` is row i's hindsight block or None. ``score_plain=False`` skips rows without a block (a
    live teacher gives them Δ = 0 exactly)."""
    items: list[ScoreItem] = []
    spans: list[list[tuple[int, int]]] = []
    for i, (row, block) in enumerate(zip(rows, blocks, strict=True)):
        found = target_span(tokenizer, row.response_ids, span, row.response_text)
        if found is None:
            spans.append([])
            continue
        s, e = found
        spans.append([found])
        if not block and not score_plain:
            continue
        block_ids = _ids(tokenizer, block) if block else []
        block_ids = fit_privileged(block_ids, len(row.prompt_ids) + e, budget, stats)
        ctx = list(row.prompt_ids) + list(row.response_ids[:s]) + block_ids
        items.append(ScoreItem(i, ctx, list(row.response_ids[s:e]), s, bool(block_ids)))
        stats.privileged += int(bool(block_ids))
    return items, spans


# ---------------------------------------------------------------------------------------------------------------
# One token row per episode (TRL, verl)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TeacherContexts:
    """The batch's episode rows and records, as the adapter read them from its trainer."""

    prompts: list[list[int]]  # each row's prompt ids (no padding)
    responses: list[list[int]]  # each row's response ids (no padding)
    steps: list[list[dict[str, Any]]]  # the agent loop's stepgym_steps
    trajectories: list[schema.Trajectory]  # the agent loop's stepgym_trajectory
    groups: list[Any]  # the group per row (verl's uid, TRL's block)
    old_log_probs: np.ndarray  # (B, L) θ_old log-probs of the response tokens
    budget: ContextBudget

    def __post_init__(self) -> None:
        n = len(self.prompts)
        sizes = {len(x) for x in (self.responses, self.steps, self.trajectories, self.groups)}
        if sizes != {n} or self.old_log_probs.shape[0] != n:
            raise StepRecordError(
                f"teacher inputs disagree on the batch size ({n} prompts, sizes {sorted(sizes)}, "
                f"old_log_probs {self.old_log_probs.shape})"
            )
        missing = [i for i, t in enumerate(self.trajectories) if t is None]
        if missing:
            raise StepRecordError(
                f"rows {missing[:5]} have no stepgym_trajectory: AHEAD and StepOPSD rebuild the teacher's context "
                "from the recorded episode, which StepGymAgentLoop puts in extra_fields"
            )

    @property
    def width(self) -> int:
        return int(self.old_log_probs.shape[1])

    def reply_spans(self, b: int) -> list[tuple[int, int, int]]:
        """Row ``b``'s replies as ``(step, start, stop)``: each recorded span clamped to the response, the empty
        ones (cut off by the response length: no token to score) left out."""
        n = len(self.responses[b])
        out = []
        for t, rec in enumerate(self.steps[b]):
            s, e = int(rec["start"]), min(int(rec["stop"]), n)
            if e > s:
                out.append((t, s, e))
        return out


def user_turn_tail(tokenizer: Any) -> list[int]:
    """The tokens a chat template puts after a user message's content up to the assistant header (ChatML:
    ``<|im_end|>`` newline ``<|im_start|>assistant`` newline): where AHEAD's privileged text goes in before."""

    def ids(content: str) -> list[int]:
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=True
        )
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    a, b = ids("0"), ids("1")
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    if n == 0:
        raise ValueError(
            "the chat template puts nothing after a user message's content (no end-of-turn or assistant header): "
            "AHEAD has no place to insert the privileged text; use a chat template with turn markers (ChatML)"
        )
    return a[len(a) - n :]


def _gap_arrays(
    where: list[tuple[int, int, int]], t_lp: list[np.ndarray], old: np.ndarray, n_rows: int
) -> tuple[list[list[tuple[int, int]]], list[list[np.ndarray]]]:
    spans: list[list[tuple[int, int]]] = [[] for _ in range(n_rows)]
    gaps: list[list[np.ndarray]] = [[] for _ in range(n_rows)]
    for (b, s, e), lp in zip(where, t_lp, strict=True):
        lp = np.asarray(lp, dtype=np.float64).ravel()
        if len(lp) != e - s:
            raise StepRecordError(f"the teacher scored {len(lp)} tokens for a {e - s}-token target (row {b})")
        spans[b].append((s, e))
        gaps[b].append(lp - old[b, s:e])
    return spans, gaps


def ahead_gaps(
    ctx: TeacherContexts, tokenizer: Any, score: ScoreFn, stats: TeacherStats, analyzer: Any = None
) -> np.ndarray:
    """AHEAD's δ (B, L) on episode rows: every reply rescored with its privileged text inside the user turn it
    answers (before the template's user-turn tail)."""
    texts = AheadTexts(ctx.trajectories, analyzer)
    tail = user_turn_tail(tokenizer)
    contexts, targets, where = [], [], []
    for b, (prompt, resp) in enumerate(zip(ctx.prompts, ctx.responses, strict=True)):
        for t, s, e in ctx.reply_spans(b):
            prefix = list(prompt) + list(resp[:s])
            pi_ids = ahead_pi_ids(tokenizer, texts.text(b, t))
            if pi_ids and prefix[len(prefix) - len(tail) :] == tail:
                pi_ids = fit_privileged(pi_ids, len(prefix) + (e - s), ctx.budget, stats)
                cut = len(prefix) - len(tail)
                prefix = prefix[:cut] + pi_ids + prefix[cut:]
                stats.privileged += int(bool(pi_ids))
            contexts.append(prefix)
            targets.append(list(resp[s:e]))
            where.append((b, s, e))
    t_lp = score(contexts, targets) if contexts else []
    stats.items, stats.tokens = len(targets), sum(len(x) for x in targets)
    spans, gaps = _gap_arrays(where, t_lp, ctx.old_log_probs, len(ctx.prompts))
    delta, _ = scatter_span_deltas(spans, gaps, (len(ctx.prompts), ctx.width))
    return delta


def opsd_gaps(
    ctx: TeacherContexts,
    tokenizer: Any,
    score: ScoreFn | None,
    stats: TeacherStats,
    *,
    span: SpanRule = ACTION_SPAN,
    blocks: list[str | None] | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None, TokenLayout]:
    """StepOPSD's ``(Δ, Δ mask, target layout)`` on episode rows: each reply's target span rescored after the
    group's peer hindsight block. ``score=None`` (λ = 0) returns only the target layout, which the step
    normalisation needs. ``blocks``: each row's hindsight block when the adapter found the peers itself (TRL gathers
    them over processes); default: :func:`peer_blocks` over ``ctx``'s rows."""
    if blocks is None:
        blocks = peer_blocks(ctx.trajectories, ctx.groups)
    elif len(blocks) != len(ctx.prompts):
        raise StepRecordError(f"{len(blocks)} hindsight blocks for {len(ctx.prompts)} rows")
    contexts, targets, where = [], [], []
    spans: list[list[tuple[int, int]]] = [[] for _ in ctx.prompts]
    for b, (prompt, resp) in enumerate(zip(ctx.prompts, ctx.responses, strict=True)):
        block_ids = _ids(tokenizer, blocks[b]) if blocks[b] else []
        for _t, s, e in ctx.reply_spans(b):
            found = target_span(tokenizer, resp[s:e], span)
            if found is None:
                continue  # no parsable action: no target, no gap
            a, z = s + found[0], s + found[1]
            fitted = fit_privileged(block_ids, len(prompt) + z, ctx.budget, stats)
            stats.privileged += int(bool(fitted))
            spans[b].append((a, z))
            contexts.append(list(prompt) + list(resp[:a]) + fitted)
            targets.append(list(resp[a:z]))
            where.append((b, a, z))
    target = TokenLayout.from_spans(spans, ctx.width)
    if score is None:
        return None, None, target
    t_lp = score(contexts, targets) if contexts else []
    stats.items, stats.tokens = len(targets), sum(len(x) for x in targets)
    _, gaps = _gap_arrays(where, t_lp, ctx.old_log_probs, len(ctx.prompts))
    delta, mask = scatter_span_deltas(spans, gaps, (len(ctx.prompts), ctx.width))
    return delta, mask, target
