"""Check the native ALFWorld engine against the TextWorld engine on every game of the given splits.

For each game: the stored walkthrough and one seeded random episode (admissible commands mixed with junk) up to
the step limit, compared step by step (observation, reward, terminated, truncated, the whole info dict incl.
admissible commands, state/subgoal keys and the expert's next action, and the world facts); see
:mod:`stepgym.envs.alfworld.native.equality`. One JSON line per game goes to ``--out`` as soon as it is done (a
rerun with ``--resume`` skips the games already there), and a summary table is printed at the end.

Run: ``STEPGYM_DATA=/path/to/data python scripts/alfworld_native_equality.py --workers 2``
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--splits", nargs="+", default=list(SPLITS))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="alfworld_native_equality.jsonl")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()

    from stepgym.envs.alfworld.games import list_games

    out = Path(args.out)
    done = {}
    if args.resume and out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            done[row["task_id"]] = row
    elif out.exists():
        out.unlink()
    jobs = []
    for split in args.splits:
        ids = [g.task_id for g in list_games(split) if g.task_id not in done]
        chunk = 4
        jobs += [
            (split, ids[i : i + chunk], args.max_steps, args.seed + i) for i in range(0, len(ids), chunk)
        ]
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
