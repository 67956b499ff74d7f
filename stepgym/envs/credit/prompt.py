"""The credit toys' text format (``"credit"``): compact prompts for a tiny model trained from scratch."""

from __future__ import annotations

import functools

from stepgym.text_format import ACTION_REPLY, PromptTemplate, TextFormat, parse_react

__all__ = ["FORMAT", "FORMAT_TEMPLATE"]

# The credit-assignment toys' compact format: prompts a tiny model trained from scratch can read (~100 tokens per
# turn instead of ~600), no <think> block (a 100k-parameter model has nothing to reason with); the reply is
# <action>…</action>, read by the same strict parser as ALFWorld's, so validity means the same thing.
FORMAT_TEMPLATE = PromptTemplate(
    intro="Task: {task}.",
    history_header="Last steps:",
    history_item="{observation} > {action}",
    current="Now: {observation}",
    current_first="Now: {observation}",
    admissible="Actions: {admissible}.",
    instruction="Reply with <action>one action</action>.",
)


def _credit_feedback(reason: str) -> str:
    return f"Invalid reply: {reason}. Reply with one admissible action inside <action> </action>."


#: The credit toys' text format (``"credit"``: ``StepGym/CreditToy-v0`` and ``StepGym/CreditFamily-v0``): the
#: reply is one ``<action>`` tag, read by the same strict parser as ALFWorld's (no ``<think>``); StepOPSD's target
#: is that tag.
FORMAT = TextFormat(
    "credit",
    FORMAT_TEMPLATE,
    functools.partial(parse_react, require_think=False),
    _credit_feedback,
    history_length=2,
    reply_shape=ACTION_REPLY,
    span_mode="action_only",
)
