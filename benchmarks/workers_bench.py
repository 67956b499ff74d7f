"""Env executors under the trainer's collector: what spreading env copies over worker processes buys, and costs.

Measured in one run (the numbers quoted in README/docs come from here):

* **ALFWorld groups through the collector** (``stepgym.trainers.collector.Collector``) with the scripted backend
  (a fake policy named as such: uniformly random admissible actions, so the envs dominate the iteration), with the
  in-process executor, a local process pool and Ray actors (``--workers`` each): env steps/s, seconds per
  iteration (resets included), and the ratios to in-process. The same tasks and seeds for every executor (the
  trajectories are identical by construction; the rows are counted to show it), in interleaved rounds.
* **Overlap** (``Collector(overlap=...)``, the trainer's ``--rollout.overlap``): the same process pool with the
  groups played in one sequential wave and in two pipelined waves (the workers step one wave while the backend
  answers the other), in the same run: first with the scripted backend (generation takes no time, so there is
  nothing to hide and the ratio shows the cost of the second wave), then with a *simulated GPU* (a fake named as
  such: the scripted replies, delivered after ``--gen-ms-per-call`` + ``--gen-ms-per-request`` × requests of
  sleep, during which the driver holds no CPU, as while a GPU generates). Every variant is group-seeded, so all of
  them play the same trajectories (checked: the benchmark prints whether the rows are identical).
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
from stepgym.trainers.collector import Collector, CollectorOptions
from stepgym.trainers.samples import PromptEncoder
from stepgym.workers import EnvRecipe, ExecutorSpec, make_executor
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import TextInterfaceWrapper, get_format

EXECUTORS = ("inprocess", "process", "ray")
#: The collector variants timed: name -> (executor, overlap).
VARIANTS = {
    "inprocess": ("inprocess", "off"),
    "process": ("process", "off"),
    "process+overlap": ("process", "on"),
    "ray+overlap": ("ray", "on"),
}


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


class SimulatedGPU:
    """A fake rollout backend (named as such): the scripted replies, returned after the time a GPU would take,
    slept so that the driver's CPU is free meanwhile (as it is while a real GPU generates)."""

    def __init__(self, inner: ScriptedBackend, call_ms: float, request_ms: float):
        self.inner, self.call_ms, self.request_ms = inner, call_ms, request_ms

    def sync_weights(self, model: Any) -> None:
        return None

    def generate(self, requests, *, seed, greedy=False):
        out = self.inner.generate(requests, seed=seed, greedy=greedy)
        time.sleep((self.call_ms + self.request_ms * len(requests)) / 1e3)
        return out


def _collector(variant: str, args: argparse.Namespace) -> Collector:
    kind, overlap = VARIANTS[variant]
    fmt = get_format("alfworld")
    tok = CharTokenizer()
    return Collector(
        "StepGym/ALFWorld-v0",
        {"split": "train", "max_steps": args.max_steps, "engine": args.alfworld_engine},
        fmt,
        history=2,
        group_size=args.group_size,
        encoder=PromptEncoder(tok, max_prompt_tokens=100_000),
        backend=ScriptedBackend(tok, "random", render=fmt.reply),
        options=CollectorOptions(
            executor=ExecutorSpec(kind, args.workers, _executor_kwargs(kind, args)), overlap=overlap
        ),
    )


def _play(col: Collector, batch: list[tuple[str, int]], seed: int):
    """One collection, group-seeded (so every variant plays the same trajectories)."""
    return col.collect(
        batch,
        seed_rng=np.random.default_rng(seed),
        group_rngs=[np.random.default_rng([seed, g]) for g in range(len(batch))],
    )


def bench_collector(
    cols: dict[str, Collector], batches: list[list[tuple[str, int]]], warm_up: bool
) -> dict[str, dict[str, float]]:
    """Every variant plays the same batches; the timed rounds interleave the variants (in-process, pool, ...,
    in-process, ...) so that a shared machine's changing load falls on all of them alike."""
    out: dict[str, dict[str, float]] = {k: {"steps": 0, "seconds": 0.0, "env_seconds": 0.0} for k in cols}
    rows: dict[str, list[str]] = {k: [] for k in cols}
    if warm_up:
        for kind, col in cols.items():  # workers up, games parsed
            t0 = time.perf_counter()
            _play(col, batches[0], 0)
            out[kind]["startup_s"] = time.perf_counter() - t0
    for n, batch in enumerate(batches[1:]):
        for kind, col in cols.items():
            t1 = time.perf_counter()
            ro = _play(col, batch, 1 + n)
            out[kind]["seconds"] += time.perf_counter() - t1
            out[kind]["steps"] += len(ro.rows)
            out[kind]["env_seconds"] += ro.stats["env_seconds"]
            rows[kind].append(repr([(r.traj, r.t, r.response_text, r.record["reward"]) for r in ro.rows]))
    for kind, r in out.items():
        r["iteration_s"] = r["seconds"] / (len(batches) - 1)
        r["steps_per_s"] = r["steps"] / r["seconds"]
        start = f"  (first collection, with start-up: {r['startup_s']:.1f} s)" if warm_up else ""
        print(
            f"  {kind:15s} {int(r['steps']):5d} steps  {r['steps_per_s']:7.1f} steps/s  "
            f"{r['iteration_s']:6.2f} s/iteration  env wait {r['env_seconds'] / (len(batches) - 1):6.2f} s{start}",
            flush=True,
        )
    same = all(v == rows["inprocess"] for v in rows.values())
    print(f"  trajectories identical across variants: {'yes' if same else 'NO'}", flush=True)
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
    ap.add_argument(
        "--alfworld-engine",
        default="textworld",
        choices=("textworld", "native"),
        help="ALFWorld engine (the README's numbers: textworld, the slow engine workers are for)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--webshop-copies", type=int, default=8)
    ap.add_argument("--webshop-calls", type=int, default=200)
    ap.add_argument("--cpu-steps", type=int, default=200)
    ap.add_argument("--gen-ms-per-call", type=float, default=50.0, help="simulated GPU: ms per backend call")
    ap.add_argument(
        "--gen-ms-per-request", type=float, default=5.0, help="simulated GPU: ms per request in a call"
    )
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
        f"{args.workers} workers, scripted random policy (generation takes ~no time)"
    )
    cols = {v: _collector(v, args) for v in VARIANTS}
    try:
        ids = cols["inprocess"].task_ids()
        rng = np.random.default_rng(0)
        batches = [
            [(ids[int(i)], int(rng.integers(2**31 - 1))) for i in rng.choice(len(ids), args.groups)]
            for _ in range(args.iterations + 1)
        ]
        col = bench_collector(cols, batches, warm_up=True)
        base = col["inprocess"]["steps_per_s"]
        for kind in list(VARIANTS)[1:]:
            print(f"  {kind} / inprocess: {col[kind]['steps_per_s'] / base:.2f}x steps/s")
        ratio = col["process"]["iteration_s"] / col["process+overlap"]["iteration_s"]
        print(f"  overlap: process / process+overlap iteration time: {ratio:.2f}x")
        print(
            f"\nOverlap with a simulated GPU (a fake: {args.gen_ms_per_call:g} ms per call + "
            f"{args.gen_ms_per_request:g} ms per request, slept): the same batches"
        )
        sim = {v: cols[v] for v in ("inprocess", "process", "process+overlap")}
        for c in sim.values():
            c.backend = SimulatedGPU(c.backend, args.gen_ms_per_call, args.gen_ms_per_request)
        col = bench_collector(sim, batches, warm_up=False)
        for kind in ("process", "process+overlap"):
            r = col["inprocess"]["iteration_s"] / col[kind]["iteration_s"]
            print(f"  {kind} / inprocess: {r:.2f}x iteration speed")
        ratio = col["process"]["iteration_s"] / col["process+overlap"]["iteration_s"]
        print(f"  overlap: process / process+overlap iteration time: {ratio:.2f}x")
    finally:
        for c in cols.values():
            c.close()
    print(f"\nWebShop per-call overhead ({args.webshop_calls} calls each)")
    ws = bench_call_overhead(args)
    base_p = ws["inprocess"]["prompt_call_ms"]
    for kind in EXECUTORS[1:]:
        print(f"  {kind}: +{ws[kind]['prompt_call_ms'] - base_p:.3f} ms per call over in-process")
    print(f"\nCPU per env step (one copy in this process, {args.cpu_steps} random admissible steps)")
    for name, env_id, kw in (
        ("ALFWorld", "StepGym/ALFWorld-v0", {"split": "train", "engine": args.alfworld_engine}),
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
