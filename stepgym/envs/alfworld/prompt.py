"""The text format of ``StepGym/ALFWorld-v0`` (``"alfworld"``): the prompt verl-agent trains GiGPO with on ALFWorld
(the task, the last K = 2 observations and actions, the current observation, the admissible actions) and ReAct's
reply, ``<think>…</think><action>…</action>``, read strictly with the action lowercased (ALFWorld's commands are
lowercase). StepOPSD's target is the ``<action>`` tag (the paper's ALFWorld choice).
"""

from __future__ import annotations

import functools

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
    intro="You are an agent acting in a household simulated by the ALFWorld text game. Your task is to: {task}",
    history_header=(
        "You have taken {step_count} action(s) so far. Here are the last {history_count} observation(s) and the "
        "action you took after each:"
    ),
    history_item="[Step {n}] Observation: {observation}\n[Step {n}] Action: {action}",
    current="You are now at step {step_number}. Your current observation is: {observation}",
    current_first="Your current observation is: {observation}",
    admissible="Your admissible actions in this situation are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
)

_parse = functools.partial(parse_react, lowercase=True)  # module-level, so the format pickles to env workers

#: The format ``make_text_env`` / ``stepgym train`` use for the env.
FORMAT = TextFormat(
    "alfworld",
    TEMPLATE,
    _parse,
    react_feedback,
    history_length=2,
    reply_shape=REACT_REPLY,
    span_mode="action_only",
)
