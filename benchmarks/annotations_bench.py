"""What the annotation layer costs on top of ALFWorld, measured against the bare env in the same run.

Replays each game's stored walkthrough (as ``<think>…</think><action>…</action>`` replies where a text interface is
in the stack) through:

* ``bare``: ``gym.make("StepGym/ALFWorld-v0")`` alone;
* ``annotated``: ``HintWrapper(TextInterfaceWrapper(EnvFeedbackWrapper(env)))`` — parsing, prompt rendering every
  step (read through ``.prompt``, as a trainer would), the feedback flags, the episode record and the oracle
  analysis at the end (``failure_only=False`` so it always runs);
* ``group``: a ``GroupEnv`` of G copies of the annotated stack, all replaying the walkthrough, vs G bare episodes.

Also times the pure pieces alone: ``parse_action``, ``render_prompt``, ``OracleAnalyzer.analyze`` and
``peer_hindsight`` per call. Every game is played once before timing so the game cache is warm in both paths
(reset cost is the env's business: ``benchmarks/alfworld_bench.py``).

Run: ``STEPGYM_DATA=../shared/data python benchmarks/annotations_bench.py --games 10 --group-size 4``
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Any

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.group import GroupEnv
from stepgym.hindsight import peer_hindsight
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.hints import HintWrapper, OracleAnalyzer
from stepgym.wrappers.text import TextInterfaceWrapper, parse_action, prompt_for_step, render_prompt


def reply(action: str) -> str:
    return f"<think>The next step of the plan is {action}.</think><action>{action}</action>"


def annotated(**kw: Any) -> gym.Env:
    env = gym.make("StepGym/ALFWorld-v0", **kw)
    return HintWrapper(TextInterfaceWrapper(EnvFeedbackWrapper(env)), failure_only=False)


def play(env: gym.Env, task: str, wrap_reply: bool) -> tuple[int, float]:
    t0 = time.perf_counter()
    env.reset(options={"task_id": task})
    walk = list(env.unwrapped.walkthrough)
    n = 0
    for a in walk:
        if wrap_reply:
            _ = env.get_wrapper_attr("prompt")
        env.step(reply(a) if wrap_reply else a)
        n += 1
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=10)
    ap.add_argument("--group-size", type=int, default=4)
    args = ap.parse_args()

    bare = gym.make("StepGym/ALFWorld-v0", split=args.split)
    ids = bare.unwrapped.task_ids
    tasks = ids[:: max(1, len(ids) // args.games)][: args.games]
    ann = annotated(split=args.split)
    for task in tasks:  # warm both game caches
        play(bare, task, False)
        play(ann, task, True)

    res = {"bare": [0, 0.0], "annotated": [0, 0.0]}
    trajs = []
    for task in tasks:
        for name, env, wrap in (("bare", bare, False), ("annotated", ann, True)):
            n, dt = play(env, task, wrap)
            res[name][0] += n
            res[name][1] += dt
        trajs.append(ann.trajectory)

    g = args.group_size
    group = GroupEnv(
        "StepGym/ALFWorld-v0",
        group_size=g,
        env_kwargs={"split": args.split},
        wrappers=[EnvFeedbackWrapper, TextInterfaceWrapper, lambda e: HintWrapper(e, failure_only=False)],
    )
    copies = [gym.make("StepGym/ALFWorld-v0", split=args.split) for _ in range(g)]
    for task in tasks:  # warm
        group.reset(options={"task_id": task})
        for c in copies:
            c.reset(options={"task_id": task})
    t_group = t_seq = 0.0
    n_group = 0
    for task in tasks:
        t0 = time.perf_counter()
        group.reset(options={"task_id": task})
        walk = list(group.envs[0].unwrapped.walkthrough)
        for a in walk:
            group.step({ag: reply(a) for ag in group.agents})
        group.peer_hindsight()
        t_group += time.perf_counter() - t0
        n_group += len(walk) * g
        t0 = time.perf_counter()
        for c in copies:
            c.reset(options={"task_id": task})
            for a in walk:
                c.step(a)
        t_seq += time.perf_counter() - t0

    # the pure pieces
    sample = trajs[0]
    text = reply(sample.steps[0].action)
    reps = 2000
    t0 = time.perf_counter()
    for _ in range(reps):
        parse_action(text, "alfworld")
    t_parse = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps // 10):
        prompt_for_step(sample, len(sample.steps) - 1, "alfworld")
    t_prompt = (time.perf_counter() - t0) / (reps // 10)
    oracle = OracleAnalyzer()
    t0 = time.perf_counter()
    for tr in trajs:
        oracle.analyze(tr)
    t_oracle = (time.perf_counter() - t0) / len(trajs)
    group8 = [trajs[i % len(trajs)] for i in range(8)]
    loser = group8[
        0
    ]  # treat rollout 0 as failed, so a block is rendered (7 successes, the first is the peer)
    t0 = time.perf_counter()
    for _ in range(100):
        blocks = peer_hindsight(group8, success_fn=lambda t: t is not loser)
    t_peer = (time.perf_counter() - t0) / 100
    assert blocks[0] is not None
    _ = render_prompt  # the same function prompt_for_step calls

    print(
        f"# annotations_bench — {time.strftime('%Y-%m-%d')} — {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, {args.split}, {len(tasks)} games (walkthrough replay, warm caches)"
    )
    per = {k: v[1] / max(1, v[0]) for k, v in res.items()}
    print(f"bare env:              {1e3 * per['bare']:.2f} ms/step ({res['bare'][0]} steps)")
    print(
        f"annotated stack:       {1e3 * per['annotated']:.2f} ms/step  -> ratio {per['annotated'] / per['bare']:.3f}"
    )
    print(
        f"GroupEnv G={g} annotated: {1e3 * t_group / n_group:.2f} ms/rollout-step vs {g} bare copies "
        f"{1e3 * t_seq / n_group:.2f} -> ratio {t_group / t_seq:.3f}"
    )
    print(
        f"parse_action: {1e6 * t_parse:.1f} µs; prompt_for_step: {1e6 * t_prompt:.1f} µs; "
        f"OracleAnalyzer.analyze: {1e3 * t_oracle:.2f} ms/trajectory; peer_hindsight (G=8): {1e6 * t_peer:.1f} µs"
    )
    assert all(tr.steps[-1].info[schema.WON] for tr in trajs)


if __name__ == "__main__":
    main()
