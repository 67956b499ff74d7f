"""``StepGym/CreditFamily-v0``: a family of credit-assignment toys with knobs that separate the shapers.

Why it exists: on ``CreditToy-v0`` every shaper reaches 80% success within a few iterations, so GRPO, GiGPO,
ProAS, AHEAD and StepOPSD look alike. The papers' claim is about *long* tasks where *few* decisions matter, the
failure shows only at the end, and look-alike states can differ. This family turns each of those into a knob, so
a study (``benchmarks/credit_study.py``) can say where step-level credit pays off and where it does not.

The world: a line of ``horizon`` stations; the agent must pass each one. A plain station is passed with ``go
forward``. At a *decisive* station (``n_decisive`` of them, their positions fixed per task) a sign names one of
``n_choices`` objects; ``take <object>`` with the named one passes the station. Taking another object is a
mistake: with ``irreversible=True`` the agent passes on carrying the wrong object and can no longer win (the
episode runs on to the step limit); with ``irreversible=False`` the object is put back, a step is lost and the
agent may try again. Every station also offers ``n_distractors`` harmless but useless actions (``inspect
<thing>``), which only cost a step. The step limit is ``max_steps`` (the keyword every stepgym env takes), by
default ``horizon + slack``; ``slack`` is how many steps beyond the optimum it allows. A ``max_steps`` below
``horizon`` is allowed (a budget probe) but no episode can win within it.

Knobs and what they model:

* ``horizon`` — the number of decisions on the optimal path (the optimum takes exactly ``horizon`` steps);
* ``n_decisive``, ``irreversible`` — how many decisions matter and whether a mistake is fatal;
* ``n_distractors`` — harmless actions that a trajectory-level advantage credits like useful ones;
* ``reward`` — ``"sparse"`` (1 on winning, else 0) or ``"dense"`` (1/(n_decisive+1) per correct decisive choice
  and the same on winning; the optimum still totals 1);
* ``alias`` — observation noise: the text omits the station number and what the agent carries, so every plain
  station looks the same and a doomed state looks like a healthy one. The exact ``STATE_KEY`` (position, carried
  object) still tells them apart; a method that groups by observation text mixes them.

The optimum is known for every setting: the env's ``EXPERT_ACTION`` is the optimal action in every state that can
still win (None in a doomed state), it wins every task in ``horizon`` steps, so the optimal success rate is 1.0
(:attr:`CreditFamilyEnv.optimal_success`), and :meth:`CreditFamilyEnv.random_success` gives the exact success rate
of a uniformly random admissible policy (the chance level). Every step fills the same info keys as the other envs
(``STATE_KEY``, ``SUBGOAL_KEY``, ``ADMISSIBLE``, ``EFFECTIVE``, ``EXPERT_ACTION``, ...) plus ``credit/decisive``
(whether the *current* station is decisive), so every wrapper and shaper runs on it unchanged. Anything that is not
admissible is answered with "Nothing happens." and flagged inadmissible.

Tasks are a pure function of the task index (a generator seeded by it), so the same task id is the same task in
every process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.envs.options import env_config
from stepgym.errors import InvalidArgumentError

__all__ = ["DECISIVE", "CreditFamilyConfig", "CreditFamilyEnv"]

OBJECTS = ("stone", "leaf", "cup", "coin", "shell", "feather", "apple", "spoon")
THINGS = ("wall", "floor", "ceiling", "window", "lamp", "rug", "shelf", "crate")
DECISIVE = "credit/decisive"
"""Info key: True when the station the agent now stands at is decisive."""
REWARDS = ("sparse", "dense")
_SPLIT_OFFSET = {"train": 0, "valid": 10_000}
GOAL_TEXT = "pass every station; at a station with a sign, take the object the sign names"


def _task(index: int, horizon: int, n_decisive: int, n_choices: int) -> dict[int, tuple]:
    """Decisive station → (objects shown, right object), for one task index (its own seeded generator)."""
    rng = np.random.default_rng([index, horizon, n_decisive, n_choices])
    positions = sorted(int(p) for p in rng.choice(horizon, size=n_decisive, replace=False))
    stations = {}
    for p in positions:
        start = int(rng.integers(len(OBJECTS)))
        shown = tuple(OBJECTS[(start + j) % len(OBJECTS)] for j in range(n_choices))
        stations[p] = (shown, shown[int(rng.integers(n_choices))])
    return stations


@dataclass(frozen=True)
class CreditFamilyConfig:
    """:class:`CreditFamilyEnv`'s finer settings (its docstring describes each); any of them may also be passed to
    the env by name."""

    n_choices: int = 3
    irreversible: bool = True
    n_distractors: int = 1
    reward: str = "sparse"
    alias: bool = False
    slack: int | None = None


class CreditFamilyEnv(TextEnv):
    """The parametrised credit toy (see the module docstring).

    Example (the expert's action, in every info, wins in ``horizon`` steps)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/CreditFamily-v0", horizon=6, n_decisive=2, alias=True)
        >>> obs, info = env.reset(seed=0)
        >>> steps = 0
        >>> while True:
        ...     obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        ...     steps += 1
        ...     if terminated or truncated:
        ...         break
        >>> reward, steps, info[schema.WON]
        (1.0, 6, True)

    Args:
        split: ``"train"`` or ``"valid"`` (disjoint task indices).
        n_tasks: tasks in the split.
        horizon: stations (decisions) on the optimal path, >= 1.
        n_decisive: decisive stations, 0..horizon.
        max_steps: the step limit (default ``horizon + slack``); pass it or ``slack``; both must agree
            (``max_steps == horizon + slack``).
        config: a :class:`CreditFamilyConfig` with the settings below (default: its defaults); each of its fields
            may also be passed by name (``gym.make("StepGym/CreditFamily-v0", horizon=6, alias=True)``); a keyword
            wins over ``config``, an unknown name is one ``InvalidArgumentError``.

    :class:`CreditFamilyConfig` fields:
        n_choices: objects shown at a decisive station (one is right), 2..len(OBJECTS).
        irreversible: a wrong object dooms the episode (True) or only costs a step (False).
        n_distractors: useless ``inspect`` actions offered at every station, 0..len(THINGS).
        reward: ``"sparse"`` or ``"dense"``.
        alias: drop the station number and the carried object from the observation text.
        slack: steps allowed beyond ``horizon`` before truncation (default: ``horizon``).
    """

    optimal_success = 1.0
    """Success rate of the optimal policy (the expert) in every setting."""

    options_class = CreditFamilyConfig

    def __init__(
        self,
        split: str = "train",
        n_tasks: int = 24,
        horizon: int = 10,
        n_decisive: int = 1,
        *,
        render_mode: str | None = None,
        max_steps: int | None = None,
        config: CreditFamilyConfig | None = None,
        **options: Any,
    ) -> None:
        cfg = env_config(CreditFamilyConfig, config, options, type(self))
        self.config = cfg
        n_choices, irreversible, n_distractors = cfg.n_choices, cfg.irreversible, cfg.n_distractors
        reward, alias, slack = cfg.reward, cfg.alias, cfg.slack
        if max_steps is not None and slack is not None and int(max_steps) != int(horizon) + int(slack):
            raise InvalidArgumentError(
                f"max_steps={max_steps} contradicts horizon={horizon} + slack={slack}: max_steps is the whole "
                f"step limit (horizon + slack); pass one of max_steps and slack"
            )
        slack = int(horizon) if slack is None else int(slack)
        checks = [
            (split in _SPLIT_OFFSET, f"split must be one of {sorted(_SPLIT_OFFSET)}, got {split!r}"),
            (n_tasks >= 1, f"n_tasks must be >= 1, got {n_tasks}"),
            (horizon >= 1, f"horizon must be >= 1, got {horizon}"),
            (0 <= n_decisive <= horizon, f"n_decisive must be in 0..horizon, got {n_decisive}"),
            (2 <= n_choices <= len(OBJECTS), f"n_choices must be in 2..{len(OBJECTS)}, got {n_choices}"),
            (
                0 <= n_distractors <= len(THINGS),
                f"n_distractors must be in 0..{len(THINGS)}, got {n_distractors}",
            ),
            (reward in REWARDS, f"reward must be one of {REWARDS}, got {reward!r}"),
            (slack >= 0, f"slack must be >= 0, got {slack}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)
        limit = int(horizon) + slack if max_steps is None else int(max_steps)
        super().__init__(max_steps=limit, render_mode=render_mode, max_observation_chars=2_000)
        self.split = split
        self.horizon = int(horizon)
        self.n_decisive = int(n_decisive)
        self.n_choices = int(n_choices)
        self.irreversible = bool(irreversible)
        self.n_distractors = int(n_distractors)
        self.reward_mode = reward
        self.alias = bool(alias)
        offset = _SPLIT_OFFSET[split]
        self.task_ids: tuple[str, ...] = tuple(f"family-{split}-{offset + i:05d}" for i in range(n_tasks))
        self._task_id = self.task_ids[0]
        self._stations: dict[int, tuple] = {}
        self._pos = 0
        self._carried = ""
        self._won = False

    # -- world ----------------------------------------------------------------------------------------------
    @property
    def _doomed(self) -> bool:
        return bool(self._carried)

    def _describe(self) -> str:
        if self._won:
            return "You passed the last station. You won!"
        parts = [] if self.alias else [f"Station {self._pos + 1} of {self.horizon}."]
        station = self._stations.get(self._pos)
        if station is None:
            parts.append("The way leads forward.")
        else:
            shown, right = station
            parts.append(f"A sign names the {right}. You see {', '.join(f'a {o}' for o in shown)}.")
        if not self.alias:
            parts.append(f"You carry a {self._carried}." if self._carried else "You carry nothing.")
        return " ".join(parts)

    def _admissible(self) -> list[str]:
        if self._won:
            return []
        station = self._stations.get(self._pos)
        acts = ["go forward"] if station is None else [f"take {o}" for o in station[0]]
        return acts + [f"inspect {t}" for t in THINGS[: self.n_distractors]]

    def _state_key(self) -> str:
        return f"pos={self._pos};carry={self._carried or '-'};won={int(self._won)}"

    def _subgoal_key(self) -> str:
        # Progress only: how far the agent got while it can still win (a doomed agent makes no progress).
        return f"pos={self._pos};doomed={int(self._doomed)};won={int(self._won)}"

    def _expert(self) -> str | None:
        if self._won or self._doomed:
            return None
        station = self._stations.get(self._pos)
        return "go forward" if station is None else f"take {station[1]}"

    def steps_to_win(self) -> int | None:
        """The optimum by construction: every station still to pass takes one action (0 when won), or None in a
        doomed state. Read by :class:`~stepgym.envs.oracle.StepsToWinOracle`."""
        if self._won:
            return 0
        if self._doomed:
            return None
        return self.horizon - self._pos

    def _info(self, feedback: str, admissible: bool, effective: bool, reason: str) -> dict[str, Any]:
        return {
            schema.TASK_ID: self._task_id,
            schema.TASK_TYPE: f"decisive-{self.n_decisive}-of-{self.horizon}",
            schema.GOAL: GOAL_TEXT,
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE_ACTIONS: self._admissible(),
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: effective,
            schema.WON: self._won,
            schema.STATE_KEY: self._state_key(),
            schema.SUBGOAL_KEY: self._subgoal_key(),
            schema.EXPERT_ACTION: self._expert(),
            schema.INVALID_REASON: reason,
            DECISIVE: (not self._won) and self._pos in self._stations,
        }

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = self._task_id_of(options, known=True)
        self._task_id = task_id
        index = int(task_id.rsplit("-", 1)[1])
        self._stations = _task(index, self.horizon, self.n_decisive, self.n_choices)
        self._pos, self._carried, self._won = 0, "", False
        return self._describe(), self._info("", True, False, "")

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        if problem or action not in self._admissible():
            reason = problem or f"{action!r} is not an admissible action here"
            return "Nothing happens.", 0.0, False, self._info("Nothing happens.", False, False, reason)
        reward, before = 0.0, self._state_key()
        share = 1.0 if self.reward_mode == "sparse" else 1.0 / (self.n_decisive + 1)
        if action.startswith("inspect "):
            feedback = f"Nothing interesting. {self._describe()}"
        elif action == "go forward":
            feedback = self._advance()
        else:  # take <object> at a decisive station
            obj = action.split(" ", 1)[1]
            if obj == self._stations[self._pos][1]:
                reward += share if (self.reward_mode == "dense" and not self._doomed) else 0.0
                feedback = self._advance()
            elif self.irreversible:
                self._carried = self._carried or obj
                feedback = self._advance()
            else:
                feedback = f"The {obj} is not the one; you put it back. {self._describe()}"
        if self._won:
            reward += share
        effective = self._state_key() != before
        return feedback, reward, self._won, self._info(feedback, True, effective, "")

    def _advance(self) -> str:
        self._pos += 1
        if self._pos == self.horizon:
            self._pos = self.horizon - 1
            self._won = not self._doomed
            if not self._won:  # a doomed agent at the exit: it stays there until the step limit
                return "The exit does not open for what you carry. " + self._describe()
        return self._describe()

    @property
    def slack(self) -> int:
        """Steps the limit allows beyond the optimum (``max_steps - horizon``; negative: no episode can win)."""
        return self.max_steps - self.horizon

    # -- interpretation ---------------------------------------------------------------------------------------
    def random_success(self) -> float:
        """Exact success rate of a uniformly random admissible policy in this setting (the chance level)."""
        return _random_success(
            self.horizon,
            self.n_decisive,
            self.n_choices,
            self.n_distractors,
            self.irreversible,
            self.max_steps,
        )


@lru_cache(maxsize=256)
def _random_success(horizon: int, k: int, choices: int, d: int, irreversible: bool, budget: int) -> float:
    """P(win) of a uniform admissible policy; it depends only on how many decisive stations remain, not where."""
    # win[s][j]: P(win) with s steps left and j stations to pass, of which the decisive ones are spread uniformly;
    # passing order does not matter for a memoryless uniform policy, so track (stations left, decisive left).
    memo: dict[tuple[int, int, int], float] = {}

    def win(steps: int, left: int, dec: int) -> float:
        if left == 0:
            return 1.0
        if steps < left:
            return 0.0
        key = (steps, left, dec)
        if key not in memo:
            p_dec = (
                dec / left
            )  # the next station is decisive (positions uniform among the remaining stations)
            plain = (1 * win(steps - 1, left - 1, dec) + d * win(steps - 1, left, dec)) / (1 + d)
            if dec:
                n = choices + d
                wrong = 0.0 if irreversible else (choices - 1) * win(steps - 1, left, dec)
                decisive = (win(steps - 1, left - 1, dec - 1) + wrong + d * win(steps - 1, left, dec)) / n
            else:
                decisive = 0.0
            memo[key] = p_dec * decisive + (1 - p_dec) * plain
        return memo[key]

    return win(budget, horizon, k)
