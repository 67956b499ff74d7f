"""EnvFeedbackWrapper: the feedback text and the three separate flags, with their fallbacks, on a toy env and ALFWorld."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from _toy_env import ALL_KEYS, ToyRoomEnv, expert_actions

from stepgym import schema
from stepgym.agents import NoisyExpertAgent
from stepgym.testing import check_text_env
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import TextInterfaceWrapper

FLAGS = (schema.FORMAT_VALID, schema.ADMISSIBLE, schema.EFFECTIVE)


def react(a: str) -> str:
    return f"<think>ok</think><action>{a}</action>"


# ---------------------------------------------------------------------------------------------------------------
# Toy env: the env's own values win, the fallbacks fill the rest
# ---------------------------------------------------------------------------------------------------------------
def test_env_values_are_never_overwritten() -> None:
    class Liar(ToyRoomEnv):  # claims every step was inadmissible but effective
        def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
            obs, r, term, info = super()._step_action(action, problem)
            info[schema.ADMISSIBLE], info[schema.EFFECTIVE], info[schema.FEEDBACK] = False, True, "custom"
            return obs, r, term, info

    env = EnvFeedbackWrapper(Liar())
    env.reset(seed=0)
    _, _, _, _, info = env.step("look")
    assert (
        info[schema.ADMISSIBLE] is False
        and info[schema.EFFECTIVE] is True
        and info[schema.FEEDBACK] == "custom"
    )
    assert info[schema.FORMAT_VALID] is True


def test_fallback_admissible_from_list_and_effective_from_state_key() -> None:
    env = EnvFeedbackWrapper(ToyRoomEnv(expose={"admissible_actions", "state_key", "won"}))
    obs, info = env.reset(seed=0)
    assert info[schema.FEEDBACK] == ""
    tid = info[schema.TASK_ID]
    # "look" is admissible but changes nothing; its observation differs from the reset text (proves the state key
    # is used, not the observation)
    obs, _, _, _, info = env.step("look")
    assert (
        info[schema.ADMISSIBLE] is True and info[schema.EFFECTIVE] is False and info[schema.FEEDBACK] == obs
    )
    obs, _, _, _, info = env.step(
        "  TAKE   key "
    )  # not admissible in the hall (case/space-insensitive match)
    assert info[schema.ADMISSIBLE] is False and info[schema.EFFECTIVE] is False and obs == "Nothing happens."
    for a in expert_actions(tid):
        _, _, _, _, info = env.step(a)
        assert info[schema.ADMISSIBLE] and info[schema.EFFECTIVE] and info[schema.FORMAT_VALID]
    _, info = env.reset(seed=0)
    assert info[schema.FEEDBACK] == ""


def test_fallback_from_invalid_reason_and_unknown_effect() -> None:
    """Without a state key, whether an accepted action changed the world is unknown (None), whatever the text."""
    env = EnvFeedbackWrapper(ToyRoomEnv(expose={"invalid_reason"}))
    env.reset(seed=0)
    _, _, _, _, info = env.step("dance")
    assert info[schema.ADMISSIBLE] is False and info[schema.EFFECTIVE] is False
    _, _, _, _, info = env.step("go to kitchen")
    assert info[schema.ADMISSIBLE] is True and info[schema.EFFECTIVE] is None
    _, _, _, _, info = env.step("inventory")  # a no-op with new text: not claimed effective
    assert info[schema.ADMISSIBLE] is True and info[schema.EFFECTIVE] is None


def test_the_observation_proxy_is_opt_in() -> None:
    env = EnvFeedbackWrapper(ToyRoomEnv(expose={"invalid_reason"}), observation_proxy=True)
    env.reset(seed=0)
    _, _, _, _, info = env.step("go to kitchen")
    assert info[schema.EFFECTIVE] is True  # observation changed
    _, _, _, _, info = env.step("inventory")
    assert info[schema.EFFECTIVE] is True  # the weak proxy: new text although nothing changed (documented)
    _, _, _, _, info = env.step("inventory")
    assert info[schema.EFFECTIVE] is False
    assert env.spec is None or env.spec.additional_wrappers[-1].kwargs == {"observation_proxy": True}


def test_unknowable_admissibility_is_left_out_and_effect_unknown() -> None:
    env = EnvFeedbackWrapper(ToyRoomEnv(expose=set()))
    env.reset(seed=0)
    for action in ("go to kitchen", "look", "inventory"):  # a move and two no-ops: none is claimed effective
        _, _, _, _, info = env.step(action)
        assert schema.ADMISSIBLE not in info and info[schema.FORMAT_VALID] is True
        assert info[schema.EFFECTIVE] is None, action
    _, _, _, _, info = env.step("")
    assert info[schema.FORMAT_VALID] is False and info[schema.EFFECTIVE] is False


def test_state_key_alone_decides_effect_without_an_admissible_list() -> None:
    env = EnvFeedbackWrapper(ToyRoomEnv(expose={"state_key"}))
    env.reset(seed=0)
    _, _, _, _, info = env.step("look")  # a no-op: the state key did not move
    assert schema.ADMISSIBLE not in info and info[schema.EFFECTIVE] is False
    _, _, _, _, info = env.step("go to kitchen")
    assert info[schema.EFFECTIVE] is True


def test_unknown_effect_reads_as_unknown_downstream() -> None:
    """The readers of the flag: step records (recording, integrations) keep None, rates skip it."""
    from stepgym.recording.records import _plain
    from stepgym.steps.record import step_annotations

    env = EnvFeedbackWrapper(ToyRoomEnv(expose=set()))
    _, before = env.reset(seed=0)
    _, r, _, _, after = env.step("look")
    assert step_annotations(before, "look", r, after)["effective"] is None
    assert _plain(after[schema.EFFECTIVE], 0) is None


def test_feedback_outside_the_text_interface_judges_the_parsed_action() -> None:
    env = EnvFeedbackWrapper(
        TextInterfaceWrapper(ToyRoomEnv(expose={"admissible_actions", "state_key"}), fmt="alfworld")
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(react("look"))
    assert info[schema.FORMAT_VALID] and info[schema.ADMISSIBLE] and not info[schema.EFFECTIVE]
    _, _, _, _, info = env.step("look")  # no tags
    assert [info[k] for k in FLAGS] == [False, False, False]


def test_wrapped_toy_env_passes_the_battery() -> None:
    check_text_env(lambda: EnvFeedbackWrapper(ToyRoomEnv(expose=ALL_KEYS - {"admissible", "effective"})))


# ---------------------------------------------------------------------------------------------------------------
# ALFWorld
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alf(data_dir):
    env = EnvFeedbackWrapper(
        TextInterfaceWrapper(EnvFeedbackWrapper(gym.make("StepGym/ALFWorld-v0", split="valid_seen")))
    )
    yield env
    env.close()


@pytest.mark.parametrize("seed", [0, 7, 23])
def test_alfworld_walkthrough_flags(alf, seed: int) -> None:
    """The stored walkthrough is format-valid, admissible and effective at every step, and wins."""
    obs, info = alf.reset(seed=seed)
    for a in list(alf.unwrapped.walkthrough):
        obs, r, term, trunc, info = alf.step(react(a))
        assert [info[k] for k in FLAGS] == [True, True, True], (a, obs)
        assert info[schema.FEEDBACK] == obs
    assert term and info[schema.WON]


def test_alfworld_nothing_happens_is_not_effective(alf) -> None:
    obs, info = alf.reset(seed=5)
    key = info[schema.STATE_KEY]
    for bad in ("fly to the moon", "take unicorn 1 from sofa 1", "go to desk 99"):
        obs, _, _, _, info = alf.step(react(bad))
        assert obs == "Nothing happens."
        assert (
            info[schema.FORMAT_VALID] is True
            and info[schema.ADMISSIBLE] is False
            and info[schema.EFFECTIVE] is False
        )
        assert info[schema.STATE_KEY] == key
    obs, _, _, _, info = alf.step("<<garbage>> no action at all")
    assert [info[k] for k in FLAGS] == [False, False, False]


class _Forget(gym.Wrapper):
    """Hides the env's own ADMISSIBLE/EFFECTIVE, so the fallbacks can be compared with the engine's truth."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, r, term, trunc, info = self.env.step(action)
        self.truth = (info.pop(schema.ADMISSIBLE), info.pop(schema.EFFECTIVE))
        return obs, r, term, trunc, info


def test_alfworld_fallbacks_agree_with_the_engine(data_dir) -> None:
    """On noisy-expert episodes, the list fallback (admissible) and the state-key fallback (effective) reproduce
    ALFWorld's own flags exactly."""
    forget = _Forget(gym.make("StepGym/ALFWorld-v0", split="valid_unseen", max_steps=25))
    env = EnvFeedbackWrapper(forget)
    agent = NoisyExpertAgent(error_rate=0.4, seed=1)
    n = bad = 0
    for seed in range(4):
        obs, info = env.reset(seed=seed)
        agent.reset()
        done = False
        while not done:
            action = agent.act(obs, info) if n % 5 else "fly to the moon"
            obs, r, term, trunc, info = env.step(action)
            done = term or trunc
            n += 1
            bad += (info[schema.ADMISSIBLE], info[schema.EFFECTIVE]) != forget.truth
    env.close()
    assert n > 40 and bad == 0
