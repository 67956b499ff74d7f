"""StepGym/Tau2-v0's text format: the domain's tools as JSON schemas, replies as tool calls or messages.

The prompt is the agent's instructions and policy, the tools (upstream's OpenAI schemas, one JSON object a line
inside ``<tools>``, the way Hermes/Qwen chat templates list them) and the whole conversation. A reply is read as:

* ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes/Qwen): one call per turn; text outside
  the tag is dropped (upstream's agents send either a call or a message, never both);
* ``<action>...</action>`` (ReAct, with or without ``<think>``): a call written as JSON or ``name(key=value)``,
  or else a message to the user;
* anything else: a message to the user (``<think>`` blocks removed).

A call becomes the env's canonical action (:func:`stepgym.envs.tau2.calls.call_text`). A malformed call (bad
JSON, two calls, an unclosed tag) is not format-valid: the env gets nothing and the model an invalid-reply
observation naming the fault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from stepgym.envs.tau2.calls import call_text, looks_like_call, read_call
from stepgym.text_format import ParseResult, PromptTemplate, TextFormat, invalid_parse, parse_react

__all__ = ["FORMAT", "TEMPLATE", "TOOL_CALL_REPLY", "parse_tool_reply", "render_tools", "tool_call_spans"]

INSTRUCTION = (
    "Now it is your turn. You may think first inside <think> </think>. Then either call one tool, written as "
    '<tool_call>{{"name": <tool name>, "arguments": <JSON object>}}</tool_call>, or write a message to the user '
    "(plain text). Never both in one turn."
)

TEMPLATE = PromptTemplate(
    intro="{task}",
    history_header="The conversation so far:",
    history_item="{observation}\nAgent: {action}",
    current="{observation}",
    current_first="{observation}",
    admissible="",
    instruction=INSTRUCTION,
    piece_separator="\n\n",
)

_THINK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_CALL_OPEN = re.compile(r"<tool_call>", re.IGNORECASE)
_CALL_CLOSE = re.compile(r"</tool_call>", re.IGNORECASE)
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.IGNORECASE | re.DOTALL)


def render_tools(schemas: Sequence[dict[str, Any]]) -> str:
    """The tools block of the prompt: each tool's JSON schema on one line inside ``<tools>``."""
    lines = "\n".join(json.dumps(s, sort_keys=True, ensure_ascii=False) for s in schemas)
    return f"# Tools\nYou may call these tools (JSON schemas):\n<tools>\n{lines}\n</tools>"


def _as_action(text: str) -> ParseResult | str:
    """A call's canonical text (or the reason it is malformed); a message as it is."""
    if looks_like_call(text):
        got = read_call(text)
        if isinstance(got, str):
            return invalid_parse(got)
        return call_text(*got)
    return text


def parse_tool_reply(text: Any) -> ParseResult:
    """Parse one model reply (see the module): a tool call in its canonical JSON, or a message to the user."""
    if not isinstance(text, str):
        return invalid_parse(f"the reply must be text, got {type(text).__name__}")
    think_m = _THINK.search(text)
    think = think_m.group(0)[7:-8].strip() if think_m else None
    body = _THINK.sub("", text)
    n_open, n_close = len(_CALL_OPEN.findall(body)), len(_CALL_CLOSE.findall(body))
    if n_open or n_close:
        if n_open != n_close:
            return invalid_parse("a <tool_call> tag is not closed by </tool_call>")
        if n_open > 1:
            return invalid_parse("one tool call per turn (the reply has several <tool_call> blocks)")
        inner = _CALL_BLOCK.search(body)
        if inner is None:
            return invalid_parse("the <tool_call> tag is not closed by </tool_call>")
        content = inner.group(1).strip()
        if not content:
            return invalid_parse("the <tool_call> tag is empty")
        got = read_call(content) if content.startswith("{") else "a <tool_call> must hold a JSON object"
        if isinstance(got, str):
            return invalid_parse(got)
        return ParseResult(format_valid=True, action=call_text(*got), think=think)
    if re.search(r"</?action>", body, re.IGNORECASE):
        react = parse_react(body, require_think=False)
        if not react.format_valid or react.action is None:
            return react
        got = _as_action(react.action)
        if isinstance(got, ParseResult):
            return got
        return ParseResult(format_valid=True, action=got, think=think)
    message = body.strip()
    if not message:
        return invalid_parse("the reply is empty (no tool call and no message)")
    if message.startswith("{"):  # a bare JSON call without its tags
        got = _as_action(message)
        if isinstance(got, ParseResult):
            return got
        return ParseResult(format_valid=True, action=got, think=think)
    return ParseResult(format_valid=True, action=message, think=think)


def tool_call_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the ``<tool_call>...</tool_call>`` blocks of a reply (tags included),
    so per-call credit can land on the call's tokens."""
    return [(m.start(), m.end()) for m in _CALL_BLOCK.finditer(text if isinstance(text, str) else "")]


def invalid_feedback(reason: str) -> str:
    return (
        f"Your reply could not be read: {reason}. Reply with one <tool_call>{{...}}</tool_call> or a message to the "
        "user."
    )


#: The reply a scripted policy or the warm-up writes for a call (Hermes/Qwen's tag around the call's JSON); a
#: message to the user is written as it is (:meth:`TextFormat.reply`). StepOPSD's span is the call's tag.
TOOL_CALL_REPLY = "<tool_call>{action}</tool_call>"

FORMAT = TextFormat(
    "tau2",
    TEMPLATE,
    parse_tool_reply,
    invalid_feedback,
    history_length=None,
    reply_shape=TOOL_CALL_REPLY,
    span_mode="action_only",
)
