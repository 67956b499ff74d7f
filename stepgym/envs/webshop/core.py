"""What the text env and the site env share: data resolution, the loaded catalogue/goals/search (cached per
process), goal selection, and the step annotations written into ``info``.

Annotations (keys from :mod:`stepgym.schema`):

* ``STATE_KEY``: the symbolic session state (page, query, results page, product, chosen options, sub page);
* ``SUBGOAL_KEY``: goal progress: ``search`` / ``results:target_on_page|target_listed|target_missing`` /
  ``other_item`` / ``target_item:k/n`` (k of the goal's n options chosen) / ``bought:won|target|other``;
* ``EXPERT_ACTION``: the oracle's next action (:meth:`ShopEngine.expert_action`), None once bought;
* ``ADMISSIBLE_ACTIONS``: ``search[<your query>]`` where there is a search bar (a placeholder: the query is free
  text), then ``click[x]`` for every clickable but the search button, in upstream's order;
* ``ADMISSIBLE``: the last action was accepted; ``EFFECTIVE``: it changed ``STATE_KEY``;
* ``WEBSHOP_AVAILABLE``: upstream's ``{"has_search_bar", "clickables"}``;
* at the end (bought, or truncated): ``REWARD_INFO`` with the reward, upstream's breakdown, the bought product,
  its options and price, and the goal's target.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepgym import schema
from stepgym.data import data_root
from stepgym.envs.webshop.catalogue import (
    ATTR_FILE,
    DOCUMENTS_FILE,
    Catalogue,
    attributes_file_for,
    load_catalogue,
)
from stepgym.envs.webshop.engine import Page, ShopEngine, ShopState
from stepgym.envs.webshop.goals import Goal, build_human_goals, build_synthetic_goals, split_indices
from stepgym.envs.webshop.search import make_backend
from stepgym.errors import DataNotFoundError

__all__ = ["SEARCH_PLACEHOLDER", "WebShopCore", "find_catalogue", "shared_core"]

SEARCH_PLACEHOLDER = "search[<your query>]"
HUMAN_GOALS_FILE = Path("baseline_models") / "data" / "human_goals.json"


def find_catalogue(root: Path) -> Path:
    """The catalogue file in a data root: the document file, else a raw ``items_shuffle*.json``."""
    for rel in (
        Path("data") / DOCUMENTS_FILE,
        Path("data") / "items_shuffle_1000.json",
        Path("data") / "items_shuffle.json",
    ):
        if (root / rel).is_file():
            return root / rel
    raise DataNotFoundError(
        f"No WebShop catalogue in {root}/data (looked for {DOCUMENTS_FILE}, items_shuffle_1000.json, "
        f"items_shuffle.json). Fix: run `stepgym download webshop`, or point $STEPGYM_DATA at a folder holding "
        f"webshop/data/{DOCUMENTS_FILE}."
    )


@dataclass
class WebShopCore:
    root: Path
    catalogue: Catalogue
    engine: ShopEngine
    goals: list[Goal]
    kind: str

    def goal_by_task_id(self, task_id: str) -> Goal:
        parts = task_id.split("/")
        if len(parts) != 3 or parts[0] != "webshop" or parts[1] != self.kind or not parts[2].isdigit():
            raise ValueError(
                f"unknown task id {task_id!r} for {self.kind} goals (expected 'webshop/{self.kind}/<index>')"
            )
        return self.goal_by_index(int(parts[2]))

    def goal_by_index(self, index: int) -> Goal:
        pos = self._positions.get(int(index))
        if pos is None:
            raise ValueError(
                f"no {self.kind} goal with index {index} in this catalogue ({len(self.goals)} goals)"
            )
        return self.goals[pos]

    def split(self, name: str) -> list[Goal]:
        return [self.goals[k] for k in split_indices(self.goals, name)]

    def __post_init__(self) -> None:
        self._positions = {g.index: k for k, g in enumerate(self.goals)}

    # -- annotations ------------------------------------------------------------------------------------------
    def info(
        self, page: Page, goal: Goal, *, admissible: bool, effective: bool, problem: str, won: bool = False
    ) -> dict[str, Any]:
        state = page.state
        actions = [SEARCH_PLACEHOLDER] if page.has_search_bar else []
        actions += [f"click[{k}]" for k in page.clickables if k != "search"]
        info: dict[str, Any] = {
            schema.TASK_ID: goal.task_id,
            schema.TASK_TYPE: str(goal.category),
            schema.GOAL: goal.instruction_text,
            schema.ADMISSIBLE_ACTIONS: actions,
            schema.WEBSHOP_AVAILABLE: page.available_actions(),
            schema.ADMISSIBLE: bool(admissible),
            schema.EFFECTIVE: bool(effective),
            schema.INVALID_REASON: problem,
            schema.STATE_KEY: state.key(),
            schema.SUBGOAL_KEY: self.engine.subgoal(state, goal, won),
            schema.EXPERT_ACTION: self.engine.expert_action(state, goal),
            schema.WON: bool(won),
        }
        return info

    def reward_info(
        self, state: ShopState | None, goal: Goal, reward: float, breakdown: dict[str, Any] | None
    ) -> dict[str, Any]:
        bought = state is not None and state.page == "done"
        return {
            "reward": float(reward),
            "breakdown": dict(breakdown or {}),
            "bought_asin": state.asin if bought else None,
            "bought_options": state.options_dict if bought else {},
            "bought_price": float(self.catalogue.price(state.asin)) if bought else None,
            "goal": goal.to_info(),
        }


@functools.lru_cache(maxsize=8)
def _load_core(
    root: str,
    catalogue_file: str,
    kind: str,
    search: str,
    title_nouns: str,
    option_match: str,
    search_anywhere: bool,
    mtime: float,
) -> WebShopCore:
    rootp = Path(root)
    catalogue = load_catalogue(catalogue_file)
    if kind == "synthetic":
        attr = attributes_file_for(Path(catalogue_file))
        if not attr.exists():
            attr = rootp / "data" / ATTR_FILE
        goals = build_synthetic_goals(catalogue, attr)
    else:
        path = rootp / HUMAN_GOALS_FILE
        if not path.exists():
            raise DataNotFoundError(
                f"{path} is missing (needed for goals='human'). Fix: run `stepgym download webshop`."
            )
        goals = build_human_goals(catalogue, path)
    engine = ShopEngine(
        catalogue,
        make_backend(search, catalogue),
        title_nouns=title_nouns,
        option_match=option_match,
        search_anywhere=search_anywhere,
    )
    return WebShopCore(rootp, catalogue, engine, goals, kind)


def shared_core(
    data_root_arg: str | os.PathLike[str] | None,
    goals: str,
    search: str,
    title_nouns: str = "heuristic",
    option_match: str = "upstream",
    search_anywhere: bool = False,
    catalogue_file: str | os.PathLike[str] | None = None,
) -> WebShopCore:
    """The loaded data for these settings, shared by every env of this process (loaded once)."""
    if goals not in ("synthetic", "human"):
        raise ValueError(f"goals must be 'synthetic' or 'human', got {goals!r}")
    if title_nouns not in ("heuristic", "spacy"):
        raise ValueError(f"title_nouns must be 'heuristic' or 'spacy', got {title_nouns!r}")
    if option_match not in ("upstream", "values"):
        raise ValueError(f"option_match must be 'upstream' or 'values', got {option_match!r}")
    root = data_root("webshop", data_root_arg)
    cat = Path(catalogue_file) if catalogue_file is not None else find_catalogue(root)
    mtime = cat.stat().st_mtime if cat.exists() else 0.0
    return _load_core(
        str(root), str(cat), goals, search, title_nouns, option_match, bool(search_anywhere), mtime
    )
