"""Room generation by reverse play, drawing exactly as gym-sokoban 0.0.6's ``envs/room_utils.py`` draws.

gym-sokoban (Schrader, 2018; the generator of DeepMind's I2A paper) builds a room in three stages, each a pure
function of two random streams, Python's ``random`` module (the topology) and NumPy's legacy global RNG (where the
player and the targets go):

1. **topology** — a random walk of ``num_steps`` steps from a random cell; at each step the direction changes with
   probability ``p_change_directions`` and one of five 3×3 masks is stamped as floor; the border is wall;
2. **placement** — the player, then ``num_boxes`` targets, each on a uniformly drawn free floor cell (a box starts
   on each target);
3. **reverse play** — a depth-first search from that solved state that *pulls* boxes (the player walks, and
   drags a box standing behind it); every state gets the score ``pulls on the path × summed box displacement``
   (0 while a target is covered by a box or the player) and the first state of the highest score is the room.

Upstream draws from the *global* RNGs (``random.seed(s); np.random.seed(s)`` before ``reset()`` is how RAGEN and
verl-agent make a room from a seed). This module draws the same numbers in the same order from *local*
generators (``random.Random(seed)`` and ``np.random.RandomState(seed)``), so :func:`generate_room` with a seed
returns the very room upstream returns after seeding its globals with it (``tests/test_env_sokoban.py`` checks
it against the installed gym-sokoban), and never touches global state.

Departures, each an option whose default is upstream's:

* ``search_depth`` is upstream's hard-coded ``ttl=300`` of the reverse-play search (RAGEN exposes it with the
  same name; its sample configs use 10 to 300);
* upstream's ``SokobanEnv.reset`` retries a failed generation (``RuntimeError``: too few floor cells;
  ``RuntimeWarning``: no state with a positive score in ``tries`` topologies) by recursion, forever, drawing on
  from the same streams. :func:`generate_room` retries the same way (so the rooms stay equal) but at most
  ``max_attempts`` times, then raises :class:`RoomGenerationError` naming the settings — deterministically, since
  the streams are seeded.

Departure from RAGEN (not from gym-sokoban): RAGEN re-seeds a failed generation with ``hash(str(seed))``, which
depends on the interpreter's string-hash salt, and adds a random player walk after reverse play; neither is done
here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

__all__ = ["Room", "RoomGenerationError", "generate_room", "reverse_play", "room_topology"]

# Room cell codes, gym-sokoban's: room_fixed holds 0/1/2, room_state all of them.
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER = 0, 1, 2, 3, 4, 5

_MASKS = (
    ((0, 0, 0), (1, 1, 1), (0, 0, 0)),
    ((0, 1, 0), (0, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (1, 1, 0)),
    ((0, 0, 0), (0, 1, 1), (0, 1, 0)),
)
_DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))
# reverse play's move deltas (upstream's CHANGE_COORDINATES of room_utils): up, down, left, right
_CHANGE = ((-1, 0), (1, 0), (0, -1), (0, 1))
_MAX_EXPLORED = 300_000  # upstream's cap on the reverse-play search's explored states


class RoomGenerationError(RuntimeError):
    """No room could be generated with these settings within the allowed attempts."""


@dataclass(frozen=True)
class Room:
    """A generated room: ``fixed`` (0 wall, 1 floor, 2 target) and ``state`` (gym-sokoban's ``room_state``:
    0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player), both as tuples of row tuples, and how many
    generation attempts it took (1 unless upstream's reset would have retried)."""

    fixed: tuple[tuple[int, ...], ...]
    state: tuple[tuple[int, ...], ...]
    attempts: int = 1


def room_topology(
    dim: tuple[int, int], p_change_directions: float, num_steps: int, rng: random.Random
) -> list[list[int]]:
    """Stage 1: the floor plan (1 floor, 0 wall) from a random walk stamping 3×3 masks (upstream's
    ``room_topology_generation``, drawing ``rng.sample`` / ``rng.randint`` / ``rng.random`` as it does)."""
    dim_x, dim_y = dim
    direction = rng.sample(_DIRECTIONS, 1)[0]
    px = rng.randint(1, dim_x - 1)
    py = rng.randint(1, dim_y - 1)
    level = [[0] * dim_y for _ in range(dim_x)]
    for _ in range(num_steps):
        if rng.random() < p_change_directions:
            direction = rng.sample(_DIRECTIONS, 1)[0]
        px = max(min(px + direction[0], dim_x - 2), 1)
        py = max(min(py + direction[1], dim_y - 2), 1)
        mask = rng.sample(_MASKS, 1)[0]
        for i in range(3):
            row = level[px - 1 + i]
            for j in range(3):
                row[py - 1 + j] += mask[i][j]
    for x in range(dim_x):
        for y in range(dim_y):
            border = x in (0, dim_x - 1) or y in (0, dim_y - 1)
            level[x][y] = 1 if level[x][y] > 0 and not border else 0
    return level


def _place(level: list[list[int]], num_boxes: int, np_rng: np.random.RandomState) -> list[list[int]]:
    """Stage 2: the player (5), then the targets (2), on floor cells drawn in row-major order (upstream's
    ``place_boxes_and_player`` without its second player)."""
    room = [row[:] for row in level]
    floor = [(x, y) for x, row in enumerate(room) for y, v in enumerate(row) if v == FLOOR]
    if len(floor) <= num_boxes + 1:
        raise RuntimeError(f"not enough free spots (#{len(floor)}) to place 1 player and {num_boxes} boxes")
    x, y = floor[int(np_rng.randint(len(floor)))]
    room[x][y] = PLAYER
    for _ in range(num_boxes):
        free = [(x, y) for x, row in enumerate(room) for y, v in enumerate(row) if v == FLOOR]
        x, y = free[int(np_rng.randint(len(free)))]
        room[x][y] = TARGET
    return room


def reverse_play(
    fixed: list[list[int]], player: tuple[int, int], targets: list[tuple[int, int]], search_depth: int
) -> tuple[int, tuple[int, int], list[tuple[int, int]]]:
    """Stage 3: upstream's reverse-play depth-first search from the solved state, as it runs.

    Returns ``(best score, player, box positions)``. The search visits states in upstream's order (pull up,
    down, left, right, then walk up, down, left, right), each state at most once (a state is the player, the
    boxes and which boxes were ever pulled: upstream hashes the whole grid, where a pulled box is a 3 and an
    unmoved one a 4), stops below depth ``search_depth - 1`` or at 300,000 explored states, and keeps the first
    state of the highest score. Upstream passes its root's ``last_pull`` to every child, so its ``box_swaps``
    counts the pulls on the path; so does this. The search is iterative (no recursion limit).
    """
    width = len(fixed[0])
    n = len(fixed) * width
    walkable = [fixed[i // width][i % width] != WALL for i in range(n)]
    is_target = [fixed[i // width][i % width] == TARGET for i in range(n)]
    deltas = [dx * width + dy for dx, dy in _CHANGE]
    origin = [x * width + y for x, y in targets]  # box i started on (and is scored against) target i
    origin_xy = list(targets)

    explored: set[tuple[int, tuple[int, ...]]] = set()
    best_score = -1
    best: tuple[int, tuple[int, ...]] = (player[0] * width + player[1], tuple(origin))

    # Each frame: [player, boxes (by box index), pulled flags, pulls so far, ttl, next action].
    boxes0 = list(origin)
    stack: list[list] = []

    def enter(p: int, boxes: list[int], pulled: list[bool], swaps: int, ttl: int) -> None:
        nonlocal best_score, best
        ttl -= 1
        if ttl <= 0 or len(explored) >= _MAX_EXPLORED:
            return
        key = (p, tuple(sorted(b * 2 + f for b, f in zip(boxes, pulled, strict=True))))
        if key in explored:
            return
        uncovered = not is_target[p] and not any(is_target[b] for b in boxes)
        if uncovered:
            disp = 0
            for b, (ox, oy) in zip(boxes, origin_xy, strict=True):
                disp += abs(b // width - ox) + abs(b % width - oy)
            score = swaps * disp
        else:
            score = 0
        if score > best_score:
            best_score = score
            best = (p, tuple(boxes))
        explored.add(key)
        stack.append([p, boxes, pulled, swaps, ttl, 0])

    enter(player[0] * width + player[1], boxes0, [False] * len(boxes0), 0, search_depth)
    while stack:
        frame = stack[-1]
        action = frame[5]
        if action == 8:
            stack.pop()
            continue
        frame[5] = action + 1
        p, boxes, pulled, swaps, ttl = frame[0], frame[1], frame[2], frame[3], frame[4]
        d = deltas[action % 4]
        nxt = p + d
        if not walkable[nxt] or nxt in boxes:
            # upstream still recurses into the unchanged state (a copy): it is already explored, so the call
            # only spends its ttl check; nothing to do
            continue
        child_boxes, child_pulled, child_swaps = boxes, pulled, swaps
        if action < 4:
            behind = p - d
            if behind in boxes:
                i = boxes.index(behind)
                child_boxes = boxes[:]
                child_boxes[i] = p
                child_pulled = pulled[:]
                child_pulled[i] = True
                child_swaps = swaps + 1
        enter(nxt, child_boxes, child_pulled, child_swaps, ttl)
    p, boxes = best
    return best_score, (p // width, p % width), [(b // width, b % width) for b in boxes]


def generate_room(
    seed: int,
    dim: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    *,
    num_steps: int | None = None,
    p_change_directions: float = 0.35,
    tries: int = 4,
    search_depth: int = 300,
    max_attempts: int = 100,
) -> Room:
    """The room gym-sokoban 0.0.6 generates after ``random.seed(seed); np.random.seed(seed)``.

    ``num_steps`` defaults to upstream's ``SokobanEnv`` choice, ``int(1.7 * (rows + cols))``. A failed attempt is
    retried from the same streams, as upstream's ``reset`` does, at most ``max_attempts`` times in all.
    """
    dim = (int(dim[0]), int(dim[1]))
    if num_steps is None:
        num_steps = int(1.7 * (dim[0] + dim[1]))
    rng = random.Random(seed)
    np_rng = np.random.RandomState(seed)
    for attempt in range(1, max_attempts + 1):
        try:
            fixed, state = _generate_once(
                dim, p_change_directions, num_steps, num_boxes, tries, search_depth, rng, np_rng
            )
        except RuntimeError:
            continue
        return Room(fixed, state, attempt)
    raise RoomGenerationError(
        f"no Sokoban room after {max_attempts} attempts for seed {seed} with dim_room={dim}, num_boxes={num_boxes}, "
        f"num_gen_steps={num_steps}, search_depth={search_depth}: use a larger room, fewer boxes or more steps"
    )


def _generate_once(
    dim: tuple[int, int],
    p_change_directions: float,
    num_steps: int,
    num_boxes: int,
    tries: int,
    search_depth: int,
    rng: random.Random,
    np_rng: np.random.RandomState,
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """One call of upstream's ``generate_room``: ``tries`` topologies; RuntimeError when none scores above 0."""
    score = 0
    for _ in range(tries):
        level = room_topology(dim, p_change_directions, num_steps, rng)
        room = _place(level, num_boxes, np_rng)  # RuntimeError propagates, as upstream's does
        fixed = [[FLOOR if v == PLAYER else v for v in row] for row in room]
        player = next((x, y) for x, row in enumerate(room) for y, v in enumerate(row) if v == PLAYER)
        targets = [(x, y) for x, row in enumerate(fixed) for y, v in enumerate(row) if v == TARGET]
        score, player, boxes = reverse_play(fixed, player, targets, search_depth)
        if score > 0:
            break
    if score <= 0:
        raise RuntimeError("generated a room with score 0")
    state = [row[:] for row in fixed]
    for x, y in boxes:
        state[x][y] = BOX  # upstream turns every box into a 4 (its best rooms have no box on a target)
    state[player[0]][player[1]] = PLAYER
    return tuple(map(tuple, fixed)), tuple(map(tuple, state))
