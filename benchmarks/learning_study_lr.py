"""The learning rate of each env of the learning study, chosen on GRPO alone on selection seeds that are never
reported (``benchmarks/learning_study.py`` reports seeds 0..9; this script uses 100..105 by default).

For every env and candidate learning rate it runs GRPO cells of the study's settings (its defaults: iterations,
tasks, group, held-out tasks, warm start) and reports GRPO's held-out gain over the starting policy (mean and 95%
bootstrap interval over the selection seeds) and its learning-curve AUC; the chosen rate is the one with the
largest mean gain. The env rows of ``learning_study.ENVS`` carry the chosen rates (docs/learning_study.md).

    python benchmarks/learning_study_lr.py --envs Sokoban BabyAI --lrs 2 5 20 50 --out runs/ls_lr
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_study as ls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(ls.ENVS), choices=list(ls.ENVS))
    p.add_argument("--lrs", nargs="+", type=float, default=[5.0, 20.0, 50.0])
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="runs/learning_study_lr")
    a, rest = p.parse_known_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cells_path = out / "cells.jsonl"
    todo = []
    for lr in a.lrs:
        args = ls.parse(
            [
                *rest,
                "--methods",
                "grpo",
                "--lr",
                str(lr),
                "--seeds",
                str(a.seeds),
                "--first-seed",
                str(a.first_seed),
            ]
        )
        args.envs = a.envs
        todo += ls.plan(args)
    if set(range(a.first_seed, a.first_seed + a.seeds)) & set(range(10)):
        raise SystemExit("selection seeds must not overlap the reported seeds 0..9")

    # a cell is (env, lr, seed) of GRPO at the command line's other settings: the first one found counts (an env
    # row's edited defaults, e.g. the chosen lr written into it, do not make a finished cell run again)
    def ident(c: dict) -> tuple:
        return (c["env"], float(c["args"]["lr"]), c["seed"])

    def same(r: dict, c: dict) -> bool:
        return all(r["args"].get(k) == c["args"].get(k) for k in ls.TRAIN_ARGS if k != "lr")

    want = {ident(c): c for c in todo}
    found: dict[tuple, dict] = {}
    for r in ls.cs.load_cells(cells_path):
        if r["method"] == "grpo" and ident(r) in want and same(r, want[ident(r)]):
            found.setdefault(ident(r), r)
    todo = [c for c in todo if ident(c) not in found]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(a.workers) if a.workers > 1 else ls.cs._Serial() as pool:
        for r in pool.imap_unordered(ls.run_cell, todo):
            ls.cs.append_cell(cells_path, r)
            found.setdefault(ident(r), r)
            print(
                f"{r['env']} lr {r['args']['lr']:g} seed {r['seed']}: {ls.held_curve(r)[[0, -1]]}", flush=True
            )
    cells = list(found.values())
    rng = np.random.default_rng(5)
    lines = [
        f"GRPO alone, selection seeds {a.first_seed}..{a.first_seed + a.seeds - 1} (never reported); "
        f"{len(cells)} cells, {sum(r['seconds'] for r in cells) / 60:.0f} min of cell wall time summed "
        f"(this invocation: {time.perf_counter() - t0:.0f} s).",
        "",
        "| env | lr | seeds | start → final | gain over start [95% CI] | AUC | chosen |",
        "|---|---|---|---|---|---|---|",
    ]
    for env in a.envs:
        rows = []
        for lr in a.lrs:
            rs = [r for r in cells if r["env"] == env and r["args"]["lr"] == lr]
            if not rs:
                continue
            m = [ls.metrics(r, None) for r in rs]
            gain = np.array([x["gain"] for x in m])
            lo, hi = ls.cs.bootstrap_ci(gain, rng)
            start = np.mean([x["final"] - x["gain"] for x in m])
            rows.append([env, lr, len(rs), start, np.mean([x["final"] for x in m]), gain.mean(), lo, hi,
                         np.mean([x["auc"] for x in m])])  # fmt: skip
        best = max(rows, key=lambda r: r[5])[1] if rows else None
        for r in rows:
            lines.append(
                f"| {r[0]} | {r[1]:g} | {r[2]} | {r[3]:.3f} → {r[4]:.3f} | {r[5]:+.3f} [{r[6]:+.3f}, {r[7]:+.3f}] "
                f"| {r[8]:.3f} | {'**yes**' if r[1] == best else ''} |"
            )
    text = "\n".join(lines)
    (out / "summary.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
