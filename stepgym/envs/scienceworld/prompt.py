"""The text format of ``StepGym/ScienceWorld-v0`` (``text_format="stepgym.envs.scienceworld.prompt:FORMAT"``).

ReAct replies (``<think>`` then ``<action>``), the last two steps as history, as the ALFWorld format. ScienceWorld's
valid-action list has hundreds of entries per state (every ``connect X to Y`` pair), so the prompt lists upstream's
action templates (its ``get_possible_actions()`` wording) instead of the actions themselves, the way the
ScienceWorld paper's LLM baselines are prompted; the full list stays in the info's ``ADMISSIBLE_ACTIONS``.
"""

from __future__ import annotations

from stepgym.text_format import OBSERVATION_STEPS, REACT_INSTRUCTION, PromptTemplate, react_format

__all__ = ["ACTION_TEMPLATES", "FORMAT", "TEMPLATE"]

#: upstream's action templates (OBJ: an object you can see; LOC: a location)
ACTION_TEMPLATES = (
    "open OBJ",
    "close OBJ",
    "activate OBJ",
    "deactivate OBJ",
    "connect OBJ to OBJ",
    "disconnect OBJ",
    "use OBJ [on OBJ]",
    "look around",
    "look at OBJ",
    "look in OBJ",
    "read OBJ",
    "move OBJ to OBJ",
    "pick up OBJ",
    "put down OBJ",
    "pour OBJ into OBJ",
    "dunk OBJ into OBJ",
    "mix OBJ",
    "go to LOC",
    "teleport to LOC",
    "eat OBJ",
    "flush OBJ",
    "focus on OBJ",
    "wait",
    "wait1",
    "inventory",
    "task",
)

TEMPLATE = PromptTemplate(
    intro=(
        "You are an agent doing an elementary-science experiment in the ScienceWorld text simulator. "
        "{task}\nActions are commands of these forms: " + "; ".join(ACTION_TEMPLATES) + ". "
        "'focus on OBJ' commits to an object as the task's answer: focus only on what the task asks for."
    ),
    admissible="",
    instruction=REACT_INSTRUCTION.replace("admissible action", "action"),
    **OBSERVATION_STEPS,
)

FORMAT = react_format("scienceworld", TEMPLATE, lowercase=True)
