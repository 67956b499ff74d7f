"""The Sokoban rules on a fixed level: states, moves, gym-sokoban's rewards and the text grid.

A :class:`Level` is the immovable part of a room (walls, floor, targets) with cells numbered row-major
(``index = row * width + col``). A state is ``(player, boxes)``: the player's cell and the sorted tuple of the
boxes' cells, hashable and exact (it is the env's ``STATE_KEY``). :meth:`Level.move` applies one of the four
actions as gym-sokoban 0.0.6's ``SokobanEnv.step`` applies its push actions 1–4 (the actions RAGEN and
verl-agent send): walk onto a free cell, push a box when the cell behind it is free, otherwise stay.

Text symbols are RAGEN's and verl-agent's: ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on
target, ``P`` player, ``S`` player on target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ACTIONS", "SYMBOLS", "Level", "State"]

#: The action words, in gym-sokoban's order (its actions 1-4: push up, down, left, right).
ACTIONS = ("up", "down", "left", "right")
#: gym-sokoban room_state code -> text symbol (6: the player on a target, RAGEN's extra code).
SYMBOLS = {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S"}

# gym-sokoban's reward constants (SokobanEnv.__init__)
STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
FINISHED = 10.0

State = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class Level:
    """The fixed part of a room. ``walls[i]`` is True for a wall cell; ``targets`` the target cells."""

    height: int
    width: int
    walls: tuple[bool, ...]
    targets: frozenset[int]
    deltas: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "deltas", (-self.width, self.width, -1, 1))

    @classmethod
    def from_rooms(
        cls, fixed: tuple[tuple[int, ...], ...], state: tuple[tuple[int, ...], ...]
    ) -> tuple[Level, State]:
        """The level and the state of gym-sokoban's ``room_fixed`` / ``room_state`` arrays (or nested tuples)."""
        height, width = len(fixed), len(fixed[0])
        flat = [int(v) for row in fixed for v in row]
        cells = [int(v) for row in state for v in row]
        level = cls(
            height, width, tuple(v == 0 for v in flat), frozenset(i for i, v in enumerate(flat) if v == 2)
        )
        player = cells.index(5)
        boxes = tuple(i for i, v in enumerate(cells) if v in (3, 4))
        return level, (player, boxes)

    def cell(self, row: int, col: int) -> int:
        return row * self.width + col

    def xy(self, index: int) -> tuple[int, int]:
        return divmod(index, self.width)

    # -- rules ----------------------------------------------------------------------------------------------
    def move(self, state: State, action: int) -> tuple[State, bool, bool]:
        """``(next state, player moved, box moved)`` for action index ``action`` (0 up, 1 down, 2 left, 3 right).

        The border of a generated room is wall, so a step never leaves the grid; a room given by hand must be
        closed by walls too (:class:`~stepgym.envs.sokoban.SokobanEnv` checks it)."""
        player, boxes = state
        d = self.deltas[action]
        nxt = player + d
        if self.walls[nxt]:
            return state, False, False
        if nxt in boxes:
            beyond = nxt + d
            if self.walls[beyond] or beyond in boxes:
                return state, False, False
            moved = tuple(sorted(beyond if b == nxt else b for b in boxes))
            return (nxt, moved), True, True
        return (nxt, boxes), True, False

    def on_target(self, boxes: tuple[int, ...]) -> int:
        return sum(1 for b in boxes if b in self.targets)

    def solved(self, state: State) -> bool:
        """Every box on a target (gym-sokoban: no target left uncovered by a box; as many boxes as targets)."""
        return all(b in self.targets for b in state[1])

    def reward(self, before: State, after: State) -> float:
        """gym-sokoban's ``_calc_reward``: -0.1 a step, +1 when a box reaches a target, -1 when one leaves, +10 when
        solved; summed in upstream's order so the floats are bit-equal."""
        reward = STEP_PENALTY
        was, now = self.on_target(before[1]), self.on_target(after[1])
        if now > was:
            reward += BOX_ON_TARGET
        elif now < was:
            reward += BOX_OFF_TARGET
        if self.solved(after):
            reward += FINISHED
        return reward

    # -- text -----------------------------------------------------------------------------------------------
    def codes(self, state: State) -> list[list[int]]:
        """The state as gym-sokoban codes (6 for the player on a target, as RAGEN renders it)."""
        player, boxes = state
        box_set = set(boxes)
        rows = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                i = r * self.width + c
                if self.walls[i]:
                    code = 0
                elif i == player:
                    code = 6 if i in self.targets else 5
                elif i in box_set:
                    code = 3 if i in self.targets else 4
                else:
                    code = 2 if i in self.targets else 1
                row.append(code)
            rows.append(row)
        return rows

    def render(self, state: State) -> str:
        """The grid as text, one line per row."""
        return "\n".join("".join(SYMBOLS[c] for c in row) for row in self.codes(state))

    def state_key(self, state: State) -> str:
        """``STATE_KEY``: the player's and the boxes' (row, col), boxes sorted; equal iff the states are."""
        player, boxes = state
        pr, pc = self.xy(player)
        return f"player=({pr},{pc});boxes=" + ",".join("({},{})".format(*self.xy(b)) for b in boxes)

    def subgoal_key(self, state: State) -> str:
        """``SUBGOAL_KEY``: the boxes alone, and how many are on targets (the player's walk between pushes is
        one class)."""
        boxes = state[1]
        return f"on_target={self.on_target(boxes)}/{len(boxes)};boxes=" + ",".join(
            "({},{})".format(*self.xy(b)) for b in boxes
        )
