"""``StepGym/ScienceWorld-v0``: ScienceWorld (Wang et al., EMNLP 2022) on its real engine, with step annotations.

Every step is upstream's own ``ScienceWorldEnv.step`` (``scienceworld`` 1.2.3, its jar in a JVM; see
:mod:`stepgym.envs.scienceworld.engine`): the observation is upstream's text, unchanged; the reward is upstream's
reward (the change of the task score, 0-100) divided by 100, each rounded so that the rewards so far, summed in
order, are exactly the score / 100: a won episode's rewards sum to exactly 1.0 (a failed task's score drops to -100
upstream, so its last reward is negative); ``terminated`` is upstream's completion flag (the
task solved, or failed: score below 0); ``truncated`` after ``max_steps`` actions (stepgym counts every action,
upstream counts the moves that take time). The default limit is per task: the longer of 100 (upstream's default)
and the task's gold path, so the expert can win every task (gold paths run to 795 steps on the test split:
inclined-plane friction, Mendelian genetics, boiling); ``max_steps=N`` fixes it for every task.

Tasks: upstream's 30 task types, each with its train / dev / test variations (:mod:`.tasks`); task id
``"<task name>/<variation>"``, task type the task name. ``simplifications`` is upstream's string ("easy", or a
comma-separated list such as "teleportAction,openDoors").

Info (``stepgym.schema``): task id and type, goal (the task description), ``ADMISSIBLE_ACTIONS`` = upstream's
``get_valid_action_object_combinations()`` (a large but incomplete list: upstream also accepts forms it does not
list, such as ``examine substance in metal pot``), ``ADMISSIBLE`` = upstream's parser matched the input to an
action (not "No known action matches that input.", not an "Ambiguous request" question, not the "Unknown action"
answer to one), ``EFFECTIVE`` = the state key changed, ``WON`` = completed with score 100, ``SUBGOAL_KEY`` =
upstream's score and the sub-goals it has met (its incremental task score), ``STATE_KEY`` = a hash of the whole
object tree (approximate; see below), ``EXPERT_ACTION`` = the next action of upstream's gold path while the agent
has followed it (see below).

The state key hashes upstream's object tree (every object, where it is, its properties) with uuids dropped, each
container's contents sorted and temperatures left out, plus upstream's ``look`` text of the agent's room, the goal
sequence's progress and a pending-question flag. It is *approximate*: states that differ only in temperatures share
a key until a state of matter or a fire changes (every tick moves every temperature by hundredths of a degree, and
the last bits differ between two JVMs playing the same actions); and doors are not in upstream's object tree, so a
door's open/closed state enters the key only while the agent is in one of its two rooms (through the ``look``
text).

The expert: the gold path upstream generates for the task (cached per env, see the engine). ``EXPERT_ACTION`` is its
next action while every action so far either was the gold path's next action or left the state key unchanged (an
input upstream rejected; a free action: ``look around``, ``inventory``, ``task``; a no-op that takes a move, such as
``open door to hallway`` on an open door: the gold path goes on from the same state). After any other deviation it
is ``None``: a gold path cannot be recomputed from a mid-episode state (upstream
generates it only from a task's start), and stepgym has no ScienceWorld solver. Gold paths are not optimal
(upstream says so); they are a winning path.

Actions: stepgym's shared cleaning (control characters dropped, whitespace collapsed, over 1,000 characters refused)
then upstream's parser. A refused or empty action is answered with upstream's own
"No known action matches that input." without reaching the engine. An ambiguous input gets upstream's question
("Ambiguous request: Please enter the number ...") and, as upstream, the next action is read as the answer.
"""

from __future__ import annotations

import math
import re
from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.envs.scienceworld.engine import GOLD_RETRIES, ScienceWorldEngine, state_hash
from stepgym.envs.scienceworld.tasks import (
    MIN_STEPS,
    SPLITS,
    STEP_LIMIT_CAP,
    parse_task_id,
    split_task_ids,
)
from stepgym.errors import InvalidArgumentError

__all__ = ["NO_MATCH", "ScienceWorldEnv"]

#: upstream's answer to an input its parser matches to no action (the world is unchanged, no move is taken)
NO_MATCH = "No known action matches that input."
_AMBIGUOUS = "Ambiguous request"
_UNKNOWN = "Unknown action."  # upstream's answer to a non-number after an ambiguous request (a move is taken)
_GOAL_LINE = re.compile(r"^\d+\t(true|false)\t\s*\S+\t(.*)$")


class ScienceWorldEnv(TextEnv):
    """ScienceWorld as a Gymnasium text env. See the module docstring for the observation/action/info contract.

    Args:
        split: ``"train"``, ``"dev"`` or ``"test"`` (upstream's variation splits; the papers evaluate on test).
        task_types: restrict to some of the 30 task names (``"boil"``, ``"find-animal"``, ...).
        max_steps: actions before truncation; ``None`` (default): per task, the longer of 100 (upstream's default
            limit) and its gold path (at most :data:`~.tasks.STEP_LIMIT_CAP`); with ``expert=False`` the gold
            path is still generated once per task for its length.
        simplifications: upstream's simplification string (``""``, ``"easy"``, ``"teleportAction,openDoors"``...).
        expert: fill ``EXPERT_ACTION`` from upstream's gold path (generating it costs ~1.3 s the first time a task
            is reset in this env); ``False`` leaves it ``None``.
        gold_retries: Mendelian genetics only (its gold paths are generated on a world where bees pollinate at
            random, and can lose when played): each new gold path is played once and generated again, at most this
            many more times, until one wins (:data:`~.engine.REPLAY_CHECKED`); ``0``: upstream's first path as it is.

    The JVM starts at construction and serves every episode; ``close()`` ends it.

    Example (starts a JVM: a few seconds)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/ScienceWorld-v0", split="test", task_types=["find-plant"])
        >>> obs, info = env.reset(options={"task_id": "find-plant/225"})
        >>> info[schema.TASK_TYPE], info[schema.EXPERT_ACTION]
        ('find-plant', 'open door to hallway')
        >>> obs, reward, terminated, truncated, info = env.step("open door to hallway")
        >>> obs, info[schema.ADMISSIBLE], info[schema.EFFECTIVE]
        ('The door is now open.', True, True)
        >>> env.step("fly to the moon")[0]
        'No known action matches that input.'
        >>> env.close()
    """

    def __init__(
        self,
        split: str = "train",
        task_types: tuple[str, ...] | list[str] | None = None,
        max_steps: int | None = None,
        simplifications: str = "",
        expert: bool = True,
        render_mode: str | None = None,
        gold_retries: int = GOLD_RETRIES,
    ):
        super().__init__(max_steps=max_steps or STEP_LIMIT_CAP, render_mode=render_mode)
        self._fixed_limit = max_steps  # None: per task (see :attr:`max_steps`)
        if split not in SPLITS:
            raise InvalidArgumentError(
                f"unknown ScienceWorld split {split!r}; expected one of {', '.join(SPLITS)}"
            )
        self.split = split
        self.task_types = tuple(task_types) if task_types else None
        self._task_ids = split_task_ids(split, self.task_types)
        self._known = frozenset(self._task_ids)
        self.simplifications = str(simplifications)
        self._use_expert = bool(expert)
        if isinstance(gold_retries, bool) or not isinstance(gold_retries, int) or gold_retries < 0:
            raise InvalidArgumentError(f"gold_retries must be an integer >= 0, got {gold_retries!r}")
        self._engine = ScienceWorldEngine(simplifications=self.simplifications, gold_retries=gold_retries)
        self._task_id = ""
        self._task_type = ""
        self._goal = ""
        self._gold: list[str] = []
        self._gold_pos: int | None = None
        self._pending = False
        self._state_key = ""
        self._moves = 0
        self._score = 0
        self._reward_sum = 0.0

    # -- public helpers -------------------------------------------------------------------------------------
    @property
    def max_steps(self) -> int:
        """The step limit of the current episode (per task unless a limit was set: ``max_steps=N``, or
        ``gym.make(..., max_episode_steps=N)``)."""
        return self._limit

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        self._limit = int(value)
        self._fixed_limit = int(value)

    @property
    def task_ids(self) -> list[str]:
        """Every task id of the split, in the fixed order (task types as upstream lists them, variations ascending)."""
        return list(self._task_ids)

    @property
    def engine(self) -> ScienceWorldEngine:
        return self._engine

    @property
    def gold_path(self) -> list[str]:
        """The current task's gold path (empty with ``expert=False``)."""
        return list(self._gold)

    @property
    def score(self) -> int:
        """Upstream's task score (0-100; negative once the task has failed)."""
        return self._score

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = self._choose_task(options)
        name, variation = parse_task_id(task_id)
        gold = (
            self._engine.gold_path(name, variation) if self._use_expert or self._fixed_limit is None else []
        )
        self._gold = gold if self._use_expert else []
        if self._fixed_limit is None:
            self._limit = min(STEP_LIMIT_CAP, max(MIN_STEPS, len(gold)))
        obs, up = self._engine.reset(name, variation)
        self._task_id, self._task_type = task_id, name
        self._goal = _task_text(str(up["taskDesc"]))
        self._gold_pos = 0 if self._gold else None
        self._pending = False
        self._moves = int(up["moves"])
        self._score = int(up["score"])
        self._reward_sum = 0.0
        info = self._info(up, feedback="", admissible=True, reason="")
        return str(obs), info

    def _choose_task(self, options: dict[str, Any]) -> str:
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in self._known:
                parse_task_id(task_id)  # a malformed id: its own message
                raise InvalidArgumentError(
                    f"task id {task_id!r} is not in the {self.split!r} split"
                    + (f" of task types {list(self.task_types)}" if self.task_types else "")
                    + f" ({len(self._task_ids)} ids, e.g. {self._task_ids[0]!r})"
                )
            return str(task_id)
        if "task_index" in options:
            return self._task_ids[int(options["task_index"]) % len(self._task_ids)]
        return self._task_ids[int(self.np_random.integers(len(self._task_ids)))]

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        before_key, was_pending = self._state_key, self._pending
        if problem:
            info = self._info(None, feedback=NO_MATCH, admissible=False, reason=problem)
            return NO_MATCH, 0.0, False, info
        obs, _, completed, up = self._engine.step(action)
        obs = str(obs)
        score_before = self._score
        self._moves, self._score = int(up["moves"]), int(up["score"])
        self._pending = obs.startswith(_AMBIGUOUS)
        reason = ""
        if obs.startswith(NO_MATCH):
            reason = f"ScienceWorld's parser matches no action to {_shown(action)}"
        elif self._pending:
            reason = (
                f"{_shown(action)} is ambiguous: the next action is read as the number of the intended one"
            )
        elif was_pending and obs.startswith(_UNKNOWN):
            reason = f"{_shown(action)} is not the number of one of the choices offered"
        info = self._info(up, feedback=obs, admissible=not reason, reason=reason)
        info[schema.EFFECTIVE] = info[schema.STATE_KEY] != before_key
        self._advance_expert(action, unchanged=info[schema.STATE_KEY] == before_key)
        info[schema.EXPERT_ACTION] = self._expert_action()
        return obs, self._reward(score_before), bool(completed), info

    def _reward(self, score_before: int) -> float:
        """The step's reward: the score's change / 100, chosen so that the rewards so far, summed in order, equal
        the score / 100 exactly (a won episode's sum is exactly 1.0, not 0.9999999999999999: each increment / 100
        is rounded, and the roundings would add up)."""
        if self._score == score_before:
            return 0.0
        target = self._score / 100.0
        reward = target - self._reward_sum
        for _ in range(4):  # at most a few ulps away: step toward the target until the sum lands on it
            total = self._reward_sum + reward
            if total == target:
                break
            reward = math.nextafter(reward, math.inf if total < target else -math.inf)
        self._reward_sum += reward
        return reward

    def _advance_expert(self, action: str, *, unchanged: bool) -> None:
        pos = self._gold_pos
        if pos is None:
            return
        if pos < len(self._gold) and action == self._gold[pos]:
            self._gold_pos = pos + 1
        elif not unchanged:
            self._gold_pos = None

    def _expert_action(self) -> str | None:
        pos = self._gold_pos
        return self._gold[pos] if pos is not None and pos < len(self._gold) else None

    # -- info -----------------------------------------------------------------------------------------------
    def _info(
        self, up: dict[str, Any] | None, *, feedback: str, admissible: bool, reason: str
    ) -> dict[str, Any]:
        if up is not None:  # the engine was stepped: read the new state
            progress = self._engine.goal_progress()
            world = self._engine.state_text()
            self._state_key = state_hash(world, str(up["look"]), _goal_flags(progress), str(self._pending))
            self._subgoal = _subgoal_key(self._score, progress)
            self._admissible = [str(a) for a in up["valid"]]
        won = self._score >= 100
        return {
            schema.TASK_ID: self._task_id,
            schema.TASK_TYPE: self._task_type,
            schema.GOAL: self._goal,
            schema.ADMISSIBLE_ACTIONS: list(self._admissible),
            schema.WON: won,
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: False,
            schema.STATE_KEY: self._state_key,
            schema.SUBGOAL_KEY: self._subgoal,
            schema.EXPERT_ACTION: self._expert_action(),
            schema.INVALID_REASON: reason,
        }

    def close(self) -> None:
        self._engine.close()
        super().close()


def _shown(action: str) -> str:
    return repr(action if len(action) <= 80 else action[:80] + "...")


def _task_text(desc: str) -> str:
    return desc.replace("Task Description:", "", 1).strip()


def _goal_lines(progress: str) -> list[tuple[bool, str]]:
    out = []
    for line in progress.splitlines():
        m = _GOAL_LINE.match(line)
        if m:
            out.append((m.group(1) == "true", m.group(2).strip()))
    return out


def _goal_flags(progress: str) -> str:
    return "".join("1" if done else "0" for done, _ in _goal_lines(progress))


def _subgoal_key(score: int, progress: str) -> str:
    met = [text for done, text in _goal_lines(progress) if done]
    return f"score {score}: " + ("; ".join(met) if met else "no sub-goal met")
