"""A text format declares its reply shape and its StepOPSD span (``TextFormat.reply_shape`` / ``span_mode``): a new
format with its own tag gets valid scripted and warm-up replies and StepOPSD spans on that tag, where the replies'
shape used to be guessed from four fixed patterns (an ``<action>`` reply the format's own parser rejects, and a
``None`` target span)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from stepgym.text_format import ParseResult, PromptTemplate, TextFormat, invalid_parse, react_feedback

ENV = "StepGym/CreditToy-v0"
KWARGS = {"n_tasks": 4, "n_rooms": 3, "n_distractors": 1, "split": "train"}
_MOVE = re.compile(r"<move>(.*?)</move>", re.DOTALL)


def parse_move(text: Any) -> ParseResult:
    """Exactly one non-empty ``<move>…</move>``; the action is its content."""
    if not isinstance(text, str):
        return invalid_parse("not text")
    found = _MOVE.findall(text)
    if len(found) != 1 or text.count("<move>") != 1 or not found[0].strip():
        return invalid_parse("exactly one <move>...</move> tag")
    return ParseResult(format_valid=True, action=found[0].strip())


TEMPLATE = PromptTemplate(
    intro="Task: {task}.",
    history_header="Last steps:",
    history_item="{observation} > {action}",
    current="Now: {observation}",
    current_first="Now: {observation}",
    admissible="Moves: {admissible}.",
    instruction="Reply with <move>one move</move>.",
)

MOVE = TextFormat(
    "move",
    TEMPLATE,
    parse_move,
    react_feedback,
    reply_shape="I will {action} now. <move>{action}</move>",
    span_mode="action_only",
)


@pytest.fixture(scope="module")
def tokenizer():
    from stepgym.trainers.models import train_tokenizer

    return train_tokenizer(
        ["go forward take the key open the door wait <move> </move> I will now"], vocab_size=300
    )


def test_the_format_declares_its_tag_and_span() -> None:
    from stepgym.steps.teacher_context import span_rule

    assert MOVE.action_tag == "move"
    assert span_rule(MOVE) == ("action_only", "move")
    assert span_rule(MOVE, "clean_step_no_observation") == ("clean_step_no_observation", "move")
    assert MOVE.reply("go forward") == "I will go forward now. <move>go forward</move>"
    rng = np.random.default_rng(0)
    for _ in range(50):  # any plain action text gives a valid reply whose action is that text
        action = " ".join(rng.choice(["go", "take", "key", "door", "red", "1"], size=int(rng.integers(1, 4))))
        parsed = MOVE.parse(MOVE.reply(action))
        assert parsed.format_valid and parsed.action == action


def test_a_shape_the_parser_rejects_or_a_span_without_a_tag_is_refused() -> None:
    with pytest.raises(ValueError, match="not a valid reply in the format itself"):
        TextFormat("move", TEMPLATE, parse_move, react_feedback, reply_shape="<action>{action}</action>")
    with pytest.raises(ValueError, match="needs a tag around"):
        TextFormat("move", TEMPLATE, parse_move, react_feedback, reply_shape="<move> {action}</move>")
    with pytest.raises(ValueError, match="span_mode must be one of"):
        TextFormat(
            "move", TEMPLATE, parse_move, react_feedback, reply_shape="<move>{action}</move>", span_mode="x"
        )
    plain = TextFormat(
        "move", TEMPLATE, parse_move, react_feedback, reply_shape="<move> {action}</move>",
        span_mode="clean_step_no_observation",
    )  # fmt: skip
    assert plain.action_tag is None and plain.parse(plain.reply("wait")).format_valid


def test_scripted_and_warmup_replies_are_valid_in_the_new_format(tokenizer) -> None:
    """The warm-up's corpus and the trainer's scripted rollouts (the warm-up's rows) write every action in the
    format's declared shape: every reply the env reads is format-valid."""
    from stepgym.trainers.backends import ScriptedBackend
    from stepgym.trainers.collector import Collector
    from stepgym.trainers.samples import PromptEncoder
    from stepgym.trainers.warmup import env_corpus

    texts = env_corpus(ENV, KWARGS, fmt=MOVE, history=1, episodes=3, seed=0)
    replies = texts[3::3]  # after the two seed texts: (prompt, reply, observation) per step
    assert replies and all(MOVE.parse(r).format_valid and "<move>" in r for r in replies)
    col = Collector(
        ENV,
        KWARGS,
        MOVE,
        history=1,
        group_size=2,
        encoder=PromptEncoder(tokenizer, max_prompt_tokens=256),
        backend=ScriptedBackend(tokenizer, "random", render=MOVE.reply),
    )
    try:
        ids = col.task_ids()
        ro = col.collect([(ids[0], 1), (ids[1], 2)], seed_rng=np.random.default_rng(0))
    finally:
        col.close()
    assert ro.rows and all(r.record["format_valid"] for r in ro.rows)
    assert all(r.response_text.startswith("I will ") for r in ro.rows)


def test_stepopsd_targets_the_formats_own_tag(tokenizer) -> None:
    from stepgym.shapers.stepopsd_text import structural_target_span
    from stepgym.steps.row import StepRow
    from stepgym.steps.teacher_context import (
        ContextBudget,
        TeacherStats,
        opsd_items,
        prefix_token_counter,
        span_rule,
        target_span,
    )

    reply = MOVE.reply("take key")
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    span = target_span(tokenizer, ids, span_rule(MOVE), reply)
    count = prefix_token_counter(tokenizer, ids)
    assert span is not None
    assert span == structural_target_span(reply, count, len(ids), mode="action_only", tag="move")
    assert tokenizer.decode(ids[span[0] : span[1]]).replace(" ", "").endswith("takekey</move>")
    assert span[1] - span[0] < len(ids)  # the tag, not the whole reply
    # what the old guess gave this format: an <action> span, which finds nothing in its replies
    assert structural_target_span(reply, count, len(ids), mode="action_only", tag="action") is None
    row = StepRow(0, 0, 0, 0, "t", "Now: room", [1, 2, 3], ids, reply)
    items, spans = opsd_items(
        [row], ["peer won"], tokenizer, ContextBudget(4096, 1), TeacherStats(), span=span_rule(MOVE)
    )
    assert spans == [[span]] and items[0].target == ids[span[0] : span[1]]
