"""Failure semantics in GroupEnv and the executors (docs/failures.md): with ``GroupConfig(on_failure="abort")`` an
env exception, a dead worker, a hung step or an unavailable service ends that rollout's episode as *aborted* with
its cause; the crashed copy is rebuilt (the dead worker restarted) and the group goes on."""

from __future__ import annotations

import os
import signal
import time

import pytest
from _toy_env import ToyRoomEnv, expert_actions

import stepgym  # noqa: F401  (registers the envs)
from stepgym import schema
from stepgym.errors import RetrieverUnavailableError, SiteUnavailableError
from stepgym.group import GroupConfig, GroupEnv
from stepgym.llm_client import LLMUnavailableError
from stepgym.workers import EnvWorkerError, ExecutorSpec, OpFailure

ABORT = GroupConfig(on_failure="abort")
TASK = {"task_id": "toy/key-in-kitchen"}


class _Faulty(ToyRoomEnv):
    """The toy env, with actions that fail the way infrastructure fails; a reset with seed 13 always raises."""

    def reset(self, *, seed=None, options=None):
        if seed == 13:
            raise OSError("the engine's data mount went away")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if action == "explode":
            raise ZeroDivisionError("boom inside the env")
        if action == "search":
            raise RetrieverUnavailableError("retrieval server http://127.0.0.1:1 did not answer")
        if action == "buy":
            raise SiteUnavailableError("the WebShop site stopped answering")
        if action == "hint":
            raise LLMUnavailableError("analyzer down")
        if action == "hang":
            time.sleep(60)
        return super().step(action)


def _play_rest(group: GroupEnv, infos: dict) -> None:
    """Play the live rollouts with the expert's actions to the end."""
    plan = {a: iter(expert_actions(TASK["task_id"])) for a in group.agents}
    while group.agents:
        group.step({a: next(plan[a], "look") for a in group.agents})


@pytest.mark.parametrize(
    ("action", "cause"),
    [
        ("explode", "env_exception"),
        ("search", "retriever_unavailable"),
        ("buy", "site_unavailable"),
        ("hint", "hint_llm_unavailable"),
    ],
)
def test_an_env_failure_aborts_that_rollout_and_the_group_goes_on(action: str, cause: str) -> None:
    group = GroupEnv(_Faulty, group_size=3, config=ABORT)
    obs, infos = group.reset(seed=0, options=TASK)
    copy_before = group.envs[1]
    _, rew, term, trunc, infos = group.step({"rollout_0": "look", "rollout_1": action, "rollout_2": "look"})
    assert trunc["rollout_1"] and not term["rollout_1"] and rew["rollout_1"] == 0.0
    assert infos["rollout_1"][schema.ABORTED] is True and infos["rollout_1"][schema.ABORT_CAUSE] == cause
    assert "rollout_1" not in group.agents and group.agents == ["rollout_0", "rollout_2"]
    assert group.envs[1] is not copy_before  # the crashed copy was rebuilt
    _play_rest(group, infos)
    t = group.trajectories
    assert group.finished and group.aborted() == [False, True, False]
    assert (
        t[1].ending == "aborted" and t[1].abort_cause == cause and t[1].steps == []
    )  # no transition happened
    assert [x.ending for x in (t[0], t[2])] == ["terminated", "terminated"] and t[0].success
    # the aborted rollout is nobody's peer and gets no hindsight
    assert group.peer_hindsight()[1] is None
    # the next group is whole again, on the rebuilt copy
    obs, _ = group.reset(seed=1, options=TASK)
    assert sorted(obs) == group.possible_agents and not any(group.aborted())


def test_without_abort_the_error_still_stops_the_group() -> None:
    group = GroupEnv(_Faulty, group_size=2)
    group.reset(seed=0, options=TASK)
    with pytest.raises(ZeroDivisionError):
        group.step({"rollout_0": "explode", "rollout_1": "look"})
    with pytest.raises(ValueError, match="on_failure"):
        GroupConfig(on_failure="ignore")


def test_a_reset_that_fails_twice_starts_the_rollout_aborted() -> None:
    group = GroupEnv(_Faulty, group_size=2, config=ABORT)
    obs, infos = group.reset(seed=13, options=TASK)  # every copy fails, twice
    assert obs == {} and group.agents == [] and group.finished
    assert [t.abort_cause for t in group.trajectories] == ["env_exception"] * 2
    assert group.trajectories[0].initial_info[schema.ABORT_DETAIL].startswith("OSError")


def test_a_killed_worker_aborts_its_rollouts_and_is_restarted() -> None:
    group = GroupEnv(_Faulty, group_size=4, config=ABORT, executor=ExecutorSpec("process", num_workers=2))
    try:
        group.reset(seed=0, options=TASK)
        victim = group.executor.pids[1]  # holds rollouts 2 and 3
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.2)
        _, _, _, trunc, infos = group.step({a: "look" for a in group.agents})
        assert {a for a, i in infos.items() if i.get(schema.ABORTED)} == {"rollout_2", "rollout_3"}
        assert infos["rollout_2"][schema.ABORT_CAUSE] == "worker_death" and trunc["rollout_2"]
        assert group.agents == ["rollout_0", "rollout_1"] and victim not in group.executor.pids
        _play_rest(group, infos)
        assert group.aborted() == [False, False, True, True] and group.trajectories[0].success
        obs, _ = group.reset(seed=0, options=TASK)  # the restarted worker's copies serve the next group
        assert sorted(obs) == group.possible_agents
    finally:
        group.close()


def test_a_hung_step_times_out_as_step_timeout_and_an_exception_in_a_worker_is_env_exception() -> None:
    group = GroupEnv(
        _Faulty,
        group_size=2,
        config=ABORT,
        executor=ExecutorSpec("process", num_workers=2, options={"timeout": 3}),
    )
    try:
        group.reset(seed=0, options=TASK)
        _, _, _, _, infos = group.step({"rollout_0": "hang", "rollout_1": "search"})
        assert infos["rollout_0"][schema.ABORT_CAUSE] == "step_timeout"
        assert infos["rollout_1"][schema.ABORT_CAUSE] == "retriever_unavailable"
        assert group.finished and group.aborted() == [True, True]
    finally:
        group.close()


def test_a_copy_whose_worker_restarted_for_another_group_is_never_stepped() -> None:
    from stepgym.workers import EnvRecipe, ProcessExecutor

    ex = ProcessExecutor(EnvRecipe(_Faulty), 4, num_workers=2)
    try:
        a = GroupEnv.on_executor(ex, [0, 2], config=ABORT)  # one copy on each worker
        b = GroupEnv.on_executor(ex, [1, 3], config=ABORT)
        a.reset(seed=0, options=TASK)
        b.reset(seed=0, options=TASK)
        with pytest.raises(EnvWorkerError):  # a strict call of group b's on worker 1 finds it dead: restarted
            _kill_and_touch(ex)
        _, _, _, _, infos = a.step({x: "look" for x in a.agents})
        assert infos["rollout_1"][schema.ABORT_CAUSE] == "worker_death" and "rollout_0" in a.agents
    finally:
        ex.close()


def _kill_and_touch(ex) -> None:
    os.kill(ex.pids[1], signal.SIGKILL)
    time.sleep(0.2)
    ex.call("attr", [3], ["spec"])


def test_tolerant_results_carry_op_failures() -> None:
    group = GroupEnv(_Faulty, group_size=2)
    group.reset(seed=0, options=TASK)
    ticket = group.executor.submit("step", [0, 1], ["explode", "look"])
    res = group.executor.result(ticket, tolerate=True)
    assert (
        isinstance(res[0], OpFailure)
        and res[0].cause == "env_exception"
        and not isinstance(res[1], OpFailure)
    )


def test_fault_injection_wrapper_input_is_checked() -> None:
    from stepgym.wrappers.faults import FaultInjectionWrapper, parse_faults

    assert parse_faults("exception=0.05,kill=0.01,seed=3") == {"exception": 0.05, "kill": 0.01, "seed": 3.0}
    assert parse_faults("") == {}
    with pytest.raises(ValueError, match="expected"):
        parse_faults("boom=1")
    with pytest.raises(ValueError, match="executor='process'"):  # never kill the driver
        FaultInjectionWrapper(ToyRoomEnv(), kill=0.1)
    with pytest.raises(ValueError, match="probability"):
        FaultInjectionWrapper(ToyRoomEnv(), exception=1.5)
