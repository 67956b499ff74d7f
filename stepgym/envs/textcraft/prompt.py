"""TextCraft's text format: the ReAct prompt (``<think>`` then ``<action>``) with the crafting commands as the task.

The task (``info[GOAL]``) is the whole reset text (the crafting commands and the goal), so it stays in every
prompt when the history window drops the first observation. The wording of the game's rules follows the
ADaPT/AgentGym TextCraft instructions (get, craft using, inventory); the reply parser is the ALFWorld one without
lower-casing (TextCraft's commands are case-sensitive, as upstream reads them).
"""

from __future__ import annotations

from stepgym.text_format import (
    REACT_INSTRUCTION,
    REACT_REPLY,
    PromptTemplate,
    TextFormat,
    parse_react,
    react_feedback,
)

__all__ = ["FORMAT", "TEMPLATE"]

TEMPLATE = PromptTemplate(
    intro=(
        "You are playing TextCraft, a text game of Minecraft recipes. Commands: 'get <count> <item>' fetches a "
        "basic item, 'craft <count> <item> using <count> <input>, <count> <input>' crafts with one of the recipes "
        "below (name a concrete item for a group such as planks), 'inventory' lists what you hold. Your task:\n"
        "{task}"
    ),
    history_header=(
        "You have taken {step_count} action(s) so far. Here are the last {history_count} observation(s) and the "
        "action you took after each:"
    ),
    history_item="[Step {n}] Observation: {observation}\n[Step {n}] Action: {action}",
    current="You are now at step {step_number}. Your current observation is: {observation}",
    current_first="Your current observation is: {observation}",
    admissible="Some admissible actions here are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
)

FORMAT = TextFormat(
    "textcraft",
    TEMPLATE,
    parse_react,
    react_feedback,
    history_length=2,
    reply_shape=REACT_REPLY,
    span_mode="action_only",
)
