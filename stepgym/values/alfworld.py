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
through the cache, so an agent that follows the optimum costs one search per episode. The search reads the cache
too: a generated state whose exact value is cached is not expanded (the way through it costs its depth plus that
value), and any cached value bounds the result, so a detour next to a labelled state gets at least an upper bound.
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
        found, cost, path = self._search(snap.engine, targets, upper, remember)
        if found == "win":
            self.stats["exact"] += 1
            for i, key in enumerate(path):
                remember(key, Value(float(len(path) - 1 - i), True, True, 1.0))
            return Value(float(len(path) - 1), True, True, 1.0)
        if found == "none":
            self.stats["exact"] += 1
            return Value.unreachable()
        if found == "exact":  # nothing shorter than the best known way exists: it is the value
            self.stats["exact"] += 1
            if expert_path is not None and len(expert_path) == cost:
                for i, key in enumerate(expert_path[:-1]):
                    remember(key, Value(float(cost - 1 - i), True, True, 1.0))
            return Value(float(cost), True, True, 1.0)
        if cost is None:
            self.stats["unknown"] += 1
            return Value.unknown()
        self.stats["bound"] += 1
        return Value(float(cost), False, True, 1.0)

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
    def _search(
        self, root: Any, targets: TaskTargets, upper: int | None, memo: Remember
    ) -> tuple[str, int | None, list[str]]:
        """Breadth-first search from ``root``. Returns ``(outcome, cost, path)``:

        * ``("win", d, keys)``: a shortest path (state keys from the root) found by the search;
        * ``("exact", c, [])``: the best known way (the bound ``upper``, or through a state whose exact value is
          cached) costs ``c`` and every state up to depth ``c - 1`` has been generated without a shorter one;
        * ``("none", None, [])``: the reachable space is exhausted without a win (unwinnable);
        * ``("budget", c, [])``: the budget ran out; ``c`` is the best upper bound known (None: none).

        A generated state with a cached *exact* value ``v`` at depth ``d`` is not expanded: every way through it
        costs at least ``d + v``, and ``d + v`` is achieved. A cached upper bound only tightens the bound.
        """
        engine = self._engine
        state = engine.set_state(root)
        root_key = engine.key_facts().state_key()
        parent: dict[str, str | None] = {root_key: None}
        frontier = deque([(root, state["admissible_commands"], root_key, 0)])
        best = upper  # the cheapest way known (a real path: the bound, or through a cached state)
        exact_best: int | None = None  # the cheapest way through a state whose exact value is cached
        generated = 0
        while frontier:
            snap, commands, key, depth = frontier.popleft()
            if best is not None and depth + 1 >= best:  # all of depth `depth` generated: nothing shorter left
                return self._done("exact", best, generated)
            for command in useful_commands(commands, targets):
                if generated >= self.budget:
                    return self._done("budget", best, generated)
                engine.set_state(snap)
                child = engine.step(command)
                generated += 1
                child_key = engine.key_facts().state_key()
                if child_key in parent:
                    continue
                parent[child_key] = key
                if child["won"]:
                    self.stats["generated"] += generated
                    return "win", depth + 1, _path(parent, child_key)
                known = memo.recall(child_key)
                if known is not None and known.reachable:
                    through = int(depth + 1 + known.cost)
                    best = through if best is None else min(best, through)
                    if known.exact:
                        exact_best = through if exact_best is None else min(exact_best, through)
                if known is not None and known.exact:
                    continue  # its value is proved: the search needs nothing below it
                frontier.append((engine.get_state(), child["admissible_commands"], child_key, depth + 1))
        # exhausted: every way was searched to its end or to a state with a proved value
        if exact_best is not None and exact_best == best:
            return self._done("exact", exact_best, generated)
        return self._done("none" if best is None else "budget", best, generated)

    def _done(self, outcome: str, cost: int | None, generated: int) -> tuple[str, int | None, list[str]]:
        self.stats["generated"] += generated
        return outcome, cost, []


def _path(parent: dict[str, str | None], last: str) -> list[str]:
    keys = [last]
    while (up := parent[keys[-1]]) is not None:
        keys.append(up)
    return keys[::-1]
