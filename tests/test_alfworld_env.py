"""StepGym/ALFWorld-v0 on the real games: the env battery, task selection, flags, expert, symbolic state."""

from __future__ import annotations

import collections
import random

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.agents import NoisyExpertAgent, RandomAgent
from stepgym.envs.alfworld.env import NOTHING_HAPPENS
from stepgym.envs.alfworld.games import TASK_TYPES, list_games
from stepgym.rollout import play_episode
from stepgym.testing import FUZZ_ACTIONS, check_determinism, check_fuzz

pytestmark = pytest.mark.usefixtures("data_dir")
ENV_ID = "StepGym/ALFWorld-v0"


@pytest.fixture(scope="module")
def env():
    e = gym.make(ENV_ID, split="valid_seen")
    yield e
    e.close()


def test_check_env_passes():
    from gymnasium.utils.env_checker import check_env

    e = gym.make(ENV_ID, split="valid_seen")
    check_env(e.unwrapped, skip_render_check=True)
    e.close()


def test_seeded_whole_episode_is_deterministic():
    """Same seed and actions: identical observations, rewards and infos over a whole episode (to truncation)."""
    steps = check_determinism(
        lambda: gym.make(ENV_ID, split="valid_unseen", max_steps=40), seed=3, n_steps=100
    )
    assert 1 <= steps <= 40  # the loop only stops when the episode ends (win or truncation)


def test_split_sizes_and_task_types_match_the_protocol():
    sizes = {s: len(list_games(s)) for s in ("valid_seen", "valid_unseen", "train")}
    assert sizes == {"valid_seen": 140, "valid_unseen": 134, "train": 150}
    counts = collections.Counter(g.task_type for g in list_games("valid_unseen"))
    assert counts == {
        "look_at_obj_in_light": 18,
        "pick_and_place_simple": 24,
        "pick_clean_then_place_in_recep": 31,
        "pick_cool_then_place_in_recep": 21,
        "pick_heat_then_place_in_recep": 23,
        "pick_two_obj_and_place": 17,
    }


def test_task_selection_by_seed_and_by_id(env):
    u = env.unwrapped
    ids = u.task_ids
    assert ids == sorted(ids) and len(set(ids)) == 140
    picked = [env.reset(seed=s)[1][schema.TASK_ID] for s in range(6)]
    again = [env.reset(seed=s)[1][schema.TASK_ID] for s in range(6)]
    assert picked == again and len(set(picked)) > 1
    _, info = env.reset(options={"task_id": ids[17]})
    assert info[schema.TASK_ID] == ids[17]
    assert info[schema.TASK_TYPE] == ids[17].split("/")[1].split("-")[0]
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "valid_seen/nope/trial_0"})


def test_task_type_filter_accepts_long_and_short_names():
    e = gym.make(ENV_ID, split="valid_seen", task_types=["Heat", "pick_two_obj_and_place"])
    types = {g.task_type for g in e.unwrapped.games}
    assert types == {"pick_heat_then_place_in_recep", "pick_two_obj_and_place"}
    assert len(e.unwrapped.games) == 16 + 24
    with pytest.raises(ValueError, match="unknown ALFWorld task types"):
        gym.make(ENV_ID, split="valid_seen", task_types=["Juggle"])


def test_reset_observation_and_info_contract(env):
    obs, info = env.reset(seed=0)
    assert "Your task is to:" in obs
    assert info[schema.GOAL] and info[schema.GOAL] in obs
    assert info[schema.STEP_INDEX] == 0 and info[schema.FEEDBACK] == ""
    assert info[schema.TASK_TYPE] in TASK_TYPES
    assert isinstance(info[schema.ADMISSIBLE_ACTIONS], list) and "look" in info[schema.ADMISSIBLE_ACTIONS]
    assert info[schema.WON] is False and info[schema.EXPERT_ACTION] == "look"
    for key in (schema.STATE_KEY, schema.SUBGOAL_KEY, schema.TASK_ID):
        assert isinstance(info[key], str) and info[key]


def test_walkthrough_flags_reward_and_termination(env):
    env.reset(options={"task_id": env.unwrapped.task_ids[40]})
    walkthrough = env.unwrapped.walkthrough
    for t, action in enumerate(walkthrough):
        obs, reward, terminated, truncated, info = env.step(action)
        assert info[schema.ADMISSIBLE] and info[schema.EFFECTIVE], action
        assert info[schema.FEEDBACK] == obs and info[schema.STEP_INDEX] == t + 1
        assert isinstance(reward, float) and truncated is False
        assert terminated == (t == len(walkthrough) - 1) and reward == (1.0 if terminated else 0.0)
    assert info[schema.WON] is True


def test_invalid_commands_answer_nothing_happens(env):
    obs, info = env.reset(seed=1)
    key = info[schema.STATE_KEY]
    for action in ("fly to the moon", "take everything", "go to desk 99"):
        obs, reward, term, trunc, info = env.step(action)
        assert obs == NOTHING_HAPPENS and reward == 0.0 and not term
        assert info[schema.ADMISSIBLE] is False and info[schema.EFFECTIVE] is False
        assert "not an admissible command" in info[schema.INVALID_REASON]
        assert info[schema.STATE_KEY] == key


def test_fuzzed_actions_never_raise(env):
    results = check_fuzz(env, seed=2)
    assert len(results) == len(FUZZ_ACTIONS)
    for action, obs, info in results:
        assert obs == NOTHING_HAPPENS, action
        assert info[schema.ADMISSIBLE] is False and info[schema.INVALID_REASON]
    rng = random.Random(0)
    env.reset(seed=2)
    for _ in range(40):
        junk = "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(0, 60)))
        obs, *_ = env.step(junk)
        assert isinstance(obs, str)
    env.reset(seed=2)
    obs, _, _, _, info = env.step(None)  # not even a string
    assert obs == NOTHING_HAPPENS and "must be a string" in info[schema.INVALID_REASON]


def test_lenient_commands_match_case_and_space_insensitively(env):
    _, info = env.reset(seed=4)
    target = next(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to"))
    garbled = "\u200b " + target.upper().replace(" ", "   ") + "\x00 "
    obs, _, _, _, info = env.step(garbled)
    assert obs == NOTHING_HAPPENS and info[schema.ADMISSIBLE] is False  # upstream's reading, the default
    lenient = gym.make(ENV_ID, split="valid_seen", lenient_commands=True)
    lenient.reset(seed=4)
    obs, _, _, _, info = lenient.step(garbled)
    assert info[schema.ADMISSIBLE] is True and obs.startswith("You arrive")
    _, _, _, _, info = lenient.step("look" + " " * 1500)  # over the 1,000-character limit
    assert info[schema.ADMISSIBLE] is False and "characters long" in info[schema.INVALID_REASON]
    lenient.close()


def test_truncation_at_the_step_limit():
    e = gym.make(ENV_ID, split="valid_seen", max_steps=5)
    e.reset(seed=0)
    flags = [e.step("look")[3] for _ in range(5)]
    assert flags == [False] * 4 + [True]
    with pytest.raises(RuntimeError, match="reset"):
        e.step("look")


def test_expert_never_crashes_after_long_runs_of_invalid_and_random_actions():
    e = gym.make(ENV_ID, split="valid_unseen")
    rng = np.random.default_rng(0)
    for game_index in range(0, 134, 9):
        obs, info = e.reset(options={"task_index": game_index})
        for t in range(50):
            admissible = info[schema.ADMISSIBLE_ACTIONS]
            if t % 3 == 0:
                action = "do something impossible"
            else:
                action = admissible[int(rng.integers(len(admissible)))]
            obs, r, term, trunc, info = e.step(action)
            exp = info[schema.EXPERT_ACTION]
            assert exp is None or exp in info[schema.ADMISSIBLE_ACTIONS]
            if term or trunc:
                break
    stats = e.unwrapped.expert_stats
    assert stats.calls > 0 and stats.none < stats.calls


def test_noisy_expert_still_wins_often_and_random_rarely():
    e = gym.make(ENV_ID, split="valid_seen")
    noisy, rand = NoisyExpertAgent(0.2, seed=1), RandomAgent(seed=1)
    ids = e.unwrapped.task_ids[::14]
    noisy_wins = sum(play_episode(e, noisy, options={"task_id": i}).success for i in ids)
    random_wins = sum(play_episode(e, rand, options={"task_id": i}).success for i in ids)
    assert noisy_wins >= len(ids) // 2
    assert random_wins < noisy_wins


def test_symbolic_state_equal_for_two_paths_to_the_same_world_state(env):
    _, info = env.reset(options={"task_id": env.unwrapped.task_ids[3]})
    gos = [a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to")]
    a, b = gos[0], gos[1]
    env.reset(options={"task_id": env.unwrapped.task_ids[3]})
    direct = env.step(a)[4]
    env.reset(options={"task_id": env.unwrapped.task_ids[3]})
    env.step(b)
    detour = env.step(a)[4]
    assert direct[schema.STATE_KEY] == detour[schema.STATE_KEY]
    assert direct[schema.SUBGOAL_KEY] == detour[schema.SUBGOAL_KEY]


def test_symbolic_state_differs_for_different_states_with_the_same_text(env):
    tid = env.unwrapped.task_ids[3]
    _, info = env.reset(options={"task_id": tid})
    gos = [a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to")]
    keys, texts = [], []
    for target in gos[:3]:
        env.reset(options={"task_id": tid})
        env.step(target)
        obs, *_, after = env.step("nonsense")
        texts.append(obs)
        keys.append(after[schema.STATE_KEY])
    assert set(texts) == {NOTHING_HAPPENS}
    assert len(set(keys)) == 3


def test_effective_is_false_for_look_and_examine(env):
    _, info = env.reset(seed=5)
    for action in ("look", "inventory"):
        assert action in info[schema.ADMISSIBLE_ACTIONS]
        *_, info = env.step(action)
        assert info[schema.ADMISSIBLE] is True and info[schema.EFFECTIVE] is False


def test_render_ansi_returns_the_last_observation():
    e = gym.make(ENV_ID, split="valid_seen", render_mode="ansi")
    obs, _ = e.reset(seed=0)
    assert e.render() == obs


def _expert_trace(env, seed: int, task_id: str, n: int = 30):
    """Expert actions and oracle hints over a fixed mix of random admissible and repeated commands."""
    from stepgym.wrappers.hints import OracleAnalyzer

    rng = np.random.default_rng(5)
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    traj = schema.Trajectory(task_id=task_id, initial_observation=obs, initial_info=info)
    for t in range(n):
        admissible = info[schema.ADMISSIBLE_ACTIONS]
        # repeating "look" makes the expert draw from its RNG (its repetition guard), so does a random walk
        action = "look" if t % 4 == 1 else admissible[int(rng.integers(len(admissible)))]
        nxt, reward, term, trunc, info = env.step(action)
        traj.steps.append(schema.Step(obs, action, reward, nxt, term, trunc, info))
        obs = nxt
        if term or trunc:
            break
    experts = [traj.initial_info[schema.EXPERT_ACTION]] + [s.info[schema.EXPERT_ACTION] for s in traj.steps]
    return experts, OracleAnalyzer().analyze(traj).hints


def test_expert_is_a_function_of_the_seed_of_each_reset():
    """A used env reset with seed 7 gives the same expert actions and oracle hints as a fresh env on seed 7."""
    used, fresh = gym.make(ENV_ID, split="valid_unseen"), gym.make(ENV_ID, split="valid_unseen")
    task_ids = used.unwrapped.task_ids[::45]
    for task_id in task_ids:
        _expert_trace(used, 123, task_id, n=8)
    for task_id in task_ids:
        assert _expert_trace(used, 7, task_id) == _expert_trace(fresh, 7, task_id), task_id
    used.close()
    fresh.close()


def test_expert_leaves_the_global_random_state_alone(env):
    """The expert draws (repeating "look" triggers its repetition guard) from a private generator only: the
    user's global ``random`` state is untouched, and ALFWorld's expert module still sees the global one outside
    the env's calls."""
    from alfworld.agents.expert import handcoded_expert

    random.seed(99)
    before = random.getstate()
    env.reset(seed=3, options={"task_id": env.unwrapped.task_ids[0]})
    experts = [env.step("look")[4][schema.EXPERT_ACTION] for _ in range(6)]
    assert random.getstate() == before
    assert any(a not in (None, "look") for a in experts)
    random.seed(5)
    upstream = [handcoded_expert.random.choice(range(1000)) for _ in range(3)]
    random.seed(5)
    assert upstream == [random.choice(range(1000)) for _ in range(3)]


def test_expert_digit_stripping_equals_upstreams():
    """The expert's memoised ``remove_num_ids`` (a translation table for ASCII texts) answers as upstream's."""
    from alfworld.agents.expert.handcoded_expert import BasePolicy

    from stepgym.envs.alfworld.expert import _remove_num_ids

    rng = random.Random(0)
    texts = ["go to countertop 12", " inreceptacle  apple 1\tfridge 1 ", "", "42", "x²3 y", "٣ apple 1"]
    texts += [
        "".join(rng.choice("ab 1\t9\n\x0b\x1c.|-_") for _ in range(rng.randrange(30))) for _ in range(500)
    ]
    for text in texts:
        assert _remove_num_ids(text) == BasePolicy.remove_num_ids(None, text), repr(text)


def test_expert_generator_is_private_to_each_thread():
    """While one thread's expert call runs, another thread sees the global ``random`` (outside a call) or its own
    private generator (inside one), and neither disturbs the other's draws."""
    import threading

    from stepgym.envs.alfworld.expert import _EXPERT_RANDOM, _PrivateRandom

    inside, done, seen = threading.Event(), threading.Event(), {}

    def other() -> None:
        inside.wait()
        random.seed(1)
        seen["outside"] = _EXPERT_RANDOM.random()
        random.seed(1)
        seen["global"] = random.random()
        with _PrivateRandom(5):
            seen["own"] = _EXPERT_RANDOM.random()
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with _PrivateRandom(3):
        inside.set()
        done.wait()
        mine = _EXPERT_RANDOM.random()
    thread.join()
    assert mine == random.Random(3).random()
    assert seen["outside"] == seen["global"]
    assert seen["own"] == random.Random(5).random()
