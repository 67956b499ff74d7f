"""ScienceWorld's expert at the env's default step limit: does the gold path win every task of a split?

For each task of the split (every one by default; ``--per-type N`` takes the first N variations of each type), the
env ``StepGym/ScienceWorld-v0`` is made with its default step limit and the expert (``info["expert_action"]``) is
played from reset to the end. One JSON line per task goes to ``--out`` as soon as it is played (``--out`` is read
first: a run that stopped goes on with the tasks not yet there), then a table per task type: tasks, won, the
longest gold path, the most steps the expert took.

Run: ``python benchmarks/scienceworld_expert.py --split test [--per-type N] [--shard K/N] [--out FILE.jsonl]``
(every task of the test split: 1,819 tasks, each a gold-path generation of 0.5 s to over a minute (Mendelian
genetics) plus its play at ~0.05-0.2 s a step; ``--shard 0/2`` and ``--shard 1/2`` on one ``--out`` file use two cores). ``--gold-only`` records only each task's gold-path length, the
survey behind the env's step-limit cap (``benchmarks/results/scienceworld_gold_<date>.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs import env_entry
from stepgym.envs.scienceworld.tasks import TASK_TYPES, split_task_ids, split_variations

ENV_ID = "StepGym/ScienceWorld-v0"


def play_expert(env: gym.Env, task_id: str) -> dict:
    """One episode of the expert on ``task_id``: won, steps, gold path length, reward sum."""
    _, info = env.reset(options={"task_id": task_id})
    gold = len(env.unwrapped.gold_path)
    steps, total, won, truncated = 0, 0.0, False, False
    while True:
        action = info[schema.EXPERT_ACTION]
        if action is None:
            break
        _, reward, terminated, truncated, info = env.step(action)
        steps += 1
        total += reward
        if terminated or truncated:
            won = bool(info[schema.WON])
            break
    return {
        "task_id": task_id,
        "won": won,
        "steps": steps,
        "gold_len": gold,
        "reward_sum": total,
        "truncated": truncated,
    }


def gold_only(env: gym.Env, task_id: str) -> dict:
    """The length of ``task_id``'s gold path, without playing it."""
    name, _, var = task_id.rpartition("/")
    return {"task_id": task_id, "gold_len": len(env.unwrapped.engine.gold_path(name, int(var)))}


def tasks_of(split: str, per_type: int) -> list[str]:
    if per_type <= 0:
        return split_task_ids(split)
    return [f"{t}/{v}" for t in TASK_TYPES for v in list(split_variations(t, split))[:per_type]]


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``0 <= K < N``: this process plays the tasks whose index is ``K`` mod ``N``."""
    k, sep, n = text.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"--shard wants K/N with 0 <= K < N, got {text!r}")
    return shard


def summary(rows: list[dict], limit: int) -> str:
    by_type: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_type[r["task_id"].rpartition("/")[0]].append(r)
    lines = [
        f"default step limit: per task (100 or the gold path, at most {limit}); "
        f"{sum(r['won'] for r in rows)}/{len(rows)} tasks won by the expert",
        "",
        "| task type | tasks | won | longest gold path | most expert steps |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in TASK_TYPES:
        rs = by_type.get(t)
        if rs:
            lines.append(
                f"| {t} | {len(rs)} | {sum(r['won'] for r in rs)} | {max(r['gold_len'] for r in rs)} | "
                f"{max(r['steps'] for r in rs)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="test", choices=["train", "dev", "test"])
    ap.add_argument("--per-type", type=int, default=0, help="first N variations of each type (0: every task)")
    ap.add_argument("--out", default=None, help="JSON lines, one per task (resumed when it exists)")
    ap.add_argument(
        "--shard",
        type=parse_shard,
        default=(0, 1),
        metavar="K/N",
        help="play only every N-th task from the K-th (0-based); shards may share one --out file, each line being "
        "one append",
    )
    ap.add_argument(
        "--gold-only", action="store_true", help="only generate each task's gold path and record its length"
    )
    args = ap.parse_args(argv)
    done: dict[str, dict] = {}
    out = Path(args.out) if args.out else None
    if out is not None and out.exists():
        for line in out.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["task_id"]] = row
    env = gym.make(ENV_ID, split=args.split)
    limit = env.unwrapped.max_steps
    assert limit == env_entry(ENV_ID).max_steps  # the default limit is what is measured
    t0 = time.perf_counter()
    try:
        k, n = args.shard
        for task_id in tasks_of(args.split, args.per_type)[k::n]:
            if task_id in done:
                continue
            row = gold_only(env, task_id) if args.gold_only else play_expert(env, task_id)
            done[task_id] = row
            if out is not None:
                with out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
            if not row.get("won", True):
                print(f"not won: {row}", flush=True)
    finally:
        env.close()
    rows = [done[t] for t in tasks_of(args.split, args.per_type) if t in done]
    if args.gold_only:
        longest = max(rows, key=lambda r: r["gold_len"])
        print(
            f"{len(rows)} tasks; longest gold path {longest['gold_len']} ({longest['task_id']}); limit {limit}"
        )
        return 0 if longest["gold_len"] <= limit else 1
    print(summary(rows, limit))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0 if all(r["won"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
