"""``StepGym/CreditToy-v0``: a tiny multi-step text task where exactly one decision decides success.

Why it exists: the papers' central claim is that trajectory-level GRPO mis-assigns credit in multi-turn tasks
(it rewards the useless steps of a success and punishes the harmless steps of a failure alike), and that
step-aware shapers (GiGPO, ProAS, AHEAD, StepOPSD) fix that. ALFWorld is far too slow to test the claim on a CPU
with a model trained from scratch, so this env is the small-scale check the bundled trainer is benchmarked on
(``benchmarks/credit_assignment.py``). It is a real Gymnasium env that passes ``stepgym.testing.check_text_env``
and fills the same info keys as ALFWorld, so every annotation wrapper and shaper runs on it unchanged.

The world: a corridor of ``n_rooms`` rooms. One room (fixed per task) holds a key among ``n_distractors`` other
objects; the last room has a locked door. Hands hold one object and nothing can be dropped, so taking a wrong
object is an *irreversible early mistake*: the episode then runs on to the step limit and fails, exactly the
situation ProAS's Future-Drift and AHEAD's hints target. Walking past the key is just as fatal (there is no way
back). Every other step is harmless: ``wait`` wastes a step, ``go forward`` moves on. With the defaults (4 rooms, 2
distractors, 10 steps) a uniformly random *admissible* policy succeeds about 19% of the time (the key is one of
four choices in its room, and dawdling runs out the step budget).

Actions: ``go forward``, ``wait``, ``take <object>`` (objects in the room, hands empty), ``open door`` (last room).
Anything else is answered with "Nothing happens." and flagged inadmissible. Reward 1.0 when the door opens
(terminated); truncated at ``max_steps``.
"""

from __future__ import annotations

from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv

__all__ = ["OBJECTS", "CreditToyEnv"]

OBJECTS = ("stone", "leaf", "cup", "coin", "shell", "feather", "apple", "spoon")
_SPLIT_OFFSET = {"train": 0, "valid": 10_000}
GOAL_TEXT = "find the key and open the door"


def _task_params(index: int, n_rooms: int, n_distractors: int) -> tuple[int, tuple[str, ...]]:
    """Key room and the objects lying beside the key, a pure function of the task index (no RNG needed)."""
    key_room = index % (n_rooms - 1)
    start = (index // (n_rooms - 1)) % len(OBJECTS)
    step = 1 + (index // (len(OBJECTS) * (n_rooms - 1))) % (len(OBJECTS) - 1)
    others = []
    j = start
    while len(others) < n_distractors:
        if OBJECTS[j] not in others:
            others.append(OBJECTS[j])
        j = (j + step) % len(OBJECTS)
    # The key's position among the objects also varies with the index, so the word "key" must be read.
    pos = (index * 5) % (n_distractors + 1)
    objects = [*others[:pos], "key", *others[pos:]]
    return key_room, tuple(objects)


def _list_words(items: list[str]) -> str:
    return ", ".join(f"a {x}" for x in items)


class CreditToyEnv(TextEnv):
    """The credit-assignment toy (see the module docstring).

    Example (the expert's action, in every info, wins)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/CreditToy-v0")
        >>> obs, info = env.reset(seed=0)
        >>> while True:
        ...     obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        ...     if terminated or truncated:
        ...         break
        >>> reward, terminated, info[schema.WON]
        (1.0, True, True)

    Args:
        split: ``"train"`` or ``"valid"`` (disjoint task indices).
        n_tasks: how many tasks the split holds (``task_ids`` in fixed order).
        n_rooms: corridor length (>= 2); the key lies in one of the first ``n_rooms - 1`` rooms.
        n_distractors: objects lying beside the key (0..len(OBJECTS)).
        max_steps: the step limit (truncation).
    """

    def __init__(
        self,
        split: str = "train",
        n_tasks: int = 24,
        n_rooms: int = 4,
        n_distractors: int = 2,
        max_steps: int = 10,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode, max_observation_chars=2_000)
        if split not in _SPLIT_OFFSET:
            raise ValueError(f"split must be one of {sorted(_SPLIT_OFFSET)}, got {split!r}")
        if n_rooms < 2:
            raise ValueError(f"n_rooms must be >= 2, got {n_rooms}")
        if not 0 <= n_distractors <= len(OBJECTS):
            raise ValueError(f"n_distractors must be in 0..{len(OBJECTS)}, got {n_distractors}")
        if n_tasks < 1:
            raise ValueError(f"n_tasks must be >= 1, got {n_tasks}")
        self.split = split
        self.n_rooms = int(n_rooms)
        self.n_distractors = int(n_distractors)
        offset = _SPLIT_OFFSET[split]
        self.task_ids: tuple[str, ...] = tuple(f"credit-{split}-{offset + i:05d}" for i in range(n_tasks))
        self._task_id = self.task_ids[0]
        self._key_room = 0
        self._room = 0
        self._room_objects: dict[int, list[str]] = {}
        self._held = ""
        self._door_open = False

    # -- world ----------------------------------------------------------------------------------------------
    def _describe(self) -> str:
        # Terse on purpose: a model trained from scratch reads every token of it at every turn.
        last = self._room == self.n_rooms - 1
        parts = [f"Room {self._room + 1} of {self.n_rooms}."]
        objs = self._room_objects.get(self._room, [])
        if objs:
            parts.append(f"You see {_list_words(objs)}.")
        if last:
            parts.append("The door is open." if self._door_open else "A locked door is here.")
        parts.append(f"You hold a {self._held}." if self._held else "You hold nothing.")
        return " ".join(parts)

    def _admissible(self) -> list[str]:
        acts = []
        if self._room < self.n_rooms - 1:
            acts.append("go forward")
        else:
            acts.append("open door")
        if not self._held:
            acts.extend(f"take {o}" for o in self._room_objects.get(self._room, []))
        acts.append("wait")
        return acts

    def _state_key(self) -> str:
        return f"room={self._room};held={self._held or '-'};door={'open' if self._door_open else 'locked'}"

    def _subgoal_key(self) -> str:
        # Progress only: where the agent is and whether it holds the key (a wrong object counts as no key).
        has_key = "yes" if self._held == "key" else "no"
        return f"room={self._room};key={has_key};door={'open' if self._door_open else 'locked'}"

    def _expert(self) -> str | None:
        if self._door_open or (self._held and self._held != "key"):
            return None  # solved, or the wrong object is held: no action can win any more
        if not self._held and "key" in self._room_objects.get(self._room, []):
            return "take key"
        if self._room == self.n_rooms - 1:
            return "open door" if self._held == "key" else None
        if not self._held and self._room >= self._key_room:
            return None  # walked past the key
        return "go forward"

    def steps_to_win(self) -> int | None:
        """The optimum by construction: the fewest actions from the current state to the open door (0 when won),
        or None when no action sequence can win (a wrong object held, or the key walked past). Read by
        :class:`~stepgym.envs.oracle.StepsToWinOracle`."""
        if self._door_open:
            return 0
        last = self.n_rooms - 1
        if self._held == "key":
            return (last - self._room) + 1
        if self._held or self._room > self._key_room:
            return None
        return (self._key_room - self._room) + 1 + (last - self._key_room) + 1

    def _info(self, feedback: str, admissible: bool, effective: bool, reason: str) -> dict[str, Any]:
        return {
            schema.TASK_ID: self._task_id,
            schema.TASK_TYPE: f"key-in-room-{self._key_room + 1}",
            schema.GOAL: GOAL_TEXT,
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE_ACTIONS: self._admissible(),
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: effective,
            schema.WON: self._door_open,
            schema.STATE_KEY: self._state_key(),
            schema.SUBGOAL_KEY: self._subgoal_key(),
            schema.EXPERT_ACTION: self._expert(),
            schema.INVALID_REASON: reason,
        }

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = self._task_id_of(options, known=True)
        index = int(task_id.rsplit("-", 1)[1])
        self._task_id = task_id
        self._key_room, objects = _task_params(index, self.n_rooms, self.n_distractors)
        self._room_objects = {self._key_room: list(objects)}
        self._room = 0
        self._held = ""
        self._door_open = False
        obs = self._describe()  # the goal is in info[GOAL]; prompts show it as the task
        info = self._info("", True, False, "")
        info[schema.WON] = False
        return obs, info

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        if problem or action not in self._admissible():
            reason = problem or f"{action!r} is not an admissible action here"
            return "Nothing happens.", 0.0, False, self._info("Nothing happens.", False, False, reason)
        before = self._state_key()
        if action == "go forward":
            self._room += 1
            feedback = self._describe()
        elif action == "wait":
            feedback = self._describe()
        elif action == "open door":
            if self._held == "key":
                self._door_open = True
                feedback = "The key opens the door. You won!"
            else:
                feedback = "It is locked. " + self._describe()
        else:  # take <object>
            obj = action.split(" ", 1)[1]
            self._room_objects[self._room].remove(obj)
            self._held = obj
            feedback = self._describe()
        effective = self._state_key() != before
        reward = 1.0 if self._door_open else 0.0
        return feedback, reward, self._door_open, self._info(feedback, True, effective, "")
