"""A tiny text env for the annotation tests (our own, not a benchmark): fetch a key, unlock a door, go outside.

Three rooms (hall, kitchen, cellar) and a garden behind a locked door. The key lies in the kitchen or the cellar
(two tasks). ``expose`` chooses which ground-truth keys the env writes, so the wrappers' fallbacks can be tested
on an env that knows little.
"""

from __future__ import annotations

from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv

TASKS = ("toy/key-in-kitchen", "toy/key-in-cellar")
ALL_KEYS = frozenset(
    {"admissible_actions", "admissible", "effective", "state_key", "expert", "won", "goal", "invalid_reason"}
)


class ToyRoomEnv(TextEnv):
    def __init__(
        self,
        *,
        max_steps: int = 12,
        expose: frozenset[str] | set[str] = ALL_KEYS,
        render_mode: str | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.expose = frozenset(expose)
        self.task_ids = TASKS
        self._task = TASKS[0]
        self.loc, self.has_key, self.door_open, self.key_room = "hall", False, False, "kitchen"

    # -- world ----------------------------------------------------------------------------------------------
    def _state_key(self) -> str:
        return f"{self.loc}|key={self.has_key}|door={self.door_open}|keyroom={self.key_room}"

    def admissible(self) -> list[str]:
        acts = ["look", "inventory"]
        for room in ("hall", "kitchen", "cellar"):
            if room != self.loc and self.loc != "garden":
                acts.append(f"go to {room}")
        if self.loc == "hall" and self.door_open:
            acts.append("go to garden")
        if self.loc == self.key_room and not self.has_key:
            acts.append("take key")
        if self.loc == "hall" and self.has_key and not self.door_open:
            acts.append("open door")
        return sorted(acts)

    def expert(self) -> str:
        if not self.has_key:
            return "take key" if self.loc == self.key_room else f"go to {self.key_room}"
        if self.loc != "hall":
            return "go to hall"
        return "open door" if not self.door_open else "go to garden"

    def _describe(self) -> str:
        things = " You see a key." if self.loc == self.key_room and not self.has_key else ""
        door = (
            " The door to the garden is " + ("open." if self.door_open else "locked.")
            if self.loc == "hall"
            else ""
        )
        return f"You are in the {self.loc}.{things}{door}"

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {schema.TASK_ID: self._task}
        if "goal" in self.expose:
            info[schema.GOAL] = "go out into the garden."
        if "admissible_actions" in self.expose:
            info[schema.ADMISSIBLE_ACTIONS] = self.admissible() if self.loc != "garden" else []
        if "state_key" in self.expose:
            info[schema.STATE_KEY] = self._state_key()
        if "expert" in self.expose:
            info[schema.EXPERT_ACTION] = self.expert() if self.loc != "garden" else None
        if "won" in self.expose:
            info[schema.WON] = self.loc == "garden"
        return info

    # -- TextEnv hooks ---------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        tid = options.get("task_id")
        if tid is None:
            tid = TASKS[int(self.np_random.integers(len(TASKS)))]
        if tid not in TASKS:
            raise ValueError(f"unknown task id {tid!r}")
        self._task = tid
        self.key_room = "kitchen" if tid.endswith("kitchen") else "cellar"
        self.loc, self.has_key, self.door_open = "hall", False, False
        obs = f"{self._describe()}\nYour task is to: go out into the garden."
        return obs, self._info()

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        before = self._state_key()
        ok = not problem and action in self.admissible()
        if not ok:
            obs = "Nothing happens."
        elif action == "look":
            obs = self._describe()
        elif action == "inventory":
            obs = "You carry a key." if self.has_key else "You carry nothing."
        elif action.startswith("go to "):
            self.loc = action[6:]
            obs = self._describe() if self.loc != "garden" else "You step out into the garden. You won!"
        elif action == "take key":
            self.has_key = True
            obs = "You pick up the key."
        else:  # open door
            self.door_open = True
            obs = "You unlock and open the door."
        info = self._info()
        if "admissible" in self.expose:
            info[schema.ADMISSIBLE] = ok
        if "effective" in self.expose:
            info[schema.EFFECTIVE] = self._state_key() != before
        if "invalid_reason" in self.expose:
            info[schema.INVALID_REASON] = "" if ok else (problem or "not admissible")
        won = self.loc == "garden"
        return obs, 1.0 if won else 0.0, won, info


def expert_actions(task_id: str = TASKS[0]) -> list[str]:
    room = "kitchen" if task_id.endswith("kitchen") else "cellar"
    return [f"go to {room}", "take key", "go to hall", "open door", "go to garden"]
