"""TextCraft's text format: the ReAct prompt (``<think>`` then ``<action>``) with the crafting commands as the task.

The task (``info[GOAL]``) is the whole reset text (the crafting commands and the goal), so it stays in every
prompt when the history window drops the first observation. The wording of the game's rules follows the
ADaPT/AgentGym TextCraft instructions (get, craft using, inventory); the reply parser is the ALFWorld one without
lower-casing (TextCraft's commands are case-sensitive, as upstream reads them).
"""

from __future__ import annotations

from stepgym.text_format import OBSERVATION_STEPS, REACT_INSTRUCTION, PromptTemplate, react_format

__all__ = ["FORMAT", "TEMPLATE"]

TEMPLATE = PromptTemplate(
    intro=(
        "You are playing TextCraft, a text game of Minecraft recipes. Commands: 'get <count> <item>' fetches a "
        "basic item, 'craft <count> <item> using <count> <input>, <count> <input>' crafts with one of the recipes "
        "below (name a concrete item for a group such as planks), 'inventory' lists what you hold. Your task:\n"
        "{task}"
    ),
    admissible="Some admissible actions here are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
    **OBSERVATION_STEPS,
)

FORMAT = react_format("textcraft", TEMPLATE)
