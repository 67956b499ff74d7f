"""The ALFWorld game engine: TextWorld's ``PddlEnv`` with ALFWorld's naming, translated once, reset in place.

Why this exists: the raw upstream path (``textworld.gym`` + ``AlfredDemangler``/``AlfredInfos``) re-parses the
game's PDDL domain and grammar and re-runs the PDDL→SAS translation of Fast Downward on every ``reset`` (about
0.4 s each, measured in ``benchmarks/alfworld_bench.py``). The translation depends only on the game file, so this
engine does it once per game and keeps the result in a small LRU cache; ``reset`` then only reloads the
translated task into Fast Downward's state and rebuilds the facts. Everything a step does is TextWorld's own code
path (``PddlEnv.step`` and ``_gather_infos``), so observations, admissible commands and the win check are the
engine's, unchanged.

Object names are demangled the way ``AlfredDemangler`` does (``apple 1`` instead of the ALFRED object id), using
ALFWorld's own ``Demangler`` without shuffling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepgym._deps import require
from stepgym.envs.alfworld.state import KeyFacts, fact_texts

__all__ = ["AlfredEngine"]


class AlfredEngine:
    """One Fast Downward instance playing ALFWorld games; ``load`` switches game, ``reset`` restarts it.

    ``step`` returns TextWorld's ``GameState`` (a dict with ``feedback``, ``admissible_commands``, ``won``,
    ``facts`` …). Not thread-safe: use one engine per env.
    """

    def __init__(self, cache_size: int = 16):
        require("alfworld", "alfworld", what="StepGym/ALFWorld-v0")
        textworld = require("textworld", "alfworld", what="StepGym/ALFWorld-v0")
        from stepgym.envs.alfworld._textworld import ReusablePddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True)
        self._env = ReusablePddlEnv(infos, cache_size)
        self.game_file: Path | None = None
        self._state: Any = None

    def load(self, game_file: Path) -> None:
        self._env.load(str(game_file))
        self.game_file = game_file

    def reset(self) -> Any:
        self._state = self._env.reset()
        return self._state

    def step(self, command: str) -> Any:
        self._state, _score, _done = self._env.step(command)
        return self._state

    def key_facts(self) -> KeyFacts:
        """What the state keys read of the current state's facts."""
        return KeyFacts(map(fact_texts, self._state["facts"]))

    @property
    def walkthrough(self) -> list[str]:
        return list(self._env.walkthrough or [])

    def close(self) -> None:
        self._env._games.clear()
