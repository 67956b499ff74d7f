"""The Search-QA prompt is Search-R1's (docs/evaluation.md says so): the default "qa" format renders Search-R1's
``base`` prompt byte for byte and continues the context as Search-R1's rollout does; stepgym's own wording stays
available as "qa-stepgym"."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from stepgym import schema
from stepgym.envs.searchqa.protocol import INVALID_FEEDBACK, render_information
from stepgym.wrappers.text import TextInterfaceWrapper, get_format, render_prompt

# Search-R1's make_prefix(template_type="base"), scripts/data_process/nq_search.py (PeterGriffinJin/Search-R1),
# typed out here independently of the package's copies, so a drift in either is caught.
SEARCH_R1_BASE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: {question}\n"
)


def _step(turn: str, feedback: str) -> schema.Step:
    return schema.Step("", turn, 0.0, feedback, False, False, {})


def test_the_default_qa_prompt_is_search_r1s() -> None:
    assert render_prompt("qa", task="who wrote hamlet?", observation="") == SEARCH_R1_BASE.format(
        question="who wrote hamlet?"
    )
    # Search-R1's data processing strips the question and ends it with "?"
    assert render_prompt("qa", task="  who wrote hamlet ", observation="") == SEARCH_R1_BASE.format(
        question="who wrote hamlet?"
    )
    assert render_prompt("qa-lenient", task="q?", observation="") == SEARCH_R1_BASE.format(question="q?")


def test_later_turns_continue_search_r1s_context() -> None:
    info = render_information(["Hamlet\nA tragedy by William Shakespeare."])
    history = [
        _step("<think>look it up</think>\n<search> hamlet author </search>", info),
        _step("no tags", INVALID_FEEDBACK),
    ]
    p = render_prompt("qa", task="who wrote hamlet?", observation="ignored", history=history)
    assert p == (
        SEARCH_R1_BASE.format(question="who wrote hamlet?")
        + "<think>look it up</think>\n<search> hamlet author </search>"
        + info
        + "no tags"
        + INVALID_FEEDBACK
    )


def test_stepgyms_own_wording_is_an_option() -> None:
    p = render_prompt("qa-stepgym", task="who wrote hamlet?", observation="")
    assert p.startswith("Answer the question below.") and p.endswith("Continue with your next turn.")
    assert "Question: who wrote hamlet?" in p and "Answer the given question." not in p
    assert get_format("qa-stepgym").parse is get_format("qa").parse  # same strict rule


def test_the_wrapped_env_prompt_equals_the_envs_own_prompt(data_dir: Path) -> None:
    """On the real env: the text interface's first prompt is the env's reset observation (Search-R1's prompt)."""
    env = TextInterfaceWrapper(gym.make("StepGym/SearchQA-v0", dataset="nq", split="test"))
    try:
        assert env.fmt.name == "qa"
        prompt, info = env.reset(seed=0)
        assert prompt == env.unwrapped.reset(seed=0)[0]
        assert prompt.startswith("Answer the given question.") and prompt.endswith("?\n")
    finally:
        env.close()
