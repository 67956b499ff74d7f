"""ALFWorld's handcoded expert, made deterministic and crash-proof.

The expert is ALFWorld's ``HandCodedTWAgent``: a per-task-type state machine that reads the observations and the
engine's facts and proposes the next command. Two upstream problems are handled here:

* **Randomness.** It draws from the *global* ``random`` module (``random.choice`` among candidate objects, and a
  random admissible command when it would repeat itself). To make the expert a function of the env's seed without
  touching the user's global RNG, the ``random`` name inside ALFWorld's expert module is pointed at
  ``_EXPERT_RANDOM``: during a call of ours it is a private ``random.Random`` seeded from a number drawn from the
  env's ``np_random`` of the current episode (which ``reset(seed=...)`` replaces), per thread; outside our calls it
  is the global ``random`` module, as upstream expects. The generator is only built and seeded when the policy
  actually draws (rarely), so a step costs one draw from ``np_random`` instead of saving, seeding and restoring
  the global state (~20 µs and ~600 objects a step); its draws are those of ``random.seed(seed)``.
* **Crashes.** It raises ``IndexError`` (``Cannot choose from an empty sequence``) after some invalid commands,
  and ``HandCodedAgentFailed``/``Timeout`` in dead ends. The env never sees these. **Fallback:** after a crash, a
  fresh expert is built, primed with the game's intro text and the current observation, and asked again (it then
  re-explores from where the agent stands). If that also fails, or the proposed command is not admissible, the
  expert action is ``None`` for that step (``info["stepgym/expert_action"] is None``); the next step tries again.
  ``ExpertStats`` counts how often each path was taken.
"""

from __future__ import annotations

import functools
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ExpertStats", "RobustExpert"]


@dataclass
class ExpertStats:
    """How the expert answered since the env was created."""

    calls: int = 0
    crashes: int = 0
    recovered: int = 0
    none: int = 0


class _ExpertRandom:
    """What ``random`` is inside ALFWorld's expert module: the generator of the current :class:`_PrivateRandom`
    block of this thread, or the global ``random`` module outside one."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        block = getattr(self._local, "block", None)
        return getattr(random if block is None else block.generator(), name)


_EXPERT_RANDOM = _ExpertRandom()


class _PrivateRandom:
    """Run a block in which ``_EXPERT_RANDOM`` draws as ``random.seed(seed)`` would make the global one draw."""

    __slots__ = ("_random", "_saved", "seed")

    def __init__(self, seed: int):
        self.seed = seed
        self._random: random.Random | None = None
        self._saved: Any = None

    def generator(self) -> random.Random:
        if self._random is None:  # seeded on the first draw: most calls never draw
            self._random = random.Random(self.seed)
        return self._random

    def __enter__(self) -> None:
        local = _EXPERT_RANDOM._local
        self._saved = getattr(local, "block", None)
        local.block = self

    def __exit__(self, *exc: object) -> None:
        _EXPERT_RANDOM._local.block = self._saved


def _upstream_task_params(game_file: Path) -> dict[str, Any] | None:
    """The task parameters upstream's ``HandCodedAgent.reset`` reads from the game's ``traj_data.json``, from
    the env's read of the same file (None when it has no task type: upstream's reset then reports the error)."""
    from alfworld.agents.expert.handcoded_expert import constants

    from stepgym.envs.alfworld.games import traj_task

    params, task_type = traj_task(game_file.with_name("traj_data.json"))
    if task_type is None:
        return None
    return {
        k: v.lower() if v in constants.OBJECTS else v for k, v in {**params, "task_type": task_type}.items()
    }


class RobustExpert:
    """Wraps one ``HandCodedTWAgent`` per episode; ``observe_reset`` then ``next_action`` after every step."""

    def __init__(self) -> None:
        from alfworld.agents.expert import handcoded_expert
        from alfworld.agents.expert.handcoded_expert_tw import HandCodedTWAgent

        handcoded_expert.random = _EXPERT_RANDOM  # see the module docstring

        self._agent_cls = HandCodedTWAgent
        self._rng: np.random.Generator | None = None
        self._agent: Any = None
        self._game_file: str = ""
        self._task_params: dict[str, Any] | None = None  # of _game_file, as upstream's reset read them
        self._intro = ""
        self.stats = ExpertStats()

    def _fresh(self) -> Any:
        agent = self._agent_cls(max_steps=10_000)
        if self._task_params is None:
            self._task_params = _upstream_task_params(Path(self._game_file))
        if self._task_params is None:
            agent.reset(self._game_file)  # reads the game's traj_data.json
            self._task_params = agent.task_params
        else:  # what upstream's reset does with the task parameters it read for this game before
            agent.task_params = dict(self._task_params)
            agent.policy = agent.get_task_policy(agent.task_params)(
                agent.task_params, max_steps=agent.max_steps
            )
        agent.policy.remove_num_ids = _remove_num_ids
        agent.policy.get_facts = _get_facts
        agent.observe(self._intro)
        return agent

    def _seed(self) -> int:
        assert self._rng is not None, "observe_reset() starts an episode"
        return int(self._rng.integers(0, 2**31 - 1))

    def observe_reset(self, game_file: Path, state: Any, rng: np.random.Generator) -> str | None:
        """Start an episode drawing from ``rng`` (the env's generator of this reset); returns the first command.

        The first command is always ``look`` upstream (its first subgoal).
        """
        self._rng = rng
        if str(game_file) != self._game_file:
            self._game_file, self._task_params = str(game_file), None
        self._intro = state["feedback"]
        with _PrivateRandom(self._seed()):
            self._agent = self._fresh()
        return "look" if "look" in state["admissible_commands"] else None

    def get_memory(self) -> tuple:
        """What the expert remembers of the episode (restore it with :meth:`set_memory`; callers copy it)."""
        return (self._agent, self._game_file, self._task_params, self._intro)

    def set_memory(self, memory: tuple, rng: np.random.Generator) -> None:
        self._agent, self._game_file, self._task_params, self._intro = memory
        self._rng = rng

    def next_action(self, state: Any, last_command: str) -> str | None:
        """The expert's next command in ``state`` after ``last_command`` was played, or None."""
        self.stats.calls += 1
        with _PrivateRandom(self._seed()):
            action = self._ask(self._agent, state, last_command)
            if action is None:
                self.stats.crashes += 1
                self._agent = self._fresh()
                self._agent.observe(state["feedback"])
                action = self._ask(self._agent, state, last_command)
                if action is not None:
                    self.stats.recovered += 1
        if action is None or action not in state["admissible_commands"]:
            self.stats.none += 1
            return None
        return action

    def _ask(self, agent: Any, state: Any, last_command: str) -> str | None:
        try:
            action = agent.policy.act(_expert_view(state), last_command)
        except Exception:  # upstream raises IndexError, NameError subclasses, KeyError ...
            return None
        admissible = state["admissible_commands"]
        # Upstream's repetition guard: never propose the command just played (or an inadmissible one after
        # "look"); pick an admissible command instead, here from the private generator.
        if action == last_command or (last_command == "look" and action not in admissible):
            return admissible[_EXPERT_RANDOM.randrange(len(admissible))] if admissible else None
        return action


@functools.lru_cache(maxsize=1 << 16)
def _remove_num_ids(text: str) -> str:
    """Upstream's ``remove_num_ids`` (digits dropped, whitespace collapsed), memoised: the policies call it on
    every admissible command and fact on every step, and the same strings come back step after step. ALFWorld's
    texts are ASCII, where ``str.isdigit`` (upstream's test) holds for 0-9 only, so those drop them by a table."""
    if text.isascii():
        return " ".join(text.translate(_ASCII_DIGITS).split())
    from alfworld.agents.expert.handcoded_expert import BasePolicy

    return BasePolicy.remove_num_ids(None, text)


_ASCII_DIGITS = str.maketrans("", "", "0123456789")


def _get_facts(game_state: Any) -> list[str]:
    """Upstream's ``get_facts`` (a ``"pred arg arg"`` line per fact), memoised per fact like ``_remove_num_ids``:
    the native engine's facts are made once per game, so most lines are a lookup."""
    return [_fact_line(fact) for fact in game_state["facts"]]


@functools.lru_cache(maxsize=1 << 14)  # the expert reads ~50 facts of a game: some hundred games' worth
def _fact_line(fact: Any) -> str:
    from alfworld.agents.expert.handcoded_expert import BasePolicy

    return BasePolicy.get_facts(None, {"facts": [fact]})[0]


_EXPERT_PREDICATES = frozenset({"holds", "ishot", "iscool", "isclean"})
# predicate name -> whether the expert reads its facts (a plain dict: faster than one with __missing__)
_EXPERT_READS: dict[str, bool] = {}


def _expert_view(state: Any) -> dict[str, Any]:
    """``state`` with only the facts the handcoded expert reads, in their order (so its answer is unchanged).

    Its TextWorld policies test ``holds``/``ishot``/``iscool``/``isclean`` facts and match ``"inreceptacle X Y"``
    as a substring (which ``not_inreceptacle`` and ``wasinreceptacle`` facts also contain); stripping digits from
    every one of the ~300 facts on each step was most of the expert's time.
    """
    reads = _EXPERT_READS
    try:
        facts = [f for f in state["facts"] if reads[f.name]]
    except KeyError:  # a predicate not seen before: decide it once
        for name in {f.name for f in state["facts"]} - reads.keys():
            reads[name] = name in _EXPERT_PREDICATES or "inreceptacle" in name
        facts = [f for f in state["facts"] if reads[f.name]]
    return {**state, "facts": facts}
