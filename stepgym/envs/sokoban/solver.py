"""The exact value of every Sokoban state: the fewest moves to a solved room, or a proof that there is none.

The search is over the exact state ``(player, boxes)`` with the env's own move rule (:meth:`Level.move`), so a
cost is counted in the env's action unit: one primitive move (a walk or a push) per step. For a state it has not
seen, :meth:`SokobanSolver.solve` enumerates every state reachable from it (breadth-first), then runs a
breadth-first search *backwards* from the solved states over that graph: every enumerated state gets its exact
steps-to-go, and a state the backward search never reaches provably cannot be solved. Solved states are not
expanded (the episode ends there), and neither are states with a **deadlock**, which can never be solved:

* a box off target on a *dead square*: a cell from which no push sequence can bring a box to any target,
  even on an empty floor (found once per level by pulling a box back from every target);
* a *frozen square*: a 2×2 block of walls and boxes holding a box off target (no box of it can ever move).

Both are permanent (a box on a dead square only reaches dead squares; a frozen block stays frozen), so a
state reached from a pruned one is recognised as dead when asked about. The pruning changes no answer, and
``tests/test_env_sokoban.py`` checks every value against a plain breadth-first search without it.

The table is kept per level (one per task), so after the first query of an episode a state costs one dict
look-up. A search that would enumerate more than ``max_states`` states stops at the first solved state it finds
(breadth-first, so that depth is still exact for the queried state) or, failing that, answers "unknown".
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from threading import Lock

from stepgym.envs.base import lru_get
from stepgym.envs.sokoban.game import ACTIONS, Level, State

__all__ = ["DEFAULT_MAX_STATES", "SokobanSolver", "Solution", "clear_solver_cache", "solver_for"]

DEFAULT_MAX_STATES = 1_000_000


@dataclass(frozen=True)
class Solution:
    """``cost``: fewest moves to a solved room (None when unsolvable or unknown); ``exact``: proved (False only
    when a search ran out of its state budget); ``action``: an optimal first action (None when solved, dead or
    unknown)."""

    cost: int | None
    exact: bool
    action: str | None

    @property
    def reachable(self) -> bool:
        return self.cost is not None


class SokobanSolver:
    """Exact steps-to-go for the states of one level (see the module docstring)."""

    def __init__(self, level: Level, max_states: int = DEFAULT_MAX_STATES):
        if max_states < 1:
            raise ValueError(f"max_states must be >= 1, got {max_states}")
        self.level = level
        self.max_states = int(max_states)
        self._dist: dict[State, int] = {}  # exact steps-to-go; -1: provably unsolvable
        self._first: dict[State, int] = {}  # an optimal first action (budget-limited answers only)
        self._live = self._live_squares()
        self.states_enumerated = 0
        self._lock = Lock()

    # -- deadlocks --------------------------------------------------------------------------------------------
    def _live_squares(self) -> frozenset[int]:
        """Cells from which a box can be pushed to some target on an empty floor: pull boxes back from every
        target (a pull from c to c - d needs c - d and c - 2d free of walls)."""
        lv = self.level
        n = lv.height * lv.width
        live = set(lv.targets)
        queue = deque(lv.targets)
        while queue:
            c = queue.popleft()
            for d in lv.deltas:
                a, b = c - d, c - 2 * d
                if 0 <= b < n and 0 <= a < n and not lv.walls[a] and not lv.walls[b] and a not in live:
                    live.add(a)
                    queue.append(a)
        return frozenset(live)

    def dead(self, state: State) -> bool:
        """A deadlock: a box off target on a dead square, or a frozen 2×2 block holding a box off target."""
        lv = self.level
        boxes = state[1]
        box_set = set(boxes)
        w = lv.width
        for b in boxes:
            if b in lv.targets:
                continue
            if b not in self._live:
                return True
            for corner in (b, b - 1, b - w, b - w - 1):  # the four 2x2 blocks holding b
                block = (corner, corner + 1, corner + w, corner + w + 1)
                if all(lv.walls[c] or c in box_set for c in block):
                    return True
        return False

    # -- search -----------------------------------------------------------------------------------------------
    def solve(self, state: State) -> Solution:
        """The exact steps-to-go of ``state`` and an optimal first action."""
        with self._lock:
            dist = self._dist.get(state)
            if dist is None:
                if self.level.solved(state):
                    dist = 0
                elif self.dead(state):
                    dist = -1
                else:
                    self._search(state)
                    dist = self._dist.get(state)
            if dist is None:
                return Solution(None, False, None)
            if dist < 0:
                return Solution(None, True, None)
            return Solution(dist, True, self._best_action(state, dist))

    def _best_action(self, state: State, dist: int) -> str | None:
        if dist == 0:
            return None
        first = self._first.get(state)
        if first is not None:
            return ACTIONS[first]
        for a in range(4):  # fixed order: up, down, left, right
            nxt, moved, _ = self.level.move(state, a)
            if moved and self._dist.get(nxt) == dist - 1:
                return ACTIONS[a]
        raise AssertionError("an enumerated state without an optimal successor")  # pragma: no cover

    def _search(self, start: State) -> None:
        lv = self.level
        index: dict[State, int] = {start: 0}
        states: list[State] = [start]
        preds: list[list[int]] = [[]]
        goals: list[int] = []
        depth = [0]
        first_action = [-1]
        goal_depth = -1
        goal_first = -1
        head = 0
        while head < len(states):
            s = states[head]
            i = head
            head += 1
            if lv.solved(s) or (i and self.dead(s)):
                continue
            for a in range(4):
                nxt, moved, _ = lv.move(s, a)
                if not moved:
                    continue
                j = index.get(nxt)
                if j is None:
                    j = len(states)
                    if j >= self.max_states:  # over budget: keep only what breadth-first order proved
                        self.states_enumerated += len(states)
                        if goal_depth >= 0:
                            self._dist[start] = goal_depth
                            self._first[start] = goal_first
                        return
                    index[nxt] = j
                    states.append(nxt)
                    preds.append([])
                    depth.append(depth[i] + 1)
                    first_action.append(a if i == 0 else first_action[i])
                    if lv.solved(nxt):
                        goals.append(j)
                        if goal_depth < 0:
                            goal_depth, goal_first = depth[j], first_action[j]
                preds[j].append(i)
        self.states_enumerated += len(states)
        # the closure is complete: exact distances by a backward breadth-first search from the solved states
        dist = [-1] * len(states)
        queue = deque(goals)
        for g in goals:
            dist[g] = 0
        while queue:
            j = queue.popleft()
            dj = dist[j] + 1
            for i in preds[j]:
                if dist[i] < 0:
                    dist[i] = dj
                    queue.append(i)
        table = self._dist
        for s, d in zip(states, dist, strict=True):
            table[s] = d


_CACHE: OrderedDict[tuple[Level, int], SokobanSolver] = OrderedDict()
_CACHE_LOCK = Lock()
_CACHE_SIZE = 256


def solver_for(level: Level, max_states: int = DEFAULT_MAX_STATES) -> SokobanSolver:
    """The process's solver of ``level`` (an LRU of the last 256 levels: env copies of one task share it)."""
    key = (level, int(max_states))
    with _CACHE_LOCK:
        return lru_get(_CACHE, key, lambda: SokobanSolver(level, max_states), _CACHE_SIZE)


def clear_solver_cache() -> None:
    """Forget every level's table (a benchmark's first play; tests)."""
    with _CACHE_LOCK:
        _CACHE.clear()
