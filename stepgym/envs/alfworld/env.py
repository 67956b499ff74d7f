"""``StepGym/ALFWorld-v0``: ALFWorld's text games, with step annotations.

The games run on stepgym's native engine by default (:mod:`stepgym.envs.alfworld.native`: TextWorld's engine
reproduced, the same results byte for byte); ``engine="textworld"`` runs TextWorld + Fast Downward itself.

Observation: ALFWorld's text (the first one holds the room description and "Your task is to: …"). Action: a
free-text command. Reward 1.0 on the step that wins (0.0 otherwise); terminated on a win; truncated after
``max_steps`` actions (50 by default, the papers' protocol).

Beyond ALFWorld's own behaviour, every ``info`` carries the schema's keys (``stepgym.schema``): task id and type,
goal, admissible commands, won, the textual feedback, whether the action was admissible and effective, the
symbolic state keys (from the engine's facts), and the expert's next command.

Commands are read as raw TextWorld reads them: surrounding whitespace is stripped (``str.strip``) and the rest
must equal an admissible command exactly; anything else is answered with ALFWorld's own "Nothing happens." and
``admissible=False``. ``lenient_commands=True`` opts into stepgym's shared action cleaning instead (control and
invisible characters removed, inner whitespace collapsed, actions over 1,000 characters refused, a case-insensitive
match: "Go to  Desk 1" plays "go to desk 1"). The engine is only stepped with admissible commands (TextWorld
answers the others without changing the world), so junk text can never reach TextWorld's parser.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any

from stepgym import schema
from stepgym._deps import require
from stepgym.envs.alfworld.engine import AlfredEngine
from stepgym.envs.alfworld.expert import RobustExpert
from stepgym.envs.alfworld.games import GameRecord, list_games, resolve_root
from stepgym.envs.alfworld.state import TaskTargets, world_facts
from stepgym.envs.base import TextEnv, sanitize_action
from stepgym.envs.options import env_config

__all__ = ["NOTHING_HAPPENS", "ALFWorldConfig", "ALFWorldEnv", "EnvSnapshot"]

NOTHING_HAPPENS = "Nothing happens."


@dataclass(frozen=True)
class EnvSnapshot:
    """A whole-env state from :meth:`ALFWorldEnv.get_state` (treat it as opaque; restoring never changes it)."""

    engine: Any
    game: GameRecord
    env: tuple
    expert: Any
    rng: dict


@dataclass(frozen=True)
class ALFWorldConfig:
    """:class:`ALFWorldEnv`'s less common settings (its docstring describes each); any of them may also be passed
    to the env by name."""

    game_cache_size: int = 16
    lenient_commands: bool = False
    engine: str = "native"


class ALFWorldEnv(TextEnv):
    """ALFWorld as a Gymnasium env. See the module docstring for the observation/action/info contract.

    Args:
        split: ``"train"``, ``"valid_seen"`` (in-distribution eval, 140 games) or ``"valid_unseen"`` (134).
        task_types: restrict to some task types (long names, or the papers' Pick/Look/Clean/Heat/Cool/Pick2).
        max_steps: actions before truncation.
        data_root: the ALFWorld data folder; default from ``$STEPGYM_DATA``/``$ALFWORLD_DATA``/the user cache.
        expert: compute ``stepgym/expert_action`` every step (the handcoded expert; costs ~1 ms a step).
        config: an :class:`ALFWorldConfig` with the settings below (default: its defaults); each of its fields may
            also be passed by name (``gym.make("StepGym/ALFWorld-v0", engine="textworld")``); a keyword wins over
            ``config``, an unknown name is one ``InvalidArgumentError``.

    :class:`ALFWorldConfig` fields:
        game_cache_size: how many translated games to keep for instant re-reset.
        lenient_commands: clean actions and match them case-insensitively (see the module docstring); the
            default reads them exactly as raw TextWorld does.
        engine: ``"native"`` (default: stepgym's pure-Python engine, the same games byte for byte, much faster;
            see :mod:`stepgym.envs.alfworld.native`) or ``"textworld"`` (TextWorld + Fast Downward, the reference).

    Example (needs the ALFWorld data, ``stepgym download alfworld``)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/ALFWorld-v0", split="valid_seen")
        >>> obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
        >>> info[schema.EXPERT_ACTION]
        'look'
        >>> obs, reward, terminated, truncated, info = env.step("look")
        >>> info[schema.ADMISSIBLE], info[schema.EFFECTIVE]
        (True, False)
        >>> env.step("fly to the moon")[0]
        'Nothing happens.'
    """

    options_class = ALFWorldConfig

    def __init__(
        self,
        split: str = "train",
        task_types: tuple[str, ...] | list[str] | None = None,
        max_steps: int = 50,
        data_root: str | os.PathLike[str] | None = None,
        expert: bool = True,
        *,
        render_mode: str | None = None,
        config: ALFWorldConfig | None = None,
        **options: Any,
    ):
        cfg = env_config(ALFWorldConfig, config, options, type(self))
        self.config = cfg
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        root = resolve_root(data_root)
        self.split = split
        self.games: tuple[GameRecord, ...] = list_games(
            split, tuple(task_types) if task_types else None, root
        )
        self._by_id = {g.task_id: g for g in self.games}
        self._engine = _make_engine(cfg.engine, cfg.game_cache_size)
        # the handcoded expert is ALFWorld's: fail here, not with an ImportError at the first reset
        if expert:
            require("alfworld", "alfworld", what="the ALFWorld expert; expert=False plays without it")
        self._use_expert = expert
        self.lenient_commands = bool(cfg.lenient_commands)
        self._expert: RobustExpert | None = None
        self._game: GameRecord | None = None
        self._targets: TaskTargets | None = None
        self._state: Any = None
        self._state_key = ""
        self._last_expert: str | None = None
        self._goal = ""

    # -- public helpers -------------------------------------------------------------------------------------
    @property
    def task_ids(self) -> list[str]:
        """Every task id of the split, in the fixed evaluation order."""
        return [g.task_id for g in self.games]

    @property
    def walkthrough(self) -> list[str]:
        """The stored expert command list of the current game (it wins when replayed from reset)."""
        return self._engine.walkthrough

    @property
    def engine(self) -> Any:
        """The game engine (``AlfredEngine``, or ``NativeEngine`` with ``get_state``/``set_state`` snapshots)."""
        return self._engine

    @property
    def game(self) -> GameRecord | None:
        return self._game

    def facts(self) -> frozenset[str]:
        """The current world facts (what ``stepgym/state_key`` hashes)."""
        return world_facts(self._state["facts"])

    @property
    def expert_stats(self) -> Any:
        return self._expert.stats if self._expert is not None else None

    # -- snapshots -----------------------------------------------------------------------------------------
    def get_state(self) -> EnvSnapshot:
        """A snapshot of the whole env mid-episode (native engine only): the engine's state, the step counter,
        the annotations' memory, the expert's memory and the env's random generator. ``set_state`` restores it,
        and the env then continues exactly as if the actions leading to it had been replayed."""
        if not hasattr(self._engine, "get_state"):
            raise NotImplementedError('snapshots need engine="native"')
        if self._game is None:
            raise RuntimeError("reset() the env before get_state()")
        return EnvSnapshot(
            engine=self._engine.get_state(),
            game=self._game,
            env=(self._steps, self._last_obs, self._done, self._state_key, self._last_expert, self._goal),
            expert=copy.deepcopy(self._expert.get_memory()) if self._expert is not None else None,
            rng=copy.deepcopy(self.np_random.bit_generator.state),
        )

    def set_state(self, snapshot: EnvSnapshot) -> None:
        """Restore a snapshot taken by :meth:`get_state` (of this env or of another env of the same split)."""
        if not hasattr(self._engine, "set_state"):
            raise NotImplementedError('snapshots need engine="native"')
        if snapshot.game is not self._game:
            self._targets = TaskTargets(snapshot.game.task_params())
            self._game = snapshot.game
        self._state = self._engine.set_state(snapshot.engine)
        self._steps, self._last_obs, self._done, self._state_key, self._last_expert, self._goal = snapshot.env
        self.np_random.bit_generator.state = copy.deepcopy(snapshot.rng)
        if snapshot.expert is not None:
            if self._expert is None:
                self._expert = RobustExpert()
            self._expert.set_memory(copy.deepcopy(snapshot.expert), self.np_random)

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        game: GameRecord = self._task_record(self.games, self._by_id, options)
        if game is not self._game:
            self._engine.load(game.game_file)
            self._targets = TaskTargets(game.task_params())
            self._game = game
        self._state = self._engine.reset()
        obs = self._state["feedback"]
        self._goal = _goal_of(obs)
        expert_action = None
        if self._use_expert:
            if self._expert is None:
                self._expert = RobustExpert()
            # the generator of *this* reset: reset(seed=s) replaces env.np_random, and the expert must follow
            expert_action = self._expert.observe_reset(game.game_file, self._state, self.np_random)
        info = self._info(
            feedback="", admissible=True, effective=False, expert_action=expert_action, reason=""
        )
        return obs, info

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        before = self._state_key
        command = "" if problem else self._match_command(action)
        if not command:
            shown = action if len(action) <= 80 else action[:80] + "..."
            reason = problem or f"{shown!r} is not an admissible command here"
            # The engine is not stepped: the world is unchanged, and so is the expert's next move.
            prev_expert = self._last_expert
            info = self._info(
                feedback=NOTHING_HAPPENS,
                admissible=False,
                effective=False,
                expert_action=prev_expert,
                reason=reason,
            )
            return NOTHING_HAPPENS, 0.0, False, info
        self._state = self._engine.step(command)
        obs = self._state["feedback"]
        expert_action = self._expert.next_action(self._state, command) if self._expert is not None else None
        won = bool(self._state["won"])
        info = self._info(
            feedback=obs, admissible=True, effective=False, expert_action=expert_action, reason=""
        )
        info[schema.EFFECTIVE] = info[schema.STATE_KEY] != before
        return obs, (1.0 if won else 0.0), won, info

    def _clean_action(self, action: Any) -> tuple[str, str]:
        if self.lenient_commands:
            return sanitize_action(action)
        if not isinstance(action, str):
            return "", f"the action must be a string, got {type(action).__name__}"
        return action.strip(), ""  # TextWorld's PddlEnv.step: command.strip(), then an exact match

    def _match_command(self, action: str) -> str:
        admissible = self._state["admissible_commands"]
        if action in admissible:
            return action
        lowered = action.lower() if self.lenient_commands else ""
        return lowered if lowered in admissible else ""

    # -- info -----------------------------------------------------------------------------------------------
    def _info(
        self, *, feedback: str, admissible: bool, effective: bool, expert_action: str | None, reason: str
    ) -> dict[str, Any]:
        assert self._game is not None and self._targets is not None
        self._last_expert = expert_action
        self._state_key, subgoal = self._engine.key_facts().keys(self._targets)
        return {
            schema.TASK_ID: self._game.task_id,
            schema.TASK_TYPE: self._game.task_type,
            schema.GOAL: self._goal,
            schema.ADMISSIBLE_ACTIONS: list(self._state["admissible_commands"]),
            schema.WON: bool(self._state["won"]),
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE: admissible,
            schema.EFFECTIVE: effective,
            schema.STATE_KEY: self._state_key,
            schema.SUBGOAL_KEY: subgoal,
            schema.EXPERT_ACTION: expert_action,
            schema.INVALID_REASON: reason,
        }

    def close(self) -> None:
        self._engine.close()
        super().close()


ENGINES = ("textworld", "native")


def _make_engine(name: str, cache_size: int) -> Any:
    if name == "native":
        from stepgym.envs.alfworld.native import NativeEngine

        return NativeEngine(cache_size=cache_size)
    if name == "textworld":
        return AlfredEngine(cache_size=cache_size)
    raise ValueError(f"unknown ALFWorld engine {name!r}; expected one of {ENGINES}")


def _goal_of(intro: str) -> str:
    marker = "Your task is to:"
    return intro.split(marker, 1)[1].strip() if marker in intro else ""
