"""Check the native ALFWorld engine against the TextWorld engine on every game of the given splits.

For each game: the stored walkthrough and one seeded random episode (admissible commands mixed with junk) up to
the step limit, compared step by step (observation, reward, terminated, truncated, the whole info dict incl.
admissible commands, state/subgoal keys and the expert's next action, and the world facts); see
:mod:`stepgym.envs.alfworld.native.equality`. One JSON line per game goes to ``--out`` as soon as it is done (a
rerun with ``--resume`` skips the games already there), and a summary table is printed at the end.

Run: ``STEPGYM_DATA=/path/to/data python scripts/alfworld_native_equality.py --workers 2``

To check that a change to the native engine alters no output, without running TextWorld: record a digest of
every step of the native engine before the change (``--digest-out before.jsonl``: the walkthrough and two seeded
random episodes per game), then compare after it (``--against-digest before.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path

SPLITS = ("valid_seen", "valid_unseen", "train")


def _work(args: tuple[str, list[str], int, int]) -> list[dict]:
    from stepgym.envs.alfworld.native.equality import compare_game, make_pair

    split, task_ids, max_steps, seed = args
    native, reference = make_pair(split, max_steps=max_steps)
    out = []
    for i, task_id in enumerate(task_ids):
        t = time.perf_counter()
        try:
            rep = compare_game(native, reference, task_id, seeds=(seed + i,))
            row = {
                "task_id": task_id,
                "episodes": rep.episodes,
                "steps": rep.steps,
                "differences": rep.differences,
            }
        except Exception as exc:  # a crash on either side is a difference too
            row = {"task_id": task_id, "episodes": 0, "steps": 0, "differences": [f"crash: {exc!r}"]}
        row["seconds"] = round(time.perf_counter() - t, 2)
        out.append(row)
    return out


def _digest_work(args: tuple[str, list[str], int, int]) -> list[dict]:
    from stepgym.envs.alfworld.env import ALFWorldEnv
    from stepgym.envs.alfworld.native.equality import digest_game

    split, task_ids, max_steps, seed = args
    env = ALFWorldEnv(split=split, max_steps=max_steps, engine="native")
    out = []
    for task_id in task_ids:
        try:
            steps = [d[:16] for d in digest_game(env, task_id, seeds=(seed + 1, seed + 2))]
        except Exception as exc:  # a crash is recorded, so it differs from a clean run
            steps = [f"crash: {exc!r}"]
        out.append({"task_id": task_id, "steps": steps})
    return out


def _digest_mode(args: argparse.Namespace, jobs: list) -> None:
    start = time.time()
    rows = {}
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for part in pool.imap_unordered(_digest_work, jobs):
            rows.update((r["task_id"], r["steps"]) for r in part)
            print(f"{len(rows)} games digested, {time.time() - start:.0f}s", flush=True)
    if args.digest_out:
        with open(args.digest_out, "w") as f:
            for task_id in sorted(rows):
                f.write(json.dumps({"task_id": task_id, "steps": rows[task_id]}) + "\n")
        print(f"{len(rows)} games, {sum(map(len, rows.values()))} step digests -> {args.digest_out}")
        return
    before = {}
    for line in Path(args.against_digest).read_text().splitlines():
        row = json.loads(line)
        if row["task_id"].split("/")[0] in args.splits:
            before[row["task_id"]] = row["steps"]
    bad = sorted(t for t in before.keys() | rows.keys() if before.get(t) != rows.get(t))
    steps = sum(map(len, rows.values()))
    print(f"{len(rows)} games, {steps} steps vs {len(before)} games recorded: {len(bad)} games differ")
    for task_id in bad:
        a, b = before.get(task_id) or [], rows.get(task_id) or []
        pairs = zip(a, b, strict=False)
        first = next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))
        print(f"{task_id}: first different step record {first} ({len(a)} recorded, {len(b)} now)")


def _jobs(splits: list[str], done: set[str], max_steps: int, seed: int) -> list:
    """Chunks of 4 games of one split, each with its own seed."""
    from stepgym.envs.alfworld.games import list_games

    jobs = []
    for split in splits:
        ids = [g.task_id for g in list_games(split) if g.task_id not in done]
        jobs += [(split, ids[i : i + 4], max_steps, seed + i) for i in range(0, len(ids), 4)]
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--splits", nargs="+", default=list(SPLITS))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="alfworld_native_equality.jsonl")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--digest-out", help="record step digests of the native engine alone to this file")
    ap.add_argument("--against-digest", help="compare the native engine's step digests with this file")
    args = ap.parse_args()

    if args.digest_out or args.against_digest:
        _digest_mode(args, _jobs(args.splits, set(), args.max_steps, args.seed))
        return
    out = Path(args.out)
    done = {}
    if args.resume and out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            done[row["task_id"]] = row
    elif out.exists():
        out.unlink()
    jobs = _jobs(args.splits, set(done), args.max_steps, args.seed)
    start = time.time()
    with out.open("a") as f, mp.get_context("spawn").Pool(args.workers) as pool:
        for rows in pool.imap_unordered(_work, jobs):
            for row in rows:
                done[row["task_id"]] = row
                f.write(json.dumps(row) + "\n")
                f.flush()
            n_bad = sum(1 for r in done.values() if r["differences"])
            print(f"{len(done)} games, {n_bad} with differences, {time.time() - start:.0f}s", flush=True)
    print(f"\n# Native vs TextWorld engine, {time.strftime('%Y-%m-%d')}, max_steps={args.max_steps}")
    print("| split | games | episodes | steps compared | games with differences |")
    print("|---|---|---|---|---|")
    for split in args.splits:
        rows = [r for r in done.values() if r["task_id"].startswith(split + "/")]
        bad = [r for r in rows if r["differences"]]
        eps = sum(r["episodes"] for r in rows)
        steps = sum(r["steps"] for r in rows)
        print(f"| {split} | {len(rows)} | {eps} | {steps} | {len(bad)} |")
    for r in done.values():
        if r["differences"]:
            print(r["task_id"], r["differences"][0])


if __name__ == "__main__":
    main()
