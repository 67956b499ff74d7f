"""``stepgym.envs.register``: an env declares what stepgym needs to know about it (step limit, text format, splits,
value oracle or why it has none, task types) in one call, and every path finds it there with no other edit.

The env here is registered from a module outside the package, written into a temporary folder, the way a user adds
one: its own prompt (``text_format="module:ATTR"``) and its own value oracle (``value_oracle="module:factory"``).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

import stepgym
from stepgym import schema
from stepgym.envs import EnvSplits, check_split, env_entry, register, registered_envs
from stepgym.errors import InvalidArgumentError, ValueOracleError

MODULE = '''
from stepgym.text_format import REACT_REPLY, PromptTemplate, TextFormat, parse_react, react_feedback
from stepgym.envs.oracle import Value
from stepgym.envs.credit import CreditToyEnv

class CountdownEnv(CreditToyEnv):
    """The credit toy under a user's name (so it has a real expert and exact distances)."""

FORMAT = TextFormat(
    "countdown",
    PromptTemplate(intro="Countdown task: {task}", history_header="", history_item="", current="",
                   current_first="Now: {observation}", admissible="Moves: {admissible}.",
                   instruction="Answer <think>..</think><action>..</action>."),
    parse_react, react_feedback, history_length=0, reply_shape=REACT_REPLY,
)

class Oracle:
    unit_gain = False
    def __init__(self, env, budget):
        self.env = env
    def value(self, info, remember):
        steps = self.env.steps_to_win()
        return Value.unreachable() if steps is None else Value(float(steps), True, True, 1.0)
'''


@pytest.fixture(scope="module")
def user_module(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("user_env")
    (folder / "countdown_env.py").write_text(textwrap.dedent(MODULE))
    sys.path.insert(0, str(folder))
    register(
        "UserOrg/Countdown-v0",
        "countdown_env:CountdownEnv",
        max_steps=7,
        text_format="countdown_env:FORMAT",
        splits=EnvSplits(("train", "valid"), "valid"),
        value_oracle="countdown_env:Oracle",
        task_types=("countdown",),
    )
    register(
        "UserOrg/CountdownNoValues-v0",
        "countdown_env:CountdownEnv",
        max_steps=7,
        splits=("valid", "train"),
        no_values="the state is too large for an exact search",
    )
    yield "countdown_env"
    sys.path.remove(str(folder))


def test_a_registered_env_declares_itself_once(user_module: str) -> None:
    entry = env_entry("UserOrg/Countdown-v0")
    assert entry is not None and entry.max_steps == 7 and entry.types() == ("countdown",)
    assert len(env_entry("StepGym/ScienceWorld-v0").types()) == 30  # a "module:ATTR" reference, read on use
    with pytest.raises(InvalidArgumentError, match="task_types is a sequence of names or a 'module:ATTR'"):
        register("UserOrg/Bad-v0", "m:C", max_steps=3, task_types="boil")
    assert "UserOrg/Countdown-v0" in registered_envs() and "StepGym/ALFWorld-v0" in registered_envs()
    assert gym.spec("UserOrg/Countdown-v0").max_episode_steps == 7
    # splits: the declared ones are checked, the evaluation split is the default; a name list's first is evaluation
    assert check_split("UserOrg/Countdown-v0", None) == "valid"
    assert check_split("UserOrg/CountdownNoValues-v0", None) == "valid"
    with pytest.raises(InvalidArgumentError, match="has no split 'test'; its splits are train, valid"):
        check_split("UserOrg/Countdown-v0", "test")
    # the same declaration again is a no-op; another one is refused
    register(
        "UserOrg/Countdown-v0",
        "countdown_env:CountdownEnv",
        max_steps=7,
        text_format="countdown_env:FORMAT",
        splits=EnvSplits(("train", "valid"), "valid"),
        value_oracle="countdown_env:Oracle",
        task_types=("countdown",),
    )
    with pytest.raises(InvalidArgumentError, match="already registered with another declaration"):
        register("UserOrg/Countdown-v0", "countdown_env:CountdownEnv", max_steps=8)


def test_the_text_interface_and_the_value_wrapper_find_the_declaration(user_module: str) -> None:
    from stepgym.values import ValueWrapper
    from stepgym.wrappers.text import make_text_env

    env = make_text_env("UserOrg/Countdown-v0")
    assert env.fmt.name == "countdown"
    _, info = env.reset(seed=0)
    assert env.prompt.startswith("Countdown task: ") and "Moves: " in env.prompt
    env.close()
    values = ValueWrapper(gym.make("UserOrg/Countdown-v0"))
    _, info = values.reset(seed=0)
    _, _, _, _, info = values.step(info[schema.EXPERT_ACTION])
    assert info[schema.VALUE_GAIN] == 1.0 and info[schema.VALUE_EXACT] is True
    # built directly (no gym.make, no spec): found by its entry point's class
    direct = ValueWrapper(sys.modules[user_module].CountdownEnv())
    assert type(direct.oracle).__name__ == "Oracle"
    with pytest.raises(
        ValueOracleError, match="UserOrg/CountdownNoValues-v0 has no exact step values: the state"
    ):
        ValueWrapper(gym.make("UserOrg/CountdownNoValues-v0"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"entry_point": "no_colon", "max_steps": 5}, "entry_point must be a 'module:Class' string"),
        ({"entry_point": "m:C", "max_steps": 0}, "max_steps must be a positive int"),
        ({"entry_point": "m:C", "max_steps": True}, "max_steps must be a positive int"),
        (
            {"entry_point": "m:C", "max_steps": 5, "value_oracle": "nocolon"},
            "value_oracle must be a 'module:factory'",
        ),
        ({"entry_point": "m:C", "max_steps": 5, "value_oracle": "m:f", "no_values": "x"}, "not both"),
        (
            {"entry_point": "m:C", "max_steps": 5, "splits": EnvSplits(("a",), "a"), "text_format": 3},
            "text_format",
        ),
    ],
)
def test_a_bad_declaration_is_one_clear_error(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        register("UserOrg/Bad-v0", **kwargs)
    assert "UserOrg/Bad-v0" not in gym.registry


def test_bad_splits_and_a_gymnasium_only_id_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="evaluation split 'x' must be one of the splits"):
        EnvSplits(("a", "b"), "x")
    if "UserOrg/GymOnly-v0" not in gym.registry:
        gym.register("UserOrg/GymOnly-v0", entry_point="stepgym.envs.credit:CreditToyEnv")
    with pytest.raises(InvalidArgumentError, match="already registered with Gymnasium"):
        register("UserOrg/GymOnly-v0", "stepgym.envs.credit:CreditToyEnv", max_steps=10)
    assert env_entry("UserOrg/GymOnly-v0") is None and check_split("UserOrg/GymOnly-v0", None) == ""


def test_stepgyms_own_envs_are_registered_through_the_same_call() -> None:
    """A built-in env is one folder (or module) of stepgym.envs plus one register call in it: the package itself
    lists no env, and the oracle an env declares lives in its own folder."""
    import ast

    assert (
        "StepGym/"
        not in Path(stepgym.envs.__file__).read_text().split("class ExactStepLimit")[0].split('"""', 2)[2]
    )
    calls: dict[str, str] = {}
    for path in sorted(Path(stepgym.envs.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register" and node.args:
                env_id = ast.literal_eval(node.args[0])
                assert env_id not in calls, f"{env_id} is registered twice ({calls[env_id]}, {path})"
                calls[env_id] = str(path.relative_to(Path(stepgym.envs.__file__).parent))
    assert set(calls) == set(stepgym.ENV_IDS), set(calls) ^ set(stepgym.ENV_IDS)
    for env_id in stepgym.ENV_IDS:
        entry = env_entry(env_id)
        assert entry is not None and entry.text_format and entry.splits is not None, env_id
        assert (entry.value_oracle is None) != (entry.no_values is None), env_id
        home = calls[env_id].removesuffix("/__init__.py").removesuffix(".py")
        assert entry.entry_point.startswith(f"stepgym.envs.{home}:"), (env_id, entry.entry_point)
        oracle = entry.value_oracle or ""
        assert oracle.startswith((f"stepgym.envs.{home}.", "stepgym.envs.oracle:")) or not oracle, (
            env_id,
            oracle,
        )
