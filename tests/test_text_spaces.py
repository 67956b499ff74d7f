"""Custom envs written from the docs: check_text_env accepts an env that declares gym.spaces.Text (read as a string
of its lengths), and with strict_charset says what to use instead; UnicodeText is the space stepgym recommends."""

from __future__ import annotations

import gymnasium as gym
import pytest

from stepgym.spaces import UnicodeText
from stepgym.testing import check_text_env


class Lamps(gym.Env):
    """docs/arg.md's example env, with Gymnasium's Text spaces (what a new user writes first)."""

    def __init__(self, space: gym.Space | None = None) -> None:
        self.observation_space = space or gym.spaces.Text(200)
        self.action_space = space or gym.spaces.Text(200)
        self.on: set[str] = set()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.on = set()
        return "Two lamps are off.", {}

    def step(self, action):
        if action in ("switch a", "switch b"):
            self.on.add(action[-1])
        done = action == "done" and self.on == {"a", "b"}
        return f"On: {sorted(self.on)}", float(done), done, False, {}


def test_a_text_space_env_passes_the_battery_and_keeps_its_spaces() -> None:
    made: list[Lamps] = []

    def make() -> Lamps:
        made.append(Lamps())
        return made[-1]

    check_text_env(make)
    assert all(type(e.observation_space) is gym.spaces.Text for e in made)  # restored after the check
    check_text_env(lambda: Lamps(UnicodeText(200)))


def test_strict_charset_names_the_space_and_the_fix() -> None:
    with pytest.raises(AssertionError, match=r"observation_space = Text\(.*stepgym\.spaces\.UnicodeText"):
        check_text_env(Lamps, strict_charset=True)
    check_text_env(lambda: Lamps(UnicodeText(200)), strict_charset=True)  # nothing to explain


def test_a_real_mismatch_still_fails() -> None:
    """Too long for the declared Text: a violation under any reading of the charset."""
    with pytest.raises(AssertionError, match="observation space"):
        check_text_env(lambda: Lamps(gym.spaces.Text(5)))
