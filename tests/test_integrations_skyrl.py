"""stepgym envs through SkyRL-gym 0.4's own ``make`` (env level: skyrl-train itself needs GPUs)."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from _oracles import oracle_step_batch, spans_of_mask  # noqa: E402

from stepgym import schema  # noqa: E402
from stepgym.integrations.skyrl import register  # noqa: E402
from stepgym.steps.tasks import task_rows  # noqa: E402

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
    is the plain format, and an explicit one is used as given."""
    import gymnasium as gym

    # the toy under an id of the user's own: no format is registered for it
    if "MyOrg/CreditToyCopy-v0" not in gym.registry:
        gym.register("MyOrg/CreditToyCopy-v0", entry_point="stepgym.envs.credit:CreditToyEnv")
    sid = register("MyOrg/CreditToyCopy-v0", "stepgym-toy-nofmt", env_kwargs=KW)
    assert skyrl_gym.make(sid, env_config={}, extras={})._env.fmt.name == "plain"
    env = skyrl_gym.make(sid, env_config={"fmt": "webshop"}, extras={})
    assert env._env.fmt.name == "webshop"


# ---------------------------------------------------------------------------------------------------------------
# Step-level advantages in SkyRL's trainer (StepAdvantageMixin)
# ---------------------------------------------------------------------------------------------------------------
class StandInBatch(dict):
    """Stands in for SkyRL's ``TrainingInputBatch`` (skyrl-train needs Python 3.12 and a GPU): the tensors its
    ``compute_advantages_and_returns`` reads by key, and ``metadata``."""

    def __init__(self, tensors, metadata) -> None:
        super().__init__(tensors)
        self.metadata = metadata


class StandInTrainer:
    """Stands in for SkyRL's ``RayPPOTrainer``: its ``convert_to_training_input`` makes the batch (loss masks and
    uids from the generator output), as SkyRL's does."""

    def __init__(self, n: int) -> None:
        from types import SimpleNamespace

        self.cfg = SimpleNamespace(
            generator=SimpleNamespace(n_samples_per_prompt=n, step_wise_trajectories=False)
        )

    def convert_to_training_input(self, generator_output, uids):
        import torch

        width = max(len(m) for m in generator_output["loss_masks"])
        mask = torch.zeros(len(uids), width)
        for i, m in enumerate(generator_output["loss_masks"]):
            mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
        return StandInBatch({"loss_mask": mask, "response_mask": (mask >= 0).float()}, {"uids": list(uids)})


def _skyrl_rollouts(n_per_task: int = 4):
    """Real SkyRL-gym episodes (expert, with some bad replies), their env metrics and SkyRL-style loss masks: each
    model turn's tokens 1, the env's reply 0 (token counts from the text lengths)."""
    import numpy as np

    sid = register(TOY, "stepgym-toy-credit", env_kwargs=KW, fmt="alfworld")
    rows = task_rows(TOY, KW)[:2]
    rng = np.random.default_rng(0)
    masks, metrics, uids = [], [], []
    for row in rows:
        for k in range(n_per_task):
            env = skyrl_gym.make(sid, env_config={}, extras=row)
            env.init(row["prompt"])
            mask, done = [], False
            while not done:
                bad = k > 0 and rng.random() < 0.3 * k
                text = "I will wander" if bad else _reply(env.info[schema.EXPERT_ACTION])
                out = env.step(text)
                done = out["done"]
                mask += [1] * (len(text) // 4 + 1)
                if not done:
                    mask += [0] * (len(out["observations"][0]["content"]) // 6 + 1)
            masks.append(mask)
            metrics.append(env.get_metrics())
            uids.append(row["task_id"])
            env.close()
    return masks, metrics, uids


@pytest.mark.parametrize(
    "preset", ["gigpo-alfworld", "graphgpo-alfworld", "hgpo-alfworld", "rewardflow-alfworld", "g2po-alfworld"]
)
def test_skyrl_trainer_mixin_gives_stepgyms_advantages(preset: str) -> None:
    import numpy as np

    from stepgym.integrations.skyrl import StepAdvantageMixin
    from stepgym.shapers import ShapeConfig, shape_advantages

    masks, metrics, uids = _skyrl_rollouts()

    class Trainer(StepAdvantageMixin, StandInTrainer):
        stepgym_shape_config = preset

    trainer = Trainer(4)
    data = trainer.convert_to_training_input({"loss_masks": masks, "env_metrics": metrics}, uids)
    adv = trainer.compute_advantages_and_returns(data)["advantages"].numpy()
    # the same from the raw records, built here
    sb = oracle_step_batch(
        [met["stepgym_steps"] for met in metrics], uids, adv.shape[1], spans=[spans_of_mask(m) for m in masks]
    )
    want = shape_advantages(sb, ShapeConfig.from_preset(preset)).token_advantages
    assert np.allclose(adv, want, atol=1e-5) and np.abs(want).max() > 0
    assert len({m["won"] for m in metrics}) > 1


def test_skyrl_mixin_refuses_missing_records_and_split_groups() -> None:
    from stepgym.errors import StepRecordError
    from stepgym.integrations.skyrl import StepAdvantageMixin

    masks, metrics, uids = _skyrl_rollouts()

    class Trainer(StepAdvantageMixin, StandInTrainer):
        pass

    trainer = Trainer(4)
    broken = [dict(m) for m in metrics]
    del broken[3]["stepgym_steps"]
    data = trainer.convert_to_training_input({"loss_masks": masks, "env_metrics": broken}, uids)
    with pytest.raises(StepRecordError, match=r"row 3 has no stepgym_steps.*StepGymTextEnv"):
        trainer.compute_advantages_and_returns(data)
    data = trainer.convert_to_training_input(
        {"loss_masks": masks[:-1], "env_metrics": metrics[:-1]}, uids[:-1]
    )
    with pytest.raises(StepRecordError, match=r"n_samples_per_prompt=4.*split or lost rows"):
        trainer.compute_advantages_and_returns(data)


# ---------------------------------------------------------------------------------------------------------------
# Failure semantics (docs/failures.md)
# ---------------------------------------------------------------------------------------------------------------
def _faulty_toy(**kw):
    import gymnasium as gym

    from stepgym.wrappers.faults import FaultInjectionWrapper

    return FaultInjectionWrapper(gym.make(TOY, **kw), exception=1.0)


def test_an_env_failure_ends_the_skyrl_episode_aborted_with_its_cause() -> None:
    import gymnasium as gym

    gym.register("StepGymTest/FaultyToy-v0", entry_point=_faulty_toy)
    sid = register("StepGymTest/FaultyToy-v0", "stepgym-faulty-toy", env_kwargs=KW, fmt="alfworld")
    row = task_rows(TOY, KW)[0]
    env = skyrl_gym.make(sid, env_config={}, extras=row)
    env.init(row["prompt"])
    out = env.step(_reply("look"))
    assert out["done"] and out["reward"] == 0.0 and out["metadata"][schema.ABORT_CAUSE] == "env_exception"
    met = env.get_metrics()
    assert (
        met["stepgym_abort_cause"] == "env_exception" and met["aborted"] == 1.0 and met["stepgym_steps"] == []
    )


def test_an_aborted_skyrl_episode_changes_nothing_for_the_others() -> None:
    import numpy as np

    from stepgym.integrations.skyrl import StepAdvantageMixin
    from stepgym.shapers import ShapeConfig, shape_advantages

    masks, metrics, uids = _skyrl_rollouts()
    cut = (
        5  # group 2's second episode: aborted after its first step (the env never answered the second reply)
    )
    metrics[cut] = {
        **metrics[cut],
        "stepgym_abort_cause": "worker_death",
        "stepgym_steps": metrics[cut]["stepgym_steps"][:1],
    }

    class Trainer(StepAdvantageMixin, StandInTrainer):
        stepgym_shape_config = "gigpo-alfworld"

    trainer = Trainer(4)
    data = trainer.compute_advantages_and_returns(
        trainer.convert_to_training_input({"loss_masks": masks, "env_metrics": metrics}, uids)
    )
    adv, loss_mask = data["advantages"].numpy(), data["loss_mask"].numpy()
    keep = [b for b in range(len(masks)) if b != cut]
    sb = oracle_step_batch(
        [metrics[b]["stepgym_steps"] for b in keep],
        [uids[b] for b in keep],
        adv.shape[1],
        spans=[spans_of_mask(masks[b]) for b in keep],
    )
    want = shape_advantages(sb, ShapeConfig.from_preset("gigpo-alfworld")).token_advantages
    assert np.allclose(adv[keep], want, atol=1e-6) and np.abs(want).max() > 0
    assert not adv[cut].any() and not loss_mask[cut].any() and loss_mask[keep].any()
