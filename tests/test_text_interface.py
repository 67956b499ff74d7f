"""The LLM text interface: strict parsing, prompt rendering, and TextInterfaceWrapper on a toy env and ALFWorld."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from _toy_env import ToyRoomEnv, expert_actions

from stepgym import schema
from stepgym.envs.base import TextEnv, lru_get
from stepgym.envs.searchqa.prompt import parse_search_r1
from stepgym.envs.searchqa.protocol import INVALID_FEEDBACK as SEARCH_R1_INVALID_FEEDBACK
from stepgym.testing import FUZZ_ACTIONS, check_determinism, check_fuzz
from stepgym.text_format import parse_react
from stepgym.wrappers.text import (
    TextInterfaceWrapper,
    declared_format,
    parse_action,
    prompt_for_step,
    render_prompt,
)


def react(action: str, think: str = "I should act.") -> str:
    return f"<think>{think}</think>\n<action>{action}</action>"


# ---------------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "action"),
    [
        (react("go to desk 1"), "go to desk 1"),
        (
            "<think>a\nb</think>   <action>  take   apple 1 from desk 1 \n</action> trailing words",
            "take apple 1 from desk 1",
        ),
        ("<THINK>x</THINK><Action>open drawer 2</Action>", "open drawer 2"),
        ("preamble <think>x</think> middle <action>look</action>", "look"),
    ],
)
def test_parse_react_valid(text: str, action: str) -> None:
    r = parse_react(text)
    assert r.format_valid and r.action == action and r.error == ""


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("go to desk 1", "no <action>"),
        ("<action>go to desk 1</action>", "think"),  # think required
        ("<action>look</action><think>late</think>", "close before"),
        (react("look") + "<action>inventory</action>", "exactly one"),
        ("<think>x</think><action>   </action>", "empty"),
        ("<think>x</think><action>go to desk 1", "exactly one"),
        ("<think>x</think><action>go <b>to</b> desk</action>", "tags"),
        ("<think>x<think>y</think><action>look</action>", "exactly one <think>"),
        ("", "no <action>"),
    ],
)
def test_parse_react_invalid(text: str, why: str) -> None:
    r = parse_react(text)
    assert not r.format_valid and r.action is None
    assert why in r.error


def test_parse_react_non_text_and_options() -> None:
    for junk in (None, 3, b"<action>x</action>", ["<action>x</action>"]):
        assert not parse_react(junk).format_valid
    assert parse_react("<action>look</action>", require_think=False).action == "look"
    assert parse_action(react("Go To Desk 1"), "alfworld").action == "go to desk 1"  # ALFWorld lowercases
    assert parse_action(react("click[Buy Now]"), "webshop").action == "click[Buy Now]"  # WebShop keeps case


@pytest.mark.parametrize(
    ("text", "action"),
    [
        (
            "<think>need facts</think>\n<search> capital of France </search>",
            "<think>need facts</think>\n<search> capital of France </search>",
        ),
        ("<answer>Paris</answer>", "<answer>Paris</answer>"),
        ("<think>t</think><search>q</search> and then it rambled on", "<think>t</think><search>q</search>"),
    ],
)
def test_parse_search_r1_valid(text: str, action: str) -> None:
    r = parse_search_r1(text)
    assert r.format_valid and r.action == action


@pytest.mark.parametrize(
    "text",
    [
        "<think>only thinking</think>",
        "<search>a</search><answer>b</answer>",
        "<search>a</search><search>b</search>",
        "<search>  </search>",
        "<answer>open only",
        "<search>a</answer>",
        "",
    ],
)
def test_parse_search_r1_invalid(text: str) -> None:
    r = parse_search_r1(text)
    assert not r.format_valid and r.action is None and r.error


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------
def _steps(n: int) -> list[schema.Step]:
    return [schema.Step(f"obs {i}", f"act {i}", 0.0, f"obs {i + 1}", False, False, {}) for i in range(n)]


def test_render_prompt_history_window() -> None:
    hist = _steps(5)
    p = render_prompt(
        "alfworld",
        task="put a mug on the desk.",
        observation="obs 5",
        history=hist,
        admissible_actions=["look", "help", "go to desk 1"],
    )
    assert "Your task is to: put a mug on the desk." in p
    assert "[Step 4] Action: act 3" in p and "[Step 5] Action: act 4" in p and "act 2" not in p  # K = 2
    assert "You have taken 5 action(s)" in p and "at step 6" in p
    assert "['look', 'go to desk 1']" in p and "'help'" not in p  # verl-agent drops help
    assert p.rstrip().endswith("<action> </action> tags.")
    p0 = render_prompt("alfworld", task="t", observation="first", history=hist, history_length=0)
    assert "[Step" not in p0
    pall = render_prompt("alfworld", task="t", observation="o", history=hist, history_length=None)
    assert all(f"act {i}" in pall for i in range(5))
    first = render_prompt("alfworld", task="t", observation="first obs")
    assert "Your current observation is: first obs" in first and "You have taken" not in first
    with pytest.raises(ValueError):
        render_prompt("alfworld", task="t", observation="o", history_length=-1)
    with pytest.raises(ValueError, match="unknown text format"):
        render_prompt("nope", task="t", observation="o")


def test_render_prompt_is_plain_text_safe() -> None:
    """Braces and tags in env text are data, not template fields."""
    p = render_prompt(
        "webshop", task="buy {x} now", observation="price {0} <b>", admissible_actions=["click[{y}]"]
    )
    assert "buy {x} now" in p and "price {0} <b>" in p and "click[{y}]" in p


def test_parse_search_r1_lenient_first_tag_wins() -> None:
    r = parse_action("<search>a</search><answer>b</answer>", "qa-lenient")
    assert r.format_valid and r.action == "<search>a</search>"
    assert not parse_action("<search>a</search><answer>b</answer>", "qa").format_valid


def test_render_prompt_qa_shows_whole_turns() -> None:
    """An env that records its own PARSED_ACTION ("search: q") still shows the model's whole turn in the history."""
    s = schema.Step(
        "q",
        "<think>t</think><search>a</search>",
        0.0,
        "<information>D</information>",
        False,
        False,
        {schema.PARSED_ACTION: "search: a"},
    )
    p = render_prompt("qa", task="q?", observation="", history=[s])
    assert "<think>t</think><search>a</search><information>D</information>" in p and "search: a" not in p


def test_render_prompt_qa_keeps_whole_history() -> None:
    steps = [
        schema.Step("q", "<search>a</search>", 0.0, "<information>Doc 1 …</information>", False, False, {}),
        schema.Step("x", "<search>b</search>", 0.0, "<information>Doc 2 …</information>", False, False, {}),
    ]
    p = render_prompt("qa", task="Who wrote Hamlet?", observation="ignored", history=steps)
    assert "Question: Who wrote Hamlet?" in p
    assert p.index("<search>a</search>") < p.index("Doc 1") < p.index("<search>b</search>") < p.index("Doc 2")


# ---------------------------------------------------------------------------------------------------------------
# The wrapper on the toy env
# ---------------------------------------------------------------------------------------------------------------
def test_wrapper_toy_valid_and_invalid() -> None:
    env = TextInterfaceWrapper(ToyRoomEnv(max_steps=8), fmt="alfworld")
    obs, info = env.reset(seed=0)
    key0 = info[schema.STATE_KEY]
    obs, r, term, trunc, info = env.step("I think I will go to the kitchen")
    assert info[schema.FORMAT_VALID] is False and info[schema.PARSED_ACTION] is None
    assert info[schema.RAW_OUTPUT] == "I think I will go to the kitchen"
    assert obs.startswith("Invalid format: no <action>") and info[schema.FEEDBACK] == obs
    assert info[schema.INVALID_REASON].startswith("invalid format")
    assert info[schema.STATE_KEY] == key0 and info[schema.EFFECTIVE] is False  # the world did not move
    assert info[schema.STEP_INDEX] == 1  # but the turn counted
    tid = info[schema.TASK_ID]
    for a in expert_actions(tid):
        obs, r, term, trunc, info = env.step(react(a))
        assert info[schema.FORMAT_VALID] and info[schema.PARSED_ACTION] == a and info[schema.ADMISSIBLE]
    assert term and r == 1.0
    assert len(env.history) == 6


def test_invalid_turns_use_the_step_budget() -> None:
    env = TextInterfaceWrapper(ToyRoomEnv(max_steps=3), fmt="alfworld")
    env.reset(seed=0)
    flags = [env.step("junk")[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_wrapper_prompt_matches_offline_prompt() -> None:
    """The online prompt at every step equals prompt_for_step over the recorded trajectory."""
    env = TextInterfaceWrapper(ToyRoomEnv(), fmt="alfworld")
    obs, info = env.reset(seed=3)
    traj = schema.Trajectory(info[schema.TASK_ID], obs, info)
    prompts = [env.prompt]
    prev = obs
    for a in ["junk", react("look"), *(react(x) for x in expert_actions(info[schema.TASK_ID]))]:
        o, r, te, tr, inf = env.step(a)
        traj.steps.append(schema.Step(prev, a, r, o, te, tr, inf))
        prompts.append(env.prompt)
        prev = o
    for t, p in enumerate(prompts):
        assert prompt_for_step(traj, t, "alfworld") == p
    assert "[Step 2] Action: look" in prompts[3]


def test_prompt_as_observation() -> None:
    env = TextInterfaceWrapper(ToyRoomEnv(), fmt="alfworld", prompt_as_observation=True)
    obs, _ = env.reset(seed=0)
    assert obs == env.prompt and obs.startswith("You are an agent")
    obs, *_ = env.step(react("look"))
    assert obs == env.prompt and "[Step 1] Action: look" in obs


def test_wrapper_is_deterministic_and_survives_fuzz() -> None:
    def make() -> gym.Env:
        return TextInterfaceWrapper(ToyRoomEnv(max_steps=15), fmt="alfworld")

    def policy(t: int, obs: str, info: dict) -> str:
        adm = info[schema.ADMISSIBLE_ACTIONS]
        return react(adm[(5 * t + 1) % len(adm)]) if t % 4 else "junk"

    assert check_determinism(make, seed=2, actions=policy, n_steps=15) >= 5
    for a, obs, info in check_fuzz(make()):
        assert info[schema.FORMAT_VALID] is False and obs.startswith("Invalid format"), a


def test_import_stays_light() -> None:
    code = (
        "import sys, stepgym, stepgym.wrappers; "
        "assert not {'pettingzoo', 'torch', 'textworld', 'stepgym.wrappers.hints'} & set(sys.modules), sys.modules.keys(); "
        "stepgym.GroupEnv; assert 'pettingzoo' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_env_without_a_format_gets_the_plain_one() -> None:
    env = TextInterfaceWrapper(ToyRoomEnv())
    assert env.fmt.name == "plain"
    with pytest.raises(ValueError, match="unknown text format 'nope'"):
        TextInterfaceWrapper(ToyRoomEnv(), fmt="nope")


class _EchoQA(TextEnv):
    """A toy Search-R1 env of our own: a search returns one fixed passage, an answer ends the episode."""

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "Question: who wrote Hamlet?", {schema.GOAL: "who wrote Hamlet?"}

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        if "<answer>" in action:
            ok = "shakespeare" in action.lower()
            return "", float(ok), True, {schema.EXACT_MATCH: float(ok), schema.INVALID_REASON: ""}
        if "<search>" in action:
            return (
                "<information>Doc 1(Title: Hamlet) by William Shakespeare</information>",
                0.0,
                False,
                {schema.INVALID_REASON: ""},
            )
        return "bad", 0.0, False, {schema.INVALID_REASON: problem or "no tag"}


def test_wrapper_qa_format() -> None:
    env = TextInterfaceWrapper(_EchoQA(max_steps=4), fmt="qa")
    env.reset(seed=0)
    obs, _, _, _, info = env.step("<think>hm</think> no tags here")
    assert obs == SEARCH_R1_INVALID_FEEDBACK and info[schema.FORMAT_VALID] is False
    assert "My previous action is invalid." in obs and obs.endswith("Let me try again.\n")
    obs, _, _, _, info = env.step("<think>look it up</think><search>Hamlet author</search> extra")
    assert info[schema.PARSED_ACTION] == "<think>look it up</think><search>Hamlet author</search>"
    assert "Shakespeare" in obs
    assert "Question: who wrote Hamlet?" in env.prompt and "<search>Hamlet author</search>" in env.prompt
    obs, r, term, _, info = env.step("<answer>William Shakespeare</answer>")
    assert term and r == 1.0 and info[schema.FORMAT_VALID]


# ---------------------------------------------------------------------------------------------------------------
# ALFWorld
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alfworld(data_dir):
    env = TextInterfaceWrapper(gym.make("StepGym/ALFWorld-v0", split="valid_seen"))
    yield env
    env.close()


def test_alfworld_family_is_looked_up(alfworld) -> None:
    assert declared_format(alfworld.env) == "alfworld" and alfworld.fmt.name == "alfworld"


def test_alfworld_walkthrough_in_tags_wins(alfworld) -> None:
    obs, info = alfworld.reset(seed=11)
    p = alfworld.prompt
    assert info[schema.GOAL] in p and "Your admissible actions" in p
    walk = list(alfworld.unwrapped.walkthrough)
    for a in walk:
        obs, r, term, trunc, info = alfworld.step(react(a, think=f"Next: {a}."))
        assert info[schema.FORMAT_VALID] and info[schema.PARSED_ACTION] == a and info[schema.ADMISSIBLE]
    assert term and info[schema.WON]


def test_alfworld_garbage_is_not_format_valid_and_harmless(alfworld) -> None:
    obs, info = alfworld.reset(seed=4)
    rng = np.random.default_rng(0)
    space = alfworld.action_space
    space.seed(0)
    junk: list[Any] = [*FUZZ_ACTIONS, None, 42, "go to sofa 1", "<action>go to sofa 1</action>"]
    junk += [space.sample() for _ in range(10)]
    junk += ["".join(chr(int(c)) for c in rng.integers(32, 0x3000, size=40)) for _ in range(5)]
    key = info[schema.STATE_KEY]
    for i, a in enumerate(junk):
        if alfworld.unwrapped._done:  # truncated by the budget: start again
            obs, info = alfworld.reset(seed=4)
            key = info[schema.STATE_KEY]
        obs, r, term, trunc, info = alfworld.step(a)
        assert info[schema.FORMAT_VALID] is False, (i, a)
        assert (
            info[schema.PARSED_ACTION] is None and isinstance(obs, str) and obs.startswith("Invalid format")
        )
        assert info[schema.STATE_KEY] == key and info[schema.EFFECTIVE] is False and r == 0.0


def test_credit_toys_have_their_format_in_the_one_registry() -> None:
    """The credit toys' format is declared where they are registered: the wrapper and the trainer find it by id."""
    from stepgym.envs import ENV_IDS, text_format_of
    from stepgym.envs.credit.prompt import FORMAT as CREDIT_FORMAT
    from stepgym.wrappers.text import FORMATS, get_format, resolve_format

    # every registered env declares one: a name in FORMATS or an env's own 'module:ATTR' (Sokoban's)
    assert all(text_format_of(env_id) in FORMATS or get_format(text_format_of(env_id)) for env_id in ENV_IDS)
    for env_id in ("StepGym/CreditToy-v0", "StepGym/CreditFamily-v0"):
        assert text_format_of(env_id) == "credit"
        assert resolve_format(env_id) is get_format("credit") is CREDIT_FORMAT
        env = TextInterfaceWrapper(gym.make(env_id))
        _, info = env.reset(seed=0)
        prompt = env.prompt
        assert prompt.startswith("Task: ") and "Reply with <action>one action</action>." in prompt
        action = info[schema.ADMISSIBLE_ACTIONS][0]
        assert env.step(f"<action>{action}</action>")[4][schema.ADMISSIBLE] is True
        assert env.step("no tags")[4][schema.FORMAT_VALID] is False
        env.close()
    assert resolve_format("MyOrg/Unknown-v0") is get_format(
        "plain"
    )  # an env that declares none: the plain one


class _Undeclared(ToyRoomEnv):
    """A user's own text env that declares no format (and counts how often it is closed)."""

    closed = 0

    def close(self) -> None:
        type(self).closed += 1
        super().close()


def test_make_text_env_builds_the_one_stack_and_closes_a_refused_env(caplog) -> None:
    from stepgym.wrappers.feedback import EnvFeedbackWrapper
    from stepgym.wrappers.text import make_text_env, text_wrappers

    env = make_text_env("StepGym/CreditToy-v0", history=1)
    assert isinstance(env, TextInterfaceWrapper) and isinstance(env.env, EnvFeedbackWrapper)
    assert env.fmt.name == "credit" and env.history_length == 1
    stack = text_wrappers("qa", history=3)
    assert stack[0] is EnvFeedbackWrapper and stack[-1].keywords["fmt"] == "qa"
    # inner_wrappers go inside the text interface (named apart from the adapters' outer wrappers=)
    inner = make_text_env("StepGym/CreditToy-v0", inner_wrappers=[gym.wrappers.RecordEpisodeStatistics])
    assert isinstance(inner.env, gym.wrappers.RecordEpisodeStatistics)
    assert isinstance(inner.env.env, EnvFeedbackWrapper)
    assert (
        text_wrappers(inner_wrappers=[gym.wrappers.RecordEpisodeStatistics])[1]
        is gym.wrappers.RecordEpisodeStatistics
    )
    with pytest.raises(TypeError):
        make_text_env("StepGym/CreditToy-v0", wrappers=[gym.wrappers.RecordEpisodeStatistics])
    with pytest.raises(ValueError, match="env_kwargs apply to an env id only"):
        make_text_env(gym.make("StepGym/CreditToy-v0"), {"seed": 1})
    # a user's env without a declared format gets the plain one, and the log names it
    with caplog.at_level(logging.INFO, logger="stepgym.wrappers.text"):
        plain = make_text_env(_Undeclared())
    assert (
        plain.fmt.name == "plain"
        and "_Undeclared declares no text format: using the 'plain' format" in caplog.text
    )
    _, info = plain.reset(seed=0)
    assert "Reply with exactly one action inside <action> </action>" in plain.prompt
    assert (
        plain.step(f"<action>{info[schema.ADMISSIBLE_ACTIONS][0]}</action>")[4][schema.FORMAT_VALID] is True
    )
    # an unknown format name is refused with the known ones, and the inner env is closed
    with pytest.raises(ValueError, match=r"unknown text format 'nope'; known: .*'plain'"):
        make_text_env(_Undeclared(), fmt="nope")
    assert _Undeclared.closed == 1
    # ... and one that declares its format in its metadata is accepted
    declared = _Undeclared()
    declared.metadata = {**declared.metadata, "text_format": "alfworld"}
    assert make_text_env(declared).fmt.name == "alfworld"


def test_lru_get_makes_once_keeps_the_most_recent_and_remakes_what_is_no_longer_usable() -> None:
    """The engines' cache (loaded games, solver tables, search results): an entry is made once while it stays
    among the ``size`` most recently used, the least recently used is dropped first, and an entry the owner no
    longer finds usable is made again."""
    from collections import OrderedDict

    made: list[str] = []

    def get(cache: OrderedDict, key: str, usable: Any = None) -> str:
        return lru_get(cache, key, lambda: made.append(key) or f"v{key}{len(made)}", 2, usable)

    cache: OrderedDict[str, str] = OrderedDict()
    assert [get(cache, k) for k in "abab"] == ["va1", "vb2", "va1", "vb2"]
    assert get(cache, "a") == "va1"  # a is now the most recent: c drops b
    assert get(cache, "c") == "vc3"
    assert list(cache) == ["a", "c"]
    assert get(cache, "b") == "vb4"  # b was dropped: made again, and a (the least recent) goes
    assert list(cache) == ["c", "b"]
    assert get(cache, "c", usable=lambda v: False) == "vc5"
    assert get(cache, "c", usable=lambda v: v == "vc5") == "vc5"
    assert made == ["a", "b", "c", "b", "c"]
