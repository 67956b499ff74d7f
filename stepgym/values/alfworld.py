"""ALFWorld's value oracle: the fewest commands to win, by breadth-first search over native-engine snapshots.

From the env's current state (a snapshot, :meth:`~stepgym.envs.alfworld.env.ALFWorldEnv.get_state`) the oracle
searches a *private* native engine: admissible commands are the edges, states are deduplicated by the state key
(the world facts), a win is tested when a state is generated. The live env is only read.

Order of work, cheapest proof first:

1. the handcoded expert plays on from the snapshot (on the private engine): its completion length ``U`` is an
   upper bound (at the start state the stored walkthrough's length bounds it too);
2. the search runs to depth ``U - 1`` at most. A win found at depth ``d`` is exact; all of depth ``U - 1`` searched
   without one proves ``U`` exact; the whole reachable space searched without one proves the game unwinnable;
3. when the search spends its ``budget`` (successor states generated) first, the label is ``U`` with
   ``exact=False``, or "unknown" (``reachable=False, exact=False``) when the expert did not win either.

Commands that can never be on a shortest path are not expanded (sound by the domain's PDDL, ``logic/alfred.pddl``,
and checked against an unpruned search in ``tests/test_values_alfworld.py``): ``look``, ``inventory``, ``examine``
and ``help`` only add history facts (``checked``) that no precondition reads; ``close`` only removes a fact
(``opened``) that preconditions need, never one they forbid; taking, moving, cleaning, heating, cooling or slicing an
object that is not one of the task's target objects (``pddl_params``) changes nothing the goal reads and only
occupies the hand. Removing such a step (and the later steps on that object) from any winning plan leaves a
shorter winning plan.

Every state on a found shortest path (and on the expert's path when it is proved optimal) gets its exact value
through the cache, so an agent that follows the optimum costs one search per episode.
"""

from __future__ import annotations

import copy
import re
from collections import deque
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.envs.alfworld.state import TaskTargets
from stepgym.errors import ValueOracleError
from stepgym.values.base import Remember, Value

__all__ = ["ALFWorldOracle", "useful_commands"]

_NO_EFFECT = ("look", "inventory", "help")
_NO_EFFECT_PREFIX = ("examine ", "close ")
_OBJECT_VERB = re.compile(r"^(?:take|move|clean|heat|cool|slice) (.+?) (?:from|to|with) ")
EXPERT_LIMIT = 100
"""The most commands the expert may play to reach a win from a state (its completions are far shorter)."""


def useful_commands(commands: list[str], targets: TaskTargets) -> list[str]:
    """The commands the search expands: ``commands`` less those that are never on a shortest path (see the
    module docstring for why each is safe to drop)."""
    out = []
    for c in commands:
        if c in _NO_EFFECT or c.startswith(_NO_EFFECT_PREFIX):
            continue
        m = _OBJECT_VERB.match(c)
        if m is not None and not targets.is_target_object(m.group(1)):
            continue
        out.append(c)
    return out


class ALFWorldOracle:
    """See the module docstring. ``budget``: successor states the search may generate per uncached state."""

    unit_gain = False

    def __init__(self, env: Any, budget: int):
        if not hasattr(env.engine, "get_state"):
            raise ValueOracleError(
                'ValueWrapper on ALFWorld searches native-engine snapshots: make the env with engine="native" '
                "(the default)"
            )
        from stepgym.envs.alfworld.native import NativeEngine

        self.env = env
        self.budget = int(budget)
        self._engine = NativeEngine(cache_size=4)  # private: the live engine is never stepped
        self._targets: dict[str, TaskTargets] = {}
        self.stats = {"searches": 0, "exact": 0, "bound": 0, "unknown": 0, "generated": 0}

    # -- the label ------------------------------------------------------------------------------------------
    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        if info[schema.WON]:
            return Value.won()
        snap = self.env.get_state()
        targets = self._targets.get(snap.game.task_id)
        if targets is None:
            targets = self._targets[snap.game.task_id] = TaskTargets(snap.game.task_params())
        expert_path = self._expert_path(snap, info.get(schema.EXPERT_ACTION))
        upper = len(expert_path) if expert_path is not None else None
        if info[schema.STEP_INDEX] == 0 and self.env.walkthrough:
            upper = min(upper or 10**9, len(self.env.walkthrough))
        self.stats["searches"] += 1
        found, path = self._search(snap.engine, targets, upper)
        if found == "win":
            self.stats["exact"] += 1
            for i, key in enumerate(path):
                remember(key, Value(float(len(path) - 1 - i), True, True, 1.0))
            return Value(float(len(path) - 1), True, True, 1.0)
        if found == "none":
            self.stats["exact"] += 1
            return Value.unreachable()
        if found == "depth":  # nothing shorter than the bound exists: the bound is the value
            self.stats["exact"] += 1
            assert upper is not None
            if expert_path is not None and len(expert_path) == upper:
                for i, key in enumerate(expert_path[:-1]):
                    remember(key, Value(float(upper - 1 - i), True, True, 1.0))
            return Value(float(upper), True, True, 1.0)
        if upper is None:
            self.stats["unknown"] += 1
            return Value.unknown()
        self.stats["bound"] += 1
        return Value(float(upper), False, True, 1.0)

    # -- the expert's completion ----------------------------------------------------------------------------
    def _expert_path(self, snap: Any, action: str | None) -> list[str] | None:
        """The state keys after each of the expert's commands until it wins (None if it does not)."""
        if snap.expert is None or action is None:
            return None
        from stepgym.envs.alfworld.expert import RobustExpert

        engine = self._engine
        state = engine.set_state(snap.engine)
        rng = np.random.Generator(type(self.env.np_random.bit_generator)())
        rng.bit_generator.state = copy.deepcopy(snap.rng)
        expert = RobustExpert()
        expert.set_memory(copy.deepcopy(snap.expert), rng)
        keys: list[str] = []
        for _ in range(EXPERT_LIMIT):
            if action is None or action not in state["admissible_commands"]:
                return None
            state = engine.step(action)
            keys.append(engine.key_facts().state_key())
            if state["won"]:
                return keys
            action = expert.next_action(state, action)
        return None

    # -- the search -----------------------------------------------------------------------------------------
    def _search(self, root: Any, targets: TaskTargets, upper: int | None) -> tuple[str, list[str]]:
        """Breadth-first search from ``root``: ``("win", keys of a shortest path from the root)``, ``("none",
        [])`` (exhausted: unwinnable), ``("depth", [])`` (no win shorter than ``upper``) or ``("budget", [])``."""
        engine = self._engine
        state = engine.set_state(root)
        root_key = engine.key_facts().state_key()
        parent: dict[str, str | None] = {root_key: None}
        frontier = deque([(root, state["admissible_commands"], root_key, 0)])
        generated = 0
        while frontier:
            snap, commands, key, depth = frontier.popleft()
            if upper is not None and depth + 1 >= upper:
                return "depth", []  # every state shallower than upper - 1 has been expanded
            for command in useful_commands(commands, targets):
                if generated >= self.budget:
                    self.stats["generated"] += generated
                    return "budget", []
                engine.set_state(snap)
                child = engine.step(command)
                generated += 1
                child_key = engine.key_facts().state_key()
                if child_key in parent:
                    continue
                parent[child_key] = key
                if child["won"]:
                    self.stats["generated"] += generated
                    return "win", _path(parent, child_key)
                frontier.append((engine.get_state(), child["admissible_commands"], child_key, depth + 1))
        self.stats["generated"] += generated
        return "none", []


def _path(parent: dict[str, str | None], last: str) -> list[str]:
    keys = [last]
    while (up := parent[keys[-1]]) is not None:
        keys.append(up)
    return keys[::-1]
