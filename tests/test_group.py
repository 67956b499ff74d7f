"""GroupEnv (PettingZoo) and StepOPSD's peer hindsight, on a toy env and on ALFWorld."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import gymnasium as gym
import pytest
from _toy_env import TASKS, ToyRoomEnv, expert_actions
from pettingzoo.test import parallel_api_test

import stepgym
from stepgym import schema
from stepgym.agents import ExpertAgent, NoisyExpertAgent, RandomAgent
from stepgym.group import GroupConfig, GroupEnv
from stepgym.hindsight import (
    NO_PEER,
    first_correct_peers,
    hindsight_block,
    peer_hindsight,
    render_trajectory_text,
)
from stepgym.testing import assert_same_infos
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import TextInterfaceWrapper


def _api_test(env: GroupEnv, cycles: int = 200) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel_api_test(env, num_cycles=cycles)
    msgs = [str(w.message) for w in caught if "pettingzoo" in w.filename or "agent" in str(w.message).lower()]
    assert not msgs, msgs


def play_group(
    group: GroupEnv, agents: list[Any], *, seed: int | None = None, options: dict | None = None
) -> dict:
    """Drive a group with one scripted agent per rollout; returns the per-step transcript for comparisons."""
    obs, infos = group.reset(seed=seed, options=options)
    for ag in agents:
        ag.reset()
    trace: list[Any] = [("reset", obs, infos)]
    while group.agents:
        actions = {a: agents[int(a.split("_")[1])].act(obs[a], infos[a]) for a in group.agents}
        o, r, te, tr, inf = group.step(actions)
        trace.append((actions, o, r, te, tr, inf))
        obs.update(o)
        infos.update(inf)
    return {"trace": trace}


class Script:
    """A fixed action list (then 'look' forever)."""

    def __init__(self, actions: list[str]):
        self.actions, self.t = actions, 0

    def reset(self) -> None:
        self.t = 0

    def act(self, obs: str, info: dict) -> str:
        a = self.actions[self.t] if self.t < len(self.actions) else "look"
        self.t += 1
        return a


# ---------------------------------------------------------------------------------------------------------------
# Pure peer-hindsight functions
# ---------------------------------------------------------------------------------------------------------------
def test_first_correct_peers_picks_the_first_success_in_rollout_order() -> None:
    assert first_correct_peers([False, True, False, True], [0] * 4).tolist() == [1, NO_PEER, 1, NO_PEER]
    assert first_correct_peers([True, False], [0, 0]).tolist() == [NO_PEER, 0]
    assert first_correct_peers([True, True], [0, 0]).tolist() == [NO_PEER, NO_PEER]
    assert first_correct_peers([False, False], [0, 0]).tolist() == [NO_PEER, NO_PEER]


def test_hindsight_block_text() -> None:
    """§5.6: the lines joined with "\\n", starting and ending with a newline."""
    assert hindsight_block("a\nb  \n") == (
        "\n<hindsight>\npeer_correct_trajectory:\n<peer_correct_trajectory>\na\nb\n</peer_correct_trajectory>\n</hindsight>\n"
    )
    assert hindsight_block("x", final_correctness="incorrect").startswith(
        "\n<hindsight>\nfinal_correctness: incorrect\n"
    )
    assert hindsight_block(None) == ""
    with pytest.raises(ValueError):
        hindsight_block("x", final_correctness="maybe")


def test_block_and_peer_choice_are_the_shapers_own() -> None:
    """GroupEnv and the shapers use one §5.6 rule and one block text (stepgym.hindsight), not two copies, and
    only stepgym.hindsight exports them."""
    import stepgym.group
    import stepgym.labels
    from stepgym import hindsight, shapers
    from stepgym.shapers import stepopsd_text

    for name in ("first_correct_peers", "hindsight_block", "hindsight_blocks"):
        assert not hasattr(stepopsd_text, name) and name not in shapers.__all__, name
    assert "hindsight_block" not in stepgym.labels.__all__ and "peer_hindsight" not in stepgym.group.__all__
    assert stepgym.group.peer_hindsight is hindsight.peer_hindsight is stepgym.peer_hindsight
    trajs = [_toy_traj(["look"]), _toy_traj(expert_actions(TASKS[0])), _toy_traj(["look"])]
    texts = [render_trajectory_text(t) for t in trajs]
    blocks = hindsight.hindsight_blocks(texts, [False, True, False], [0, 0, 0])
    assert peer_hindsight(trajs) == [b or None for b in blocks]


def _toy_traj(
    actions: list[str], task: str = TASKS[0], max_steps: int = 8, raw: bool = False
) -> schema.Trajectory:
    env = ToyRoomEnv(max_steps=max_steps)
    obs, info = env.reset(options={"task_id": task})
    tr = schema.Trajectory(task, obs, info)
    for a in actions:
        o, r, te, tru, inf = env.step(a)
        if raw:
            inf[schema.RAW_OUTPUT] = f"<think>t</think><action>{a}</action>  "
        tr.steps.append(schema.Step(obs, a, r, o, te, tru, inf))
        obs = o
        if te or tru:
            break
    return tr


def test_peer_hindsight_pure_function() -> None:
    win = expert_actions(TASKS[0])
    win2 = ["look", *win]
    lose = ["look"] * 8
    trajs = [_toy_traj(lose), _toy_traj(win2), _toy_traj(lose), _toy_traj(win)]
    out = peer_hindsight(trajs)
    assert out[1] is None and out[3] is None
    assert (
        out[0] == out[2] == hindsight_block(render_trajectory_text(trajs[1]))
    )  # first success, rollout order
    assert (
        "> look\nYou are in the hall." in out[0] and "> go to garden\nYou step out into the garden." in out[0]
    )
    assert peer_hindsight([_toy_traj(lose), _toy_traj(lose)]) == [None, None]
    assert peer_hindsight([_toy_traj(win), _toy_traj(win)]) == [None, None]
    assert peer_hindsight([]) == []
    flagged = peer_hindsight(trajs, final_correctness=True)
    assert "final_correctness: incorrect" in flagged[0]


def test_render_uses_raw_outputs_when_recorded() -> None:
    text = render_trajectory_text(_toy_traj(expert_actions(TASKS[0]), raw=True))
    assert text.startswith("<think>t</think><action>go to kitchen</action>\nYou are in the kitchen.")
    assert text == text.rstrip()


# ---------------------------------------------------------------------------------------------------------------
# GroupEnv on the toy env
# ---------------------------------------------------------------------------------------------------------------
def test_toy_parallel_api() -> None:
    _api_test(GroupEnv(ToyRoomEnv, group_size=3, env_kwargs={"max_steps": 10}))


def test_lazy_export_and_spaces() -> None:
    assert stepgym.GroupEnv is GroupEnv
    g = GroupEnv(ToyRoomEnv, group_size=2)
    assert g.possible_agents == ["rollout_0", "rollout_1"]
    assert g.observation_space("rollout_1") is g.observation_space("rollout_1")
    assert g.action_space("rollout_0") is g.action_space("rollout_0")
    with pytest.raises(ValueError):
        GroupEnv(ToyRoomEnv, group_size=0)


def test_toy_group_peer_hindsight_and_bookkeeping() -> None:
    g = GroupEnv(ToyRoomEnv, group_size=4, env_kwargs={"max_steps": 8})
    win = expert_actions(TASKS[1])
    agents = [Script(["look"]), Script(["inventory", *win]), Script(["dance"]), Script(win)]
    obs, infos = g.reset(options={"task_id": TASKS[1]})
    assert {i[schema.TASK_ID] for i in infos.values()} == {TASKS[1]}
    with pytest.raises(RuntimeError):
        g.peer_hindsight()
    done_at: dict[str, int] = {}
    t = 0
    while g.agents:
        actions = {a: agents[int(a[-1])].act(obs[a], infos[a]) for a in g.agents}
        o, r, te, tr, inf = g.step(actions)
        assert set(o) == set(actions)
        for a in actions:
            if te[a] or tr[a]:
                done_at[a] = t
                assert a not in g.agents
        obs.update(o)
        infos.update(inf)
        t += 1
    assert done_at == {"rollout_3": 4, "rollout_1": 5, "rollout_0": 7, "rollout_2": 7}
    assert g.finished and g.successes() == [False, True, False, True]
    h = g.peer_hindsight()
    assert h[1] is None and h[3] is None
    assert h[0] == h[2] == hindsight_block(render_trajectory_text(g.trajectories[1]))
    assert "> inventory" in h[0]  # rollout_1's path, not rollout_3's
    for tr_, hh in zip(g.trajectories, h, strict=True):
        assert tr_.steps[-1].info[schema.PEER_HINDSIGHT] == hh
    assert infos["rollout_0"][schema.PEER_HINDSIGHT] == h[0]  # delivered with the step that ended the group
    assert peer_hindsight(g.trajectories) == h
    with pytest.raises(ValueError, match="not live"):
        g.step({"rollout_0": "look"})


def test_toy_group_partial_steps_and_same_task() -> None:
    g = GroupEnv(ToyRoomEnv, group_size=3)
    obs, infos = g.reset(seed=123)
    assert len({i[schema.TASK_ID] for i in infos.values()}) == 1
    o, *_ = g.step({"rollout_1": "look"})
    assert set(o) == {"rollout_1"}
    assert [len(t.steps) for t in g.trajectories] == [0, 1, 0]
    seeds = [g.reset()[1]["rollout_0"][schema.TASK_ID] for _ in range(6)]
    g2 = GroupEnv(ToyRoomEnv, group_size=3)
    g2.reset(seed=123)
    assert [g2.reset()[1]["rollout_0"][schema.TASK_ID] for _ in range(6)] == seeds  # seeded chain


def test_group_repairs_an_env_with_its_own_task_order() -> None:
    class Cycling(ToyRoomEnv):
        """Ignores the seed and walks through its tasks (upstream ALFWorld's behaviour users complain about)."""

        counter = 0

        def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            if "task_id" not in options:
                Cycling.counter += 1
                options = {**options, "task_id": TASKS[Cycling.counter % 2]}
            return super()._reset_task(options)

    g = GroupEnv(Cycling, group_size=4)
    _, infos = g.reset(seed=0)
    assert len({i[schema.TASK_ID] for i in infos.values()}) == 1
    g_strict = GroupEnv(Cycling, group_size=2, config=GroupConfig(task_option=None))
    with pytest.raises(RuntimeError, match="different tasks"):
        g_strict.reset(seed=0)


def test_group_with_text_interface_prompts() -> None:
    g = GroupEnv(
        ToyRoomEnv,
        group_size=2,
        wrappers=[EnvFeedbackWrapper, functools.partial(TextInterfaceWrapper, fmt="alfworld")],
    )
    g.reset(seed=0)
    p = g.prompts()
    assert set(p) == {"rollout_0", "rollout_1"} and p["rollout_0"] == p["rollout_1"]
    _, _, _, _, inf = g.step({"rollout_0": "<think>x</think><action>look</action>", "rollout_1": "junk"})
    assert inf["rollout_0"][schema.FORMAT_VALID] and not inf["rollout_1"][schema.FORMAT_VALID]
    assert g.prompts()["rollout_0"] != g.prompts()["rollout_1"]


# ---------------------------------------------------------------------------------------------------------------
# ALFWorld
# ---------------------------------------------------------------------------------------------------------------
ALF = "StepGym/ALFWorld-v0"


def test_alfworld_parallel_api(data_dir) -> None:
    g = GroupEnv(ALF, group_size=2, env_kwargs={"split": "valid_seen", "max_steps": 6})
    _api_test(g, cycles=100)
    g.close()


def _compare(a: dict, b: dict) -> None:
    assert len(a["trace"]) == len(b["trace"])
    for i, (x, y) in enumerate(zip(a["trace"], b["trace"], strict=True)):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, dict) and u and isinstance(next(iter(u.values())), dict):
                assert u.keys() == v.keys()
                for k in u:
                    assert_same_infos(u[k], v[k], where=f"step {i} {k}")
            else:
                assert u == v, f"step {i}"


def test_alfworld_multistep_determinism(data_dir) -> None:
    """Two groups, same seed, same (noisy, seeded) agents: every observation, reward, flag and info is identical
    over whole episodes, and so are the recorded trajectories and the peer hindsight."""
    runs = []
    for _ in range(2):
        g = GroupEnv(ALF, group_size=3, env_kwargs={"split": "valid_unseen", "max_steps": 12})
        agents = [NoisyExpertAgent(0.3, seed=s) for s in (1, 2, 3)]
        runs.append((play_group(g, agents, seed=17), g))
    _compare(runs[0][0], runs[1][0])
    assert len(runs[0][0]["trace"]) > 5
    assert runs[0][1].peer_hindsight() == runs[1][1].peer_hindsight()
    for g in (runs[0][1], runs[1][1]):
        g.close()


@pytest.fixture(scope="module")
def alf_group(data_dir):
    g = GroupEnv(ALF, group_size=4, env_kwargs={"split": "valid_seen", "max_steps": 20})
    yield g
    g.close()


def test_alfworld_two_succeed_two_fail(alf_group) -> None:
    """G=4, scripted: rollouts 1 and 3 win by different routes, 0 and 2 fail; the failed ones get rollout 1's
    trajectory (the first success in rollout order), the winners get None."""
    task = alf_group.envs[0].unwrapped.task_ids[3]
    alf_group.reset(options={"task_id": task})
    walk = list(alf_group.envs[0].unwrapped.walkthrough)
    agents = [RandomAgent(seed=0), Script(["inventory", *walk]), Script(["look"] * 30), Script(walk)]
    play_group(alf_group, agents, options={"task_id": task})
    assert alf_group.successes() == [False, True, False, True]
    h = alf_group.peer_hindsight()
    peer = hindsight_block(render_trajectory_text(alf_group.trajectories[1]))
    assert h == [peer, None, peer, None]
    assert "> inventory\n" in peer and all(f"> {a}\n" in peer for a in walk)
    assert peer.startswith("\n<hindsight>\npeer_correct_trajectory:\n<peer_correct_trajectory>\n")
    assert alf_group.trajectories[0].steps[-1].info[schema.PEER_HINDSIGHT] == peer
    assert alf_group.trajectories[3].steps[-1].info[schema.PEER_HINDSIGHT] is None


def test_alfworld_none_succeed(alf_group) -> None:
    agents = [RandomAgent(seed=s) for s in range(3)] + [Script(["look"] * 30)]
    play_group(alf_group, agents, seed=5)
    assert not any(alf_group.successes())
    assert alf_group.peer_hindsight() == [None] * 4
    assert all(
        schema.PEER_HINDSIGHT in t.steps[-1].info and t.steps[-1].info[schema.PEER_HINDSIGHT] is None
        for t in alf_group.trajectories
    )


def test_alfworld_all_succeed(alf_group) -> None:
    play_group(alf_group, [ExpertAgent() for _ in range(4)], seed=9)
    assert all(alf_group.successes()) and alf_group.peer_hindsight() == [None] * 4
    assert len({t.task_id for t in alf_group.trajectories}) == 1


def test_alfworld_group_is_a_gym_free_user(data_dir) -> None:
    """A factory works too (any callable returning a gym.Env)."""
    g = GroupEnv(
        lambda **kw: gym.make(ALF, **kw), group_size=2, env_kwargs={"split": "valid_seen", "max_steps": 3}
    )
    obs, infos = g.reset(seed=2)
    assert obs["rollout_0"] == obs["rollout_1"] and "Your task is to" in obs["rollout_0"]
    g.close()
