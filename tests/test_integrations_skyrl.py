"""stepgym envs through SkyRL-gym 0.4's own ``make`` (env level: skyrl-train itself needs GPUs)."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from stepgym import schema  # noqa: E402
from stepgym.integrations import task_rows  # noqa: E402
from stepgym.integrations.skyrl import register  # noqa: E402

TOY = "StepGym/CreditToy-v0"
KW = {"n_tasks": 3, "n_rooms": 3, "n_distractors": 1, "max_steps": 6}


def _reply(action: str) -> str:
    return f"<think>next</think><action>{action}</action>"


def test_full_episode_through_skyrl_make_carries_rewards_and_annotations() -> None:
    sid = register(TOY, env_kwargs=KW, fmt="alfworld")
    row = task_rows(TOY, KW, system_prompt="Be brief.")[1]
    env = skyrl_gym.make(sid, env_config={}, extras=row)
    messages, meta = env.init(row["prompt"])
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert "find the key" in messages[-1]["content"] and meta["task_id"] == row["task_id"]
    bad = env.step("I will just wander")  # no tags: an invalid step, answered, never raised
    assert bad["reward"] == 0.0 and not bad["done"]
    assert bad["metadata"]["format_valid"] is False and bad["metadata"]["action"] is None
    assert "Invalid format" in bad["observations"][0]["content"]
    outs = []
    while True:
        # the env's own oracle drives the episode to a win
        outs.append(env.step(_reply(env.info[schema.EXPERT_ACTION])))
        if outs[-1]["done"]:
            break
    last = outs[-1]
    assert last["reward"] == 1.0 and last["observations"] == []
    assert all(o["metadata"]["admissible"] and o["metadata"]["format_valid"] for o in outs)
    assert all(o["metadata"]["task_id"] == row["task_id"] for o in [bad, *outs])
    ep = last["metadata"]["episode"]
    assert ep["won"] and ep["n_steps"] == len(outs) + 1 and ep["task_id"] == row["task_id"]
    assert ep["steps"][1]["state_key"] == outs[0]["metadata"]["state_key"]
    assert env.get_metrics()["won"] == 1.0 and env.turns == len(outs) + 1
    env.close()


def test_env_config_overrides_and_missing_env_id_is_refused() -> None:
    sid = register(TOY, "stepgym-toy-test", env_kwargs=KW, fmt="alfworld")
    env = skyrl_gym.make(
        sid, env_config={"env_kwargs": {"max_steps": 2}}, extras={"task_id": "credit-train-00000"}
    )
    env.init([])
    assert env.max_turns == 2
    assert env.step(_reply("wait"))["metadata"]["won"] is False
    assert env.step(_reply("wait"))["done"]  # truncated at the overridden step limit
    from stepgym.integrations.skyrl import StepGymTextEnv

    with pytest.raises(ValueError, match="no stepgym env id"):
        StepGymTextEnv(env_config={}, extras={})


def test_an_env_without_a_text_format_is_refused_clearly() -> None:
    """The adapter uses the text interface's own format rule: no format given and none registered for the env id
    is a clear error at construction, and an explicit one is used as given."""
    import gymnasium as gym

    # the toy under an id of the user's own: no format is registered for it
    if "MyOrg/CreditToyCopy-v0" not in gym.registry:
        gym.register("MyOrg/CreditToyCopy-v0", entry_point="stepgym.envs.credit:CreditToyEnv")
    sid = register("MyOrg/CreditToyCopy-v0", "stepgym-toy-nofmt", env_kwargs=KW)
    with pytest.raises(ValueError, match="no text format is registered for 'MyOrg/CreditToyCopy-v0'"):
        skyrl_gym.make(sid, env_config={}, extras={})
    env = skyrl_gym.make(sid, env_config={"fmt": "webshop"}, extras={})
    assert env._env.fmt.name == "webshop"
