"""The cost of the ground-truth value labels (``ValueWrapper``), per env, and ALFWorld's share of exact labels.

Every env plays the same rollouts three times in one process: the plain annotated env, the env wrapped in
``ValueWrapper`` with its cache, and wrapped with ``cache_size=0`` (every step runs the oracle); ``--repeat`` times
(5), interleaved, and the medians are printed with each run's ratio. Times are the process's CPU time (the shared
machine's load comes in bursts).
Before each variant the per-state caches of ALFWorld's parsed games (shared by the engines of a process) are
emptied, so every variant pays for its first visits. Rollouts come in
groups, as a GRPO trainer plays them: per task ``--group`` rollouts, the first the env's expert, the others the
expert with probability 0.7 and a uniformly random admissible action otherwise (seeded, so the three variants
play identical actions; the wrapper only adds keys). Printed per env: seconds per annotated step of each variant,
the ratio labelled / plain, the cache hit rate and, for ALFWorld, the share of oracle calls whose search proved the
value within the budget (the rest are the expert's upper bounds, or unknown) and the share of exact step labels.

``--fresh`` measures ALFWorld's labels as a trainer meets them: each variant (plain, labelled) plays in a new
process (the expert's library imported before the clock starts, as both pay it alike), ``--group`` envs, one
``ValueWrapper`` each as ``GroupEnv`` wraps its copies, play every ``--fresh-games``-th game in lockstep, resets
included, first play (nothing parsed or cached before); ``--repeat`` pairs, the order alternated; it prints each
pair's ratio labelled / plain, the median, a digest of every label (equal digests: equal labels) and the load.

Run: ``STEPGYM_DATA=../shared/data python benchmarks/values_bench.py --alfworld-games 10 --budget 500``
(``--alfworld-games 0`` plays every valid_seen game). Envs without their data are skipped with a note. A labelled
warm-up pass runs first, so caches the variants share (WebShop's search results, parsed ALFWorld games) are
warm for all three; each variant's own value cache and oracle start empty.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.wrappers import ValueWrapper

Policy = Callable[[dict[str, Any], np.random.Generator, bool], str]


def admissible_policy(info: dict[str, Any], rng: np.random.Generator, expert_only: bool) -> str:
    expert = info.get(schema.EXPERT_ACTION)
    acts = info.get(schema.ADMISSIBLE_ACTIONS) or []
    if expert and (expert_only or rng.random() < 0.7 or not acts):
        return expert
    return acts[int(rng.integers(len(acts)))] if acts else "look"


def webshop_policy(info: dict[str, Any], rng: np.random.Generator, expert_only: bool) -> str:
    expert = info.get(schema.EXPERT_ACTION) or "click[back to search]"
    clicks = [c for c in info[schema.WEBSHOP_AVAILABLE]["clickables"] if c != "search"]
    if expert_only or rng.random() < 0.7 or not clicks:
        return expert
    return f"click[{clicks[int(rng.integers(len(clicks)))]}]"


def searchqa_policy(info: dict[str, Any], rng: np.random.Generator, expert_only: bool) -> str:
    expert = info.get(schema.EXPERT_ACTION) or "<answer>unknown</answer>"
    if expert_only or rng.random() < 0.7:
        return expert
    return ["<search>history of the world</search>", "<answer>no idea</answer>", "junk"][int(rng.integers(3))]


def play(env: gym.Env, tasks: list[str], group: int, policy: Policy, seed: int) -> tuple[float, int, list]:
    """CPU seconds of this process spent in reset/step (``time.process_time``: the machine is shared, and other
    jobs' bursts would swamp wall times of steps this short), the number of steps, and every step's info (for the
    label statistics)."""
    rng = np.random.default_rng(seed)
    gc.collect()
    gc.disable()  # as timeit does: a collection of the big heaps (catalogue, games) would land in one variant
    try:
        return _play(env, tasks, group, policy, seed, rng)
    finally:
        gc.enable()


def _play(env: gym.Env, tasks: list[str], group: int, policy: Policy, seed: int, rng: np.random.Generator):
    spent, steps, infos = 0.0, 0, []
    for task in tasks:
        for g in range(group):
            t0 = time.process_time()
            obs, info = env.reset(seed=seed + g, options={"task_id": task})
            spent += time.process_time() - t0
            while True:
                action = policy(info, rng, g == 0)
                t0 = time.process_time()
                obs, reward, terminated, truncated, info = env.step(action)
                spent += time.process_time() - t0
                steps += 1
                infos.append(info)
                if terminated or truncated:
                    break
    return spent, steps, infos


def bench(
    name: str,
    make: Callable[[], gym.Env],
    tasks: list[str],
    group: int,
    policy: Policy,
    budget: int,
    labelled_warmup: bool = True,
    repeat: int = 1,
) -> None:
    # warm-up, labelled: the caches the variants share (WebShop's search results, parsed games, the reward's
    # title parses) hold the oracle's lookups too, so the timed runs compare oracle work, not first searches.
    # ALFWorld shares only its parsed games, which a plain warm-up loads as well.
    play(ValueWrapper(make(), budget=budget) if labelled_warmup else make(), tasks, group, policy, 0)
    times: dict[str, list[float]] = {"plain": [], "cached": [], "uncached": []}
    for _ in range(repeat):  # interleaved, so a burst of load on the shared machine hits every variant alike
        cold()
        plain_s, n, _ = play(make(), tasks, group, policy, 0)
        cold()
        cached = ValueWrapper(make(), budget=budget)
        cached_s, n2, infos = play(cached, tasks, group, policy, 0)
        cold()
        uncached = ValueWrapper(make(), budget=budget, cache_size=0)
        uncached_s, n3, _ = play(uncached, tasks, group, policy, 0)
        for key, t in (("plain", plain_s), ("cached", cached_s), ("uncached", uncached_s)):
            times[key].append(t)
    plain_s, cached_s, uncached_s = (float(np.median(times[k])) for k in ("plain", "cached", "uncached"))
    ratios = [c / p for c, p in zip(times["cached"], times["plain"], strict=True)]
    assert n == n2 == n3, "the wrapper changed the rollouts"
    hits, misses = cached.cache.hits, cached.cache.misses
    exact = sum(bool(i[schema.VALUE_EXACT]) for i in infos) / len(infos)
    classes = [int(np.sign(i[schema.VALUE_GAIN])) for i in infos]
    print(
        f"{name:12s} tasks {len(tasks):3d} x{group} steps {n:5d} | ms/step plain {plain_s / n * 1e3:8.2f}  "
        f"labels+cache {cached_s / n * 1e3:8.2f} ({cached_s / plain_s:6.1f}x)  no cache "
        f"{uncached_s / n * 1e3:8.2f} ({uncached_s / plain_s:6.1f}x) | cache hits {hits / max(1, hits + misses):.0%}"
        f" | exact labels {exact:.1%} | steps -1/0/+1 {classes.count(-1)}/{classes.count(0)}/{classes.count(1)}"
    )
    if repeat > 1:
        print(
            f"{'':12s} medians of {repeat} interleaved runs; labels+cache / plain per run: "
            + ", ".join(f"{r:.2f}x" for r in ratios)
        )
    stats = getattr(cached.oracle, "stats", None)
    if stats:
        searched = stats["searches"]
        print(
            f"{'':12s} oracle searches {searched} (uncached states): exact within budget {budget}: "
            f"{stats['exact'] / max(1, searched):.1%}, expert upper bound {stats['bound'] / max(1, searched):.1%}, "
            f"unknown {stats['unknown'] / max(1, searched):.1%}; successor states generated "
            f"{stats['generated']} ({stats['generated'] / max(1, searched):.0f} per search)"
        )


def cold() -> None:
    """ALFWorld's parsed games are shared by the engines of a process, with their per-state caches: each variant
    starts with those empty, so every variant's first visit of a state costs what a first visit costs."""
    if "stepgym.envs.alfworld.native.engine" in sys.modules:
        sys.modules["stepgym.envs.alfworld.native.engine"].clear_shared_state_caches()
    if "stepgym.envs.alfworld.values" in sys.modules:
        sys.modules["stepgym.envs.alfworld.values"].clear_shared_work()


# -- ALFWorld's first play in a fresh process -------------------------------------------------------------------
LABEL_KEYS = (
    schema.VALUE_BEFORE,
    schema.VALUE_AFTER,
    schema.VALUE_GAIN,
    schema.VALUE_EXACT,
    schema.VALUE_REACHABLE,
    schema.VALUE_BEST_REWARD,
)


def fresh_games(n_games: int, split: str = "valid_seen") -> list[str]:
    """Every n-th game of ``split`` (``n_games`` of them; 0: all)."""
    ids = gym.make("StepGym/ALFWorld-v0", split=split).unwrapped.task_ids
    return list(ids if n_games <= 0 else ids[:: max(1, len(ids) // n_games)][:n_games])


def fresh_child(variant: str, games: list[str], group: int, steps: int, budget: int) -> dict[str, Any]:
    """One process's first play: ``group`` envs (one ``ValueWrapper`` each when ``variant`` is "labelled", as
    ``GroupEnv`` wraps its copies), every game played by the group in lockstep, resets included. Returns the CPU
    seconds spent in reset/step, the steps and a digest of every label (the labelled variant)."""
    rng = np.random.default_rng(0)
    # the expert's library parses its logic files on import (~0.5 s, once per process, in both variants alike):
    # imported before the clock starts, so the ratio compares the steps' work, not a one-off import
    from stepgym.envs.alfworld.expert import RobustExpert

    RobustExpert()

    def make() -> gym.Env:
        env = gym.make("StepGym/ALFWorld-v0", split="valid_seen", max_steps=steps).unwrapped
        return ValueWrapper(env, budget=budget) if variant == "labelled" else env

    envs = [make() for _ in range(group)]
    digest, per_game = hashlib.sha256(), {}
    spent, n = 0.0, 0
    gc.collect()
    for game in games:
        game_digest = hashlib.sha256()
        t0 = time.process_time()
        infos = [env.reset(seed=g, options={"task_id": game})[1] for g, env in enumerate(envs)]
        spent += time.process_time() - t0
        live = list(range(group))
        while live:
            for g in list(live):
                action = admissible_policy(infos[g], rng, g == 0)
                t0 = time.process_time()
                _, _, terminated, truncated, infos[g] = envs[g].step(action)
                spent += time.process_time() - t0
                n += 1
                labels = json.dumps([infos[g].get(k) for k in LABEL_KEYS]).encode()
                digest.update(labels)
                game_digest.update(labels)
                if terminated or truncated:
                    live.remove(g)
        per_game[game] = game_digest.hexdigest()[:16]
    return {"variant": variant, "seconds": spent, "steps": n, "digest": digest.hexdigest(), "games": per_game}


def fresh_bench(args: argparse.Namespace, budget: int) -> None:
    """``--fresh``: the plain and the labelled first play, each in its own new process, ``--repeat`` times with
    the order alternated (a burst of load hits both alike); prints each pair's ratio and the median."""
    games = fresh_games(args.fresh_games)
    ratios, plain, labelled = [], [], []
    for r in range(args.repeat):
        got = {}
        for variant in ("plain", "labelled") if r % 2 == 0 else ("labelled", "plain"):
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--fresh-child",
                variant,
                "--budget",
                str(budget),
            ]
            cmd += ["--group", str(args.group), "--alfworld-steps", str(args.alfworld_steps)]
            cmd += ["--fresh-games", str(args.fresh_games)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            got[variant] = json.loads(out.strip().splitlines()[-1])
        plain.append(got["plain"]["seconds"])
        labelled.append(got["labelled"]["seconds"])
        ratios.append(labelled[-1] / plain[-1])
        n = got["plain"]["steps"]
        assert n == got["labelled"]["steps"], "the wrapper changed the rollouts"
    print(
        f"ALFWorld first play, fresh process: {len(games)} valid_seen games x group {args.group}, "
        f"{n} steps, resets included | ms/step plain {np.median(plain) / n * 1e3:.2f}  labelled "
        f"{np.median(labelled) / n * 1e3:.2f} | labelled / plain median {np.median(ratios):.2f}x "
        f"(runs: {', '.join(f'{x:.2f}x' for x in ratios)}) | label digest {got['labelled']['digest'][:16]}"
    )
    print(
        f"load average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"
    )


def _maybe(name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as exc:  # a missing data folder: say so and go on with the other envs
        if type(exc).__name__ not in ("DataNotFoundError", "DependencyNotInstalled"):
            raise
        print(f"{name:12s} skipped: {exc}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--alfworld-games", type=int, default=10, help="every n-th valid_seen game (0: all 140)")
    ap.add_argument("--alfworld-steps", type=int, default=20, help="ALFWorld's step limit in these rollouts")
    ap.add_argument(
        "--budget", type=int, default=None, help="ALFWorld search budget (default: the wrapper's)"
    )
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5, help="interleaved runs of the three variants (medians)")
    ap.add_argument("--tasks", type=int, default=8, help="tasks of the other envs")
    ap.add_argument(
        "--only", default="", help="comma-separated subset: credit,family,alfworld,webshop,searchqa"
    )
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="ALFWorld's first play, each variant in a new process (groups of --group, resets included)",
    )
    ap.add_argument(
        "--fresh-games", type=int, default=20, help="--fresh: every n-th valid_seen game (0: all)"
    )
    ap.add_argument("--fresh-child", choices=("plain", "labelled"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    from stepgym.values import DEFAULT_BUDGET

    budget = DEFAULT_BUDGET if args.budget is None else args.budget
    if args.fresh_child:
        games = fresh_games(args.fresh_games)
        res = fresh_child(args.fresh_child, games, args.group, args.alfworld_steps, budget)
        print(json.dumps(res))
        return
    only = set(filter(None, args.only.split(",")))
    if args.fresh:
        fresh_bench(args, budget)
        return
    print(
        f"# values_bench {time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.processor() or 'cpu'}), "
        f"group {args.group}, ALFWorld budget {budget}"
    )

    def first_tasks(name: str, make: Callable[[], gym.Env], policy: Policy) -> Callable[[], None]:
        """A benchmark of the env's first ``--tasks`` tasks."""
        return lambda: bench(
            name, make, list(make().task_ids[: args.tasks]), args.group, policy, budget, repeat=args.repeat
        )

    def alfworld() -> None:
        steps = args.alfworld_steps
        make = lambda: gym.make("StepGym/ALFWorld-v0", split="valid_seen", max_steps=steps).unwrapped  # noqa: E731
        ids = make().task_ids
        games = ids if args.alfworld_games <= 0 else ids[:: max(1, len(ids) // args.alfworld_games)]
        bench("ALFWorld", make, list(games), args.group, admissible_policy, budget, False, args.repeat)

    runs = {
        "credit": first_tasks(
            "CreditToy", lambda: gym.make("StepGym/CreditToy-v0").unwrapped, admissible_policy
        ),
        "family": first_tasks(
            "CreditFamily",
            lambda: gym.make("StepGym/CreditFamily-v0", horizon=10, n_decisive=3).unwrapped,
            admissible_policy,
        ),
        "webshop": first_tasks(
            "WebShop", lambda: gym.make("StepGym/WebShop-v0", split="test").unwrapped, webshop_policy
        ),
        "searchqa": first_tasks(
            "SearchQA",
            lambda: gym.make("StepGym/SearchQA-v0", dataset="nq", split="test").unwrapped,
            searchqa_policy,
        ),
        "alfworld": alfworld,
    }
    for name, fn in runs.items():
        if not only or name in only:
            _maybe(name, fn)


if __name__ == "__main__":
    main()
