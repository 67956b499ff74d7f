"""The text format of ``StepGym/WebShop-v0`` and ``StepGym/WebShopSite-v0`` (``"webshop"``): verl-agent's WebShop
prompt (the instruction, the last K = 2 pages and actions, the current page, the admissible actions) and ReAct's
reply, ``<think>…</think><action>…</action>``, read strictly. StepOPSD's target is the ``<action>`` tag.
"""

from __future__ import annotations

from stepgym.text_format import REACT_INSTRUCTION, PromptTemplate, react_format

__all__ = ["FORMAT", "TEMPLATE"]

TEMPLATE = PromptTemplate(
    intro=(
        "You are a shopping agent on the WebShop website. Your task is to buy a product that matches this "
        "instruction: {task}"
    ),
    history_header=(
        "You have taken {step_count} action(s) so far. Here are the last {history_count} page(s) you saw and the "
        "action you took on each:"
    ),
    history_item="[Step {n}] Page: {observation}\n[Step {n}] Action: {action}",
    current="You are now at step {step_number}. The current page is: {observation}",
    current_first="The current page is: {observation}",
    admissible="Your admissible actions on this page are: [{admissible}].",
    instruction=REACT_INSTRUCTION,
)

#: The format ``make_text_env`` / ``stepgym train`` use for the env.
FORMAT = react_format("webshop", TEMPLATE)
