"""The trainer-neutral integration pieces: task datasets from an env's fixed split, flattened step annotations,
and the error a missing trainer gives."""

from __future__ import annotations

import importlib
import sys

import gymnasium as gym
import pytest

from stepgym import schema
from stepgym.errors import DependencyNotInstalled
from stepgym.schema import Step, Trajectory
from stepgym.steps.record import episode_annotations
from stepgym.steps.tasks import task_id_of_prompt, task_ids, task_rows

TOY = "StepGym/CreditToy-v0"


def test_task_rows_follow_the_env_split_and_carry_the_task_id() -> None:
    env = gym.make(TOY, n_tasks=5, split="valid")
    ids = list(env.unwrapped.task_ids)
    env.close()
    rows = task_rows(TOY, {"n_tasks": 5, "split": "valid"}, system_prompt="sys", user_prompt="task {task_id}")
    assert [r["task_id"] for r in rows] == ids == task_ids(TOY, {"n_tasks": 5, "split": "valid"})
    assert rows[1]["prompt"][0] == {"role": "system", "content": "sys", "task_id": ids[1]}
    assert rows[1]["prompt"][-1]["content"] == f"task {ids[1]}"
    assert [task_id_of_prompt(r["prompt"]) for r in rows] == ids
    assert len(task_rows(TOY, {"n_tasks": 5}, limit=2)) == 2


def test_task_helpers_refuse_what_they_cannot_use() -> None:
    with pytest.raises(ValueError, match="no task_ids"):
        task_ids(lambda: gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="limit"):
        task_rows(TOY, {"n_tasks": 2}, limit=0)
    with pytest.raises(ValueError, match="carries no task id"):
        task_id_of_prompt([{"role": "user", "content": "hello"}])


def test_episode_annotations_flatten_every_step_without_guessing() -> None:
    env = gym.make(TOY, n_tasks=2)
    obs, info = env.reset(seed=0, options={"task_id": env.unwrapped.task_ids[0]})
    traj = Trajectory(info[schema.TASK_ID], obs, info)
    for action in ("dance", info[schema.EXPERT_ACTION]):
        nxt, r, te, tr, after = env.step(action)
        traj.steps.append(Step(obs, action, r, nxt, te, tr, after))
        obs = nxt
    rec = episode_annotations(traj)
    assert rec["task_id"] == traj.task_id and rec["n_steps"] == 2 and rec["won"] is False
    bad, good = rec["steps"]
    assert bad["admissible"] is False and bad["effective"] is False and bad["action"] == "dance"
    assert good["admissible"] is True and good["state_key"] == traj.infos()[1][schema.STATE_KEY]
    assert good["next_state_key"] == traj.infos()[2][schema.STATE_KEY] != good["state_key"]
    assert bad["format_valid"] is None and bad["arg_reasonable"] is None  # not annotated: None, never guessed


@pytest.mark.parametrize(
    ("package", "module", "extra"),
    [
        ("trl", "trl", "trl"),
        ("skyrl_gym", "skyrl", "skyrl"),
        ("verl", "verl", "verl"),
        ("openrlhf", "openrlhf", "openrlhf"),
        ("verifiers", "verifiers", "verifiers"),
    ],
)
def test_a_missing_trainer_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, package: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail
    monkeypatch.delitem(sys.modules, f"stepgym.integrations.{module}", raising=False)
    with pytest.raises(DependencyNotInstalled, match=rf"pip install 'stepgym\[{extra}\]'"):
        importlib.import_module(f"stepgym.integrations.{module}")


def test_one_validity_anchor_and_label_rule_for_every_adapter() -> None:
    from stepgym.steps.batch import StepBatchOptions, build_step_batch
    from stepgym.steps.record import FORMAT_OR_INADMISSIBLE, arg_labels, valid_flags

    def rec(fv, adm, key, rea=None, prog=None):
        return {
            "reward": 0.0,
            "format_valid": fv,
            "admissible": adm,
            "state_key": key,
            "arg_reasonable": rea,
            "arg_progress": prog,
        }

    records = [rec(True, True, "s0"), rec(True, False, "s1"), rec(True, None, None), rec(False, True, "s3")]
    # unannotated admissibility is not held against a step
    assert valid_flags(records, FORMAT_OR_INADMISSIBLE).tolist() == [True, False, True, False]
    assert valid_flags(records, "format").tolist() == [True, True, True, False]
    # a step without a state key gets its own anchor
    batch = build_step_batch([[(0, 1), (1, 2), (2, 3), (3, 4)]], [0], 4, records=[records])
    assert list(batch.anchor_obs) == ["s0", "s1", "0:2", "s3"]
    assert batch.valid.tolist() == [True, False, True, False]
    # labels only when every step has them
    assert (
        arg_labels(records, "arg_reasonable") is None and batch.reasonable is None and batch.progress is None
    )
    labelled = [rec(True, True, "s", True, False)]
    assert arg_labels(labelled, "arg_reasonable").tolist() == [True]
    assert arg_labels(labelled, "arg_progress").tolist() == [False]
    with pytest.raises(ValueError, match="invalid_rule"):
        valid_flags(records, "admissible")
    with pytest.raises(ValueError, match="invalid_rule"):
        StepBatchOptions(invalid_rule="admissible")
