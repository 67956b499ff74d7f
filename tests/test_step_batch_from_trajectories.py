"""``step_batch_from_trajectories``: a StepBatch from recorded episodes, for a training loop of one's own.

The same episodes shaped two ways must give the same advantages for every base (the graph methods included): the
bundled trainer's path (the collector's step rows → ``stepgym.steps.row.rows_step_batch`` → ``stepgym.steps.batch``'s
``build_step_batch``) and a user's path
(the collector's recorded ``Trajectory`` objects, which ``GroupEnv`` records → ``step_batch_from_trajectories``).
A plain ``GroupEnv`` loop on the env itself (no text interface) then gets a batch whose states chain.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from stepgym import GroupEnv, schema
from stepgym.errors import StepRecordError
from stepgym.shapers import GRAPH_BASES, ShapeConfig, shape_advantages
from stepgym.steps.batch import step_batch_from_trajectories

ENV = "StepGym/CreditToy-v0"
KWARGS = {"n_tasks": 6, "n_rooms": 3, "n_distractors": 1, "split": "train"}
PRESETS = (
    "grpo",
    "drgrpo",
    "gigpo-alfworld",
    "graphgpo-alfworld",
    "hgpo-alfworld",
    "rewardflow-alfworld",
    "g2po-alfworld",
    "oracle",
)


@pytest.fixture(scope="module")
def rollouts():
    from stepgym.trainers.backends import ScriptedBackend
    from stepgym.trainers.collector import Collector, CollectorOptions
    from stepgym.trainers.models import train_tokenizer
    from stepgym.trainers.samples import PromptEncoder
    from stepgym.wrappers.text import get_format

    fmt = get_format("credit")
    tok = train_tokenizer(["go forward take the key open the door <think>ok</think>"], vocab_size=300)
    col = Collector(
        ENV,
        KWARGS,
        fmt,
        history=1,
        group_size=4,
        encoder=PromptEncoder(tok, max_prompt_tokens=256),
        backend=ScriptedBackend(tok, "noisy-expert:0.4", render=fmt.reply),
        options=CollectorOptions(value_labels=True),  # VALUE_GAIN on every step: the oracle base too
    )
    try:
        ids = col.task_ids()
        ro = col.collect([(ids[k], 100 + k) for k in range(4)], seed_rng=np.random.default_rng(0))
    finally:
        col.close()
    return ro, tok.pad_token_id


def test_the_graph_bases_are_all_covered() -> None:
    assert {p.split("-")[0] for p in PRESETS} >= set(GRAPH_BASES)


@pytest.mark.parametrize("preset", PRESETS)
def test_from_trajectories_shapes_as_the_bundled_trainer_does(rollouts, preset: str) -> None:
    from stepgym.steps.row import rows_step_batch

    ro, pad_id = rollouts
    assert len({t.success for t in ro.trajectories}) == 2  # mixed outcomes: non-trivial advantages
    trainer, _ = rows_step_batch(
        ro.rows, reward_scale=10.0, invalid_rule="format_or_inadmissible", pad_id=pad_id
    )
    mine = step_batch_from_trajectories(ro.trajectories, ro.traj_group, reward_scale=10.0)
    assert mine.layout is None and len(mine.rewards) == len(ro.rows)
    np.testing.assert_array_equal(mine.valid, trainer.valid)
    assert list(mine.anchor_obs) == list(trainer.anchor_obs) and list(mine.next_obs) == list(trainer.next_obs)
    np.testing.assert_array_equal(mine.dones, trainer.dones)
    np.testing.assert_array_equal(mine.success, trainer.success)
    np.testing.assert_array_equal(mine.true_gain, trainer.true_gain)
    cfg = ShapeConfig.from_preset(preset)
    want = shape_advantages(trainer, cfg)
    got = shape_advantages(mine, cfg)
    np.testing.assert_allclose(got.step_advantages, want.step_advantages, rtol=0, atol=1e-12)
    assert np.abs(got.step_advantages).max() > 0


def test_a_groupenv_loop_of_ones_own() -> None:
    """The env driven directly (no text interface, so no format to break), one group per task."""
    rng = np.random.default_rng(0)
    trajectories, groups = [], []
    group = GroupEnv(ENV, group_size=3, env_kwargs={"n_tasks": 2, "n_rooms": 3, "n_distractors": 1})
    try:
        for k, task in enumerate(group.get_unwrapped_attr("task_ids")):
            obs, infos = group.reset(seed=k, options={"task_id": task})
            while group.agents:
                actions = {}
                for a in group.agents:
                    info = infos[a]
                    adm = info[schema.ADMISSIBLE_ACTIONS]
                    good = info[schema.EXPERT_ACTION]
                    actions[a] = good if rng.random() < 0.6 else adm[int(rng.integers(len(adm)))]
                obs, rewards, terms, truncs, infos = group.step(actions)
            trajectories += group.trajectories
            groups += [task] * group.group_size
    finally:
        group.close()
    batch = step_batch_from_trajectories(trajectories, groups, reward_scale=10.0)
    # no text interface: no format to break; a step is invalid only where the env says it was inadmissible
    admissible = [s.info.get(schema.ADMISSIBLE) is not False for t in trajectories for s in t.steps]
    np.testing.assert_array_equal(batch.valid, admissible)
    assert batch.valid.sum() > len(admissible) // 2
    # the before/after chain of the graph methods: the state after step t is the state step t + 1 starts in
    for i in range(len(batch.rewards) - 1):
        if batch.traj_ids[i] == batch.traj_ids[i + 1]:
            assert batch.next_obs[i] == batch.anchor_obs[i + 1]
            assert batch.step_index[i + 1] == batch.step_index[i] + 1
    shaped = shape_advantages(batch, ShapeConfig.from_preset("graphgpo-alfworld"))
    assert np.isfinite(shaped.step_advantages).all()
    with pytest.raises(StepRecordError, match="2 group ids for 6 trajectories"):
        step_batch_from_trajectories(trajectories, groups[:2])


@pytest.mark.parametrize("preset", ["gigpo-alfworld", "g2po-alfworld"])
def test_observation_keying_is_the_same_option_on_both_paths(rollouts, preset: str) -> None:
    """``--env.anchor observation``: the trainer's rows and a user's trajectories key states by the text alike."""
    from stepgym.steps.row import rows_step_batch

    ro, pad_id = rollouts
    trainer, _ = rows_step_batch(
        ro.rows, reward_scale=10.0, invalid_rule="format_or_inadmissible", pad_id=pad_id, anchor="observation"
    )
    mine = step_batch_from_trajectories(
        ro.trajectories, ro.traj_group, reward_scale=10.0, anchor="observation"
    )
    assert list(trainer.anchor_obs) == [r.observation for r in ro.rows] == list(mine.anchor_obs)
    assert list(mine.next_obs) == [r.next_observation for r in ro.rows] == list(trainer.next_obs)
    keyed = step_batch_from_trajectories(ro.trajectories, ro.traj_group, reward_scale=10.0)
    assert list(keyed.anchor_obs) != list(mine.anchor_obs)  # the state keys are not the texts
    cfg = ShapeConfig.from_preset(preset)
    np.testing.assert_array_equal(
        shape_advantages(mine, cfg).step_advantages, shape_advantages(trainer, cfg).step_advantages
    )


def test_the_facade_exports_the_one_builder() -> None:
    import stepgym
    from stepgym.steps import batch as steps

    assert stepgym.step_batch_from_trajectories is steps.step_batch_from_trajectories
    assert step_batch_from_trajectories is steps.step_batch_from_trajectories
    with pytest.raises(ValueError, match="anchor must be one of"):
        steps.StepBatchOptions(anchor="text")
    with pytest.raises(ValueError, match="invalid_rule must be one of"):
        steps.build_step_batch(
            [[(0, 1)]], [0], 1, rewards=[[1.0]], options=steps.StepBatchOptions(invalid_rule="admissible")
        )
    with pytest.raises(ValueError, match="needs the observation texts"):
        steps.build_step_batch(
            [[(0, 1)]],
            [0],
            1,
            records=[[{"reward": 1.0}]],
            options=steps.StepBatchOptions(anchor="observation"),
        )
