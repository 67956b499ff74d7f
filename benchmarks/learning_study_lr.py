"""The learning rate of each env and method of the learning study, chosen on selection seeds that are never
reported (``benchmarks/learning_study.py`` reports seeds 0..99; this script uses 100..105 by default).

For every env, method and candidate learning rate it runs cells of the study's settings (its defaults:
iterations, tasks, group, held-out tasks, warm start), the same budget (rates × seeds) for every method, and
reports per rate the held-out gain over the starting policy and the learning-curve AUC (mean and 95% bootstrap
interval over the selection seeds). The chosen rate of a method is the one with the largest mean of the
criterion: ``--criterion auc`` (default; the study's headline metric) or ``gain`` (the final gain, the rule the
env rows' shared rates were chosen by, on GRPO alone). ``--json`` writes the chosen rates per (env, method).

    python benchmarks/learning_study_lr.py --envs Sokoban --methods grpo gigpo oracle --lrs 2 5 20 --out runs/ls_lr
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_study as ls

REPORTED = range(100)  #: seeds the study reports (discovery, confirmation, replication): never selected on


def ident(c: dict) -> tuple:
    """A selection cell: (env, method, lr, seed) at the command line's other settings."""
    return (c["env"], c["method"], float(c["args"]["lr"]), c["seed"])


def select(cells: list[dict], criterion: str, rng: np.random.Generator) -> list[dict]:
    """One row per (env, method, lr): seeds, start, final, gain and AUC (means, bootstrap intervals), and whether
    the rate is the method's chosen one (largest mean ``criterion``)."""
    groups: dict[tuple, list[dict]] = {}
    for r in cells:
        groups.setdefault((r["env"], r["method"], float(r["args"]["lr"])), []).append(r)
    rows = []
    for (env, method, lr), rs in groups.items():
        m = [ls.metrics(r, None) for r in rs]
        gain, auc = np.array([x["gain"] for x in m]), np.array([x["auc"] for x in m])
        rows.append(
            {"env": env, "method": method, "lr": lr, "seeds": len(rs),
             "start": float(np.mean([x["final"] - x["gain"] for x in m])),
             "final": float(np.mean([x["final"] for x in m])),
             "gain": float(gain.mean()), "gain_ci": ls.cs.bootstrap_ci(gain, rng),
             "auc": float(auc.mean()), "auc_ci": ls.cs.bootstrap_ci(auc, rng)}
        )  # fmt: skip
    for key in {(r["env"], r["method"]) for r in rows}:
        mine = [r for r in rows if (r["env"], r["method"]) == key]
        best = max(mine, key=lambda r: (r[criterion], -r["lr"]))  # a tie goes to the smaller rate
        for r in mine:
            r["chosen"] = r is best
    order = {m: i for i, m in enumerate(ls.METHODS)}
    envs = list(ls.ENVS)
    rows.sort(key=lambda r: (envs.index(r["env"]), order.get(r["method"], 99), r["lr"]))
    return rows


def markdown(rows: list[dict], criterion: str, header: str) -> str:
    lines = [
        header,
        "",
        f"| env | method | lr | seeds | start → final | gain over start [95% CI] | AUC [95% CI] | chosen ({criterion}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['method']} | {r['lr']:g} | {r['seeds']} | {r['start']:.3f} → {r['final']:.3f} | "
            f"{r['gain']:+.3f} [{r['gain_ci'][0]:+.3f}, {r['gain_ci'][1]:+.3f}] | "
            f"{r['auc']:.3f} [{r['auc_ci'][0]:.3f}, {r['auc_ci'][1]:.3f}] | {'**yes**' if r['chosen'] else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(ls.ENVS), choices=list(ls.ENVS))
    p.add_argument("--methods", nargs="+", default=["grpo"], choices=list(ls.METHODS))
    p.add_argument("--lrs", nargs="+", type=float, default=[5.0, 20.0, 50.0])
    p.add_argument(
        "--criterion", choices=("auc", "gain"), default="auc", help="what the chosen rate maximises"
    )
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="runs/learning_study_lr")
    p.add_argument("--json", default=None, help="write the rows and the chosen rate per (env, method) here")
    a, rest = p.parse_known_args(argv)
    if set(range(a.first_seed, a.first_seed + a.seeds)) & set(REPORTED):
        raise SystemExit(
            f"selection seeds must not overlap the reported seeds {REPORTED.start}..{REPORTED.stop - 1}"
        )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cells_path = out / "cells.jsonl"
    todo = []
    for lr in a.lrs:
        args = ls.parse(
            [*rest, "--methods", *a.methods, "--lr", str(lr), "--seeds", str(a.seeds), "--first-seed",
             str(a.first_seed), "--envs", *a.envs]
        )  # fmt: skip
        todo += ls.plan(args)

    # the first finished cell of an (env, method, lr, seed) at the command line's other settings counts (an env
    # row's edited defaults, e.g. the chosen lr written into it, do not make a finished cell run again)
    def same(r: dict, c: dict) -> bool:
        return all(r["args"].get(k) == c["args"].get(k) for k in ls.TRAIN_ARGS if k != "lr")

    want = {ident(c): c for c in todo}
    found: dict[tuple, dict] = {}
    for r in ls.cs.load_cells(cells_path):
        if ident(r) in want and same(r, want[ident(r)]):
            found.setdefault(ident(r), r)
    todo = [c for c in todo if ident(c) not in found]
    print(f"# lr selection: {len(found)} cells done, {len(todo)} to run, {a.workers} workers", flush=True)
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(a.workers) if a.workers > 1 else ls.cs._Serial() as pool:
        for r in pool.imap_unordered(ls.run_cell, todo):
            ls.append_once(cells_path, r)
            found.setdefault(ident(r), r)
            y = ls.held_curve(r)
            print(
                f"{r['env']} {r['method']} lr {r['args']['lr']:g} seed {r['seed']}: {y[0]:.2f} → {y[-1]:.2f}",
                flush=True,
            )
    cells = [found[k] for k in want if k in found]
    rows = select(cells, a.criterion, np.random.default_rng(5))
    header = (
        f"Selection seeds {a.first_seed}..{a.first_seed + a.seeds - 1} (never reported), the same rates and seeds "
        f"for every method; {len(cells)} cells, {sum(r['seconds'] for r in cells) / 60:.0f} min of cell wall time "
        f"summed (this invocation: {time.perf_counter() - t0:.0f} s). Chosen: the largest mean {a.criterion}."
    )
    text = markdown(rows, a.criterion, header)
    (out / "summary.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    if a.json:
        chosen = {f"{r['env']}/{r['method']}": r["lr"] for r in rows if r["chosen"]}
        data = {"criterion": a.criterion, "seeds": [a.first_seed, a.first_seed + a.seeds - 1], "lrs": a.lrs,
                "chosen": chosen, "rows": rows}  # fmt: skip
        Path(a.json).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
