"""StepGym/BabyAI-v0: Gymnasium's checker, determinism, fuzzed actions, equality with MiniGrid stepped directly
(rewards, termination, and the text against a rendering written here from MiniGrid's own observation), the solver's
values against a brute-force breadth-first search over deep copies of the level, and one run through GroupEnv +
ValueWrapper + the text interface."""

from __future__ import annotations

import contextlib
import copy
import io

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.babyai import BabyAIEnv
from stepgym.envs.babyai.engine import ACTIONS, WorldCodec, make_level, reset_level
from stepgym.envs.babyai.solver import Solver
from stepgym.testing import check_text_env
from stepgym.values import ValueWrapper, step_value_class

ENV_ID = "StepGym/BabyAI-v0"


def _upstream(level: str, seed: int, max_steps: int = 64):
    env = gym.make(level, max_steps=max_steps)
    with contextlib.redirect_stdout(io.StringIO()):
        obs, _ = env.reset(seed=seed)
    return env, obs


# ---------------------------------------------------------------------------------------------------------------
# An independent rendering of BabyAI-Text's view, from MiniGrid's observation only
# ---------------------------------------------------------------------------------------------------------------
def _reference_text(obs: dict) -> str:
    from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

    names = {v: k for k, v in OBJECT_TO_IDX.items()}
    colors = {v: k for k, v in COLOR_TO_IDX.items()}
    states = {v: k for k, v in STATE_TO_IDX.items()}
    img = obs["image"]
    n = img.shape[0]
    me = (n // 2, n - 1)

    def count(k: int, word: str) -> str:
        return f"{k} {'step' if k == 1 else 'steps'} {word}"

    lines = []
    held = names[int(img[me][0])]
    if held not in ("empty", "unseen"):  # MiniGrid draws the carried object on the agent's own cell
        lines.append(f"You carry a {colors[int(img[me][1])]} {held}")
    rays = {
        "forward": [img[me[0], y] for y in reversed(range(me[1]))],
        "left": [img[x, me[1]] for x in reversed(range(me[0]))],
        "right": [img[x, me[1]] for x in range(me[0] + 1, n)],
    }
    for word, ray in rays.items():
        seen = [
            (i, names[int(c[0])]) for i, c in enumerate(ray) if names[int(c[0])] not in ("unseen", "empty")
        ]
        if seen and seen[0][1] == "wall":
            lines.append(f"You see a wall {count(seen[0][0] + 1, word)}")
    for x in range(n):
        for y in range(n):
            kind = names[int(img[x, y, 0])]
            if (x, y) == me or kind in ("unseen", "empty", "wall"):
                continue
            dx, ahead = x - me[0], me[1] - y
            if dx == 0:
                where = count(ahead, "forward")
            elif ahead == 0:
                where = count(abs(dx), "right" if dx > 0 else "left")
            else:
                where = count(abs(dx), "right" if dx > 0 else "left") + " and " + count(ahead, "forward")
            color = colors[int(img[x, y, 1])]
            if kind == "door":
                state = states[int(img[x, y, 2])]
                lines.append(f"You see a {state} {color} door {where}")
            else:
                lines.append(f"You see a {color} {kind} {where}")
    return ", ".join(lines)


def test_first_view_is_babyai_texts_own_example():
    """BabyAI-Text's train_language_agent.py shows GoToLocal's seed-0 start; the env writes the same sentences."""
    env = BabyAIEnv()
    obs, info = env.reset(options={"task_id": "BabyAI-GoToLocal-v0/0"})
    assert obs.splitlines()[0] == "Goal of the agent: go to the green ball"
    assert obs.splitlines()[1].startswith(
        "You see a wall 2 steps left, You see a purple key 1 step left and 2 steps forward, "
        "You see a yellow key 1 step left and 1 step forward, You see a green ball 3 steps forward"
    )
    assert info[schema.TASK_TYPE] == "goto" and info[schema.ADMISSIBLE_ACTIONS] == list(ACTIONS)
    env.close()


@pytest.mark.parametrize(
    ("level", "seed"),
    [
        ("BabyAI-GoToLocal-v0", 3),
        ("BabyAI-PickupLoc-v0", 1),
        ("BabyAI-PutNextLocal-v0", 2),
        ("BabyAI-GoTo-v0", 5),
    ],
)
def test_equal_to_minigrid_stepped_directly(level, seed):
    """The same level and actions, stepped through stepgym and directly: the same rewards, termination and
    truncation, and stepgym's text equals the rendering above of MiniGrid's own observation."""
    rng = np.random.default_rng(seed)
    ours = gym.make(ENV_ID, level=level, max_steps=40, search_budget=100)
    theirs, raw = _upstream(level, seed, max_steps=40)
    obs, info = ours.reset(options={"task_id": f"{level}/{seed}"})
    assert obs == f"Goal of the agent: {raw['mission']}\n" + _reference_text(raw)
    assert info[schema.GOAL] == raw["mission"]
    rewards = []
    for _ in range(40):
        expert = info[schema.EXPERT_ACTION]
        word = expert if expert and rng.random() < 0.5 else ACTIONS[int(rng.integers(len(ACTIONS)))]
        obs, reward, terminated, truncated, info = ours.step(word)
        raw, r_up, t_up, tr_up, _ = theirs.step(ACTIONS.index(word))
        assert obs == _reference_text(raw)
        assert (reward, terminated, truncated) == (float(r_up), t_up, tr_up and not t_up)
        assert info[schema.WON] == (t_up and r_up > 0)
        rewards.append(reward)
        if terminated or truncated:
            break
    assert terminated or truncated
    ours.close()
    theirs.close()


def test_checker_determinism_and_fuzz():
    check_text_env(lambda: gym.make(ENV_ID, search_budget=300), seed=3)


@pytest.mark.parametrize(
    "bad", ["", " ", "go  forwards", "x" * 5000, "🦊 pick up", "turn left; drop", None, 3, b"\xff", "done"]
)
def test_bad_actions_are_invalid_and_change_nothing(bad):
    env = gym.make(ENV_ID, search_budget=300)
    _, info = env.reset(seed=1)
    key = info[schema.STATE_KEY]
    obs, reward, terminated, truncated, info = env.step(bad)
    assert obs.startswith("Invalid action") and reward == 0.0 and not terminated and not truncated
    assert (
        info[schema.ADMISSIBLE] is False and info[schema.EFFECTIVE] is False and info[schema.INVALID_REASON]
    )
    assert info[schema.STATE_KEY] == key and info[schema.EXPERT_ACTION] in ACTIONS
    obs, *_ = env.step("Go_Forward")  # the action words are read case- and underscore-blind
    assert not obs.startswith("Invalid")
    env.close()


def test_task_ids_and_splits_are_disjoint_and_checked():
    train = BabyAIEnv(n_tasks=5)
    test = BabyAIEnv(split="test", n_tasks=5)
    assert train.task_ids[0] == "BabyAI-GoToLocal-v0/0" and test.task_ids[0] == "BabyAI-GoToLocal-v0/1000000"
    assert not set(train.task_ids) & set(test.task_ids)
    for bad in ("BabyAI-GoToLocal-v0/1000000", "BabyAI-PickupLoc-v0/3", "nonsense"):
        with pytest.raises(ValueError, match="unknown task_id"):
            train.reset(options={"task_id": bad})
    with pytest.raises(ValueError, match="unknown BabyAI level"):
        BabyAIEnv(level="BabyAI-Nope-v0")
    a, _ = train.reset(options={"task_id": "BabyAI-GoToLocal-v0/77"})
    b, _ = BabyAIEnv().reset(options={"task_id": "BabyAI-GoToLocal-v0/77"})
    assert a == b  # a task is its (level, seed): the same layout in any env
    train.close()
    test.close()


# ---------------------------------------------------------------------------------------------------------------
# The full state and the solver
# ---------------------------------------------------------------------------------------------------------------
def _solver(live, budget: int) -> tuple[WorldCodec, Solver]:
    codec = WorldCodec(live)
    memo: dict = {}
    sim = copy.deepcopy(live, memo)
    return codec, Solver(sim, codec.for_copy(sim, memo), budget)


def test_state_written_into_a_copy_steps_as_the_level_itself():
    """Reading a state and writing it into another copy of the level loses nothing: from random states, every
    action stepped on the written copy gives the state (and outcome) a deep copy of the level itself gives."""
    rng = np.random.default_rng(0)
    for level, seed in (("BabyAI-PutNextLocal-v0", 4), ("BabyAI-GoTo-v0", 1), ("BabyAI-PickupLoc-v0", 2)):
        live = make_level(level, 10**6)
        reset_level(live, seed)
        codec, solver = _solver(live, budget=10)
        for _ in range(25):
            state = codec.read(live)
            for a in range(len(ACTIONS)):
                memo: dict = {}
                twin = copy.deepcopy(live, memo)
                twin.step_count = 0
                _, reward, terminated, _, _ = twin.step(a)
                status, child = solver.step(state, a)
                if terminated:
                    assert status == ("success" if reward > 0 else "failure")
                else:
                    assert status == "continue" and child == codec.for_copy(twin, memo).read(twin)
            _, _, terminated, _, _ = live.step(int(rng.integers(len(ACTIONS))))
            if terminated:
                break


# An independent brute force: breadth-first search over deep copies of the level, every action from every state,
# states told apart by MiniGrid's own encoding of the grid, the agent, the carried object and the verifier's fields.
def _obj(o):
    if o is None:
        return None
    return (o.type, o.color, None if o.cur_pos is None else tuple(int(v) for v in o.cur_pos))


def _verifier(instr) -> tuple:
    out = []
    for name, v in sorted(vars(instr).items()):
        if name == "env":
            continue
        if name in ("instr_a", "instr_b"):
            out.append(_verifier(v))
        elif name.startswith("desc"):
            out.append((tuple(map(_obj, v.obj_set)), tuple((int(p[0]), int(p[1])) for p in v.obj_poss)))
        else:
            out.append((name, _obj(v) if hasattr(v, "cur_pos") else v))
    return tuple(out)


def _brute_key(env) -> tuple:
    pos = tuple(int(v) for v in env.agent_pos)
    return (pos, int(env.agent_dir), env.grid.encode().tobytes(), _obj(env.carrying), _verifier(env.instrs))


def _brute_force(env, limit: int = 40_000):
    root = copy.deepcopy(env)
    root.max_steps, root.step_count = 10**9, 0
    seen, layer, depth, stepped = {_brute_key(root)}, [root], 0, 0
    while layer:
        nxt = []
        for node in layer:
            for a in range(len(ACTIONS)):
                child = copy.deepcopy(node)
                _, reward, terminated, _, _ = child.step(a)
                stepped += 1
                if stepped > limit:
                    return "limit"
                if terminated:
                    if reward > 0:
                        return depth + 1
                    continue
                key = _brute_key(child)
                if key not in seen:
                    seen.add(key)
                    nxt.append(child)
        layer, depth = nxt, depth + 1
    return None


@pytest.mark.parametrize(
    ("level", "seeds"),
    [
        ("BabyAI-GoToObjS4-v0", (0, 1, 2)),
        ("BabyAI-GoToLocalS5N2-v0", (0, 1, 2, 3)),
        ("BabyAI-PickupDist-v0", (1,)),
        ("BabyAI-PutNextLocalS5N3-v0", (0,)),
        ("BabyAI-GoToObjMazeS4R2-v0", (0, 1)),  # rooms and doors: the bound goes around the walls
    ],
)
def test_values_equal_brute_force(level, seeds):
    """At the start and along a random walk, the solver's exact value is the brute force's shortest success."""
    compared = 0
    for seed in seeds:
        live = make_level(level, 10**6)
        reset_level(live, seed)
        codec, solver = _solver(live, budget=20_000)
        rng = np.random.default_rng(seed)
        for _ in range(3):
            sol = solver.solve(codec.read(live))
            truth = _brute_force(live)
            assert sol.exact and truth != "limit"
            assert sol.cost == truth, (level, seed, live.mission)
            compared += 1
            for _ in range(2):
                _, _, terminated, _, _ = live.step(int(rng.integers(len(ACTIONS))))
                if terminated:
                    break
            if terminated:
                break
    assert compared >= len(seeds)


def test_a_destroyed_target_is_proved_unreachable():
    """Toggling a box opens (destroys) it: a mission to pick that box up can never succeed, and the solver says
    so exactly (the brute force finds no success either, within its limit)."""
    for seed in range(40):
        live = make_level("BabyAI-PickupLoc-v0", 10**6)
        reset_level(live, seed)
        target = live.instrs.desc.obj_set
        if len(target) == 1 and target[0].type == "box":
            break
    else:
        pytest.fail("no PickupLoc task with a box to pick up in the first 40 seeds")
    codec, solver = _solver(live, budget=20_000)
    path = []
    while not np.array_equal(live.front_pos, target[0].cur_pos):  # walk there with the solver's own moves
        state = codec.read(live)
        assert solver.solve(state).exact
        action = ACTIONS.index(solver.solve(state).action)
        if action == ACTIONS.index("pick up"):
            break
        live.step(action)
        path.append(action)
    live.step(ACTIONS.index("toggle"))
    sol = solver.solve(codec.read(live))
    assert sol.exact and sol.cost is None and sol.action is None
    assert _brute_force(live, limit=600) in (None, "limit")


def test_expert_is_optimal_and_values_are_exact_on_gotolocal():
    env = ValueWrapper(gym.make(ENV_ID, search_budget=5_000))
    rng = np.random.default_rng(0)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        assert info[schema.VALUE_EXACT] and info[schema.VALUE_REACHABLE]
        while True:
            expert = info[schema.EXPERT_ACTION]
            action = expert if rng.random() < 0.6 else ACTIONS[int(rng.integers(len(ACTIONS)))]
            obs, reward, terminated, truncated, info = env.step(action)
            assert info[schema.VALUE_EXACT]
            if action == expert:
                assert info[schema.VALUE_GAIN] == 1.0 and step_value_class(info) == 1
            else:
                assert info[schema.VALUE_GAIN] <= 1.0
            if terminated or truncated:
                break
        assert info[schema.WON] == (info[schema.VALUE_AFTER] == 0.0 and terminated)
    env.close()


def test_bound_and_bot_beyond_the_budget():
    """With a search budget too small for a multi-room level, the value is an upper bound marked inexact (the
    bot's completion) and the expert is the BabyAI bot's action."""
    env = ValueWrapper(gym.make(ENV_ID, level="BabyAI-GoTo-v0", search_budget=12, max_steps=300))
    obs, info = env.reset(options={"task_id": "BabyAI-GoTo-v0/5"})
    assert not info[schema.VALUE_EXACT] and info[schema.VALUE_REACHABLE] and info[schema.VALUE_AFTER] > 12
    assert info[schema.EXPERT_ACTION] in ACTIONS
    bound = info[schema.VALUE_AFTER]
    plain = env.unwrapped  # the bot's actions, without the per-step bounds
    for _ in range(300):
        obs, reward, terminated, truncated, info = plain.step(info[schema.EXPERT_ACTION])
        if terminated or truncated:
            break
    assert info[schema.WON] and info[schema.STEP_INDEX] <= bound  # the bot finishes within what it bounds
    env.close()


def test_group_env_value_wrapper_and_text_interface():
    from stepgym.group import GroupEnv
    from stepgym.wrappers.arg import ARGWrapper
    from stepgym.wrappers.hints import HintWrapper
    from stepgym.wrappers.text import text_wrappers

    group = GroupEnv(
        ENV_ID,
        group_size=2,
        env_kwargs={"max_steps": 12, "search_budget": 500},
        wrappers=[ValueWrapper, ARGWrapper, HintWrapper, *text_wrappers()],
    )
    obs, infos = group.reset(seed=0, options={"task_id": "BabyAI-GoToLocal-v0/5"})
    while group.agents:
        replies = {}
        for name in group.agents:
            expert = infos[name][schema.EXPERT_ACTION]
            good = f"<think>go</think><action>{expert}</action>"
            replies[name] = good if name.endswith("0") else "no tags at all"
        obs, _, _, _, infos = group.step(replies)
    good, bad = group.trajectories
    assert good.success and not bad.success
    assert all(s.info[schema.FORMAT_VALID] for s in good.steps)
    assert not any(s.info[schema.FORMAT_VALID] for s in bad.steps)
    assert all(s.info[schema.VALUE_GAIN] == 1.0 for s in good.steps)
    assert all(s.info[schema.VALUE_GAIN] == 0.0 for s in bad.steps)
    assert schema.ARG_LABELS in good.steps[-1].info and schema.HINTS in bad.steps[-1].info
    group.close()


def test_prompt_is_babyai_texts():
    from stepgym.wrappers.text import make_text_env

    env = make_text_env(ENV_ID, {"search_budget": 300}, prompt_as_observation=True)
    prompt, _ = env.reset(options={"task_id": "BabyAI-GoToLocal-v0/0"})
    assert "Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle" in prompt
    assert (
        "Goal of the agent: go to the green ball" in prompt
        and "You see a green ball 3 steps forward" in prompt
    )
    prompt, _, _, _, info = env.step("<think>ahead</think><action>Go Forward</action>")
    assert info[schema.FORMAT_VALID] and info[schema.ADMISSIBLE] and "Action 1: go forward" in prompt
    env.close()


def test_served_over_openenv_protocol_equals_in_process():
    from _serve_reference import local_episode, served_episode

    kwargs = {"split": "test", "n_tasks": 4, "search_budget": 300}
    local = local_episode(ENV_ID, kwargs, 7, 500)
    assert local[-1]["info"][schema.WON]
    assert served_episode(ENV_ID, kwargs, 7, [s["action"] for s in local[1:]]) == local


def test_docstring_examples_run():
    import doctest

    import stepgym.envs.babyai.env as module

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module, module.__name__) if t.examples]
    assert tests
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize(
    "level",
    [
        "BabyAI-BossLevel-v0",
        "BabyAI-KeyCorridorS3R2-v0",
        "BabyAI-SynthSeq-v0",
        "BabyAI-UnlockPickup-v0",
        "BabyAI-OpenDoorsOrderN4-v0",
        "BabyAI-KeyInBox-v0",
        "BabyAI-PutNextS5N2Carrying-v0",
        "BabyAI-GoToSeqS5R2-v0",
    ],
)
def test_other_levels_play_as_minigrid(level):
    """Levels beyond the navigation and pick-up ones (doors, keys in boxes, sequences, a carried start): the same
    text, rewards and termination as MiniGrid for a short random walk, with a small search budget (values there
    may be bounds)."""
    rng = np.random.default_rng(1)
    ours = gym.make(ENV_ID, level=level, max_steps=12, search_budget=30)
    theirs, raw = _upstream(level, 11, max_steps=12)
    obs, info = ours.reset(options={"task_id": f"{level}/11"})
    # the PutNext*Carrying levels hand over the object after drawing reset's observation: the view now
    assert obs == f"Goal of the agent: {raw['mission']}\n" + _reference_text(theirs.unwrapped.gen_obs())
    for _ in range(12):
        word = ACTIONS[int(rng.integers(len(ACTIONS)))]
        obs, reward, terminated, truncated, info = ours.step(word)
        raw, r_up, t_up, tr_up, _ = theirs.step(ACTIONS.index(word))
        assert obs == _reference_text(raw) and (reward, terminated) == (float(r_up), t_up)
        if terminated or truncated:
            break
    ours.close()
    theirs.close()


def test_import_stepgym_does_not_import_minigrid():
    import subprocess
    import sys

    code = "import stepgym, sys; gym = __import__('gymnasium'); gym.spec('StepGym/BabyAI-v0'); "
    code += "print('minigrid' in sys.modules, 'pygame' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["False", "False"], out.stderr[-2000:]
