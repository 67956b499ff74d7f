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
from dataclasses import dataclass
from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.envs.options import env_config
from stepgym.envs.webshop.core import WebShopCore, shared_core
from stepgym.envs.webshop.engine import ShopState
from stepgym.envs.webshop.goals import Goal

__all__ = ["WebShopConfig", "WebShopEnv"]


@dataclass(frozen=True)
class WebShopConfig:
    """:class:`WebShopEnv`'s less common settings; any of them may also be passed to the env by name."""

    catalogue_file: str | os.PathLike[str] | None = None
    """The product catalogue (default: the one found in the data folder)."""
    title_nouns: str = "heuristic"
    """``"heuristic"`` or ``"spacy"``: how nouns are read from product titles."""
    option_match: str = "upstream"
    """``"upstream"`` or ``"values"``: how goal options are matched."""
    search_anywhere: bool = False
    """Allow ``search[...]`` on every page, not only where the page has a search bar."""
    invalid_feedback: bool = True
    """Prefix an invalid action's observation with ``Invalid action: <reason> [SEP]`` (False: the page alone)."""


class ShopEnvBase(TextEnv):
    """What :class:`WebShopEnv` and :class:`~stepgym.envs.webshop.WebShopSiteEnv` share: the constructor (the
    settings, the loaded catalogue :attr:`core` and the split's goals) and the goal draw of ``reset``. A subclass
    sets :attr:`options_class` and starts its own parts in :meth:`_open`."""

    options_class: type[Any] = WebShopConfig

    def __init__(
        self,
        split: str = "train",
        goals: str = "synthetic",
        search: str = "bm25s",
        *,
        data_root: str | os.PathLike[str] | None = None,
        max_steps: int = 15,
        render_mode: str | None = None,
        config: Any = None,
        **options: Any,
    ) -> None:
        cfg = env_config(self.options_class, config, options, type(self))
        self.config = cfg
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.core: WebShopCore = shared_core(
            data_root,
            goals,
            search,
            cfg.title_nouns,
            cfg.option_match,
            getattr(cfg, "search_anywhere", False),
            cfg.catalogue_file,
        )
        self.split = split
        self.split_goals = self.core.split(split)
        if not self.split_goals:
            raise ValueError(
                f"the {goals} goals of this catalogue have no '{split}' split "
                f"({len(self.core.goals)} goals; see docs/webshop.md on human goals and the 1k catalogue)"
            )
        self.invalid_feedback = cfg.invalid_feedback
        self.goal: Goal | None = None
        self.state = ShopState()
        self._open(cfg)

    def _open(self, cfg: Any) -> None:
        """Start what the env needs beyond the catalogue (called last by the constructor; nothing here)."""

    @property
    def task_ids(self) -> list[str]:
        return [g.task_id for g in self.split_goals]

    def _pick_goal(self, options: dict[str, Any]) -> Goal:
        if "task_id" in options:
            return self.core.goal_by_task_id(str(options["task_id"]))
        if "goal_index" in options:
            return self.core.goal_by_index(int(options["goal_index"]))
        return self.split_goals[int(self.np_random.integers(len(self.split_goals)))]


class WebShopEnv(ShopEnvBase):
    """WebShop in text mode, with step annotations (see :mod:`stepgym.envs.webshop.core`).

    Args:
        split, goals, search: the goal split, the goal kind (``"synthetic"`` or ``"human"``) and the search engine.
        data_root: the WebShop data folder (default: ``$STEPGYM_DATA/webshop`` or the user cache).
        max_steps: actions before truncation.
        config: a :class:`WebShopConfig` with the less common settings (default: its defaults); each of its fields
            may also be passed by name (``gym.make("StepGym/WebShop-v0", invalid_feedback=False)``); a keyword wins
            over ``config``, an unknown name is one ``InvalidArgumentError``.

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

    options_class = WebShopConfig

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
