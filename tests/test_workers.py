"""Env executors (stepgym.workers): the same groups, byte for byte, wherever the env copies run; loud faults.

In-process, a local process pool and Ray must give identical trajectories, infos and peer hindsight for the same
seeds and actions (on CreditToy, and on ALFWorld with the process pool and Ray); a killed or hung worker is restarted and
the call fails naming it; a group is never stepped on a fresh copy without a reset; close() leaves no process.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from _toy_env import ToyRoomEnv

import stepgym  # noqa: F401  (registers the envs)
from stepgym import schema
from stepgym.envs.credit import CreditToyEnv
from stepgym.group import GroupEnv
from stepgym.workers import (
    EnvRecipe,
    EnvWorkerError,
    ExecutorSpec,
    InProcessExecutor,
    ProcessExecutor,
    make_executor,
)
from stepgym.wrappers.feedback import EnvFeedbackWrapper

TOY_KWARGS = {"n_rooms": 3, "n_distractors": 1}


def _play(group: GroupEnv, seed: int, n_groups: int = 2) -> str:
    """Play ``n_groups`` groups with seeded random admissible-or-junk actions; return everything as one string.

    ``repr`` (not pickle, whose bytes depend on which objects happen to be shared) keeps every value, type and
    dict order, so equal strings mean byte-identical results."""
    rng = np.random.default_rng(seed)
    record = []
    for k in range(n_groups):
        obs, infos = group.reset(seed=seed + k)
        while group.agents:
            actions = {}
            for a in group.agents:
                adm = infos[a].get(schema.ADMISSIBLE_ACTIONS) or ["look"]
                actions[a] = adm[int(rng.integers(len(adm)))] if rng.random() < 0.8 else "xyzzy"
            obs, rew, term, trunc, new_infos = group.step(actions)
            infos.update(new_infos)
        record.append(
            [
                (t.task_id, t.initial_observation, t.initial_info, [tuple(vars(s).values()) for s in t.steps])
                for t in group.trajectories
            ]
        )
        record.append(group.peer_hindsight())
    return repr(record)


def _toy_group(executor, num_workers=2, options=None) -> GroupEnv:
    return GroupEnv(
        "StepGym/CreditToy-v0",
        group_size=4,
        env_kwargs=TOY_KWARGS,
        wrappers=[EnvFeedbackWrapper],
        executor=ExecutorSpec(executor, num_workers=num_workers, options=options or {}),
    )


def test_process_pool_is_byte_identical_to_in_process():
    ref = _toy_group("inprocess")
    try:
        expected = _play(ref, seed=3)
    finally:
        ref.close()
    pool = _toy_group("process", num_workers=2)
    try:
        assert _play(pool, seed=3) == expected
        # and stays so when it is reused for the next groups
        assert _play(pool, seed=3) == expected
    finally:
        pool.close()


def test_shared_executor_sends_one_call_per_worker_per_turn():
    recipe = EnvRecipe("StepGym/CreditToy-v0", TOY_KWARGS, (EnvFeedbackWrapper,))
    calls: list[dict[int, int]] = []

    class Counting(ProcessExecutor):
        def _send_batches(self, batches):
            calls.append({w: len(ops) for w, ops in batches.items()})
            return super()._send_batches(batches)

    ex = Counting(recipe, 8, num_workers=2)
    try:
        groups = [GroupEnv.on_executor(ex, slots=range(4 * k, 4 * k + 4)) for k in range(2)]
        for k, g in enumerate(groups):
            g.reset_async(seed=k)
        for g in groups:
            g.reset_wait()
        calls.clear()
        for g in groups:
            g.step_async({a: "look" for a in g.agents})
        for g in groups:
            g.step_wait()
        # two groups of four, one turn: one message per worker, each holding that worker's four steps
        assert calls == [{0: 4, 1: 4}]
    finally:
        ex.close()


def test_killed_worker_is_restarted_and_named_and_group_must_reset():
    group = _toy_group("process", num_workers=2)
    try:
        group.reset(seed=0)
        victim = group.executor.pids[1]
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.2)  # let the kernel reap it; the executor notices on its next call
        with pytest.raises(EnvWorkerError, match=r"env worker 1 .*(died|dead).*restarted"):
            group.step({a: "look" for a in group.agents})
        assert victim not in group.executor.pids
        with pytest.raises(RuntimeError, match="reset"):
            group.step({a: "look" for a in group.agents})
        # after a reset the group is whole again and plays exactly like a fresh in-process one
        assert _play(group, seed=5) == _play(_toy_group("inprocess"), seed=5)
    finally:
        group.close()


class _SlowOnWait(ToyRoomEnv):
    """The toy env, with an action that hangs (to test the call timeout)."""

    def step(self, action):
        if action == "hang":
            time.sleep(60)
        return super().step(action)


def test_hung_worker_times_out_and_is_restarted():
    group = GroupEnv(
        _SlowOnWait, group_size=2, executor=ExecutorSpec("process", num_workers=1, options={"timeout": 3})
    )
    try:
        group.reset(seed=0)
        pid = group.executor.pids[0]
        with pytest.raises(EnvWorkerError, match="did not answer within 3 s"):
            group.step({"rollout_0": "hang", "rollout_1": "look"})
        assert group.executor.pids and group.executor.pids[0] != pid
        obs, _ = group.reset(seed=0)
        assert set(obs) == {"rollout_0", "rollout_1"}
    finally:
        group.close()


class _Exploding(ToyRoomEnv):
    def step(self, action):
        if action == "explode":
            raise ZeroDivisionError("boom inside the env")
        return super().step(action)


def test_env_exception_is_reported_with_the_worker_traceback():
    group = GroupEnv(_Exploding, group_size=2, executor=ExecutorSpec("process", num_workers=1))
    try:
        group.reset(seed=0)
        with pytest.raises(
            EnvWorkerError, match=r"(?s)slot 0 \(worker 0\) raised during 'step'.*ZeroDivisionError"
        ):
            group.step({"rollout_0": "explode", "rollout_1": "look"})
    finally:
        group.close()
    # in-process the original exception propagates unchanged
    local = GroupEnv(_Exploding, group_size=2)
    local.reset(seed=0)
    with pytest.raises(ZeroDivisionError):
        local.step({"rollout_0": "explode", "rollout_1": "look"})


def test_unpicklable_recipe_is_refused_clearly():
    with pytest.raises(ValueError, match="no lambdas"):
        GroupEnv("StepGym/CreditToy-v0", group_size=2, wrappers=[lambda e: e], executor="process")
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("threads", EnvRecipe("StepGym/CreditToy-v0"), 2)


def test_a_plain_script_needs_no_main_guard(tmp_path):
    """Workers are fresh interpreters that never re-import the user's script (multiprocessing's spawn would, and
    fail without an ``if __name__ == "__main__":`` guard)."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(
        "import stepgym\n"
        "from stepgym.workers import ExecutorSpec\n"
        "from stepgym.wrappers import EnvFeedbackWrapper\n"
        "g = stepgym.GroupEnv('StepGym/CreditToy-v0', group_size=2, wrappers=[EnvFeedbackWrapper],\n"
        "                     executor=ExecutorSpec('process', num_workers=2))\n"
        "obs, infos = g.reset(seed=0)\n"
        "print('agents', sorted(obs))\n"
        "g.close()\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "agents ['rollout_0', 'rollout_1']" in out.stdout


def test_close_leaves_no_worker_process():
    group = _toy_group("process", num_workers=2)
    pids = list(group.executor.pids)
    group.reset(seed=1)
    group.close()
    for pid in pids:
        status = f"/proc/{pid}/status"
        assert not os.path.exists(status) or "zombie" in open(status).read().lower()  # noqa: SIM115


def test_remote_group_reads_wrapper_and_unwrapped_attributes():
    group = _toy_group("process", num_workers=2)
    local = _toy_group("inprocess")
    try:
        group.reset(seed=2)
        local.reset(seed=2)
        assert group.get_unwrapped_attr("task_ids") == local.envs[0].unwrapped.task_ids
        assert group.get_unwrapped_attr("no_such_attribute", "fallback") == "fallback"
        assert group.observation_space("rollout_0") is group.observation_space("rollout_0")
        with pytest.raises(RuntimeError, match="live in ProcessExecutor"):
            _ = group.envs
    finally:
        group.close()
        local.close()
    assert isinstance(local.executor, InProcessExecutor)


def test_results_nobody_collects_are_dropped_oldest_first_and_bounded():
    """A ticket whose caller walked away (an async attribute read never waited for) must not keep its answer for
    the executor's life: only the newest ``max_uncollected`` answers wait, and a dropped one says so."""
    group = _toy_group("inprocess")
    ex = group.executor
    ex.max_uncollected = 5
    try:
        group.reset(seed=1)
        abandoned = []
        for turn in range(40):
            abandoned.append(group.get_wrapper_attr_async("spec"))  # answered with the step, never waited for
            if not group.agents:
                group.reset(seed=turn)
            group.step({a: "look" for a in group.agents})
            assert len(ex._answers) <= 5
        outcomes = []
        for wait in abandoned:
            try:
                outcomes.append(isinstance(wait(), dict))
            except ValueError as e:
                assert re.search(r"ticket \d+, or dropped: more than 5 answers were left uncollected", str(e))
                outcomes.append("dropped")
        assert outcomes == ["dropped"] * 35 + [True] * 5
        kept = [ex.submit("unwrapped_attr", [0], [("task_ids", None)]) for _ in range(6)]
        ids = [group.envs[0].unwrapped.task_ids]
        assert ex.result(kept[-1]) == ids and [ex.result(t) for t in kept[:-1]] == [ids] * 5
        assert len(ex._answers) == 0
        with pytest.raises(ValueError, match=r"unknown or already collected ticket \d+$"):
            ex.result(kept[0])
    finally:
        group.close()


def _toy_collector(
    executor: str,
    overlap: str,
    policy: str = "noisy-expert:0.3",
    env: str = "StepGym/CreditToy-v0",
    env_kwargs: dict | None = None,
    group_size: int = 3,
    on_failure: str = "abort",
):
    from stepgym.trainers.backends import ScriptedBackend
    from stepgym.trainers.collector import Collector, CollectorOptions
    from stepgym.trainers.models import train_tokenizer
    from stepgym.trainers.samples import PromptEncoder
    from stepgym.wrappers.text import get_format

    tok = train_tokenizer(["go to the room and take the key", "look around <think>ok</think>"])
    return Collector(
        env,
        TOY_KWARGS if env_kwargs is None else env_kwargs,
        get_format("alfworld"),
        history=1,
        group_size=group_size,
        encoder=PromptEncoder(tok, max_prompt_tokens=256),
        backend=ScriptedBackend(tok, policy, render=_render),
        options=CollectorOptions(executor=ExecutorSpec(executor, 2), overlap=overlap, on_failure=on_failure),
    )


def _collected(col, tasks, group_seeds: bool) -> str:
    """Everything a collection returns, as one string (rows, trajectories, hindsight, task ids)."""
    out = col.collect(
        tasks,
        seed_rng=np.random.default_rng(0),
        group_rngs=[np.random.default_rng([5, g]) for g in range(len(tasks))] if group_seeds else None,
    )
    return repr(
        (
            [(r.traj, r.t, r.prompt, r.response_ids, r.info, r.record) for r in out.rows],
            [
                (t.task_id, t.initial_info, [tuple(vars(s).values()) for s in t.steps])
                for t in out.trajectories
            ],
            out.hindsight,
            out.task_ids,
        )
    )


def test_collector_gives_identical_rows_with_a_process_pool():
    ref = _toy_collector("inprocess", "off")
    got = _toy_collector("process", "off")
    try:
        assert _collected(got, [(None, 11), (None, 12)], False) == _collected(
            ref, [(None, 11), (None, 12)], False
        )
        assert got.task_ids() == ref.task_ids()
        assert not got.overlaps and _toy_collector("process", "auto").overlaps
    finally:
        got.close()
        ref.close()


def _count_in_flight(col, n_groups: int) -> list[int]:
    """Record, at every send of the collector's shared executor, how many earlier sends were still unanswered."""
    col.groups(n_groups)
    ex, seen = col._shared, []
    send = ex._send_batches

    def counting(batches):
        seen.append(len(ex._in_flight))
        return send(batches)

    ex._send_batches = counting
    return seen


def test_overlapped_collection_is_byte_identical_to_sequential():
    """Waves of groups pipelined over a process pool give the rows, trajectories and hindsight of the sequential
    collector when requests are group-seeded, and a fixed (timing-independent) result otherwise."""
    tasks = [(None, 11), (None, 12), (None, 13), (None, 14), (None, 15)]  # odd: the waves differ in size
    ref = _toy_collector("inprocess", "off")
    pool = _toy_collector("process", "on")
    seq = _toy_collector("process", "off")
    try:
        expected = _collected(ref, tasks, True)
        assert "True" in expected  # some rollout succeeded, so hindsight and success rows are compared too
        in_flight, in_flight_seq = _count_in_flight(pool, len(tasks)), _count_in_flight(seq, len(tasks))
        assert _collected(pool, tasks, True) == expected
        assert _collected(seq, tasks, True) == expected
        # overlapped: one wave was sent while the other was still stepping; sequential: never
        assert max(in_flight) == 1 and max(in_flight_seq) == 0
        assert pool._shared.num_workers == 2
        # without group seeds the waves' samples differ from one big call, but not from run to run
        assert _collected(pool, tasks, False) == _collected(pool, tasks, False)
        assert _collected(_toy_collector("inprocess", "on"), tasks, False) == _collected(pool, tasks, False)
    finally:
        seq.close()
        pool.close()
        ref.close()


class _FailsOnStep(CreditToyEnv):
    """CreditToy, whose worker process dies at a copy's third step (a crash in the middle of overlapped waves)."""

    def step(self, action):
        self._n_steps = getattr(self, "_n_steps", 0) + 1
        if self._n_steps == 3:
            os._exit(1)
        return super().step(action)


def test_worker_death_during_overlapped_waves_names_worker_and_task():
    from stepgym.trainers.collector import Collector

    col = _toy_collector("process", "on", policy="random", on_failure="raise")  # the debugging mode: raise
    col.env_id = _FailsOnStep
    try:
        with pytest.raises(
            EnvWorkerError, match=r"env worker \d .*died.*restarted.*task '[^']+', seed 1[1-4]"
        ):
            _collected(col, [(None, 11), (None, 12), (None, 13), (None, 14)], True)
        # the collector is usable again: the dropped wave was collected, the copies are fresh and get reset
        col.env_id = "StepGym/CreditToy-v0"
        col.close()
        assert isinstance(col, Collector) and _collected(col, [(None, 11), (None, 12)], True)
    finally:
        col.close()


def _render(action: str) -> str:
    return f"<think>ok</think><action>{action}</action>"


@pytest.mark.slow
def test_ray_executor_is_byte_identical_and_restarts_dead_actors(monkeypatch, tmp_path):
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("STEPGYM_DATA", os.environ.get("STEPGYM_DATA", str(tmp_path)))
    assert not ray.is_initialized()
    ref = _toy_group("inprocess")
    expected = _play(ref, seed=7)
    # the executor starts Ray itself (as the trainer's does), so its runtime environment is the one under test
    kw = {"num_cpus": 0.5, "timeout": 120, "ray_init_kwargs": {"num_cpus": 2}}
    group = _toy_group("ray", num_workers=2, options=kw)
    try:

        def runtime_env_vars():  # local, so Ray ships it by value
            return ray.get_runtime_context().runtime_env.get("env_vars", {})

        # data paths reach the workers through the runtime environment (what carries them to other machines)
        assert ray.get(ray.remote(runtime_env_vars).remote())["STEPGYM_DATA"] == os.environ["STEPGYM_DATA"]
        assert _play(group, seed=7) == expected
        group.reset(seed=0)
        victim = group.executor._actors[0]
        ray.kill(victim, no_restart=True)
        # ray.kill is asynchronous: wait (bounded) until the actor is really gone before stepping
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ray.get(victim.run.remote([]), timeout=10)
            except ray.exceptions.RayActorError:
                break
            time.sleep(0.2)
        with pytest.raises(EnvWorkerError, match=r"Ray env worker 0 .*died.*task '[^']+', seed 0"):
            group.step({a: "look" for a in group.agents})
        assert _play(group, seed=7) == expected
        pids = group.executor.pids
    finally:
        group.close()
        ray_left_up = ray.is_initialized()
        if ray_left_up:
            ray.shutdown()
    # close() ended the actors and the Ray it started: no process is left behind
    assert not ray_left_up
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.2)
    for pid in pids:
        status = f"/proc/{pid}/status"
        assert not os.path.exists(status) or "zombie" in open(status).read().lower()  # noqa: SIM115


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["process", "ray"])
def test_alfworld_groups_identical_in_process_and_on_workers(executor, data_dir, monkeypatch):
    kwargs = {"split": "valid_seen", "max_steps": 8}
    extra: dict = {}
    if executor == "ray":
        ray = pytest.importorskip("ray")
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        assert not ray.is_initialized()
        extra = {"num_cpus": 0.5, "timeout": 300, "ray_init_kwargs": {"num_cpus": 2}}

    def group(kind, options=None):
        return GroupEnv(
            "StepGym/ALFWorld-v0",
            group_size=2,
            env_kwargs=kwargs,
            wrappers=[EnvFeedbackWrapper],
            executor=ExecutorSpec(kind, num_workers=2, options=options or {}),
        )

    ref = group("inprocess")
    try:
        expected = _play(ref, seed=1, n_groups=1)
    finally:
        ref.close()
    workers = group(executor, extra)
    try:
        assert _play(workers, seed=1, n_groups=1) == expected
    finally:
        workers.close()
    if executor == "ray":
        assert not ray.is_initialized()  # close() shut down the Ray the executor started


@pytest.mark.slow
def test_alfworld_overlapped_collection_is_byte_identical_to_sequential(data_dir):
    kw = {
        "env": "StepGym/ALFWorld-v0",
        "env_kwargs": {"split": "valid_seen", "max_steps": 6},
        "group_size": 2,
    }
    tasks = [(None, 1), (None, 2), (None, 3)]
    ref = _toy_collector("inprocess", "off", **kw)
    pool = _toy_collector("process", "on", **kw)
    try:
        expected = _collected(ref, tasks, True)
        assert _collected(pool, tasks, True) == expected
    finally:
        pool.close()
        ref.close()


# ---------------------------------------------------------------------------------------------------------------
# The ARG of an ARGWrapper in the wrappers: one graph, in the parent, sent to workers as JSON
# ---------------------------------------------------------------------------------------------------------------
def _arg_group(executor: str, graph, grow: bool) -> GroupEnv:
    import functools

    from stepgym.wrappers.arg import ARGWrapper

    return GroupEnv(
        "StepGym/CreditToy-v0",
        group_size=3,
        env_kwargs=TOY_KWARGS,
        wrappers=[EnvFeedbackWrapper, functools.partial(ARGWrapper, graph=graph, grow=grow)],
        executor=ExecutorSpec(executor, num_workers=2),
    )


def _arg_play(group: GroupEnv, n_groups: int, after_group=None) -> str:
    """Play ``n_groups`` groups of one task (rollout 0 follows the expert, the others mostly); return every
    trajectory, ARG labels included, as one string. ``after_group(group)`` runs when each group has finished."""
    rng = np.random.default_rng(0)
    record = []
    for _ in range(n_groups):
        obs, infos = group.reset(seed=7)
        while group.agents:
            actions = {
                a: infos[a][schema.EXPERT_ACTION] if a == "rollout_0" or rng.random() < 0.7 else "wait"
                for a in group.agents
            }
            _, _, _, _, new_infos = group.step(actions)
            infos.update(new_infos)
        record.append(
            [(t.initial_info, [tuple(vars(s).values()) for s in t.steps]) for t in group.trajectories]
        )
        if after_group is not None:
            after_group(group)
    return repr(record)


def _seeded_graph():
    from stepgym.graph_seeding import seed_graph_from_expert
    from stepgym.reference_graph import AgenticReferenceGraph

    graph = AgenticReferenceGraph()
    probe = _arg_group("inprocess", graph, grow=False)
    try:
        probe.reset(seed=7)
        task = probe.task_id
    finally:
        probe.close()
    import gymnasium as gym

    base = gym.make("StepGym/CreditToy-v0", **TOY_KWARGS)
    assert seed_graph_from_expert(graph, base, [task]) == 1
    return graph


def test_arg_graph_crosses_process_boundaries_as_its_json():
    import pickle

    from stepgym.reference_graph import AgenticReferenceGraph

    graph = _seeded_graph()
    data = pickle.dumps(graph)
    assert graph.to_json_text().encode() in data and b"networkx" not in data
    assert pickle.loads(data) == graph
    by_name = AgenticReferenceGraph(
        state_key=schema.STATE_KEY
    )  # its key function is a closure: the name travels
    assert pickle.loads(pickle.dumps(by_name)).state_key({schema.STATE_KEY: ("a", 1)}) == "('a', 1)"


def test_read_only_arg_labels_are_byte_identical_in_workers():
    graph = _seeded_graph()
    before = graph.to_json_text()
    ref = _arg_group("inprocess", graph, grow=False)
    try:
        expected = _arg_play(ref, 2)
    finally:
        ref.close()
    pool = _arg_group("process", graph, grow=False)
    try:
        assert pool.parent_states[0].graph is graph
        assert _arg_play(pool, 2) == expected
    finally:
        pool.close()
    assert graph.to_json_text() == before


def test_growing_arg_grows_once_in_the_parent_and_workers_label_against_it():
    from stepgym.reference_graph import AgenticReferenceGraph

    # What growth at group boundaries gives: label a group read-only, then add its successes in rollout order.
    ref_graph = AgenticReferenceGraph()
    ref = _arg_group("inprocess", ref_graph, grow=False)

    def grow_ref(group):
        for t in group.trajectories:
            if ref_graph.success_fn(t):
                ref_graph.add_trajectory(t)

    try:
        expected = _arg_play(ref, 3, grow_ref)
    finally:
        ref.close()
    assert ref_graph.stats()["trajectories"] > 0

    graph = AgenticReferenceGraph()
    pool = _arg_group("process", graph, grow=True)
    sent: list[int] = []
    submit = pool.executor.submit

    def counting(op, slots, args):
        if op == "parent_state":
            sent.append(len(slots))
        return submit(op, slots, args)

    pool.executor.submit = counting
    try:
        assert _arg_play(pool, 3) == expected  # later groups labelled against the parent's grown graph
        assert graph == ref_graph and pool.parent_states[0].graph is graph
        assert pool.get_wrapper_attr("grown", pool.possible_agents) == dict.fromkeys(pool.possible_agents, 0)
        assert sent == [
            3,
            3,
        ]  # before groups 2 and 3, each after a group that grew the graph; not before group 1
    finally:
        pool.close()
    # and the grown labels are not those of an empty graph
    empty = _arg_group("process", AgenticReferenceGraph(), grow=False)
    try:
        assert _arg_play(empty, 3) != expected
    finally:
        empty.close()


def test_growing_arg_on_a_shared_remote_executor_is_refused():
    import functools

    from stepgym.wrappers.arg import ARGWrapper

    recipe = EnvRecipe("StepGym/CreditToy-v0", TOY_KWARGS, (functools.partial(ARGWrapper, grow=True),))
    ex = ProcessExecutor(recipe, 2, 1)
    try:
        with pytest.raises(ValueError, match="grow=True"):
            GroupEnv.on_executor(ex)
    finally:
        ex.close()


def test_growing_arg_in_the_parent_warns_when_nothing_succeeds():
    import functools

    from stepgym.wrappers.arg import ARGWrapper

    group = GroupEnv(
        "StepGym/CreditToy-v0",
        group_size=2,
        env_kwargs=TOY_KWARGS,
        wrappers=[functools.partial(ARGWrapper, grow=True, warn_after=2)],
        executor=ExecutorSpec("process", num_workers=1),
    )
    try:
        group.reset(seed=1)
        with pytest.warns(RuntimeWarning, match="none counted as a success"):
            while group.agents:
                group.step(dict.fromkeys(group.agents, "wait"))
        assert group.parent_states[0].graph.stats()["trajectories"] == 0
    finally:
        group.close()


# ---------------------------------------------------------------------------------------------------------------
# Any wrapper that implements the parent-state protocol (stepgym.wrappers.protocols), not only the ARG
# ---------------------------------------------------------------------------------------------------------------
class _FinishedCounter(gym.Wrapper):
    """Reports in every reset info how many episodes of the group's copies had finished when the parent last sent
    its count; the count is kept and grown in the parent (the protocol's split, ship and merge)."""

    def __init__(self, env, finished=0, step=1):
        super().__init__(env)
        self.finished, self.step_by = finished, step

    @classmethod
    def split_parent_state(cls, finished=0, step=1):
        return functools.partial(cls, finished=finished, step=0), _FinishedCount(finished, step)

    def load_parent_state(self, payload):
        self.finished = payload

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        info["finished_before"] = self.finished
        return obs, info


class _FinishedCount:
    def __init__(self, finished, step):
        self.finished, self.step = finished, step
        self.updates = 0

    @property
    def grows(self):
        return self.step > 0

    def payload(self):
        return self.finished

    def update(self, trajectories):
        self.updates += 1
        self.finished += self.step * len(trajectories)


def test_any_parent_state_wrapper_is_kept_shipped_and_merged_in_the_parent():
    from stepgym.wrappers.protocols import ParentState, ParentStateWrapper

    assert isinstance(_FinishedCounter, ParentStateWrapper) and isinstance(_FinishedCount(0, 1), ParentState)
    group = GroupEnv(
        "StepGym/CreditToy-v0",
        group_size=2,
        env_kwargs=TOY_KWARGS,
        wrappers=[EnvFeedbackWrapper, functools.partial(_FinishedCounter, finished=5)],
        executor=ExecutorSpec("process", num_workers=2),
    )
    try:
        (state,) = group.parent_states
        seen = []
        for seed in (1, 2, 3):
            _, infos = group.reset(seed=seed)
            seen.append(sorted({i["finished_before"] for i in infos.values()}))
            while group.agents:
                group.step(dict.fromkeys(group.agents, "wait"))
        assert seen == [
            [5],
            [7],
            [9],
        ]  # each group's two finished episodes merged here and shipped to both workers
        assert (state.finished, state.updates) == (11, 3)
        assert group.get_wrapper_attr("step_by", group.possible_agents) == dict.fromkeys(
            group.possible_agents, 0
        )
    finally:
        group.close()
    recipe = EnvRecipe("StepGym/CreditToy-v0", TOY_KWARGS, (_FinishedCounter,))
    ex = ProcessExecutor(recipe, 2, 1)
    try:
        with pytest.raises(ValueError, match="grows"):
            GroupEnv.on_executor(ex)
    finally:
        ex.close()
