"""StepGym/BabyAI-v0 speed: the env beside MiniGrid stepped directly, and the solver's time per state, in one run.

Measured on the same levels, seeds and action sequences (a uniformly random policy over the six actions):

* **upstream**: MiniGrid's level stepped directly (``gymnasium.make(level).unwrapped.step(int)``), its observation
  rendered to BabyAI-Text's sentences by nothing (the raw engine's speed);
* **stepgym**: ``gym.make("StepGym/BabyAI-v0", level=...)`` stepped with the action words: the text, the full state
  key and the expert (the solver's optimal action, one search per state not seen before in the episode) in every
  info; and the same under ``ValueWrapper`` (the value labels too);
* **solver**: the time of one search from a fresh solver (no cache) at states along random walks, the stepped
  actions it needed, and the share of states whose value it proves within the default budget (the rest get the
  bot's completion as a bound; that time is reported apart).

Run: ``python benchmarks/babyai_bench.py [--episodes 20] [--states 40] [--out FILE]`` (``nice -n 10`` on a shared
machine). Prints a Markdown report; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import platform
import time
from pathlib import Path

import numpy as np

LEVELS = (
    "BabyAI-GoToLocal-v0",
    "BabyAI-GoToObj-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PutNextLocal-v0",
    "BabyAI-GoTo-v0",
)


def _actions(seed: int, n: int) -> list[int]:
    return [int(a) for a in np.random.default_rng(seed).integers(6, size=n)]


def bench_upstream(level: str, episodes: int, max_steps: int) -> tuple[int, float]:
    import gymnasium as gym
    import minigrid  # noqa: F401 - registers the BabyAI levels

    env = gym.make(level, max_steps=max_steps).unwrapped
    steps, elapsed = 0, 0.0
    for ep in range(episodes):
        with contextlib.redirect_stdout(io.StringIO()):
            env.reset(seed=ep)
        t0 = time.perf_counter()
        for a in _actions(ep, max_steps):
            _, _, terminated, truncated, _ = env.step(a)
            steps += 1
            if terminated or truncated:
                break
        elapsed += time.perf_counter() - t0
    return steps, elapsed


def bench_stepgym(level: str, episodes: int, max_steps: int, values: bool) -> tuple[int, float, float]:
    import gymnasium as gym

    import stepgym  # noqa: F401 - registers the envs
    from stepgym.envs.babyai.engine import ACTIONS
    from stepgym.values import ValueWrapper

    env = gym.make("StepGym/BabyAI-v0", level=level, max_steps=max_steps)
    if values:
        env = ValueWrapper(env)
    steps, elapsed, resets = 0, 0.0, 0.0
    for ep in range(episodes):
        t0 = time.perf_counter()
        env.reset(options={"task_id": f"{level}/{ep}"})
        resets += time.perf_counter() - t0
        t0 = time.perf_counter()
        for a in _actions(ep, max_steps):
            _, _, terminated, truncated, _ = env.step(ACTIONS[a])
            steps += 1
            if terminated or truncated:
                break
        elapsed += time.perf_counter() - t0
    env.close()
    return steps, elapsed, resets / episodes


def bench_solver(level: str, states: int, budget: int) -> dict[str, float]:
    from stepgym.envs.babyai.engine import WorldCodec, make_level, reset_level
    from stepgym.envs.babyai.solver import BotFollower, Solver

    live = make_level(level, 10**6)
    times, generated, exact, bot_times = [], [], 0, []
    seed = 0
    while len(times) < states:
        reset_level(live, seed)
        codec = WorldCodec(live)
        played: list[int] = []
        for k, a in enumerate(_actions(10_000 + seed, 12)):
            if k % 4 == 0 and len(times) < states:
                memo: dict = {}
                sim = copy.deepcopy(live, memo)
                solver = Solver(sim, codec.for_copy(sim, memo), budget)
                t0 = time.perf_counter()
                sol = solver.solve(codec.read(live))
                times.append(time.perf_counter() - t0)
                generated.append(sol.generated)
                exact += sol.exact
                if not sol.exact:
                    bot = BotFollower(make_level(level, 10**6), seed)
                    t0 = time.perf_counter()
                    bot.completion(played, 1_000)
                    bot_times.append(time.perf_counter() - t0)
            _, _, terminated, _, _ = live.step(a)
            played.append(a)
            if terminated:
                break
        seed += 1
    ms = np.array(times) * 1e3
    return {
        "states": len(times),
        "median_ms": float(np.median(ms)),
        "p90_ms": float(np.percentile(ms, 90)),
        "max_ms": float(ms.max()),
        "median_generated": float(np.median(generated)),
        "exact_share": exact / len(times),
        "bot_bound_median_ms": float(np.median(bot_times) * 1e3) if bot_times else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=20, help="random-policy episodes per level and side")
    ap.add_argument("--max-steps", type=int, default=64, help="step limit of every episode")
    ap.add_argument("--states", type=int, default=40, help="solver timings per level")
    ap.add_argument("--levels", default=",".join(LEVELS), help="comma-separated BabyAI level ids")
    ap.add_argument("--out", default="", help="also write the report to this file")
    args = ap.parse_args(argv)
    import inspect

    from stepgym.envs.babyai.env import BabyAIEnv

    budget_default = int(inspect.signature(BabyAIEnv).parameters["search_budget"].default)
    lines = [
        f"# StepGym/BabyAI-v0 benchmark ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
        f"{args.episodes} random-policy episodes per level, at most {args.max_steps} steps; solver budget "
        f"{budget_default} stepped actions per state.",
        "",
        "| level | upstream steps/s | stepgym steps/s | ratio | with values steps/s | stepgym reset ms |",
        "|---|---|---|---|---|---|",
    ]
    levels = [lv for lv in args.levels.split(",") if lv]
    for level in levels:
        n_up, t_up = bench_upstream(level, args.episodes, args.max_steps)
        n_sg, t_sg, reset = bench_stepgym(level, args.episodes, args.max_steps, values=False)
        n_v, t_v, _ = bench_stepgym(level, args.episodes, args.max_steps, values=True)
        up, sg, vv = n_up / t_up, n_sg / t_sg, n_v / t_v
        lines.append(
            f"| {level} | {up:,.0f} | {sg:,.0f} | {up / sg:.1f}x slower | {vv:,.0f} | {reset * 1e3:.1f} |"
        )
        print(lines[-1], flush=True)
    lines += [
        "",
        "Solver, one search from a fresh solver (no cache) at states along random walks:",
        "",
        "| level | states | exact | median ms | p90 ms | max ms | median actions stepped | bot bound median ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level in levels:
        s = bench_solver(level, args.states, budget_default)
        lines.append(
            f"| {level} | {s['states']} | {s['exact_share']:.0%} | {s['median_ms']:.1f} | {s['p90_ms']:.1f} | "
            f"{s['max_ms']:.1f} | {s['median_generated']:.0f} | {s['bot_bound_median_ms']:.0f} |"
        )
        print(lines[-1], flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
