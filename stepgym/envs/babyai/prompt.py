"""The text format of ``StepGym/BabyAI-v0`` (declared at its registration as ``module:FORMAT``).

BabyAI-Text's prompt (``experiments/agents/base_agent.py`` of Carta et al.'s code) lists the possible actions,
states the goal, then shows the last 3 observations with the action taken after each ("Observation 0: ...",
"Action 0: ..."); its policy scores the six action words. stepgym keeps that content and window (the 2 previous
steps and the current observation) and asks for the reply in the ReAct tags every stepgym format reads
(``<think>`` then ``<action>``), lowercased as the action words are.
"""

from __future__ import annotations

from stepgym.text_format import REACT_INSTRUCTION, PromptTemplate, react_format

__all__ = ["FORMAT", "TEMPLATE"]

TEMPLATE = PromptTemplate(
    intro=(
        "You are an agent in a BabyAI grid world. Possible action of the agent: turn left, turn right, go "
        "forward, pick up, drop, toggle.\nGoal of the agent: {task}"
    ),
    history_header="You have taken {step_count} action(s) so far. The last {history_count} step(s):",
    history_item="Observation {n}: {observation}\nAction {n}: {action}",
    current="Observation {step_number}: {observation}",
    current_first="Observation 1: {observation}",
    admissible="Your admissible actions are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
)

FORMAT = react_format("babyai", TEMPLATE, lowercase=True)
