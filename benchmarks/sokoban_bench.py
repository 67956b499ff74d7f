"""StepGym/Sokoban-v0 beside gym-sokoban 0.0.6 in one run: resets, steps, the solver's time per state, the labels.

Printed, per room setting (``--settings``, default 6x6 with one box and 7x7 with two):

* **reset**: stepgym's room generation (local generators) vs gym-sokoban's ``reset()`` after seeding its global
  RNGs with the same seeds (the same rooms: tests/test_env_sokoban.py checks it);
* **step**: the same random action sequences on both; stepgym's env fills every info key (the state keys and the
  optimal expert action included); gym-sokoban's ``step`` renders an RGB frame each step by default
  (``rgb_array``) and a small one with ``tiny_rgb_array``: both are timed, with the ratio to stepgym;
* **solver**: a fresh solver per room, solving the start state (which enumerates and labels every reachable
  state): milliseconds per room and per state;
* **labels on first play**: the same random episodes with the env alone and wrapped in ``ValueWrapper`` (exact
  ``VALUE_*`` keys on every step), each with empty solver caches (first play): seconds per step and the ratio.

Times are the process's CPU time; ``--repeat`` runs (3), medians. The output is what benchmarks/results/
sokoban_bench_<date>.txt holds. Run: ``python benchmarks/sokoban_bench.py`` (needs ``pip install
'stepgym[sokoban]'`` for the gym-sokoban side).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import random
import statistics
import time
import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np

import stepgym  # noqa: F401 - registers the envs
from stepgym.envs.sokoban.game import ACTIONS, Level
from stepgym.envs.sokoban.generation import generate_room
from stepgym.envs.sokoban.solver import SokobanSolver, clear_solver_cache
from stepgym.values import ValueWrapper


def _clock() -> float:
    return time.process_time()


def _median(fn: Callable[[], float], repeat: int) -> float:
    return statistics.median(fn() for _ in range(repeat))


def _upstream_class():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            from gym_sokoban.envs.sokoban_env import SokobanEnv
    return SokobanEnv


def _upstream_reset(env, seed: int) -> None:
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env.reset()
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def bench_setting(dim: tuple[int, int], boxes: int, rooms: int, steps: int, repeat: int) -> None:
    seeds = list(range(rooms))
    rng = np.random.default_rng(0)
    actions = [int(a) for a in rng.integers(4, size=steps)]
    upstream_cls = _upstream_class()
    up = upstream_cls(dim_room=dim, num_boxes=boxes, max_steps=10**9, reset=False)

    def ours_reset() -> float:
        t = _clock()
        for s in seeds:
            generate_room(s, dim, boxes)
        return (_clock() - t) / len(seeds)

    def up_reset() -> float:
        t = _clock()
        for s in seeds:
            _upstream_reset(up, s)
        return (_clock() - t) / len(seeds)

    env = gym.make("StepGym/Sokoban-v0", dim_room=dim, num_boxes=boxes, max_steps=10**9).unwrapped
    per_room = max(1, steps // rooms)

    def ours_step() -> float:
        n, spent = 0, 0.0
        for k, tid in enumerate(env.task_ids[:rooms]):
            env.reset(options={"task_id": tid})
            env.solution()  # the room's table is built at reset; the step's own cost is timed
            t = _clock()
            for a in actions[k * per_room : (k + 1) * per_room]:
                if env.step(ACTIONS[a])[
                    2
                ]:  # solved: start the room again (not timed), as upstream's side does
                    spent += _clock() - t
                    env.reset(options={"task_id": tid})
                    t = _clock()
            spent += _clock() - t
            n += per_room
        return spent / n

    def up_step(mode: str) -> Callable[[], float]:
        def run() -> float:
            n, spent = 0, 0.0
            for k, s in enumerate(seeds):
                _upstream_reset(up, s)
                t = _clock()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for a in actions[k * per_room : (k + 1) * per_room]:
                        if up.step(a + 1, observation_mode=mode)[3].get("all_boxes_on_target"):
                            spent += _clock() - t
                            _upstream_reset(up, s)
                            t = _clock()
                spent += _clock() - t
                n += per_room
            return spent / n

        return run

    def solver_per_room() -> tuple[float, float, float]:
        total_t, total_states = 0.0, 0
        for s in seeds:
            room = generate_room(s, dim, boxes)
            level, start = Level.from_rooms(room.fixed, room.state)
            t = _clock()
            solver = SokobanSolver(level)
            solver.solve(start)
            total_t += _clock() - t
            total_states += solver.states_enumerated
        return total_t / len(seeds), total_t / total_states, total_states / len(seeds)

    def play(labelled: bool) -> float:
        clear_solver_cache()
        e = gym.make("StepGym/Sokoban-v0", dim_room=dim, num_boxes=boxes, max_steps=per_room).unwrapped
        if labelled:
            e = ValueWrapper(e)
        t = _clock()
        n = 0
        for k, tid in enumerate(e.unwrapped.task_ids[:rooms]):
            e.reset(options={"task_id": tid})
            for a in actions[k * per_room : (k + 1) * per_room]:
                _, _, term, trunc, _ = e.step(ACTIONS[a])
                n += 1
                if term or trunc:
                    break
        return (_clock() - t) / n

    r_ours, r_up = _median(ours_reset, repeat), _median(up_reset, repeat)
    s_ours = _median(ours_step, repeat)
    s_up_rgb, s_up_tiny = _median(up_step("rgb_array"), repeat), _median(up_step("tiny_rgb_array"), repeat)
    solver_runs = [solver_per_room() for _ in range(repeat)]
    per_room_t = statistics.median(r[0] for r in solver_runs)
    per_state_t = statistics.median(r[1] for r in solver_runs)
    states = solver_runs[0][2]
    plain = _median(lambda: play(False), repeat)
    labelled = _median(lambda: play(True), repeat)
    name = f"{dim[0]}x{dim[1]}, {boxes} box{'es' if boxes > 1 else ''}"
    print(f"## {name} ({rooms} rooms, {steps} random steps)")
    print(
        f"reset  stepgym {r_ours * 1e3:8.3f} ms   gym-sokoban {r_up * 1e3:8.3f} ms   ratio {r_up / r_ours:6.1f}x"
    )
    print(
        f"step   stepgym {s_ours * 1e6:8.1f} us   gym-sokoban rgb_array {s_up_rgb * 1e6:8.1f} us "
        f"({s_up_rgb / s_ours:5.1f}x)   tiny_rgb_array {s_up_tiny * 1e6:8.1f} us ({s_up_tiny / s_ours:5.2f}x)"
    )
    print(
        f"solver {per_room_t * 1e3:8.3f} ms per room, {states:8.0f} states per room, "
        f"{per_state_t * 1e6:8.2f} us per state"
    )
    print(
        f"labels first play: plain {plain * 1e6:8.1f} us/step   ValueWrapper {labelled * 1e6:8.1f} us/step   "
        f"ratio {labelled / plain:5.2f}x"
    )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--settings", default="6x6x1,7x7x2", help="rows x cols x boxes, comma separated")
    parser.add_argument("--rooms", type=int, default=100, help="rooms per setting")
    parser.add_argument("--steps", type=int, default=4000, help="random steps per setting")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    args = parser.parse_args()
    print(f"# sokoban_bench  {time.strftime('%Y-%m-%d')}  {platform.python_version()}  {platform.machine()}")
    print(
        f"# python benchmarks/sokoban_bench.py --settings {args.settings} --rooms {args.rooms} "
        f"--steps {args.steps} --repeat {args.repeat}; CPU times, medians of {args.repeat}"
    )
    print()
    for setting in args.settings.split(","):
        r, c, b = (int(v) for v in setting.split("x"))
        bench_setting((r, c), b, args.rooms, args.steps, args.repeat)
    print(f"# load average at the end (1/5/15 min): {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
