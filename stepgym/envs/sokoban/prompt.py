"""The text format of ``StepGym/Sokoban-v0`` (``register(..., text_format="stepgym.envs.sokoban.prompt:FORMAT")``).

The prompt follows the one verl-agent trains GiGPO with on Sokoban (and RAGEN's): a legend of the grid symbols,
the rules (walls block, boxes can be pushed but not pulled), the goal, the last steps, the current grid and the
admissible actions; the reply is ReAct's ``<think>…</think><action>…</action>``, read by the same strict parser
as ALFWorld's (the action lowercased, so ``Up`` and ``up`` are one action). The wording is stepgym's own.
"""

from __future__ import annotations

from stepgym.text_format import REACT_INSTRUCTION, PromptTemplate, react_format

__all__ = ["FORMAT", "TEMPLATE"]

_LEGEND = (
    "You are playing Sokoban, a puzzle on a grid. Symbols: '#' wall, '_' floor, 'O' target, 'X' box, "
    "'√' box on a target, 'P' you, 'S' you standing on a target. You move one cell up, down, left or right; "
    "walls stop you. Walking into a box pushes it one cell further in the same direction if that cell is floor "
    "or a target; a box can never be pulled, so a box pushed into a corner off target is lost for good. "
    "Your goal: {task}."
)

TEMPLATE = PromptTemplate(
    intro=_LEGEND,
    history_header=(
        "You have taken {step_count} action(s) so far. Here are the last {history_count} grid(s) and the action "
        "you took on each:"
    ),
    history_item="[Step {n}] Grid:\n{observation}\n[Step {n}] Action: {action}",
    current="You are now at step {step_number}. The current grid is:\n{observation}",
    current_first="The current grid is:\n{observation}",
    admissible="Your admissible actions are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
)

#: The format ``make_text_env`` / ``stepgym train`` use for the env (history K = 2, as verl-agent's).
FORMAT = react_format("sokoban", TEMPLATE, lowercase=True)
