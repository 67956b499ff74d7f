"""Env executors under the trainer's collector: what spreading env copies over worker processes buys, and costs.

Measured in one run (the numbers quoted in README/docs come from here):

* **ALFWorld groups through the collector** (``stepgym.trainers.collector.Collector``) with the scripted backend
  (a fake policy named as such: uniformly random admissible actions, so the envs dominate the iteration), with the
  in-process executor, a local process pool and Ray actors (``--workers`` each): env steps/s, seconds per
  iteration (resets included), and the ratios to in-process. The same tasks and seeds for every executor (the
  trajectories are identical by construction; the rows are counted to show it), in interleaved rounds.
* **Per-call overhead on WebShop** (``StepGym/WebShop-v0``, text mode, ~1 ms a step): the round trip of one batched
  call that asks every copy for its prompt (one message per worker), and of one batched ``step`` turn, per executor.
* **CPU per env step**: CPU-milliseconds and wall-milliseconds per step of one ALFWorld and one WebShop copy stepped
  in this process with random admissible actions: how many cores an env copy keeps busy at a given step rate.

The driver-side tokenizer is a character-level stand-in (so prompt encoding costs nearly nothing and the env is
what is timed); the model never runs. Ray starts a local instance (usage stats off) unless ``--ray-address`` names
a cluster.

Run: ``STEPGYM_DATA=/path/to/data python benchmarks/workers_bench.py [--groups 4 --group-size 4 --workers 2]``
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import gymnasium as gym
import numpy as np

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.trainers.backends import ScriptedBackend
from stepgym.trainers.collector import Collector
from stepgym.trainers.formats import reply_renderer
from stepgym.trainers.samples import PromptEncoder
from stepgym.workers import EnvRecipe, make_executor
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import TextInterfaceWrapper, get_format

EXECUTORS = ("inprocess", "process", "ray")


class CharTokenizer:
    """A stand-in tokenizer (one id per character): the benchmark times envs, not tokenization."""

    bos_token_id = None
    eos_token_id = 0
    pad_token_id = 0
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [1 + (ord(c) % 255) for c in text]}


def _executor_kwargs(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    if kind != "ray":
        return {}
    return {"num_cpus": args.ray_cpus, "address": args.ray_address or None}


def _collector(kind: str, args: argparse.Namespace) -> Collector:
    fmt = get_format("alfworld")
    tok = CharTokenizer()
    return Collector(
        "StepGym/ALFWorld-v0",
        {"split": "train", "max_steps": args.max_steps},
        fmt,
        history=2,
        group_size=args.group_size,
        encoder=PromptEncoder(tok, max_prompt_tokens=100_000),
        backend=ScriptedBackend(tok, "random", render=reply_renderer(fmt)),
        executor=kind,
        num_workers=args.workers,
        executor_kwargs=_executor_kwargs(kind, args),
    )


def bench_collector(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Every executor plays the same batches; the timed rounds interleave the executors (in-process, pool, Ray,
    in-process, ...) so that a shared machine's changing load falls on all of them alike."""
    cols = {kind: _collector(kind, args) for kind in EXECUTORS}
    out: dict[str, dict[str, float]] = {
        k: {"steps": 0, "seconds": 0.0, "env_seconds": 0.0} for k in EXECUTORS
    }
    try:
        ids = cols["inprocess"].task_ids()
        rng = np.random.default_rng(0)
        batches = [
            [(ids[int(i)], int(rng.integers(2**31 - 1))) for i in rng.choice(len(ids), args.groups)]
            for _ in range(args.iterations + 1)
        ]
        for kind, col in cols.items():  # warm-up: workers up, games parsed
            t0 = time.perf_counter()
            col.collect(batches[0], seed_rng=np.random.default_rng(0))
            out[kind]["startup_s"] = time.perf_counter() - t0
        for batch in batches[1:]:
            for kind, col in cols.items():
                t1 = time.perf_counter()
                ro = col.collect(batch, seed_rng=np.random.default_rng(1))
                out[kind]["seconds"] += time.perf_counter() - t1
                out[kind]["steps"] += len(ro.rows)
                out[kind]["env_seconds"] += ro.stats["env_seconds"]
    finally:
        for col in cols.values():
            col.close()
    for kind, r in out.items():
        r["iteration_s"] = r["seconds"] / args.iterations
        r["steps_per_s"] = r["steps"] / r["seconds"]
        print(
            f"  {kind:9s} {int(r['steps']):5d} steps  {r['steps_per_s']:7.1f} steps/s  "
            f"{r['iteration_s']:6.2f} s/iteration  (first collection, with start-up: {r['startup_s']:.1f} s)",
            flush=True,
        )
    return out


def _random_admissible(info: dict[str, Any], rng: np.random.Generator) -> str:
    adm = [a for a in (info.get(schema.ADMISSIBLE_ACTIONS) or []) if a != "help"] or ["look"]
    return adm[int(rng.integers(len(adm)))]


def bench_call_overhead(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    fmt = get_format("webshop")
    import functools

    recipe = EnvRecipe(
        "StepGym/WebShop-v0",
        {"split": "train"},
        (EnvFeedbackWrapper, functools.partial(TextInterfaceWrapper, fmt=fmt, history_length=2)),
    )
    n = args.webshop_copies
    out: dict[str, dict[str, float]] = {}
    for kind in EXECUTORS:
        ex = make_executor(kind, recipe, n, num_workers=args.workers, **_executor_kwargs(kind, args))
        try:
            slots = list(range(n))
            rng = np.random.default_rng(0)
            resets = ex.call("reset", slots, [(s, None) for s in slots])
            infos = [info for _, info in resets]
            ex.call("attr", slots, ["prompt"] * n)  # warm-up
            t0 = time.perf_counter()
            for _ in range(args.webshop_calls):
                ex.call("attr", slots, ["prompt"] * n)
            attr_s = (time.perf_counter() - t0) / args.webshop_calls
            step_s, turns = 0.0, 0
            for _ in range(args.webshop_calls):
                actions = [_random_admissible(i, rng) for i in infos]
                t1 = time.perf_counter()
                res = ex.call("step", slots, actions)
                step_s += time.perf_counter() - t1
                turns += 1
                infos = [r[4] for r in res]
                done = [s for s, r in zip(slots, res, strict=True) if r[2] or r[3]]
                if done:
                    again = ex.call("reset", done, [(s + 1000 * turns, None) for s in done])
                    for s, (_, info) in zip(done, again, strict=True):
                        infos[s] = info
        finally:
            ex.close()
        out[kind] = {"prompt_call_ms": 1e3 * attr_s, "step_call_ms": 1e3 * step_s / turns}
        print(
            f"  {kind:9s} prompt call {out[kind]['prompt_call_ms']:7.3f} ms   "
            f"step call {out[kind]['step_call_ms']:7.3f} ms  ({n} copies)",
            flush=True,
        )
    return out


def bench_cpu_per_step(env_id: str, kwargs: dict[str, Any], steps: int) -> dict[str, float]:
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    cpu = wall = 0.0
    for k in range(steps):
        a = _random_admissible(info, rng)
        c0, w0 = time.process_time(), time.perf_counter()
        _, _, term, trunc, info = env.step(a)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        if term or trunc:
            _, info = env.reset(seed=k + 1)
    env.close()
    return {"cpu_ms": 1e3 * cpu / steps, "wall_ms": 1e3 * wall / steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=4, help="ALFWorld task groups per iteration")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=15, help="ALFWorld step limit per episode")
    ap.add_argument(
        "--iterations", type=int, default=2, help="timed collections per executor (after a warm-up)"
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--webshop-copies", type=int, default=8)
    ap.add_argument("--webshop-calls", type=int, default=200)
    ap.add_argument("--cpu-steps", type=int, default=200)
    ap.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs each Ray actor reserves")
    ap.add_argument("--ray-address", default="", help="'' local Ray; 'auto' a running cluster")
    args = ap.parse_args()
    load = os.getloadavg()
    print(
        f"# workers_bench: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min)"
    )
    print(
        f"\nALFWorld collector: {args.groups} groups x {args.group_size}, max {args.max_steps} steps, "
        f"{args.workers} workers, scripted random policy"
    )
    col = bench_collector(args)
    base = col["inprocess"]["steps_per_s"]
    for kind in EXECUTORS[1:]:
        print(f"  {kind} / inprocess: {col[kind]['steps_per_s'] / base:.2f}x steps/s")
    print(f"\nWebShop per-call overhead ({args.webshop_calls} calls each)")
    ws = bench_call_overhead(args)
    base_p = ws["inprocess"]["prompt_call_ms"]
    for kind in EXECUTORS[1:]:
        print(f"  {kind}: +{ws[kind]['prompt_call_ms'] - base_p:.3f} ms per call over in-process")
    print(f"\nCPU per env step (one copy in this process, {args.cpu_steps} random admissible steps)")
    for name, env_id, kw in (
        ("ALFWorld", "StepGym/ALFWorld-v0", {"split": "train"}),
        ("WebShop", "StepGym/WebShop-v0", {"split": "train"}),
    ):
        r = bench_cpu_per_step(env_id, kw, args.cpu_steps)
        print(
            f"  {name:9s} {r['cpu_ms']:7.2f} CPU-ms/step  {r['wall_ms']:7.2f} wall-ms/step  "
            f"(one core runs ~{1e3 / max(r['cpu_ms'], 1e-9):.0f} steps/s)"
        )
    load = os.getloadavg()
    print(f"\n# load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")


if __name__ == "__main__":
    main()
