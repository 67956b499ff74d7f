"""``StepGym/BabyAI-v0``: MiniGrid's BabyAI levels as text, with the exact value of every state where it can be had.

The world is MiniGrid's own level (``minigrid`` 3.2.0): this env only reads its observations and steps it with
one of BabyAI-Text's six action words. What the agent reads is BabyAI-Text's description of its partial view
(:func:`~stepgym.envs.babyai.engine.view_sentences`), joined with ", " as BabyAI-Text's prompt joins them; the
first observation starts with the goal ("Goal of the agent: go to the red ball").

Ground truth in ``info``: the full state (``STATE_KEY``: the agent's cell and direction, the carried object, every
object's cell and door state, the instruction verifier's bookkeeping) and an expert. The expert is an *optimal*
action when the solver (:mod:`~stepgym.envs.babyai.solver`, A* over the level's own code) proves the value within
its budget, which it does on the single-room navigation and pick-up levels (GoToLocal, GoToObj, GoToRedBall,
PickupLoc, ...); elsewhere it is the BabyAI bot's action (``minigrid.utils.baby_ai_bot.BabyAIBot``).

Tasks are ``(level, seed)`` pairs, written ``"<level>/<seed>"``; the train split draws seeds from 0 to 999,999, the
test split from 1,000,000 up (disjoint ranges). Reward, termination and success are the level's: its instruction
verifier decides, and a success pays upstream's ``1 - 0.9 * steps / max_steps``.
"""

from __future__ import annotations

import copy
from typing import Any

from stepgym import schema
from stepgym.envs.babyai.engine import (
    ACTIONS,
    WorldCodec,
    babyai_levels,
    make_level,
    reset_level,
    view_sentences,
)
from stepgym.envs.babyai.solver import BotFollower, Solution, Solver
from stepgym.envs.base import TextEnv

__all__ = ["DEFAULT_LEVEL", "SPLIT_SEEDS", "BabyAIEnv", "task_type_of"]

DEFAULT_LEVEL = "BabyAI-GoToLocal-v0"
"""BabyAI-Text's own training level (its ``train_language_agent.py``): go to an object in one 8×8 room, 8
distractors, 64 steps."""

#: Each split's seeds: ``[first, first + size)``.
SPLIT_SEEDS = {"train": (0, 1_000_000), "test": (1_000_000, 1_000_000)}

BOT_LIMIT = 1_000
"""The most actions the bot may play to finish from a state (its completions bound the value)."""

_INSTR_TYPES = {
    "GoToInstr": "goto",
    "PickupInstr": "pickup",
    "OpenInstr": "open",
    "PutNextInstr": "putnext",
}


def task_type_of(instrs: Any) -> str:
    """The task type of a mission: ``goto``, ``pickup``, ``open``, ``putnext``, or ``sequence`` (two joined)."""
    return _INSTR_TYPES.get(type(instrs).__name__, "sequence")


def _read_action(text: str) -> int | None:
    word = " ".join(text.lower().replace("_", " ").split())
    return ACTIONS.index(word) if word in ACTIONS else None


class BabyAIEnv(TextEnv):
    """A BabyAI level as text (see the module docstring).

    Example (the expert solves the task; on GoToLocal its every action is optimal)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/BabyAI-v0")
        >>> obs, info = env.reset(options={"task_id": "BabyAI-GoToLocal-v0/0"})
        >>> obs.splitlines()[0]
        'Goal of the agent: go to the green ball'
        >>> obs.splitlines()[1][:60]
        'You see a wall 2 steps left, You see a purple key 1 step lef'
        >>> while True:
        ...     obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        ...     if terminated or truncated:
        ...         break
        >>> info[schema.WON], info[schema.STEP_INDEX], reward
        (True, 2, 0.971875)

    Args:
        level: a BabyAI level id of MiniGrid (``BabyAI-GoToLocal-v0``, ``BabyAI-PickupLoc-v0``, ...; see
            docs/babyai.md for where the values are exact).
        split: ``"train"`` or ``"test"`` (disjoint seed ranges, :data:`SPLIT_SEEDS`).
        n_tasks: how many tasks ``task_ids`` lists (the split's first seeds); ``reset`` takes any seed of the split.
        max_steps: the step limit (also the level's own, which its success reward reads).
        search_budget: actions the solver may step per state before it settles for an upper bound.
    """

    def __init__(
        self,
        level: str = DEFAULT_LEVEL,
        split: str = "train",
        n_tasks: int = 1000,
        max_steps: int = 64,
        search_budget: int = 5_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode, max_observation_chars=20_000)
        if split not in SPLIT_SEEDS:
            raise ValueError(f"split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
        if not 1 <= n_tasks <= SPLIT_SEEDS[split][1]:
            raise ValueError(f"n_tasks must be in 1..{SPLIT_SEEDS[split][1]}, got {n_tasks}")
        if search_budget < 0:
            raise ValueError(f"search_budget must be >= 0, got {search_budget}")
        levels = babyai_levels()  # imports MiniGrid (a clear error when it is missing)
        if level not in levels:
            raise ValueError(f"unknown BabyAI level {level!r}; MiniGrid has {', '.join(levels)}")
        self.level = level
        self.split = split
        self.search_budget = int(search_budget)
        first = SPLIT_SEEDS[split][0]
        self.task_ids: tuple[str, ...] = tuple(f"{level}/{first + i}" for i in range(n_tasks))
        self._mg = make_level(level, max_steps)
        self._shadow = make_level(level, max_steps)  # the bot's copy (BotFollower)
        self._task_id = self.task_ids[0]
        self._codec: WorldCodec | None = None
        self._solver: Solver | None = None
        self._bot: BotFollower | None = None
        self._state: tuple = ()
        self._played: list[int] = []
        self._searched: tuple[tuple, Solution] | None = None
        self._won = False
        self._failed = False

    # -- tasks ----------------------------------------------------------------------------------------------
    def _seed_of(self, task_id: Any) -> int:
        level, _, seed = str(task_id).rpartition("/")
        first, size = SPLIT_SEEDS[self.split]
        if level != self.level or not seed.isdigit() or not first <= int(seed) < first + size:
            raise ValueError(
                f"unknown task_id {task_id!r} for level {self.level} split {self.split!r}: task ids are "
                f"'{self.level}/<seed>' with a seed in [{first}, {first + size})"
            )
        return int(seed)

    # -- ground truth ---------------------------------------------------------------------------------------
    def solution(self) -> Solution:
        """The solver's answer for the current state: the exact value and an optimal action, or (beyond the
        search budget) an upper bound, the shorter of the best success the search found and the BabyAI bot's
        completion, with the bot's action. Read by :mod:`stepgym.envs.babyai.values`."""
        sol = self._search()
        if sol.exact:
            return sol
        assert self._bot is not None
        bound = self._bot.completion(self._played, BOT_LIMIT)
        if sol.cost is not None and (bound is None or sol.cost < bound):
            bound = sol.cost
        return Solution(bound, False, sol.action, sol.generated)

    def _search(self) -> Solution:
        """The search's answer for the current state (run once per state), with the bot's action when inexact."""
        if self._won:
            return Solution(0, True, None)
        if self._failed:
            return Solution(None, True, None)
        if self._searched is not None and self._searched[0] == self._state:
            return self._searched[1]
        assert self._solver is not None and self._bot is not None
        sol = self._solver.solve(self._state)
        if not sol.exact:
            sol = Solution(sol.cost, False, self._bot.suggest(self._played), sol.generated)
        self._searched = (self._state, sol)
        return sol

    def _observation(self, obs: dict[str, Any]) -> str:
        carrying = self._mg.carrying
        held = None if carrying is None else (carrying.color, carrying.type)
        return ", ".join(view_sentences(obs["image"], held))

    def _info(self, feedback: str, admissible: bool, effective: bool, reason: str) -> dict[str, Any]:
        assert self._codec is not None
        expert = self._search().action
        return {
            schema.TASK_ID: self._task_id,
            schema.TASK_TYPE: task_type_of(self._mg.instrs),
            schema.GOAL: str(self._mg.mission),
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE_ACTIONS: list(ACTIONS),
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: effective,
            schema.WON: self._won,
            schema.STATE_KEY: self._codec.key(self._state),
            schema.EXPERT_ACTION: expert,
            schema.INVALID_REASON: reason,
        }

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = self._task_id_of(options)
        seed = self._seed_of(task_id)
        self._task_id = str(task_id)
        self._mg.max_steps = self.max_steps  # the limit may have been set after construction (gym.make)
        reset_level(self._mg, seed)
        self._codec = WorldCodec(self._mg)
        self._state = self._codec.read(self._mg)
        memo: dict[int, Any] = {}
        sim = copy.deepcopy(self._mg, memo)
        self._solver = Solver(sim, self._codec.for_copy(sim, memo), self.search_budget)
        self._bot = BotFollower(self._shadow, seed)
        self._played = []
        self._searched = None
        self._won = self._failed = False
        # the view of the state reset leaves: the PutNext*Carrying levels hand the agent its object after upstream's
        # reset has drawn the observation it returns (which shows the object still on the floor)
        text = f"Goal of the agent: {self._mg.mission}\n" + self._observation(self._mg.gen_obs())
        return text, self._info("", True, False, "")

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        index = None if problem else _read_action(action)
        if index is None:
            reason = problem or f"{action!r} is not one of the actions: {', '.join(ACTIONS)}"
            self._mg.step_count += (
                1  # an invalid turn spends a step of the level's clock too (its reward reads it)
            )
            feedback = f"Invalid action: {reason}."
            return feedback, 0.0, False, self._info(feedback, False, False, reason)
        assert self._codec is not None
        obs, reward, terminated, _, _ = self._mg.step(index)
        self._played.append(index)
        before = self._state
        self._state = self._codec.read(self._mg)
        self._won = bool(terminated and reward > 0)
        self._failed = bool(terminated and not reward > 0)
        text = self._observation(obs)
        return text, float(reward), bool(terminated), self._info(text, True, self._state != before, "")

    def close(self) -> None:
        for env in (self._mg, self._shadow):
            env.close()
        super().close()
