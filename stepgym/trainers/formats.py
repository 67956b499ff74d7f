"""Text formats the trainer uses: the registered ones of :mod:`stepgym.wrappers.text`, plus a compact one for the
credit-assignment toy, and the reply renderer the scripted backend answers with.

The toy's format keeps prompts short (a tiny model trained from scratch reads ~100 tokens per turn instead of
~600) and drops the ``<think>`` block (a 100k-parameter model has nothing to reason with); the reply is
``<action>…</action>``, parsed by the same strict parser as ALFWorld's, so validity means the same thing.
"""

from __future__ import annotations

from collections.abc import Callable

from stepgym.wrappers.text import (
    ENV_FAMILIES,
    FORMATS,
    ParseResult,
    PromptTemplate,
    TextFormat,
    get_format,
    parse_react,
)

__all__ = ["CREDIT_FORMAT", "reply_renderer", "resolve_format"]


def _credit_parse(text: str) -> ParseResult:
    """The toy's parser: ALFWorld's strict one without the ``<think>`` block (module-level, so the format pickles
    and travels to env workers)."""
    return parse_react(text, require_think=False)


def _credit_feedback(reason: str) -> str:
    return f"Invalid reply: {reason}. Reply with one admissible action inside <action> </action>."


CREDIT_TEMPLATE = PromptTemplate(
    intro="Task: {task}.",
    history_header="Last steps:",
    history_item="{observation} > {action}",
    current="Now: {observation}",
    current_first="Now: {observation}",
    admissible="Actions: {admissible}.",
    instruction="Reply with <action>one action</action>.",
)

CREDIT_FORMAT = TextFormat(
    "credit",
    CREDIT_TEMPLATE,
    _credit_parse,
    _credit_feedback,
    history_length=2,
)

_TRAINER_FORMATS = {"credit": CREDIT_FORMAT}
_TRAINER_FAMILIES = {"StepGym/CreditToy-v0": "credit"}


def resolve_format(env_id: str, name: str = "") -> TextFormat:
    """The text format by name, else by env id (the wrappers' registry, then the trainer's own)."""
    key = name or ENV_FAMILIES.get(env_id) or _TRAINER_FAMILIES.get(env_id)
    if not key:
        raise ValueError(
            f"no text format known for {env_id!r}: pass --env.text-format alfworld|webshop|qa|credit"
        )
    if key in _TRAINER_FORMATS:
        return _TRAINER_FORMATS[key]
    if key in FORMATS:
        return get_format(key)
    raise ValueError(f"unknown text format {key!r}; known: {sorted({*FORMATS, *_TRAINER_FORMATS})}")


def reply_renderer(fmt: TextFormat) -> Callable[[str], str]:
    """How a scripted policy's action is written as a model reply in ``fmt`` (a valid reply by construction)."""
    if fmt.name == "credit":
        return lambda a: f"<action>{a}</action>"
    if fmt.name == "qa":
        return lambda a: a if "<" in a else f"<answer>{a}</answer>"
    return lambda a: f"<think>The next step is {a}.</think>\n<action>{a}</action>"
