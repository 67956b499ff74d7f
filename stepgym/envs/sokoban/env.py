"""``StepGym/Sokoban-v0``: the text Sokoban of the agent-RL papers, with the exact value of every state.

The room of a task is the one gym-sokoban 0.0.6 generates from its seed (:mod:`.generation`: reverse play,
drawn in upstream's order from local generators), the moves and rewards are gym-sokoban's (:mod:`.game`), the
grid is rendered with RAGEN's and verl-agent's symbols, and the four action words are theirs (``up``, ``down``,
``left``, ``right``; a move into a box pushes it when the cell behind is free). The solver (:mod:`.solver`) gives
every state its exact steps-to-go, so the expert action is optimal and ``ValueWrapper``'s labels are exact on
every step (:mod:`stepgym.envs.sokoban.values`).

Tasks: the task of seed ``s`` is ``sokoban-<rows>x<cols>-<boxes>-<s>`` (``-d<depth>`` before the seed when the
generation's search depth is not upstream's 300). The splits are disjoint seed ranges: ``train`` seeds
0–999,999 and ``test`` seeds 1,000,000–1,999,999; ``task_ids`` lists the first ``n_tasks`` of the split
(10,000 train, 1,000 test by default), and ``reset(options={"task_id": ...})`` takes any seed of the split.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.envs.sokoban.game import ACTIONS, Level, State
from stepgym.envs.sokoban.generation import generate_room
from stepgym.envs.sokoban.solver import DEFAULT_MAX_STATES, Solution, solver_for

__all__ = ["DEFAULT_SEARCH_DEPTH", "GOAL_TEXT", "SPLIT_SEEDS", "SokobanEnv"]

#: split -> (first seed, seeds in the split): disjoint ranges
SPLIT_SEEDS = {"train": (0, 1_000_000), "test": (1_000_000, 1_000_000)}
_DEFAULT_N_TASKS = {"train": 10_000, "test": 1_000}
#: gym-sokoban 0.0.6's reverse-play search depth (its fixed ``ttl``)
DEFAULT_SEARCH_DEPTH = 300
GOAL_TEXT = "push every box (X) onto a target (O)"
_ACTION_WORDS = {a: a for a in ACTIONS}


class SokobanEnv(TextEnv):
    """Sokoban as text (see the module docstring).

    Example (the expert is optimal: it solves the room in exactly the solver's count)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/Sokoban-v0")
        >>> obs, info = env.reset(options={"task_id": "sokoban-6x6-1-3"})
        >>> print(obs)
        ######
        ######
        #O####
        #X####
        #P_###
        ######
        >>> env.unwrapped.solution().cost
        1
        >>> obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        >>> info[schema.WON], round(reward, 1), terminated
        (True, 10.9, True)

    Args:
        split: ``"train"`` or ``"test"`` (disjoint seed ranges).
        dim_room: the room's (rows, cols), walls included; 6×6 as verl-agent and RAGEN train.
        num_boxes: boxes (and targets) per room; 1 as verl-agent and RAGEN train.
        max_steps: the step limit (truncation); every action counts, an invalid one too.
        search_depth: gym-sokoban's reverse-play search depth (its fixed ``ttl`` 300; RAGEN's configs use
            10–300): a smaller depth gives rooms closer to solved.
        n_tasks: how many tasks ``task_ids`` lists (default 10,000 train, 1,000 test).
        max_solver_states: the solver's state budget per search (a state past it gets an unknown value and no
            expert; never reached on 6×6 rooms).
        render_mode: ``"ansi"`` (``render()`` returns the observation) or ``"human"`` (prints it).
    """

    def __init__(
        self,
        split: str = "train",
        dim_room: tuple[int, int] | list[int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int = 100,
        search_depth: int = DEFAULT_SEARCH_DEPTH,
        n_tasks: int | None = None,
        max_solver_states: int = DEFAULT_MAX_STATES,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode, max_observation_chars=20_000)
        if split not in SPLIT_SEEDS:
            raise ValueError(f"split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
        rows, cols = (int(v) for v in dim_room)
        if not (4 <= rows <= 40 and 4 <= cols <= 40):
            raise ValueError(f"dim_room must be two sizes in 4..40 (walls included), got {tuple(dim_room)}")
        if not 1 <= num_boxes <= (rows - 2) * (cols - 2) - 2:
            raise ValueError(
                f"num_boxes must be in 1..{(rows - 2) * (cols - 2) - 2} for {rows}x{cols}, got {num_boxes}"
            )
        if search_depth < 2:
            raise ValueError(f"search_depth must be >= 2, got {search_depth}")
        first, size = SPLIT_SEEDS[split]
        n = _DEFAULT_N_TASKS[split] if n_tasks is None else int(n_tasks)
        if not 1 <= n <= size:
            raise ValueError(f"n_tasks must be in 1..{size}, got {n_tasks}")
        self.split = split
        self.dim_room = (rows, cols)
        self.num_boxes = int(num_boxes)
        self.search_depth = int(search_depth)
        self.max_solver_states = int(max_solver_states)
        depth = "" if self.search_depth == DEFAULT_SEARCH_DEPTH else f"d{self.search_depth}-"
        self._prefix = f"sokoban-{rows}x{cols}-{self.num_boxes}-{depth}"
        self._seeds = range(first, first + size)
        self.task_ids: tuple[str, ...] = tuple(f"{self._prefix}{s}" for s in range(first, first + n))
        self.task_type = f"{rows}x{cols}-{self.num_boxes}box"
        self._task_id = self.task_ids[0]
        self.level: Level | None = None
        self.state: State = (0, ())

    # -- tasks ----------------------------------------------------------------------------------------------
    def seed_of(self, task_id: str) -> int:
        """The room seed of a task id of this env's settings and split (ValueError for any other id)."""
        text = str(task_id)
        seed_text = text[len(self._prefix) :] if text.startswith(self._prefix) else ""
        if not seed_text.isdigit() or int(seed_text) not in self._seeds or str(int(seed_text)) != seed_text:
            raise ValueError(
                f"unknown task_id {task_id!r} for split {self.split!r}: expected {self._prefix}<seed> with a seed "
                f"in {self._seeds.start}..{self._seeds.stop - 1}"
            )
        return int(seed_text)

    def solution(self) -> Solution:
        """The solver's answer for the current state: exact steps-to-go (None when unsolvable) and an optimal
        action. Read by :mod:`stepgym.envs.sokoban.values`."""
        if self.level is None:
            raise RuntimeError("solution() before reset()")
        return solver_for(self.level, self.max_solver_states).solve(self.state)

    # -- info -----------------------------------------------------------------------------------------------
    def _info(self, feedback: str, admissible: bool, effective: bool, reason: str) -> dict[str, Any]:
        assert self.level is not None
        won = self.level.solved(self.state)
        return {
            schema.TASK_ID: self._task_id,
            schema.TASK_TYPE: self.task_type,
            schema.GOAL: GOAL_TEXT,
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE_ACTIONS: list(ACTIONS),
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: effective,
            schema.WON: won,
            schema.STATE_KEY: self.level.state_key(self.state),
            schema.SUBGOAL_KEY: self.level.subgoal_key(self.state),
            schema.EXPERT_ACTION: None if won else self.solution().action,
            schema.INVALID_REASON: reason,
        }

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = self._task_id_of(options)
        seed = self.seed_of(task_id)
        self.level, self.state = _start(seed, self.dim_room, self.num_boxes, self.search_depth)
        self._task_id = str(task_id)
        obs = self.level.render(self.state)
        return obs, self._info("", True, False, "")

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.level is not None
        word = action.lower()
        if problem or word not in _ACTION_WORDS:
            reason = problem or f"{action!r} is not an action: use up, down, left or right"
            # gym-sokoban's no-op (its action 0): the world stays, the step still costs its penalty
            obs = f"Invalid action: {reason}.\n{self.level.render(self.state)}"
            before = self.state
            return obs, self.level.reward(before, before), False, self._info(obs, False, False, reason)
        before = self.state
        self.state, moved, _ = self.level.move(before, ACTIONS.index(word))
        reward = self.level.reward(before, self.state)
        obs = self.level.render(self.state)
        return obs, reward, self.level.solved(self.state), self._info(obs, True, moved, "")


@lru_cache(maxsize=4096)
def _start(seed: int, dim_room: tuple[int, int], num_boxes: int, search_depth: int) -> tuple[Level, State]:
    """A task's level and start state: the room is a pure function of its seed and settings (and immutable), so
    it is generated once per process, not on every reset of the task."""
    room = generate_room(seed, dim_room, num_boxes, search_depth=search_depth)
    return Level.from_rooms(room.fixed, room.state)
