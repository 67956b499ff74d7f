"""The text format of ``StepGym/ALFWorld-v0`` (``"alfworld"``): the prompt verl-agent trains GiGPO with on ALFWorld
(the task, the last K = 2 observations and actions, the current observation, the admissible actions) and ReAct's
reply, ``<think>…</think><action>…</action>``, read strictly with the action lowercased (ALFWorld's commands are
lowercase). StepOPSD's target is the ``<action>`` tag (the paper's ALFWorld choice).
"""

from __future__ import annotations

from stepgym.text_format import OBSERVATION_STEPS, REACT_INSTRUCTION, PromptTemplate, react_format

__all__ = ["FORMAT", "TEMPLATE"]

TEMPLATE = PromptTemplate(
    intro="You are an agent acting in a household simulated by the ALFWorld text game. Your task is to: {task}",
    admissible="Your admissible actions in this situation are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
    **OBSERVATION_STEPS,
)

#: The format ``make_text_env`` / ``stepgym train`` use for the env.
FORMAT = react_format("alfworld", TEMPLATE, lowercase=True)
