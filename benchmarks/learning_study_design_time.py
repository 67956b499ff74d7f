"""What the learning study's whole design costs on this machine, from a timed sample of its own cells.

The design is what :func:`learning_study_stats.timing` counts: the core methods on the discovery and confirmation
seeds, for every (env, learner) of the committed cells files (the linear learner at the shared rate, at a rate per
method, and the token-level learner). The committed cells' own ``seconds`` were taken on a shared machine under
other sessions' load; this script re-runs a sample of those very cells (``--per-class`` seeds of every (env,
learner, method): the first discovery seed and the first confirmation seed by default), each as the runners run
it (``learning_study.run_cell`` / ``learning_study_llm.run_llm_cell``, in a pool of ``--workers`` processes), and
projects the design's wall time: per (env, learner, method) the median re-run time times the design's cells of
that class, summed, divided by the workers. It also checks each re-run against the committed record (the same
held-out curve, training curve and tasks): a cell whose key no longer matches (its env row changed since) is
re-run under its recorded settings but reported as such.

    python benchmarks/learning_study_design_time.py --workers 2 --out benchmarks/results/design_time.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_study as ls
import learning_study_stats as st

#: the record fields a re-run must reproduce (wall time and the token learner's last-step metrics aside)
COMPARED = ("eval_its", "held", "train_curve", "trained_tasks", "held_tasks")


def design_cells(cells: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """(env, learner, method) -> the design's cells of that class, by seed."""
    out: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in cells:
        env, learner, method, seed = st.cell_id(r)
        if method in st.CORE and (seed in st.DISCOVERY or seed in st.CONFIRMATION):
            out[(env, learner, method)].append(r)
    for rows in out.values():
        rows.sort(key=lambda r: int(r["seed"]))
    return dict(out)


def sample(classes: dict[tuple[str, str, str], list[dict]], per_class: int) -> list[dict]:
    """``per_class`` cells of each class: the first discovery seed, the first confirmation seed, then the next
    seeds of each in turn."""
    picked = []
    for rows in classes.values():
        disc = [r for r in rows if int(r["seed"]) in st.DISCOVERY]
        conf = [r for r in rows if int(r["seed"]) in st.CONFIRMATION]
        order = [r for pair in zip(disc, conf, strict=False) for r in pair]
        order += [r for r in disc + conf if r not in order]
        picked += order[:per_class]
    return picked


def cell_of(record: dict) -> dict:
    """The runner's cell that produced ``record`` (its recorded settings)."""
    args = dict(record["args"])
    if record.get("learner") and record.get("learner") != "llm":
        args["learner"] = record["learner"]
    return {"env": record["env"], "method": record["method"], "seed": int(record["seed"]), "args": args}


def rerun(record: dict, folder: Path | None = None) -> dict[str, Any]:
    """Run the cell of ``record`` again; its wall time and whether it reproduced the record. A token-level cell
    runs in ``folder`` (its runner's run folder: cells of one seed share their format warm-up there, as in a
    sweep) or a temporary one."""
    cell = cell_of(record)
    if record.get("learner") == "llm":
        import learning_study_llm as llm

        key = llm.cell_key(cell)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            new = llm.run_llm_cell(cell, Path(folder or tmp))
            seconds = time.perf_counter() - t0
    else:
        key = ls.cell_key(cell)
        t0 = time.perf_counter()
        new = ls.run_cell(cell)
        seconds = time.perf_counter() - t0
    env, learner, method, seed = st.cell_id(record)
    return {
        "env": env,
        "learner": learner,
        "method": method,
        "seed": seed,
        "seconds": round(seconds, 2),
        "recorded_seconds": record.get("seconds"),
        "same_key": key == record["key"],
        "same_record": all(new.get(k) == record.get(k) for k in COMPARED if k in record),
    }


def _rerun(job: tuple[dict, Path]) -> dict[str, Any]:
    return rerun(*job)


def project(classes: dict, runs: list[dict], workers: int) -> dict[str, Any]:
    """The design's projected cost from the re-run times: per (env, learner) and in all."""
    times: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in runs:
        times[(r["env"], r["learner"], r["method"])].append(r["seconds"])
    rows: dict[tuple[str, str], dict[str, float]] = defaultdict(
        lambda: {"cells": 0, "cpu_s": 0.0, "recorded_s": 0.0}
    )
    for (env, learner, method), cells in classes.items():
        if not times.get((env, learner, method)):
            continue
        row = rows[(env, learner)]
        row["cells"] += len(cells)
        row["cpu_s"] += len(cells) * statistics.median(times[(env, learner, method)])
        row["recorded_s"] += sum(float(c.get("seconds") or 0.0) for c in cells)
    table = [
        {"env": e, "learner": lrn, "cells": int(v["cells"]), "cpu_s": round(v["cpu_s"]),
         "recorded_cpu_s": round(v["recorded_s"])}
        for (e, lrn), v in sorted(rows.items(), key=lambda kv: (kv[0][1] != "linear", kv[0][1], kv[0][0]))
    ]  # fmt: skip
    cpu = sum(r["cpu_s"] for r in table)
    return {
        "rows": table,
        "cpu_s": cpu,
        "recorded_cpu_s": sum(r["recorded_cpu_s"] for r in table),
        "workers": workers,
        "wall_s": round(cpu / workers),
    }


def markdown(result: dict) -> str:
    p = result["projection"]
    runs = result["runs"]
    lines = [
        f"# The learning study's design on this machine ({result['date']})",
        "",
        f"`python benchmarks/learning_study_design_time.py --per-class {result['per_class']} --workers "
        f"{p['workers']}`: {len(runs)} cells of the design re-run ({result['per_class']} per env, learner and "
        f"method; the sample took {result['sample_wall_s']:.0f} s of wall time), on {result['machine']} "
        f"(load average {result['load_before']} before the run). The projection: per env, learner and method the "
        "median re-run time times that class's design cells, summed; wall time = CPU time / workers.",
        "",
        "| env | learner | design cells | projected CPU-min | CPU-min of the committed cells' own times |",
        "|---|---|---|---|---|",
    ]
    for r in p["rows"]:
        lines.append(
            f"| {r['env']} | {r['learner']} | {r['cells']} | {r['cpu_s'] / 60:.1f} | {r['recorded_cpu_s'] / 60:.1f} |"
        )
    same = sum(r["same_record"] for r in runs)
    keyed = sum(r["same_key"] for r in runs)
    lines += [
        "",
        f"**The whole design: {p['cpu_s'] / 60:.0f} CPU-minutes, {p['wall_s'] / 60:.0f} minutes of wall time on "
        f"{p['workers']} workers** (the committed cells' own times add up to {p['recorded_cpu_s'] / 3600:.1f} "
        "CPU-hours: they were taken under other sessions' load).",
        "",
        f"Re-runs that reproduced the committed record (held-out curve, training curve, tasks): {same} of "
        f"{len(runs)}; cells whose key is still the committed one: {keyed} of {len(runs)}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-class", type=int, default=2, help="cells re-run per (env, learner, method)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--learners", nargs="+", default=None, help="only these learners (default: all)")
    p.add_argument("--envs", nargs="+", default=None, help="only these envs (default: all)")
    p.add_argument("--out", default=None, help="write the result JSON here (and a .md beside it)")
    args = p.parse_args(argv)
    if args.per_class < 1 or args.workers < 1:
        p.error("--per-class and --workers must be at least 1")
    cells, _ = st.merge(st.CELLS)
    classes = {
        k: v
        for k, v in design_cells(cells).items()
        if (args.learners is None or k[1] in args.learners) and (args.envs is None or k[0] in args.envs)
    }
    todo = sample(classes, args.per_class)
    print(
        f"# {len(todo)} cells of {sum(map(len, classes.values()))} design cells, {args.workers} workers",
        flush=True,
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    runs = []
    # the token-level cells first (the longest, in the order that shares each seed's warm-up, as their runner
    # orders them), so that the pool's last cells are short ones
    import learning_study_llm as llm

    tokens = llm.sharing_order([r for r in todo if r.get("learner") == "llm"], args.workers)
    todo = tokens + [r for r in todo if r.get("learner") != "llm"]
    folder = Path(tempfile.mkdtemp(prefix="design_time_"))  # the token-level runner's run folder
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for r in pool.imap_unordered(_rerun, [(r, folder) for r in todo]):
            runs.append(r)
            print(
                f"{r['env']:12s} {r['learner']:13s} {r['method']:10s} seed {r['seed']:2d}: {r['seconds']:6.1f} s"
                f"{'' if r['same_record'] else ' (record differs)'}{'' if r['same_key'] else ' (key changed)'}",
                flush=True,
            )
    shutil.rmtree(folder, ignore_errors=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_before": None if load is None else round(load, 2),
        "per_class": args.per_class,
        "sample_wall_s": round(time.perf_counter() - t0, 1),
        "runs": sorted(runs, key=lambda r: (r["env"], r["learner"], r["method"], r["seed"])),
        "projection": project(classes, runs, args.workers),
    }
    text = markdown(result)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps(result, indent=1) + "\n")
        out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
