"""``StepGym/WebShop-v0``: WebShop (Yao et al., 2022) as a Gymnasium text env in WebShop's text mode.

``gym.make("StepGym/WebShop-v0", split="train", goals="synthetic", search="bm25s")``. The observation is the page
as upstream's ``WebAgentTextEnv(observation_mode="text")`` renders it; actions are ``search[keywords]`` and
``click[element]``; ``Buy Now`` ends the episode with WebShop's reward in [0, 1] (success = reward 1.0).

Goal selection: ``reset(seed=s)`` draws a goal of the split uniformly with ``self.np_random``;
``reset(options={"task_id": "webshop/synthetic/12"})`` or ``{"goal_index": 12}`` picks one (any goal of the kind,
in or out of the split). ``env.unwrapped.task_ids`` lists the split in fixed (index) order for evaluation.

An invalid action (unparsable, unknown button, search without a search bar) leaves the page unchanged; the
observation is ``"Invalid action: <reason> [SEP] <page>"`` (``invalid_feedback=False`` gives upstream's silent
no-op: the page alone).
"""

from __future__ import annotations

import os
from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.envs.webshop.core import WebShopCore, shared_core
from stepgym.envs.webshop.engine import ShopState
from stepgym.envs.webshop.goals import Goal

__all__ = ["WebShopEnv"]


class WebShopEnv(TextEnv):
    """WebShop in text mode, with step annotations (see :mod:`stepgym.envs.webshop.core`).

    Example (needs the WebShop data, ``stepgym download webshop``)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/WebShop-v0", split="test")
        >>> obs, info = env.reset(seed=0)
        >>> info[schema.EXPERT_ACTION].startswith("search[")
        True
        >>> obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        >>> info[schema.ADMISSIBLE], reward
        (True, 0.0)
    """

    def __init__(
        self,
        split: str = "train",
        goals: str = "synthetic",
        search: str = "bm25s",
        *,
        data_root: str | os.PathLike[str] | None = None,
        catalogue_file: str | os.PathLike[str] | None = None,
        max_steps: int = 15,
        title_nouns: str = "heuristic",
        option_match: str = "upstream",
        search_anywhere: bool = False,
        invalid_feedback: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.core: WebShopCore = shared_core(
            data_root, goals, search, title_nouns, option_match, search_anywhere, catalogue_file
        )
        self.split = split
        self.split_goals = self.core.split(split)
        if not self.split_goals:
            raise ValueError(
                f"the {goals} goals of this catalogue have no '{split}' split "
                f"({len(self.core.goals)} goals; see docs/webshop.md on human goals and the 1k catalogue)"
            )
        self.invalid_feedback = invalid_feedback
        self.goal: Goal | None = None
        self.state = ShopState()

    @property
    def task_ids(self) -> list[str]:
        return [g.task_id for g in self.split_goals]

    def _pick_goal(self, options: dict[str, Any]) -> Goal:
        if "task_id" in options:
            return self.core.goal_by_task_id(str(options["task_id"]))
        if "goal_index" in options:
            return self.core.goal_by_index(int(options["goal_index"]))
        return self.split_goals[int(self.np_random.integers(len(self.split_goals)))]

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.goal = self._pick_goal(options)
        self.state = ShopState()
        page = self.core.engine.page(self.state, self.goal)
        info = self.core.info(page, self.goal, admissible=True, effective=False, problem="")
        return page.text(), info

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.goal is not None
        engine = self.core.engine
        before = self.state
        new, why = (before, problem) if problem else engine.transition(before, action)
        reward, breakdown, terminated, won = 0.0, None, False, False
        if not why and new.page == "done":
            reward, breakdown = engine.reward(new, self.goal)
            terminated, won = True, reward == 1.0
        self.state = new
        page = engine.page(new, self.goal, reward=(reward, breakdown or {}) if terminated else None)
        info = self.core.info(
            page, self.goal, admissible=not why, effective=new.key() != before.key(), problem=why, won=won
        )
        obs = page.text()
        if why and self.invalid_feedback:
            obs = f"Invalid action: {why} [SEP] {obs}"
        if terminated or self._steps + 1 >= self.max_steps:
            info[schema.REWARD_INFO] = self.core.reward_info(
                new if terminated else None, self.goal, reward, breakdown
            )
        info[schema.FEEDBACK] = obs
        return obs, reward, terminated, info
