"""MiniGrid's BabyAI levels as stepgym uses them: the levels, the text of the agent's view, the full state.

Everything here runs on the real engine (``minigrid`` 3.2.0, imported when a level is made, never at
``import stepgym``):

* :func:`make_level` builds a level by its Gymnasium id (``BabyAI-GoToLocal-v0``); :func:`reset_level` resets it
  from a seed, muting the lines upstream prints while it rejection-samples a layout ("Sampling rejected: ...").
* :func:`view_sentences` writes the agent's partial view as BabyAI-Text does (Carta et al., "Grounding Large
  Language Models in Interactive Environments with Online Reinforcement Learning", ICML 2023; the
  ``gen_graph`` method of the ``babyai-text`` package): "You carry a ...", a wall straight ahead / to the left /
  to the right when nothing stands between ("You see a wall 2 steps left"), then one sentence per visible object
  in the view's column order ("You see a red ball 2 steps left and 1 step forward"), word for word, upstream's
  "You see a open red door" included (its article test compares a string with 0, so it always writes "a").
* :class:`WorldCodec` reads a level's *full* state as a hashable tuple (the agent's cell and direction, the
  carried object, every object's cell, ``cur_pos`` and door flags, and the instruction verifier's own
  bookkeeping: matched positions, the object carried at the last check, which parts of a sequence are done) and
  writes such a tuple back into a private copy of the level, so the solver can step the level's own code from any
  state. Two states with the same tuple behave identically under every action sequence.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium.error import DependencyNotInstalled

__all__ = [
    "ACTIONS",
    "WorldCodec",
    "babyai_levels",
    "make_level",
    "reset_level",
    "view_sentences",
]

#: The six action words of BabyAI-Text, in MiniGrid's action order (``left, right, forward, pickup, drop,
#: toggle``); MiniGrid's seventh action, ``done``, is unused by the levels and not offered.
ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")

# MiniGrid's cell encoding (minigrid.core.constants: OBJECT_TO_IDX, COLOR_TO_IDX, STATE_TO_IDX), fixed by
# upstream's observation format; kept here so rendering a view imports nothing.
_OBJECTS = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
_COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")
_UNSEEN, _EMPTY, _WALL, _DOOR = 0, 1, 2, 4


def _minigrid() -> Any:
    try:
        import minigrid  # registers the MiniGrid and BabyAI ids with Gymnasium
    except ImportError:
        raise DependencyNotInstalled(
            "StepGym/BabyAI-v0 needs MiniGrid: pip install 'stepgym[babyai]'"
        ) from None
    return minigrid


def babyai_levels() -> tuple[str, ...]:
    """Every BabyAI level id MiniGrid registers (``BabyAI-*``), sorted."""
    _minigrid()
    import gymnasium

    return tuple(
        sorted(
            k
            for k, spec in gymnasium.registry.items()
            if k.startswith("BabyAI-") and str(spec.entry_point).startswith("minigrid.envs.babyai")
        )
    )


def make_level(level: str, max_steps: int) -> Any:
    """The unwrapped MiniGrid level ``level`` with a fixed step limit (upstream's reward reads it)."""
    _minigrid()
    import gymnasium

    return gymnasium.make(level, max_steps=int(max_steps)).unwrapped


def reset_level(env: Any, seed: int) -> dict[str, Any]:
    """Reset ``env`` from ``seed`` (the same seed gives the same layout and mission) and return its observation."""
    with contextlib.redirect_stdout(io.StringIO()):  # upstream prints each rejected layout
        obs, _ = env.reset(seed=int(seed))
    return obs


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def view_sentences(image: np.ndarray, carrying: tuple[str, str] | None = None) -> list[str]:
    """BabyAI-Text's sentences for one partial view.

    ``image`` is MiniGrid's observation image (``view × view × (type, colour, state)``, indexed ``[x, y]``, the
    agent at the bottom middle, facing up); ``carrying`` the (colour, type) of the carried object, if any.
    """
    size = int(image.shape[0])
    ax, ay = size // 2, size - 1
    out: list[str] = []
    if carrying is not None:
        out.append(f"You carry a {carrying[0]} {carrying[1]}")
    for name, dx, dy in (("forward", 0, -1), ("left", -1, 0), ("right", 1, 0)):
        x, y, dist = ax + dx, ay + dy, 1
        while 0 <= x < size and 0 <= y < size:
            kind = int(image[x, y, 0])
            if kind not in (_UNSEEN, _EMPTY):
                if kind == _WALL:
                    out.append(f"You see a wall {_steps(dist)} {name}")
                break
            x, y, dist = x + dx, y + dy, dist + 1
    for x in range(size):
        for y in range(size):
            kind, color, state = (int(v) for v in image[x, y])
            if kind in (_UNSEEN, _EMPTY, _WALL) or (x, y) == (ax, ay):
                continue
            side, ahead = x - ax, ay - y
            if side == 0:
                where = f"{_steps(ahead)} forward"
            else:
                where = f"{_steps(abs(side))} {'right' if side > 0 else 'left'}"
                if ahead:
                    where += f" and {_steps(ahead)} forward"
            if kind == _DOOR:  # "a open" too, as upstream writes it
                out.append(f"You see a {_DOOR_STATES[state]} {_COLORS[color]} door {where}")
            else:
                out.append(f"You see a {_COLORS[color]} {_OBJECTS[kind]} {where}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# The full state
# ---------------------------------------------------------------------------------------------------------------
_NOT_STATE = frozenset({"env", "desc", "desc_move", "desc_fixed", "instr_a", "instr_b", "strict"})
_DESCS = ("desc", "desc_move", "desc_fixed")


def _instr_nodes(instr: Any) -> Iterator[Any]:
    yield instr
    for part in ("instr_a", "instr_b"):
        child = getattr(instr, part, None)
        if child is not None:
            yield from _instr_nodes(child)


class WorldCodec:
    """Reads and writes the full state of one level instance (see the module docstring).

    Built right after a reset: it fixes the order of the level's objects (walls excluded: they never change)
    by their cell, then the contents of boxes. Two codecs built on two copies of one reset level agree on that
    order, so a state read from one copy can be written into the other.
    """

    def __init__(self, env: Any, objects: list[Any] | None = None):
        from minigrid.core.world_object import WorldObj

        self._worldobj = WorldObj
        cells = env.grid.grid
        self.walls = [c if c is not None and c.type == "wall" else None for c in cells]
        if objects is None:
            objects = [c for c in cells if c is not None and c.type != "wall"]
            if env.carrying is not None:
                objects.append(env.carrying)
            k = 0
            while k < len(objects):  # box contents appear when the box is opened
                inside = getattr(objects[k], "contains", None)
                if inside is not None and all(inside is not o for o in objects):
                    objects.append(inside)
                k += 1
        self.objects = objects
        self.index = {id(o): i for i, o in enumerate(objects)}
        self.doors = tuple(i for i, o in enumerate(objects) if o.type == "door")
        self.nodes = tuple(_instr_nodes(env.instrs))
        self.width = int(env.grid.width)
        self._held: tuple | None = None  # the state the env holds, as this codec last wrote or read it

    def for_copy(self, env_copy: Any, memo: dict[int, Any]) -> WorldCodec:
        """The codec of ``env_copy = copy.deepcopy(env, memo)`` (the level this codec was built for), with the
        same object order, so states read from one can be written into the other."""
        return WorldCodec(env_copy, [memo[id(o)] for o in self.objects])

    # -- values of the verifier's fields ---------------------------------------------------------------------
    def _freeze(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, self._worldobj):
            return ("@", self.index[id(v)])
        if isinstance(v, np.ndarray):
            return ("np", tuple(int(x) for x in v.tolist()))
        if isinstance(v, tuple):
            return ("t", tuple(self._freeze(x) for x in v))
        if isinstance(v, list):
            return ("l", tuple(self._freeze(x) for x in v))
        raise TypeError(f"BabyAI state: cannot read a {type(v).__name__} of the verifier")

    def _thaw(self, v: Any) -> Any:
        if not isinstance(v, tuple):
            return v
        tag, body = v
        if tag == "@":
            return self.objects[body]
        if tag == "np":
            return np.array(body)
        if tag == "t":
            return tuple(self._thaw(x) for x in body)
        return [self._thaw(x) for x in body]

    def _node_state(self, node: Any) -> tuple:
        fields = [(k, self._freeze(v)) for k, v in sorted(vars(node).items()) if k not in _NOT_STATE]
        for name in _DESCS:
            desc = getattr(node, name, None)
            if desc is not None:
                fields.append((f"{name}.obj_poss", self._freeze(desc.obj_poss)))
        return tuple(fields)

    # -- read / write ----------------------------------------------------------------------------------------
    def _row(self, o: Any, where: int) -> tuple:
        cur = o.cur_pos
        cur = None if cur is None else (int(cur[0]), int(cur[1]))
        if o.type == "door":
            return (where, cur, bool(o.is_open), bool(o.is_locked))
        return (where, cur)

    def read(self, env: Any, after: tuple | None = None) -> tuple:
        """The full state of ``env`` (a level this codec was built for, or a copy of it).

        ``after``: the state ``env`` held before its last action, written by :meth:`write`. Only the objects
        that action can have touched are then looked at (pick-up, drop and toggle act on the cell ahead of the
        agent; nothing else moves or changes an object): the one there before and after, and the one carried
        before and after. ``tests/test_env_babyai.py`` checks this against a full read of a deep copy.
        """
        index = self.index
        carry = -1 if env.carrying is None else index[id(env.carrying)]
        if after is None:
            where = [-2] * len(
                self.objects
            )  # -2: not in the grid nor carried (inside a box, or a box opened)
            for k, c in enumerate(env.grid.grid):
                if c is not None and c.type != "wall":
                    where[index[id(c)]] = k
            if carry >= 0:
                where[carry] = -1
            objs = tuple(self._row(o, where[i]) for i, o in enumerate(self.objects))
        else:
            ahead = self.ahead(after)
            rows = list(after[4])
            cell = env.grid.grid[ahead]
            now = -1 if cell is None or cell.type == "wall" else index[id(cell)]
            touched = {i for i, row in enumerate(rows) if row[0] == ahead}
            touched.update(i for i in (after[3], now, carry) if i >= 0)
            for i in touched:
                rows[i] = self._row(self.objects[i], ahead if i == now else (-1 if i == carry else -2))
            objs = tuple(rows)
        verifier = tuple(self._node_state(n) for n in self.nodes)
        ax, ay = env.agent_pos
        state = (int(ax), int(ay), int(env.agent_dir), carry, objs, verifier)
        self._held = state
        return state

    def write(self, env: Any, state: tuple) -> None:
        """Put ``state`` into ``env`` (the private copy the solver steps; never the env an agent plays).

        Only what differs from the state ``env`` holds (the last one this codec wrote into it or read from it) is
        written."""
        ax, ay, direction, carry, objs, verifier = state
        grid = env.grid.grid
        held = self._held
        if held is None:
            grid[:] = self.walls
            changed: Any = range(len(objs))
        else:
            old = held[4]
            changed = [i for i, row in enumerate(objs) if row != old[i]]
            for i in changed:  # first lift every object that moves, then put each down
                k = old[i][0]
                if k >= 0 and grid[k] is self.objects[i]:
                    grid[k] = None
        for i in changed:
            o, row = self.objects[i], objs[i]
            if row[0] >= 0:
                grid[row[0]] = o
            o.cur_pos = None if row[1] is None else np.array(row[1])
            if len(row) == 4:
                o.is_open, o.is_locked = row[2], row[3]
        env.carrying = self.objects[carry] if carry >= 0 else None
        env.agent_pos = (ax, ay)
        env.agent_dir = direction
        env.step_count = 0
        if held is None or held[5] != verifier:
            for node, fields in zip(self.nodes, verifier, strict=True):
                for name, value in fields:
                    if name.endswith(".obj_poss"):
                        getattr(node, name.split(".")[0]).obj_poss = self._thaw(value)
                    else:
                        setattr(node, name, self._thaw(value))
        self._held = state

    def ahead(self, state: tuple) -> int:
        """The grid index of the cell ahead of the agent in ``state``."""
        dx, dy = ((1, 0), (0, 1), (-1, 0), (0, -1))[state[2]]
        return (state[1] + dy) * self.width + state[0] + dx

    def cell(self, where: int) -> tuple[int, int]:
        """The (x, y) of a grid index."""
        return where % self.width, where // self.width

    def key(self, state: tuple) -> str:
        """A readable, exact string of ``state`` (``schema.STATE_KEY``)."""
        ax, ay, direction, carry, objs, verifier = state
        parts = [f"agent={ax},{ay},{direction}", f"carry={carry}"]
        for i, row in enumerate(objs):
            o = self.objects[i]
            text = f"{o.color} {o.type}@{row[0]}"
            if row[1] is None:
                text += "~-"
            elif row[0] < 0 or row[1] != self.cell(row[0]):  # cur_pos is the cell itself, unless said
                text += f"~{row[1][0]},{row[1][1]}"
            if len(row) == 4:
                text += ":locked" if row[3] else (":open" if row[2] else ":closed")
            parts.append(text)
        parts.append("verifier=" + repr(verifier))
        return ";".join(parts)
