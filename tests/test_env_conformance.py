"""One conformance test over every registered StepGym env (``stepgym.ENV_IDS``, read from the registry): an env
registered in its folder is tested here with no other edit.

Each env is made once, on its evaluation split, and plays short episodes only (CI runs this on 2 cores):

* Gymnasium's own checker (``check_env``) on the unwrapped env, and the registered step limit on the spec and the
  env;
* determinism under a seed: the same seed and actions give identical observations, rewards, flags and infos,
  also after junk actions were played in between (``reset`` leaves nothing behind);
* junk and fuzzed actions (``stepgym.testing.FUZZ_ACTIONS``, seeded random strings, non-strings): each is answered
  with an invalid-action observation (``ADMISSIBLE`` False and a reason), never an exception;
* every capability the env declares or shows: its state key, its expert action (always admissible), its task id
  and task type (one of the declared types), its task list (``task_ids``, each task reachable through
  ``reset(options=...)``), its text format (the text stack builds on it and refuses a junk reply), its value
  oracle (``ValueWrapper`` labels every step, a win is worth 0) or its reason for having none (``ValueWrapper``
  refuses it with that reason).

Envs that need data read ``STEPGYM_DATA`` (skipped without it, a failure in CI); a missing extra is a skip that
CI turns into a failure (tests/conftest.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.error import DependencyNotInstalled
from gymnasium.utils.env_checker import check_env

import stepgym
from stepgym import schema
from stepgym.envs import EnvEntry, env_entry, env_make_kwargs
from stepgym.errors import DataNotFoundError, ValueOracleError
from stepgym.testing import FUZZ_ACTIONS, assert_same_infos

#: What keeps an env's one episode cheap; an env not named here is made with its defaults.
CHEAP: dict[str, dict[str, Any]] = {
    "StepGym/ScienceWorld-v0": {"task_types": ["find-plant"]},
}
#: Envs whose step limit is per task, up to the registered one (ScienceWorld: the task's gold path, at least 100).
PER_TASK_LIMIT = {"StepGym/ScienceWorld-v0"}
#: Envs whose actions include free text (tau2-bench: a message to the user is a legitimate turn), so a junk string
#: is a (useless) message, not an invalid action; values that are not text are still refused.
FREE_TEXT = {"StepGym/Tau2-v0"}
SEED = 3
STEPS = 4  # per episode
VALUE_BUDGET = 100  # ALFWorld's search budget for the value labels (others ignore it)


def _junk() -> list[Any]:
    """The fuzzed actions: the shared battery's, seeded random strings, and values that are not text at all."""
    rng = random.Random(0)
    alphabet = "abcxyz#%&*[]<>/\\|~0123456789 \u00e9\u6f22\U0001f4a5\u200b"
    randoms = ["q" + "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 40))) for _ in range(4)]
    return [*FUZZ_ACTIONS, *randoms, None, 42, 3.5, b"\xff\xfe", ["go", "north"], {"action": "look"}]


@pytest.fixture(params=stepgym.ENV_IDS)
def made(request: pytest.FixtureRequest) -> Iterator[tuple[str, EnvEntry, gym.Env]]:
    env_id = request.param
    entry = env_entry(env_id)
    assert entry is not None, f"{env_id} is in ENV_IDS but not in the registry"
    split = entry.splits.evaluation if entry.splits is not None else None
    kwargs = env_make_kwargs(env_id, CHEAP.get(env_id), split=split)
    try:
        env = gym.make(env_id, **kwargs)
    except DataNotFoundError:
        request.getfixturevalue("data_dir")  # skips (or fails, in CI) without STEPGYM_DATA
        raise  # the data are there and the env still cannot find them: a real failure
    except DependencyNotInstalled as exc:
        pytest.skip(f"{env_id}: {exc}")
    try:
        yield env_id, entry, env
    finally:
        env.close()


def _actions(t: int, info: dict[str, Any]) -> Any:
    """The episode's actions: the expert's where there is one (else an admissible action), one junk turn."""
    if t == 1:
        return "qz7 no such action"
    expert = info.get(schema.EXPERT_ACTION)
    if expert:
        return expert
    admissible = info.get(schema.ADMISSIBLE_ACTIONS) or ["look"]
    return admissible[(7 * t + 3) % len(admissible)]


def _episode(env: gym.Env, seed: int = SEED) -> list[tuple]:
    obs, info = env.reset(seed=seed)
    trace: list[tuple] = [("reset", obs, info)]
    for t in range(STEPS):
        action = _actions(t, info)
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


def _same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b), f"episode lengths differ: {len(a)} vs {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x[:-1] == y[:-1], f"step {i}: {x[:-1]!r:.300} != {y[:-1]!r:.300}"
        assert_same_infos(x[-1], y[-1], where=f"step {i}")


def _fuzz(env: gym.Env, free_text: bool = False) -> None:
    env.reset(seed=SEED + 1)
    for action in _junk():
        obs, reward, terminated, truncated, info = env.step(action)
        where = f"junk action {action!r:.40}"
        assert isinstance(obs, str) and obs.strip(), where
        assert isinstance(reward, float) and math.isfinite(reward), where
        assert isinstance(terminated, bool) and isinstance(truncated, bool), where
        if free_text and isinstance(action, str):
            if terminated or truncated:  # a message can end the conversation (the user hangs up)
                env.reset(seed=SEED + 1)
            continue  # a message to the user: any text is a legitimate (if useless) turn
        assert info.get(schema.ADMISSIBLE) is False, f"{where} was accepted: {info.get(schema.ADMISSIBLE)!r}"
        assert str(info.get(schema.INVALID_REASON, "")).strip(), f"{where}: no invalid_reason"
        assert not info.get(schema.WON), where
        if terminated or truncated:
            env.reset(seed=SEED + 1)


def _check_capabilities(env_id: str, entry: EnvEntry, env: gym.Env, trace: list[tuple]) -> None:
    core: Any = env.unwrapped
    assert gym.spec(env_id).max_episode_steps == entry.max_steps, (
        "the spec's step limit is not the registered one"
    )
    if env_id in PER_TASK_LIMIT:
        assert 0 < core.max_steps <= entry.max_steps, "the task's step limit is above the registered cap"
    else:
        assert core.max_steps == entry.max_steps, "the env's own step limit is not the registered one"
    infos = [row[-1] for row in trace]
    for i, info in enumerate(infos):
        assert isinstance(info.get(schema.STATE_KEY), str) and info[schema.STATE_KEY], (
            f"step {i}: no state key"
        )
        assert isinstance(info.get(schema.TASK_ID), str) and info[schema.TASK_ID], f"step {i}: no task id"
    types = entry.types()
    if types:
        assert infos[0].get(schema.TASK_TYPE) in types, (infos[0].get(schema.TASK_TYPE), types)
    for t, (action, *_, info) in enumerate(trace[1:]):
        if action == infos[t].get(schema.EXPERT_ACTION):
            assert info[schema.ADMISSIBLE] is True, f"step {t}: the expert's action {action!r} was refused"
        elif t == 1 and env_id not in FREE_TEXT:
            assert info[schema.ADMISSIBLE] is False, "the junk turn was accepted"
    task_ids = getattr(core, "task_ids", None)
    if task_ids is not None:
        assert len(task_ids) > 0, "the evaluation split has no tasks"
        _, info = env.reset(options={"task_id": task_ids[-1]})
        assert info[schema.TASK_ID] == task_ids[-1], "reset(options={'task_id': ...}) played another task"


def _check_values(entry: EnvEntry, env: gym.Env) -> None:
    from stepgym.values import ValueWrapper

    if entry.no_values is not None:
        with pytest.raises(ValueOracleError, match="has no exact step values") as refused:
            ValueWrapper(env)
        assert entry.no_values in str(refused.value)
        return
    assert entry.value_oracle is not None, "an env declares a value oracle or why it has none"
    labelled = ValueWrapper(env, budget=VALUE_BUDGET)
    trace = _episode(labelled)
    for key in (schema.VALUE_AFTER, schema.VALUE_EXACT, schema.VALUE_REACHABLE, schema.VALUE_BEST_REWARD):
        assert key in trace[0][-1], f"reset: no {key}"
    for t, (*_, info) in enumerate(trace[1:]):
        for key in (schema.VALUE_BEFORE, schema.VALUE_AFTER, schema.VALUE_GAIN):
            assert isinstance(info[key], float) and math.isfinite(info[key]), (
                f"step {t}: {key}={info.get(key)!r}"
            )
        assert info[schema.VALUE_BEFORE] >= 0 and info[schema.VALUE_AFTER] >= 0, f"step {t}: a negative cost"
        if info.get(schema.WON):
            assert info[schema.VALUE_AFTER] == 0.0 and info[schema.VALUE_REACHABLE], (
                f"step {t}: a win is worth 0"
            )
        if t == 1:  # the junk turn changes nothing: no gain
            assert info[schema.VALUE_GAIN] == 0.0, f"the junk turn has gain {info[schema.VALUE_GAIN]}"


def _check_text_format(entry: EnvEntry, env: gym.Env, free_text: bool = False) -> None:
    from stepgym.text_format import TextFormat
    from stepgym.wrappers.text import make_text_env

    assert entry.text_format, "every built-in env declares its text format"
    text_env = make_text_env(env)
    assert isinstance(text_env.fmt, TextFormat) and text_env.fmt.name != "plain"
    prompt, info = text_env.reset(seed=SEED)
    assert isinstance(prompt, str) and prompt.strip()
    expert = info.get(schema.EXPERT_ACTION)
    if isinstance(
        expert, str
    ):  # the reply the warm-up and the scripted policies write carries the very action
        parsed = text_env.fmt.parse(text_env.fmt.reply(expert))
        assert parsed.format_valid and parsed.action == expert, (expert, text_env.fmt.reply(expert), parsed)
    # free text is a message where the env takes one: there, a malformed tool call is the unformatted reply
    junk = "<tool_call>{not json</tool_call>" if free_text else "an unformatted junk reply"
    obs, *_, info = text_env.step(junk)
    assert isinstance(obs, str) and info.get(schema.ADMISSIBLE) is False


def test_env_conforms(made: tuple[str, EnvEntry, gym.Env]) -> None:
    env_id, entry, env = made
    check_env(env.unwrapped, skip_render_check=True)
    first = _episode(env)
    _fuzz(env, free_text=env_id in FREE_TEXT)
    _same(first, _episode(env))  # the same seed and actions replay the episode, junk in between or not
    _check_capabilities(env_id, entry, env, first)
    _check_values(entry, env)
    _check_text_format(entry, env, free_text=env_id in FREE_TEXT)
