# Over 400 lines: one A* search over the level's state with its per-mission heuristics, which only make sense together.
"""The fewest actions to complete a BabyAI mission from any state: A* over the level's full state.

The search steps the level's *own* code (MiniGrid's dynamics and the mission's instruction verifier, which says
"success") on a private deep copy of the level: a state (:class:`~stepgym.envs.babyai.engine.WorldCodec`) is
written into the copy, one of the six actions is stepped, the state after it is read back. Nothing is re-implemented,
so the values are the level's, and the env an agent plays is only read.

* **Edges:** all six actions from every state; an action that changes nothing (a turn never does; a pick-up in
  front of a wall does) is dropped. A step the level ends with reward > 0 is a success, one it ends with 0 (a
  strict instruction failed) a dead end. The level's step limit is not part of the state (a value is the distance
  to success, as every stepgym oracle defines it: ``stepgym.envs.oracle``).
* **Order:** A* with a lower bound that never overestimates (:func:`lower_bound`): for the object(s) an instruction
  names, the forward moves to a cell beside one (around the walls: :class:`WallDistances`) plus the turns needed to face every direction
  those moves and the final facing use, plus the pick-up / drop / toggle actions the instruction needs; the max of
  the parts still to do for a sequence. Walls, doors and objects in the way only make the truth larger, so the
  first success proved with nothing cheaper left is the shortest (exact); the whole reachable space searched
  without one proves the mission unreachable.
* **Budget:** the search gives up after ``budget`` stepped actions (multi-room levels with doors and objects that
  can be carried anywhere): the value is then an upper bound, marked inexact, from the best success found or the
  BabyAI bot's completion (:class:`BotFollower`), whichever is shorter.

Every state on a proved shortest way gets its exact value and its optimal action (cached), so an agent that
follows the expert costs one search per episode.
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass
from typing import Any

from stepgym.envs.babyai.engine import ACTIONS, WorldCodec, reset_level

__all__ = ["BotFollower", "Solution", "Solver", "WallDistances", "lower_bound", "turns_to_face"]

_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))  # MiniGrid's DIR_TO_VEC: right, down, left, up
_INF = 10**9


def _cover_table() -> tuple[tuple[int, ...], ...]:
    """``table[d][mask]``: the fewest quarter turns from direction ``d`` after which every direction in ``mask``
    (a bit set over 0..3) has been faced (breadth-first over (direction, faced set))."""
    table = []
    for d in range(4):
        best = [_INF] * 16
        start = (d, 1 << d)
        seen = {start: 0}
        frontier = [start]
        while frontier:
            nxt = []
            for cur, faced in frontier:
                dist = seen[(cur, faced)]
                for sub in range(16):
                    if sub & faced == sub:
                        best[sub] = min(best[sub], dist)
                for turn in (1, 3):
                    nd = (cur + turn) % 4
                    state = (nd, faced | (1 << nd))
                    if state not in seen:
                        seen[state] = dist + 1
                        nxt.append(state)
            frontier = nxt
        table.append(tuple(best))
    return tuple(table)


_COVER = _cover_table()


def turns_to_face(direction: int, directions: set[int]) -> int:
    """The fewest quarter turns, from ``direction``, to have faced every direction in ``directions``."""
    return _COVER[direction][sum(1 << d for d in directions)]


def _headings(u: int, dx: int, dy: int) -> int:
    """The bit mask of the headings a walk ``(dx, dy)`` long that ends facing ``u`` turns through."""
    mask = 1 << u
    if dx:
        mask |= 1 << (0 if dx > 0 else 2)
    if dy:
        mask |= 1 << (1 if dy > 0 else 3)
    return mask


def _nav(ax: int, ay: int, d: int, targets: list[tuple[int, int]]) -> int:
    """A lower bound on the turns and forward moves that end facing one of ``targets`` from a neighbouring cell."""
    best = _INF
    for tx, ty in targets:
        for u, (ux, uy) in enumerate(_VEC):
            nx, ny = tx - ux, ty - uy  # stand here, facing u
            dx, dy = nx - ax, ny - ay
            cost = abs(dx) + abs(dy) + _COVER[d][_headings(u, dx, dy)]
            if cost < best:
                best = cost
    return best


def _alive(codec: WorldCodec, state: tuple, o: Any) -> bool:
    """Whether ``o`` can still be seen: in the grid, carried, or inside a box that is (an opened box is gone for
    good, and nothing ever puts an object back)."""
    objs = state[4]
    if objs[codec.index[id(o)]][0] != -2:
        return True
    return any(
        getattr(box, "contains", None) is o and _alive(codec, state, box)
        for box in codec.objects
        if box is not o
    )


def _positions(codec: WorldCodec, state: tuple, objs: list[Any]) -> tuple[list[tuple[int, int]], bool, bool]:
    """The cells of ``objs`` that lie in the grid, whether one of them is carried, whether one is still alive."""
    cells, carried, alive = [], False, False
    for o in objs:
        where = state[4][codec.index[id(o)]][0]
        if where >= 0:
            cells.append(codec.cell(where))
            alive = True
        elif where == -1:
            carried = alive = True
        elif _alive(codec, state, o):
            alive = True
    return cells, carried, alive


def _bound(instr: Any, codec: WorldCodec, state: tuple, _nav: Any = _nav) -> int | None:
    """A lower bound on the actions ``instr`` still needs in ``state``; None when it can never succeed."""
    kind = type(instr).__name__
    ax, ay, d, carry = state[0], state[1], state[2], state[3]
    if kind in ("BeforeInstr", "AfterInstr", "AndInstr"):
        parts = []
        if instr.a_done != "success":
            parts.append(_bound(instr.instr_a, codec, state, _nav))
        if instr.b_done != "success":
            parts.append(_bound(instr.instr_b, codec, state, _nav))
        if any(p is None for p in parts):
            return None
        return max(parts, default=1)  # type: ignore[type-var]
    if kind == "GoToInstr":  # success: the cell ahead is one of the verifier's (possibly stale) positions
        poss = [(int(p[0]), int(p[1])) for p in instr.desc.obj_poss]
        if poss:
            return _nav(ax, ay, d, poss)
        # the positions are re-read from the grid after a drop: a matching object must come back into it
        return 1 if _positions(codec, state, instr.desc.obj_set)[2] else None
    if kind == "PickupInstr":  # success: a pick-up of a matching object with empty hands before it
        cells, carried, alive = _positions(codec, state, instr.desc.obj_set)
        if not alive:
            return None
        if carried:
            return 2  # (a sequence's later part) drop it, pick it up again
        if not cells:
            return 1
        return (1 if carry >= 0 else 0) + _nav(ax, ay, d, cells) + 1
    if kind == "OpenInstr":  # success: a toggle that leaves a matching door open
        cells, _, _ = _positions(codec, state, instr.desc.obj_set)
        return _nav(ax, ay, d, cells) + 1 if cells else 1
    if kind == "PutNextInstr":  # success: a drop of a moving object beside a fixed object's position
        cells, carried, alive = _positions(codec, state, instr.desc_move.obj_set)
        if not alive:
            return None
        fixed = [(int(p[0]), int(p[1])) for p in instr.desc_fixed.obj_poss]
        if not fixed:
            return 1 if _positions(codec, state, instr.desc_fixed.obj_set)[2] else None
        beside = [(fx + ux, fy + uy) for fx, fy in fixed for ux, uy in _VEC]  # where the drop must land
        if carried:
            return _nav(ax, ay, d, beside) + 1  # face such a cell, drop
        if not cells:
            return 1
        best = _INF
        for mx, my in cells:  # reach and take it, then carry it from beside it to beside a fixed one, drop
            carry_leg = max(0, min(abs(mx - bx) + abs(my - by) for bx, by in beside) - 2)
            best = min(best, _nav(ax, ay, d, [(mx, my)]) + 1 + carry_leg + 1)
        return (1 if carry >= 0 else 0) + best
    return 1


class WallDistances:
    """Forward moves between cells around the level's walls, which never change (doors, open or not, and objects
    count as passable: the true number is never smaller). One breadth-first map per cell asked, kept."""

    def __init__(self, codec: WorldCodec):
        self.width = codec.width
        self.height = len(codec.walls) // codec.width
        self.free = [w is None for w in codec.walls]
        self._maps: dict[int, list[int] | None] = {}

    def _map(self, cell: int) -> list[int] | None:
        if cell in self._maps:
            return self._maps[cell]
        dist: list[int] | None = None
        if self.free[cell]:
            dist = [_INF] * len(self.free)
            dist[cell] = 0
            frontier = [cell]
            w = self.width
            while frontier:
                nxt = []
                for k in frontier:
                    x = k % w
                    for j in (k - w, k + w, k - 1 if x > 0 else -1, k + 1 if x < w - 1 else -1):
                        if 0 <= j < len(dist) and self.free[j] and dist[j] == _INF:
                            dist[j] = dist[k] + 1
                            nxt.append(j)
                frontier = nxt
        self._maps[cell] = dist
        return dist

    def nav(self, ax: int, ay: int, d: int, targets: list[tuple[int, int]]) -> int:
        """Like Manhattan's bound, with the shortest way around the walls for the forward moves; ``_INF`` when
        no cell beside a target can be reached."""
        best = _INF
        for tx, ty in targets:
            for u, (ux, uy) in enumerate(_VEC):
                nx, ny = tx - ux, ty - uy
                if not (0 <= nx < self.width and 0 <= ny < self.height):
                    continue
                dist = self._map(ny * self.width + nx)
                if dist is None or dist[ay * self.width + ax] >= _INF:
                    continue
                cost = dist[ay * self.width + ax] + _COVER[d][_headings(u, nx - ax, ny - ay)]
                if cost < best:
                    best = cost
        return best


def lower_bound(env: Any, codec: WorldCodec, state: tuple, walls: WallDistances | None = None) -> int | None:
    """A lower bound (>= 1) on the actions to success from ``state``, which ``env`` (the solver's copy) holds;
    None when success can never be reached (an object the mission needs is gone, or walls cut it off). ``walls``:
    count forward moves around the walls (else by Manhattan distance)."""
    h = _bound(env.instrs, codec, state, _nav if walls is None else walls.nav)
    return None if h is None or h >= _INF else max(1, h)


@dataclass(frozen=True)
class Solution:
    """What the solver knows about one state.

    ``cost``: the fewest actions to success (exact), an upper bound (``exact`` False), or None (exact: success is
    unreachable; not exact: unknown). ``action``: an optimal action when exact (None when unreachable), else the
    BabyAI bot's. ``generated``: actions the search stepped for it (0 when cached).
    """

    cost: int | None
    exact: bool
    action: str | None
    generated: int = 0


class Solver:
    """A* over one episode's level (see the module docstring): ``sim`` is the solver's own copy of the level and
    ``codec`` its :class:`~stepgym.envs.babyai.engine.WorldCodec` (``WorldCodec.for_copy``)."""

    def __init__(self, sim: Any, codec: WorldCodec, budget: int, cache_size: int = 200_000):
        self.sim = sim
        self.codec = codec
        self.budget = int(budget)
        self.cache_size = int(cache_size)
        self.exact: dict[tuple, tuple[int | None, int | None]] = {}  # state -> (cost or None, action index)
        self.walls = WallDistances(codec)
        sim.agent_view_size = 3  # the search reads no observation: the smallest view upstream allows
        sim.max_steps = _INF

    def step(self, state: tuple, action: int) -> tuple[str, tuple | None]:
        """``("success" | "failure" | "continue", state after)`` of one action from ``state`` on the copy."""
        sim, codec = self.sim, self.codec
        codec.write(sim, state)
        _, reward, terminated, _, _ = sim.step(action)
        child = codec.read(sim, after=state)
        if terminated:
            return ("success" if reward > 0 else "failure"), None
        return "continue", child

    def solve(self, root: tuple) -> Solution:
        """The exact value and an optimal action at ``root``, or what the budget allowed (cost None: unknown)."""
        known = self.exact.get(root)
        if known is not None:
            cost, action = known
            return Solution(cost, True, None if action is None else ACTIONS[action])
        sim, codec = self.sim, self.codec
        codec.write(sim, root)
        h_root = lower_bound(sim, codec, root, self.walls)
        if h_root is None:
            self._remember(root, None, None)
            return Solution(None, True, None)
        g_of = {root: 0}
        parent: dict[tuple, tuple[tuple, int]] = {}
        heap = [(h_root, 0, 0, root)]
        tie = 0
        best, best_end = _INF, None  # (state, action, via): the last edge of the best way found
        generated = 0
        complete = True
        while heap:
            f, neg_g, _, state = heapq.heappop(heap)
            if f >= best:
                break
            g = g_of[state]
            if -neg_g > g:
                continue  # reached more cheaply since it was queued
            if generated + len(ACTIONS) > self.budget:
                complete = False
                break
            for a in range(len(ACTIONS)):
                status, child = self.step(state, a)
                generated += 1
                if status == "success":
                    if g + 1 < best:
                        best, best_end = g + 1, (state, a, None)
                    continue
                if status == "failure" or child is None or child == state:
                    continue
                ng = g + 1
                if g_of.get(child, _INF) <= ng:
                    continue
                cached = self.exact.get(child)
                if cached is not None:
                    g_of[child] = ng
                    parent[child] = (state, a)
                    if cached[0] is not None and ng + cached[0] < best:
                        best, best_end = ng + cached[0], (state, a, child)
                    continue
                h = lower_bound(sim, codec, child, self.walls)
                if h is None or ng + h >= best:
                    continue
                g_of[child] = ng
                parent[child] = (state, a)
                tie += 1
                heapq.heappush(heap, (ng + h, -ng, tie, child))
        if not complete:
            return Solution(None if best >= _INF else best, False, None, generated)
        if best_end is None:
            self._remember(root, None, None)
            return Solution(None, True, None, generated)
        # every state on the way found is that many actions from success, and its next action is optimal
        state, action, via = best_end
        cost = 1 if via is None else self.exact[via][0] + 1  # type: ignore[operator]
        while True:
            self._remember(state, cost, action)
            if state not in parent:
                break
            state, action = parent[state]
            cost += 1
        return Solution(best, True, ACTIONS[action], generated)

    def _remember(self, state: tuple, cost: int | None, action: int | None) -> None:
        if len(self.exact) >= self.cache_size:
            self.exact.clear()
        self.exact[state] = (cost, action)


class BotFollower:
    """MiniGrid's BabyAI bot (``minigrid.utils.baby_ai_bot.BabyAIBot``) following an episode on its own copy.

    The bot keeps a memory of what the agent has seen and a plan it revises after every action, so it must see
    every action the agent took. This follower replays them, lazily, on a copy of the level reset from the same
    seed (it never reads the env the agent plays): :meth:`suggest` is the bot's next action, :meth:`completion`
    the number of actions the bot needs to finish from here (an upper bound on the true value), on a copy of the
    copy. The bot raises on some states (a box it needed was opened); the follower then has no suggestion for the
    rest of the episode.
    """

    def __init__(self, level_env: Any, seed: int):
        self._env = level_env
        self._seed = int(seed)
        self._bot: Any = None
        self._played = 0
        self._suggestion: int | None = None
        self._broken = False

    def _catch_up(self, actions: list[int]) -> None:
        from minigrid.utils.baby_ai_bot import BabyAIBot

        if self._broken:
            return
        try:
            if self._bot is None:
                reset_level(self._env, self._seed)
                self._env.max_steps = _INF
                self._bot = BabyAIBot(self._env)
                self._suggestion = int(self._bot.replan())
            while self._played < len(actions):
                a = actions[self._played]
                self._env.step(a)
                self._played += 1
                self._suggestion = int(self._bot.replan(a))
        except Exception:  # the bot's own failures (DisappearedBoxError, assertions, ...)
            self._broken = True
            self._suggestion = None

    def suggest(self, actions: list[int]) -> str | None:
        """The bot's next action after ``actions`` (the valid actions of the episode so far), or None."""
        self._catch_up(actions)
        s = self._suggestion
        return ACTIONS[s] if s is not None and 0 <= s < len(ACTIONS) else None

    def completion(self, actions: list[int], limit: int) -> int | None:
        """Actions the bot takes to success from here (at most ``limit``), or None."""
        self._catch_up(actions)
        if self._broken or self._bot is None:
            return None
        env, bot = copy.deepcopy((self._env, self._bot))
        suggestion = self._suggestion
        try:
            for n in range(1, limit + 1):
                if suggestion is None or not 0 <= suggestion < len(ACTIONS):
                    return None
                _, reward, terminated, _, _ = env.step(suggestion)
                if terminated:
                    return n if reward > 0 else None
                suggestion = int(bot.replan(suggestion))
        except Exception:  # the bot failed: no bound
            return None
        return None
