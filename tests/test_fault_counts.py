"""The fault-injection suite (docs/failures.md): phase × executor × cause, with known faults, counted exactly.

Every fault is planned (``tests/_fault_env.py``: an episode reset on a planned task or seed fails at a planned step,
by an env exception, an unavailable retriever, a killed worker or a hung step) and logged by the env as it happens;
each test compares the aborted episodes per cause with what was injected, exactly:

* every failed operation has one cause: an env exception or a service outage cuts off its own episode; a killed
  worker cuts off the episodes it held (``worker_death``), a hung step those of the worker restarted because of it
  (``step_timeout``, also for a call that was in flight to it with overlap on: never also a ``worker_death``);
* the same on the in-process executor, a process pool and Ray;
* in every phase that plays an env: a collection (format warm-up and training collect the same way), the
  evaluation, the tokenizer corpus and ``stepgym rollout``'s loop.

Bigger sweeps (real envs, random faults, the credit they would cost) are ``benchmarks/fault_injection.py``.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from _fault_env import PlannedFaultEnv, injected

from stepgym.workers import ExecutorSpec

G = 3
TOY = {"n_rooms": 3, "n_distractors": 1}


def _render(action: str) -> str:
    return f"<think>ok</think><action>{action}</action>"


def _collector(
    executor: str, overlap: str, env_kwargs: dict, *, group_size: int = G, workers: int = 2, timeout=0
):
    from stepgym.trainers.backends import ScriptedBackend
    from stepgym.trainers.collector import Collector, CollectorOptions
    from stepgym.trainers.models import train_tokenizer
    from stepgym.trainers.samples import PromptEncoder
    from stepgym.wrappers.text import get_format

    tok = train_tokenizer(["go to the room and take the key", "look around <think>ok</think>"])
    opts: dict = {"timeout": timeout} if timeout else {}
    if executor == "ray":
        opts["num_cpus"] = 0.25
    return Collector(
        PlannedFaultEnv,
        env_kwargs,
        get_format("alfworld"),
        history=1,
        group_size=group_size,
        encoder=PromptEncoder(tok, max_prompt_tokens=256),
        backend=ScriptedBackend(tok, "noisy-expert:0.3", render=_render),
        options=CollectorOptions(executor=ExecutorSpec(executor, workers, opts), overlap=overlap),
    )


def _kwargs(tmp_path: Path, plan: dict) -> dict:
    return {**TOY, "plan": plan, "log": str(tmp_path / "faults.log"), "driver_pid": os.getpid()}


CAUSE_OF = {"raise": "env_exception", "retriever": "retriever_unavailable"}


@pytest.fixture(scope="module")
def ray_up():
    """One Ray for the module's Ray cases (a Ray the caller started stays up between executors)."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    path = os.pathsep.join(p for p in [str(Path(__file__).parent), *sys.path] if p)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


def _executor(request: pytest.FixtureRequest, kind: str) -> str:
    if kind == "ray":
        request.getfixturevalue("ray_up")
    return kind


# -- a collection (what format warm-up and training play) ------------------------------------------------------------
@pytest.mark.parametrize(("kind", "overlap"), [("inprocess", "off"), ("process", "on"), ("ray", "on")])
def test_env_exceptions_and_service_outages_abort_their_own_episodes(
    request, tmp_path, kind, overlap
) -> None:
    plan = {"seed:11": (0, "raise"), "seed:13": (1, "retriever"), "seed:14": (0, "raise")}
    col = _collector(_executor(request, kind), overlap, _kwargs(tmp_path, plan))
    try:
        ro = col.collect([(None, s) for s in (11, 12, 13, 14)], seed_rng=np.random.default_rng(0))
        # the same collector goes on: its copies were rebuilt, nothing is left aborted
        again = col.collect([(None, s) for s in (21, 22)], seed_rng=np.random.default_rng(1))
    finally:
        col.close()
    logged = injected(tmp_path / "faults.log")
    want = collections.Counter(CAUSE_OF[how] for _, _, how, _ in logged)
    assert want == {"env_exception": 2 * G, "retriever_unavailable": G}  # every copy of the planned groups
    assert ro.abort_counts() == want
    aborted_groups = {ro.traj_group[i] for i, t in enumerate(ro.trajectories) if t.aborted}
    assert aborted_groups == {0, 2, 3}
    assert not any(r.aborted for r in ro.rows if r.group == 1)
    assert again.abort_counts() == {}


@pytest.mark.parametrize("overlap", ["off", "on"])
def test_a_killed_worker_aborts_exactly_the_episodes_it_held(tmp_path, overlap) -> None:
    # two workers, one group each: the kill cuts off group 0's copies only
    col = _collector("process", overlap, _kwargs(tmp_path, {"seed:11": (0, "kill")}))
    try:
        ro = col.collect([(None, 11), (None, 12)], seed_rng=np.random.default_rng(0))
        again = col.collect([(None, 21), (None, 22)], seed_rng=np.random.default_rng(1))
    finally:
        col.close()
    assert [how for _, _, how, _ in injected(tmp_path / "faults.log")] == ["kill"]
    assert ro.abort_counts() == {"worker_death": G}
    assert [t.aborted for t in ro.trajectories] == [True] * G + [False] * G
    assert again.abort_counts() == {}


@pytest.mark.parametrize("kind", ["process", "ray"])
@pytest.mark.parametrize("how", ["kill", "hang"])
def test_a_restart_cuts_off_the_overlapped_wave_under_its_own_cause(request, tmp_path, kind, how) -> None:
    """One worker holding both waves: the failure of wave 0's call restarts it while wave 1's call is in flight.
    Both waves' episodes end with the restart's cause: a hung step is a step_timeout for all of them (no
    worker_death: no process died of itself), a killed worker a worker_death."""
    # a Ray call has more latency than a socket: a little longer deadline there (an actor start never counts)
    timeout = 3 if kind == "process" else 5
    col = _collector(
        _executor(request, kind), "on", _kwargs(tmp_path, {"seed:11": (0, how)}), workers=1, timeout=timeout
    )
    try:
        ro = col.collect([(None, 11), (None, 12)], seed_rng=np.random.default_rng(0))
        again = col.collect([(None, 21), (None, 22)], seed_rng=np.random.default_rng(1))
    finally:
        col.close()
    assert [h for _, _, h, _ in injected(tmp_path / "faults.log")] == [how]
    cause = {"kill": "worker_death", "hang": "step_timeout"}[how]
    assert ro.abort_counts() == {cause: 2 * G}  # every episode the restarted worker held, once
    assert again.abort_counts() == {}


def test_a_hung_step_without_overlap_is_one_step_timeout_per_episode(tmp_path) -> None:
    col = _collector("process", "off", _kwargs(tmp_path, {"seed:12": (1, "hang")}), workers=2, timeout=3)
    try:
        ro = col.collect([(None, 11), (None, 12)], seed_rng=np.random.default_rng(0))
    finally:
        col.close()
    assert ro.abort_counts() == {"step_timeout": G}
    assert [t.aborted for t in ro.trajectories] == [False] * G + [True] * G


# -- evaluation --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["inprocess", "process"])
def test_evaluation_counts_its_aborted_episodes_and_leaves_them_out(tmp_path, kind) -> None:
    from stepgym.envs.credit import CreditToyEnv
    from stepgym.trainers.evaluate import evaluate_policy

    ids = CreditToyEnv(split="valid", **TOY).task_ids
    plan = {ids[0]: (0, "raise"), ids[3]: (0, "retriever"), ids[5]: (0, "raise")}
    kw = {**_kwargs(tmp_path, plan), "split": "valid"}
    col = _collector(kind, "off", kw, group_size=1)
    try:
        res = evaluate_policy(col, budgets=(5, 10), limit=len(ids), parallel=4)
    finally:
        col.close()
    # (the workers log concurrently: in no fixed order)
    assert sorted(k for k, _, _, _ in injected(tmp_path / "faults.log")) == sorted([ids[0], ids[3], ids[5]])
    assert res["n_aborted"] == 3 and res["aborted"] == {"env_exception": 2, "retriever_unavailable": 1}
    assert res["n_tasks"] == len(ids) - 3


# -- the single-env loop: the tokenizer corpus and `stepgym rollout` ---------------------------------------------------
def test_the_tokenizer_corpus_and_the_rollout_loop_count_their_aborts(tmp_path, caplog) -> None:
    from stepgym.agents import make_agent
    from stepgym.envs.credit import CreditToyEnv
    from stepgym.rollout import evaluate_agent
    from stepgym.trainers.warmup import env_corpus
    from stepgym.wrappers.text import get_format

    ids = CreditToyEnv(**TOY).task_ids
    plan = {ids[1]: (0, "raise"), ids[2]: (1, "retriever")}
    caplog.set_level(logging.WARNING, logger="stepgym.trainers.warmup")
    texts = env_corpus(
        PlannedFaultEnv, _kwargs(tmp_path, plan), get_format("alfworld"), history=1, episodes=6, seed=0
    )
    assert texts and len(injected(tmp_path / "faults.log")) == 2
    [line] = [r.message for r in caplog.records if "tokenizer corpus" in r.message]
    assert "2 of 6 episodes" in line and "env_exception 1" in line and "retriever_unavailable 1" in line

    env = PlannedFaultEnv(**_kwargs(tmp_path, plan))
    res = evaluate_agent(env, make_agent("expert"), task_ids=ids[:6], progress=False)
    assert res.abort_counts() == {"env_exception": 1, "retriever_unavailable": 1}
    assert res.success_by_type()["all"] == (4, 4)  # the expert wins every finished episode
