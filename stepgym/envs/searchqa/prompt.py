"""The text formats of ``StepGym/SearchQA-v0``: Search-R1's prompt with the strict one-action-per-turn rule
(``"qa"``, the env's declared format), Search-R1's prompt with its own first-tag-wins rule (``"qa-lenient"``, the
env's ``strict_format=False``) and stepgym's own wording of the same protocol (``"qa-stepgym"``).

A reply is one turn: ``<search>…</search>`` or ``<answer>…</answer>`` (``<think>`` optional, as in Search-R1), read
by the env's own turn parser (:func:`stepgym.envs.searchqa.protocol.parse_turn`); the action is the whole turn.
A scripted answer is written ``<answer>…</answer>`` (a whole turn, Search-QA's expert, is sent as is), and
StepOPSD's target is the whole reply (the paper's Search-QA choice).
"""

from __future__ import annotations

import functools
from typing import Any

from stepgym.envs.searchqa.protocol import INVALID_FEEDBACK, normalize_question, parse_turn
from stepgym.text_format import ParseResult, PromptTemplate, TextFormat, invalid_parse

__all__ = [
    "FORMAT",
    "LENIENT_FORMAT",
    "QA_TEMPLATE",
    "SEARCH_R1_TEMPLATE",
    "STEPGYM_FORMAT",
    "parse_search_r1",
]

#: A scripted answer, as a turn.
ANSWER_REPLY = "<answer>{action}</answer>"


def parse_search_r1(text: Any, *, strict: bool = True) -> ParseResult:
    """Parse a Search-R1 turn: exactly one complete ``<search>q</search>`` or ``<answer>a</answer>``.

    The returned ``action`` is the whole turn up to and including the closing tag (leading/trailing whitespace
    stripped): the Search-QA env reads the tags itself, and Search-R1 stops generating at the closing tag, so
    anything after it would never have been generated. Two action tags, none, an unclosed one or empty content are
    invalid (the Search-QA env's rule). ``strict=False`` is Search-R1's own rule instead: the turn is cut after its
    first ``</search>`` (else its first ``</answer>``) and the first complete block of that wins. ``think`` is the first ``<think>`` block, if any.
    """
    if not isinstance(text, str):
        return invalid_parse(f"the reply must be text, got {type(text).__name__}")
    turn = parse_turn(text, strict=strict)  # one parser for the env and this interface
    if not turn.valid:
        return invalid_parse(turn.reason)
    return ParseResult(format_valid=True, action=text[: turn.end].strip(), think=turn.think)


# Search-R1's prompt (Jin et al., 2025), the string of its ``make_prefix(template_type="base")`` in
# ``scripts/data_process/nq_search.py`` (github.com/PeterGriffinJin/Search-R1), reproduced exactly because matching
# it is the point (the papers' Search-QA numbers are measured with it; stepgym.envs.searchqa.protocol.make_prompt
# holds the same string). Later turns continue the context as Search-R1's rollout does: every earlier reply, then
# the env's answer to it (``"\n\n<information>…</information>\n\n"`` or the invalid-turn sentence), nothing else.
SEARCH_R1_TEMPLATE = PromptTemplate(
    intro=(
        "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
        "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine "
        "by <search> query </search> and it will return the top searched results between <information> and "
        "</information>. You can search as many times as your want. If you find no further external knowledge "
        "needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
        "illustrations. For example, <answer> Beijing </answer>. Question: {task}\n"
    ),
    history_header="",
    history_item="{turn}{feedback}",
    current="",
    current_first="",
    admissible="",
    instruction="",
    history_separator="",
    piece_separator="",
)

# stepgym's own wording of the same protocol (format "qa-stepgym"): the tags and the rule are Search-R1's, the
# history is labelled and the prompt ends with an explicit instruction.
QA_TEMPLATE = PromptTemplate(
    intro=(
        "Answer the question below. Reason inside <think> </think> whenever you get new information. If you need "
        "knowledge you do not have, call the search engine by writing a query inside <search> </search>; the "
        "results come back inside <information> </information>. You may search several times. When you are "
        "ready, give the final answer inside <answer> </answer> with no explanation, for example "
        "<answer> Paris </answer>.\nQuestion: {task}"
    ),
    history_header="Your turns so far:",
    history_item="{turn}\n{feedback}",
    current="",
    current_first="",
    admissible="",
    instruction="Continue with your next turn.",
)


def _search_r1_feedback(reason: str) -> str:
    return INVALID_FEEDBACK


_parse_lenient = functools.partial(parse_search_r1, strict=False)  # module-level, so the format pickles

_REPLY = {"reply_shape": ANSWER_REPLY, "span_mode": "clean_step_no_observation"}

#: Search-R1's prompt, one action per turn (the format ``StepGym/SearchQA-v0`` declares).
FORMAT = TextFormat(
    "qa",
    SEARCH_R1_TEMPLATE,
    parse_search_r1,
    _search_r1_feedback,
    history_length=None,
    task_text=normalize_question,
    **_REPLY,
)

#: Search-R1's prompt and its own first-tag-wins rule (the env's default, ``strict_format=False``).
LENIENT_FORMAT = TextFormat(
    "qa-lenient",
    SEARCH_R1_TEMPLATE,
    _parse_lenient,
    _search_r1_feedback,
    history_length=None,
    task_text=normalize_question,
    **_REPLY,
)

#: stepgym's own wording, one action per turn.
STEPGYM_FORMAT = TextFormat(
    "qa-stepgym", QA_TEMPLATE, parse_search_r1, _search_r1_feedback, history_length=None, **_REPLY
)
