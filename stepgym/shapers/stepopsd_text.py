"""StepOPSD's text side: step segmentation and target spans (docs/shapers.md §5.1). Tokenizer-agnostic: a callback counts the
tokens of a text prefix. Peer selection and the hindsight block (docs/shapers.md §5.6) are :mod:`stepgym.hindsight`'s
(``first_correct_peers``, ``hindsight_block``, ``hindsight_blocks``), shared with ``GroupEnv``.

Source: ``OPSD_experiment_SearchR1`` @ 79c114c, ``verl/trainer/main_ppo.py``: ``RewardManager``'s
``_find_invalid_feedback_spans``, ``_advance_past_invalid_feedback``, ``_find_next_observation_span``,
``_extract_response_steps``, the target-span/token-index code of ``__call__`` and
``_build_teacher_hindsight_suffix_ids``. The Search-QA segmentation reproduces the code's behaviour, quirks
included (an invalid turn before a valid action is merged into that step's clean span, feedback text and all; a
turn without a valid action is never a step; token boundaries are approximated by re-tokenising prefixes).

ALFWorld has no public StepOPSD code: the resolution is structural (docs/shapers.md §5.1, §8.25) — one step per generated turn
(one row per step), the action span is the row's ``<action>…</action>`` match with its tags, the clean span is the
whole generated response. See :func:`structural_target_span`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ACTION_PATTERN",
    "INVALID_FEEDBACK_PREFIX",
    "INVALID_FEEDBACK_SUFFIX",
    "SPAN_MODES",
    "ResponseStep",
    "TargetSpan",
    "char_span_to_token_span",
    "extract_response_steps",
    "structural_target_span",
    "target_token_spans",
]

#: A complete Search-R1 action, non-greedy, across lines (``<search>…</search>`` or ``<answer>…</answer>``).
ACTION_PATTERN = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
INFORMATION_START = "<information>"
INFORMATION_END = "</information>"
INVALID_FEEDBACK_PREFIX = "My previous action is invalid."
INVALID_FEEDBACK_SUFFIX = "Let me try again.\n"

SPAN_MODES = ("clean_step_no_observation", "action_only", "answer_only", "final_answer_only")
SpanMode = Literal["clean_step_no_observation", "action_only", "answer_only", "final_answer_only"]
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class ResponseStep:
    """One logical step of a decoded multi-turn response (character offsets, end-exclusive)."""

    start: int  #: step start (after whitespace and feedback spans)
    clean_end: int  #: start of the observation that ends the step (= end of the clean span)
    end: int  #: end of that observation (where the next step's search starts)
    action_start: int
    action_end: int
    action_type: str  #: "search" or "answer"
    is_final_answer: bool  #: the last answer action of the response


@dataclass(frozen=True)
class TargetSpan:
    """A step's target span in tokens (half-open ``[token_start, token_stop)``) and characters."""

    token_start: int
    token_stop: int
    char_start: int
    char_end: int
    action_type: str


def _feedback_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    cursor, n = 0, len(text)
    while cursor < n:
        s = text.find(INVALID_FEEDBACK_PREFIX, cursor)
        if s < 0:
            break
        suffix = text.find(INVALID_FEEDBACK_SUFFIX, s)
        e = suffix + len(INVALID_FEEDBACK_SUFFIX) if suffix >= 0 else n
        spans.append((s, e))
        cursor = max(e, s + len(INVALID_FEEDBACK_PREFIX))
    return spans


def _in_spans(i: int, spans: list[tuple[int, int]]) -> bool:
    return any(s <= i < e for s, e in spans)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _advance(text: str, i: int, spans: list[tuple[int, int]]) -> int:
    """Skip whitespace and any feedback span the cursor is inside, repeatedly."""
    while i < len(text):
        i = _skip_ws(text, i)
        for s, e in spans:
            if s <= i < e:
                i = e
                break
        else:
            break
    return _skip_ws(text, i)


def _next_observation(
    text: str, start: int, stop: int, spans: list[tuple[int, int]]
) -> tuple[int, int] | None:
    cands = []
    info = text.find(INFORMATION_START, start, stop)
    if info >= 0:
        close = text.find(INFORMATION_END, info)
        end = close + len(INFORMATION_END) if close >= 0 else stop
        cands.append((info, min(end, stop)))
    cands.extend((s, min(e, stop)) for s, e in spans if start <= s < stop)
    return min(cands, key=lambda span: span[0]) if cands else None


def extract_response_steps(text: str) -> list[ResponseStep]:
    """Segment a decoded Search-R1 multi-turn response into action-anchored steps (docs/shapers.md §5.1 steps 1–4).

    Actions are complete ``<search>``/``<answer>`` matches not starting inside an invalid-feedback span. Step k
    starts at the cursor (after whitespace and feedback spans) and its clean span ends at the first observation
    (an ``<information>`` block, or a feedback span) between action k and action k+1, else at action k+1 (or the
    end). Steps with blank clean text, or whose clean span would be empty, are skipped.
    """
    spans = _feedback_spans(text)
    actions = [m for m in ACTION_PATTERN.finditer(text) if not _in_spans(m.start(), spans)]
    if not actions:
        return []
    final_answer = max((k for k, m in enumerate(actions) if m.group(1) == "answer"), default=None)
    steps: list[ResponseStep] = []
    cursor = _advance(text, 0, spans)
    for k, m in enumerate(actions):
        cursor = _advance(text, cursor, spans)
        nxt = actions[k + 1].start() if k + 1 < len(actions) else len(text)
        obs = _next_observation(text, m.end(), nxt, spans)
        clean_end, end = obs if obs is not None else (nxt, nxt)
        if clean_end <= cursor:
            cursor = _advance(text, end, spans)
            continue
        if text[cursor:clean_end].strip():
            steps.append(
                ResponseStep(
                    start=cursor,
                    clean_end=clean_end,
                    end=end,
                    action_start=m.start(),
                    action_end=m.end(),
                    action_type=m.group(1),
                    is_final_answer=(m.group(1) == "answer" and k == final_answer),
                )
            )
        cursor = _advance(text, end, spans)
    return steps


def _cached(count_tokens: CountTokens, text: str) -> Callable[[int], int]:
    cache: dict[int, int] = {}

    def prefix_len(i: int) -> int:
        if i not in cache:
            cache[i] = int(count_tokens(text[:i]))
        return cache[i]

    return prefix_len


def char_span_to_token_span(
    text: str, char_start: int, char_end: int, count_tokens: CountTokens, n_valid: int
) -> tuple[int, int] | None:
    """Approximate token range of ``text[char_start:char_end]`` by re-tokenising prefixes (docs/shapers.md §5.1 step 6):
    start = |tok(text[:start])|, last = |tok(text[:end])| − 1, both clamped into [0, n_valid − 1]. Returns the
    half-open ``(start, last + 1)``, or None when empty (last < start, or ``n_valid == 0``)."""
    if n_valid <= 0:
        return None
    s = min(max(int(count_tokens(text[:char_start])), 0), n_valid - 1)
    last = min(max(int(count_tokens(text[:char_end])) - 1, 0), n_valid - 1)
    return (s, last + 1) if last >= s else None


def target_token_spans(
    text: str, mode: SpanMode, count_tokens: CountTokens, n_valid: int
) -> list[TargetSpan]:
    """The StepOPSD target spans of one decoded response, in tokens (docs/shapers.md §5.1 step 5–6; ``RewardManager.__call__``).

    Args:
        text: the response decoded with ``skip_special_tokens=True`` (observations included, as generated).
        mode: "clean_step_no_observation" (reasoning + action; the paper's Search-QA choice), "action_only" (the
            action with its tags), "answer_only", "final_answer_only".
        count_tokens: ``count_tokens(prefix) -> int``, the number of tokens of a prefix encoded without special
            tokens (e.g. ``lambda s: len(tok.encode(s, add_special_tokens=False))``).
        n_valid: the number of valid response tokens (the clamp bound).

    Returns the spans in step order, half-open token ranges. As in the code: the clean start is clamped to
    [0, n_valid] and the ends/action start to [0, n_valid − 1]; a step whose *action* span maps to nothing is
    skipped in every mode; in clean mode a step whose clean span maps to nothing is skipped.
    """
    if mode not in SPAN_MODES:
        raise ValueError(f"unknown span mode {mode!r}; expected one of {SPAN_MODES}")
    if n_valid <= 0:
        return []
    plen = _cached(count_tokens, text)
    out = []
    for st in extract_response_steps(text):
        if mode in ("answer_only", "final_answer_only") and st.action_type != "answer":
            continue
        if mode == "final_answer_only" and not st.is_final_answer:
            continue
        a0 = min(max(plen(st.action_start), 0), n_valid - 1)
        a1 = min(max(plen(st.action_end) - 1, 0), n_valid - 1)
        if a1 < a0:
            continue
        if mode == "clean_step_no_observation":
            c0 = min(max(plen(st.start), 0), n_valid)
            c1 = min(max(plen(st.clean_end) - 1, 0), n_valid - 1)
            if c1 < c0:
                continue
            out.append(TargetSpan(c0, c1 + 1, st.start, st.clean_end, st.action_type))
        else:
            out.append(TargetSpan(a0, a1 + 1, st.action_start, st.action_end, st.action_type))
    return out


def structural_target_span(
    response_text: str,
    count_tokens: CountTokens,
    n_valid: int,
    *,
    mode: Literal["action_only", "clean_step_no_observation"] = "action_only",
    tag: str = "action",
    which: Literal["first", "last"] = "first",
) -> tuple[int, int] | None:
    """Target span of one *step row* (one generated turn; ALFWorld, docs/shapers.md §5.1 last paragraph).

    ``action_only`` (the paper's ALFWorld choice): the complete ``<tag>…</tag>`` match, tags included (the
    ``which`` match if there are several), mapped to tokens like :func:`char_span_to_token_span`; None when the
    row has no parsable action (its tokens keep A). ``clean_step_no_observation``: the whole response
    ``(0, n_valid)``.
    """
    if mode == "clean_step_no_observation":
        return (0, n_valid) if n_valid > 0 else None
    if mode != "action_only":
        raise ValueError(
            f"structural spans support 'action_only' or 'clean_step_no_observation', not {mode!r}"
        )
    matches = list(re.finditer(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", response_text, re.DOTALL))
    if not matches:
        return None
    m = matches[0] if which == "first" else matches[-1]
    return char_span_to_token_span(response_text, m.start(), m.end(), count_tokens, n_valid)
