"""What a text format is: the prompt's pieces, the reply parser and the result of parsing one reply.

These types sit in the bottom layer so that an env can declare its own prompt in its own module (``register(...,
text_format="mypkg.myenv:FORMAT")``, see docs/byo_env.md) without importing the wrappers. The formats stepgym ships
and the machinery that renders prompts and parses replies are in :mod:`stepgym.wrappers.text`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTION_REPLY",
    "OBSERVATION_STEPS",
    "REACT_INSTRUCTION",
    "REACT_REPLY",
    "SPAN_MODES",
    "ParseResult",
    "PromptTemplate",
    "TextFormat",
    "invalid_parse",
    "parse_react",
    "react_feedback",
    "react_format",
]


@dataclass(frozen=True)
class ParseResult:
    """The outcome of parsing one model reply.

    ``action`` is what the env receives (``None`` when the reply is not format-valid), ``think`` the reasoning
    text when the format has one, ``error`` a short reason ('' when valid).
    """

    format_valid: bool
    action: str | None
    think: str | None = None
    error: str = ""


_WS = re.compile(r"\s+")
_TAG_CACHE: dict[str, tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]] = {}


def _tag_patterns(tag: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    if tag not in _TAG_CACHE:
        _TAG_CACHE[tag] = (
            re.compile(rf"<{tag}>", re.IGNORECASE),
            re.compile(rf"</{tag}>", re.IGNORECASE),
            re.compile(rf"<{tag}>(.*?)</{tag}>", re.IGNORECASE | re.DOTALL),
        )
    return _TAG_CACHE[tag]


def invalid_parse(reason: str) -> ParseResult:
    """A :class:`ParseResult` for a reply that is not format-valid, with its reason."""
    return ParseResult(format_valid=False, action=None, error=reason)


def parse_react(text: Any, *, require_think: bool = True, lowercase: bool = False) -> ParseResult:
    """Parse ``<think>…</think><action>…</action>`` (ALFWorld / WebShop, as trained in verl-agent and AHEAD).

    Valid iff: ``text`` is a string; it holds exactly one ``<action>`` and one ``</action>`` tag, enclosing a
    non-empty action without further tags; and (``require_think``) exactly one ``<think>…</think>`` block that
    closes before ``<action>`` opens. Tags are case-insensitive; text outside the tags is allowed. The action's
    whitespace is collapsed; ``lowercase`` lowercases it (ALFWorld's commands are lowercase).
    """
    if not isinstance(text, str):
        return invalid_parse(f"the reply must be text, got {type(text).__name__}")
    a_open, a_close, a_block = _tag_patterns("action")
    n_open, n_close = len(a_open.findall(text)), len(a_close.findall(text))
    if n_open == 0 and n_close == 0:
        return invalid_parse("no <action>...</action> tag")
    if n_open != 1 or n_close != 1:
        return invalid_parse("there must be exactly one <action>...</action> tag")
    m = a_block.search(text)
    if m is None:
        return invalid_parse("the <action> tag is not closed by </action>")
    action = _WS.sub(" ", m.group(1)).strip()
    if not action:
        return invalid_parse("the <action> tag is empty")
    if "<" in action and ">" in action and re.search(r"</?[a-zA-Z]+>", action):
        return invalid_parse("the action contains tags")
    think: str | None = None
    if require_think:
        t_open, t_close, t_block = _tag_patterns("think")
        if len(t_open.findall(text)) != 1 or len(t_close.findall(text)) != 1:
            return invalid_parse("there must be exactly one <think>...</think> block before the action")
        tm = t_block.search(text)
        if tm is None or tm.end() > m.start():
            return invalid_parse("the <think>...</think> block must close before <action>")
        think = tm.group(1).strip()
    if lowercase:
        action = action.lower()
    return ParseResult(format_valid=True, action=action, think=think)


@dataclass(frozen=True)
class PromptTemplate:
    """The pieces of a prompt, each a ``str.format`` template. A piece is left out when its fields are empty
    (the ``intro`` when the env has no goal: no ``{task}``).

    Fields available: ``{task}``, ``{observation}``, ``{admissible}`` (the admissible actions, quoted and comma
    separated), ``{step_count}`` (actions taken so far), ``{step_number}`` (``step_count + 1``),
    ``{history_count}`` (steps shown), ``{history}`` (the rendered history items), and in ``history_item``
    ``{n}`` (1-based step number), ``{observation}`` (what the agent saw when it acted), ``{action}`` (the parsed
    action, :func:`~stepgym.wrappers.text.action_text`), ``{turn}`` (the model's whole reply, :func:`~stepgym.wrappers.text.turn_text`) and ``{feedback}`` (the
    env's answer).
    """

    intro: str
    history_header: str
    history_item: str
    current: str
    current_first: str
    admissible: str
    instruction: str
    history_separator: str = "\n"
    piece_separator: str = "\n"


REACT_INSTRUCTION = (
    "Now it is your turn to act. First reason step by step about the situation inside <think> </think> tags. "
    "Then choose exactly one admissible action and write it inside <action> </action> tags."
)


#: The reply shape of the formats whose reply is one ``<action>`` tag (the credit toys', ``plain``).
ACTION_REPLY = "<action>{action}</action>"

#: The reply shape of the ReAct formats (``<think>`` then ``<action>``: ALFWorld, WebShop, ...).
REACT_REPLY = "<think>The next step is {action}.</think>\n<action>{action}</action>"

#: StepOPSD's target span in one reply (docs/shapers.md §5.1): ``action_only``, the tag around ``{action}`` in the
#: format's reply shape, tags included (the paper's ALFWorld choice); ``clean_step_no_observation``, the whole
#: reply (the paper's Search-QA choice).
SPAN_MODES: tuple[str, ...] = ("action_only", "clean_step_no_observation")

_ACTION_TAG = re.compile(r"<([A-Za-z_][\w-]*)>\{action\}</\1>")


@dataclass(frozen=True)
class TextFormat:
    """Everything the text interface needs to know about one env family.

    ``history_length`` is the default K of :func:`~stepgym.wrappers.text.render_prompt` (``None``: the whole history, Search-R1's
    growing context). ``invalid_feedback(reason)`` is the observation an unparsable reply gets. ``task_text``
    rewrites the task before it is rendered (Search-R1's prompt ends the question with ``?``, as its data
    processing does); a module-level function, so the format pickles.

    The format also declares its replies: ``reply_shape`` is a whole valid reply with ``{action}`` standing for the
    action (what the warm-up and the scripted policies write, :meth:`reply`; checked against ``parse`` when the
    format is made), and ``span_mode`` StepOPSD's target span in a reply (:data:`SPAN_MODES`; ``action_only``
    targets the tag around ``{action}`` in ``reply_shape``, :attr:`action_tag`).
    """

    name: str
    template: PromptTemplate
    parse: Callable[[Any], ParseResult]
    invalid_feedback: Callable[[str], str]
    history_length: int | None = 2
    extras: Mapping[str, Any] = field(default_factory=dict)
    task_text: Callable[[str], str] | None = None
    reply_shape: str = ACTION_REPLY
    span_mode: str = "action_only"

    def __post_init__(self) -> None:
        if "{action}" not in self.reply_shape:
            raise ValueError(
                f"text format {self.name!r}: reply_shape must hold '{{action}}', got {self.reply_shape!r}"
            )
        if self.span_mode not in SPAN_MODES:
            raise ValueError(
                f"text format {self.name!r}: span_mode must be one of {SPAN_MODES}, got {self.span_mode!r}"
            )
        if self.span_mode == "action_only" and self.action_tag is None:
            raise ValueError(
                f"text format {self.name!r}: span_mode 'action_only' needs a tag around {{action}} in reply_shape "
                f"({self.reply_shape!r}); declare span_mode='clean_step_no_observation' for the whole reply"
            )
        parsed = self.parse(self.reply("look"))
        if not parsed.format_valid:
            raise ValueError(
                f"text format {self.name!r}: its reply_shape {self.reply_shape!r} is not a valid reply in the format "
                f"itself ({parsed.error}); declare the shape its parser accepts"
            )

    @property
    def action_tag(self) -> str | None:
        """The tag around ``{action}`` in :attr:`reply_shape` (``"action"`` for ``<action>{action}</action>``), or
        ``None``: StepOPSD's ``action_only`` span is that tag's match."""
        m = _ACTION_TAG.search(self.reply_shape)
        return m.group(1) if m else None

    def reply(self, action: str) -> str:
        """The whole reply that takes ``action``: :attr:`reply_shape` with the action in it, or ``action`` itself
        when it already is a valid reply that the shape would not carry as the same action (a policy that writes
        whole turns: Search-QA's expert; a tool-use format's message to the user, which its ``<tool_call>`` shape
        does not hold, while a call, also readable bare, is written in the shape)."""
        shaped = self.reply_shape.replace("{action}", action)
        bare = self.parse(action)
        if not bare.format_valid:
            return shaped
        wrapped = self.parse(shaped)
        return shaped if wrapped.format_valid and wrapped.action == bare.action else action


def react_feedback(reason: str) -> str:
    """The invalid-format observation of the ReAct formats (``<think>`` + ``<action>``)."""
    return (
        f"Invalid format: {reason}. Reply with your reasoning inside <think> </think> followed by exactly one "
        "admissible action inside <action> </action>."
    )


#: verl-agent's wording (its ALFWorld prompt) of the history and the current step, for an env whose observations
#: are text: ``PromptTemplate(intro=..., admissible=..., instruction=..., **OBSERVATION_STEPS)``.
OBSERVATION_STEPS: Mapping[str, str] = {
    "history_header": (
        "You have taken {step_count} action(s) so far. Here are the last {history_count} observation(s) and the "
        "action you took after each:"
    ),
    "history_item": "[Step {n}] Observation: {observation}\n[Step {n}] Action: {action}",
    "current": "You are now at step {step_number}. Your current observation is: {observation}",
    "current_first": "Your current observation is: {observation}",
}


def react_format(name: str, template: PromptTemplate, *, lowercase: bool = False) -> TextFormat:
    """A ReAct format as the verl-agent envs' (ALFWorld, WebShop, Sokoban, ...): the reply
    ``<think>…</think><action>…</action>`` read strictly by :func:`parse_react` (the action lowercased with
    ``lowercase``), :func:`react_feedback` on an invalid one, the last 2 steps in the prompt and StepOPSD's target on
    the ``<action>`` tag. The parser is a ``functools.partial`` of a module-level function, so the format pickles to
    env workers."""
    parse = functools.partial(parse_react, lowercase=True) if lowercase else parse_react
    return TextFormat(name, template, parse, react_feedback, history_length=2, reply_shape=REACT_REPLY)
