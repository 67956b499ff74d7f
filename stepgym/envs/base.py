"""What every stepgym text env shares: spaces, action sanitising, the step limit and render (and :func:`lru_get`,
the least-recently-used cache the engines keep their games, tables and search results in).

Subclasses implement ``_reset_task(options) -> (obs, info)`` and ``_step_action(action) -> (obs, reward,
terminated, info)``; this base class turns any input into a clean string first (a non-string, control characters
and 10k-character junk included), counts steps, truncates at ``max_steps`` and fills the schema keys every env
shares. It never raises on a bad action: the env's own ``_step_action`` answers it with invalid-action feedback.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from stepgym import schema
from stepgym.spaces import UnicodeText

__all__ = ["MAX_ACTION_CHARS", "TextEnv", "sanitize_action"]

MAX_ACTION_CHARS = 1_000
_WS = re.compile(r"\s+")
_V = TypeVar("_V")


def lru_get(
    cache: OrderedDict[Any, _V],
    key: Any,
    make: Callable[[], _V],
    size: int,
    usable: Callable[[_V], bool] | None = None,
) -> _V:
    """``cache[key]``, made by ``make()`` when it is absent (or not ``usable`` any more), then marked the most
    recently used; the least recently used entries beyond ``size`` are dropped (the engines' loaded games, the
    solvers' tables, the search results). No lock: a cache shared by threads is read under its owner's lock."""
    value = cache.pop(key, None)
    if value is None or (usable is not None and not usable(value)):
        value = make()
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)
    return value


def read_text_action(action: Any, max_chars: int, noun: str = "action") -> tuple[str, str]:
    """``(text, problem)``: ``action`` as text, unchanged (UTF-8 bytes decoded), or why it is unusable (not
    text, not UTF-8, longer than ``max_chars``). The one input guard every env shares; ``noun`` names the action
    in the reason ("action", "turn")."""
    if isinstance(action, bytes):
        try:
            action = action.decode("utf-8")
        except UnicodeDecodeError:
            return "", f"the {noun} is not valid UTF-8"
    if not isinstance(action, str):
        return "", f"the {noun} must be a string, got {type(action).__name__}"
    if len(action) > max_chars:
        return "", f"the {noun} is {len(action)} characters long (the limit is {max_chars})"
    return action, ""


def sanitize_action(action: Any, max_chars: int = MAX_ACTION_CHARS) -> tuple[str, str]:
    """Normalise a raw action into ``(clean_text, problem)``.

    ``problem`` is '' for a usable action, else a short reason (the env reports it as invalid). Control and
    format characters are dropped, whitespace is collapsed, and text past ``max_chars`` makes the action invalid
    (no real command is that long; cutting it would silently change its meaning).
    """
    action, problem = read_text_action(action, max_chars)
    if problem:
        return "", problem
    cleaned = "".join(ch for ch in action if unicodedata.category(ch)[0] != "C" or ch in "\t\n ")
    cleaned = _WS.sub(" ", cleaned).strip()
    if not cleaned:
        return "", "the action is empty"
    return cleaned, ""


class TextEnv(gym.Env[str, str]):
    """Base class of stepgym's text envs (observation and action are ``str``).

    Example (a one-step task; the base class cleans the action and counts the steps)::

        >>> from stepgym.envs.base import TextEnv
        >>> class Echo(TextEnv):
        ...     def _reset_task(self, options):
        ...         return "say hello", {}
        ...
        ...     def _step_action(self, action, problem):
        ...         won = action == "hello"
        ...         return ("well done" if won else "try again"), float(won), won, {}
        >>> env = Echo(max_steps=3)
        >>> env.reset(seed=0)[0]
        'say hello'
        >>> env.step("  hello ")[:4]
        ('well done', 1.0, True, False)
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 4}
    _spec: EnvSpec | None = None

    @property
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        """Gymnasium's ``EnvSpec``; ``max_episode_steps`` reports the step limit this env enforces itself.

        The ids are registered without a ``TimeLimit`` (the env's own limit is exact: ``truncated`` is never set on
        the step that terminates), and ``gym.make`` hands the env a spec without a limit; this fills in
        ``max_steps`` so that ``env.spec.max_episode_steps`` reads as Gymnasium users expect. To build another
        copy from a spec, use ``gym.make(spec.id, **spec.kwargs)`` (``gym.make(spec)`` would add a ``TimeLimit``).
        """
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        if value is not None and value.max_episode_steps is None:
            value = dataclasses.replace(value, max_episode_steps=self.max_steps)
        self._spec = value

    def __init__(
        self, *, max_steps: int, render_mode: str | None = None, max_observation_chars: int = 1_000_000
    ):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.max_steps = int(max_steps)
        self.render_mode = render_mode
        self.observation_space = UnicodeText(max_length=max_observation_chars)
        self.action_space = UnicodeText(max_length=100_000)
        self._steps = 0
        self._last_obs = ""
        self._done = True

    # -- subclass hooks -------------------------------------------------------------------------------------
    def _reset_task(
        self, options: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _step_action(
        self, action: str, problem: str
    ) -> tuple[str, float, bool, dict[str, Any]]:  # pragma: no cover
        """Apply a sanitised action. ``problem`` is non-empty when sanitising already found it unusable."""
        raise NotImplementedError

    def _task_id_of(self, options: dict[str, Any], *, known: bool = False) -> Any:
        """The task of the episode ``reset(options=...)`` starts: ``options["task_id"]``, else one of the env's
        ``task_ids`` drawn with its seeded generator. ``known``: refuse a task id that is not in ``task_ids``
        (``ValueError`` naming the env's ``split``)."""
        task_id = options.get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]  # type: ignore[attr-defined]
        if known and task_id not in self.task_ids:  # type: ignore[attr-defined]
            raise ValueError(
                f"unknown task_id {task_id!r} for split {getattr(self, 'split', None)!r} "
                f"({len(self.task_ids)} tasks)"  # type: ignore[attr-defined]
            )
        return task_id

    def _task_record(self, records: Sequence[Any], by_id: Mapping[str, Any], options: dict[str, Any]) -> Any:
        """The record (with a ``task_id``) of the task ``reset(options=...)`` starts, of an env that holds its
        split's ``records`` and ``by_id`` (task id → record): ``options["task_id"]`` (``ValueError`` for one not in
        the split), else ``options["task_index"]`` (modulo the count), else one drawn with the seeded generator."""
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in by_id:
                raise ValueError(
                    f"unknown task_id {task_id!r} for split {getattr(self, 'split', None)!r} ({len(records)} "
                    f"tasks; ids look like {records[0].task_id!r})"
                )
            return by_id[task_id]
        if "task_index" in options:
            return records[int(options["task_index"]) % len(records)]
        return records[int(self.np_random.integers(len(records)))]

    def _clean_action(self, action: Any) -> tuple[str, str]:
        """``(text, problem)`` for a raw action: :func:`sanitize_action` unless an env reads actions as its upstream."""
        return sanitize_action(action)

    # -- Gymnasium API --------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._steps = 0
        obs, info = self._reset_task(dict(options or {}))
        info[schema.STEP_INDEX] = 0
        info.setdefault(schema.FEEDBACK, "")
        self._last_obs = obs
        self._done = False
        if self.render_mode == "human":
            print(obs)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        clean, problem = self._clean_action(action)
        obs, reward, terminated, info = self._step_action(clean, problem)
        self._steps += 1
        truncated = (not terminated) and self._steps >= self.max_steps
        info[schema.STEP_INDEX] = self._steps
        self._last_obs = obs
        self._done = bool(terminated or truncated)
        if self.render_mode == "human":
            print(f"> {clean}\n{obs}")
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None
