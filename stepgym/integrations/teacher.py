"""AHEAD and StepOPSD teacher contexts for layouts of one token row per episode, scored by a callback.

TRL (:class:`stepgym.integrations.trl.TeacherGaps`) and verl (:mod:`stepgym.integrations.verl.train`) both keep
one row per episode: the prompt, then the response, in which the model's replies alternate with the env's turns.
The adapter records each reply's span (``stepgym_steps[t]["start"/"stop"]``) and the recorded episode
(``stepgym_trajectory``). This module rebuilds, per reply, the context the paper's teacher reads, and leaves the
forward passes to ``score(contexts, targets) -> [log-probs]`` (TRL: the trainer's model; verl: its own actor / ref
``compute_log_prob``). One rule for both: a span is clamped to the response and an empty one skipped (the
response length cut it off), the teacher must return one log-prob per target token, and the chat template must
have a user-turn tail.

* AHEAD (docs/shapers.md §4): the reply is scored again with the privileged text (the env's feedback to it, plus
  the oracle analyzer's corrective hint on the error steps of failed episodes) inserted at the end of the user
  turn it answers, before the template's end-of-turn and assistant header; δ on every reply token.
* StepOPSD (docs/shapers.md §5): each reply's target span (its ``<action>…</action>`` tag; the whole reply for
  Search-QA) is scored after ``prompt ⊕ earlier turns ⊕ reply before the span ⊕ hindsight block`` (the first
  successful peer of the group); Δ on those spans.

The privileged text is cut (middle first) or dropped to fit ``max_context_tokens``, as in the bundled trainer
(:mod:`stepgym.trainers.teacher`). Gaps are teacher − student, the student being θ_old on the row as generated
(verl's ``old_log_probs``; TRL: the trainer's model on the batch before the update).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.errors import StepRecordError
from stepgym.shapers import TokenLayout, scatter_span_deltas
from stepgym.shapers.stepopsd_text import structural_target_span
from stepgym.trainers.teacher import TeacherStats, fit_privileged, prefix_token_counter

__all__ = ["ScoreFn", "TeacherContexts", "ahead_gaps", "as_trajectory", "opsd_gaps", "user_turn_tail"]

#: ``score(contexts, targets)``: one float array of log-probs per target (its length), under the teacher.
ScoreFn = Callable[[list[list[int]], list[list[int]]], list[np.ndarray]]


@dataclass(frozen=True)
class TeacherContexts:
    """The batch's token rows and records, as the adapter read them from its trainer."""

    prompts: list[list[int]]  # each row's prompt ids (no padding)
    responses: list[list[int]]  # each row's response ids (no padding)
    steps: list[list[dict[str, Any]]]  # the agent loop's stepgym_steps
    trajectories: list[schema.Trajectory]  # the agent loop's stepgym_trajectory
    groups: list[Any]  # the group per row (verl's uid, TRL's block)
    old_log_probs: np.ndarray  # (B, L) θ_old log-probs of the response tokens
    max_context_tokens: int
    min_pi_tokens: int = 32

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


def as_trajectory(value: Any) -> schema.Trajectory:
    """A recorded episode back from verl's row: ``AgentLoopOutput.as_dict`` (pydantic's ``model_dump``) turns the
    agent loop's :class:`~stepgym.schema.Trajectory` into nested dicts on its way to TransferQueue."""
    if isinstance(value, schema.Trajectory) or value is None:
        return value
    if not isinstance(value, dict) or "steps" not in value:
        raise StepRecordError(
            f"stepgym_trajectory is neither a Trajectory nor its dict form: {type(value).__name__}"
        )
    steps = [s if isinstance(s, schema.Step) else schema.Step(**s) for s in value["steps"]]
    return schema.Trajectory(
        str(value["task_id"]), value["initial_observation"], dict(value["initial_info"]), steps
    )


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
    """AHEAD's δ (B, L): every reply rescored with its privileged text inside the user turn it answers."""
    from stepgym.wrappers.hints import ahead_privileged_text, analyze_many

    analyses = analyze_many(ctx.trajectories, analyzer, failure_only=True)
    tail = user_turn_tail(tokenizer)
    contexts, targets, where = [], [], []
    for b, (prompt, resp, recs) in enumerate(zip(ctx.prompts, ctx.responses, ctx.steps, strict=True)):
        for t, rec in enumerate(recs):
            s, e = int(rec["start"]), min(int(rec["stop"]), len(resp))
            if e <= s:
                continue  # cut off by the response length: no token to score
            prefix = list(prompt) + list(resp[:s])
            pi = ahead_privileged_text(ctx.trajectories[b], t, analyses[b].hints)
            pi_ids = list(tokenizer("\n\n" + pi, add_special_tokens=False)["input_ids"]) if pi else []
            if pi_ids and prefix[len(prefix) - len(tail) :] == tail:
                room = ctx.max_context_tokens - len(prefix) - (e - s)
                pi_ids = fit_privileged(pi_ids, room, ctx.min_pi_tokens, stats)
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


def _peer_blocks(ctx: TeacherContexts) -> list[str | None]:
    from stepgym.hindsight import peer_hindsight

    blocks: list[str | None] = [None] * len(ctx.prompts)
    for g in dict.fromkeys(ctx.groups):  # groups in first-seen order; rows keep their order inside a group
        members = [b for b, x in enumerate(ctx.groups) if x == g]
        for b, block in zip(members, peer_hindsight([ctx.trajectories[b] for b in members]), strict=True):
            blocks[b] = block
    return blocks


def opsd_gaps(
    ctx: TeacherContexts,
    tokenizer: Any,
    score: ScoreFn | None,
    stats: TeacherStats,
    *,
    span_mode: str = "action_only",
    blocks: list[str | None] | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None, TokenLayout]:
    """StepOPSD's ``(Δ, Δ mask, target layout)``: each reply's target span rescored after the group's peer
    hindsight block. ``score=None`` (λ = 0) returns only the target layout, which the step normalisation needs.
    ``blocks``: each row's hindsight block when the adapter found the peers itself (TRL gathers them over
    processes); default: the first successful peer among ``ctx``'s rows of the same group."""
    if blocks is None:
        blocks = _peer_blocks(ctx)
    elif len(blocks) != len(ctx.prompts):
        raise StepRecordError(f"{len(blocks)} hindsight blocks for {len(ctx.prompts)} rows")
    contexts, targets, where = [], [], []
    spans: list[list[tuple[int, int]]] = [[] for _ in ctx.prompts]
    for b, (prompt, resp, recs) in enumerate(zip(ctx.prompts, ctx.responses, ctx.steps, strict=True)):
        block_ids = list(tokenizer(blocks[b], add_special_tokens=False)["input_ids"]) if blocks[b] else []
        for rec in recs:
            s, e = int(rec["start"]), min(int(rec["stop"]), len(resp))
            reply = list(resp[s:e])
            if not reply:
                continue
            text = tokenizer.decode(reply, skip_special_tokens=True)
            span = structural_target_span(
                text, prefix_token_counter(tokenizer, reply), len(reply), mode=span_mode
            )
            if span is None:
                continue  # no parsable action: no target, no gap
            a, z = s + span[0], s + span[1]
            fitted = fit_privileged(
                block_ids, ctx.max_context_tokens - len(prompt) - z, ctx.min_pi_tokens, stats
            )
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
