"""Small-scale check of the papers' central claim: on a multi-step task where only one decision matters, how many
iterations do GRPO, GiGPO, ProAS, AHEAD (oracle hints) and StepOPSD need to reach a target success rate?

Setup (all in process, no downloads, CPU): ``StepGym/CreditToy-v0`` (a corridor; the key lies among distractor
objects in one room; taking a wrong object or walking past the key fails the episode, every other step is
harmless), a tiny random Qwen2-style model with a tokenizer trained on the env's text, a short format warm-up that
imitates a *uniformly random admissible* policy (so every method starts from the same policy that knows the reply
format and no preference), then GRPO-style training with each shaper. For a given seed the initial policy, the task
order and the env seeds are identical across methods (paired comparison).

Reported per method and seed: the first iteration at which the training success rate (mean of the last
``--smooth`` iterations, each over n_tasks × G episodes) reaches ``--target``; the final training success; greedy
success on the held-out ``valid`` tasks; seconds per iteration. A run that never reaches the target within
``--iterations`` counts as ``>N`` (and the median treats it as N + 1).

    python benchmarks/credit_assignment.py                       # 5 methods × 3 seeds (20-40 min on 2 shared cores)
    python benchmarks/credit_assignment.py --seeds 1 --methods grpo gigpo --iterations 15
    python benchmarks/credit_assignment.py --json out.json       # also write the raw numbers
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from stepgym.trainers.diagnostics import method_slug  # noqa: E402
from stepgym.trainers.grpo import GRPOTrainer  # noqa: E402
from stepgym.trainers.presets import get_preset  # noqa: E402

METHODS = {
    "grpo": "credit-grpo",
    "gigpo": "credit-gigpo",
    "proas": "credit-proas",
    "ahead": "credit-ahead",
    "stepopsd": "credit-stepopsd",
}


def run_one(method: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    cfg = get_preset(METHODS[method])
    env_kwargs = json.dumps({"n_rooms": args.rooms, "n_distractors": args.distractors, "n_tasks": args.tasks})
    out = workdir / f"{method}-s{seed}"
    shutil.rmtree(out, ignore_errors=True)
    cfg = replace(
        cfg,
        run=replace(
            cfg.run,
            output_dir=str(out),
            iterations=args.iterations,
            seed=seed,
            progress=False,
            tensorboard=False,
            report=False,
            save_every=0,
            threads=args.threads,
        ),
        env=replace(cfg.env, kwargs=env_kwargs, max_steps=args.max_steps),
        rollout=replace(cfg.rollout, n_tasks=args.n_tasks, group_size=args.group_size),
        optim=replace(cfg.optim, lr=args.lr),
        warmup=replace(cfg.warmup, steps=args.warmup_steps),
        eval=replace(cfg.eval, limit=args.eval_tasks, parallel=args.eval_tasks),
    )
    t0 = time.perf_counter()
    tr = GRPOTrainer(cfg)
    t_init = time.perf_counter() - t0
    curve: list[float] = []
    gaps: list[float] = []
    adv_means: list[float] = []
    reached = None
    t1 = time.perf_counter()
    for it in range(1, args.iterations + 1):
        m = tr.step()
        curve.append(m["rollout/success"])
        adv_means.append(m[f"adv/{method_slug(tr.cfg.method)}_tokens/mean"])
        if "teacher/delta_mean" in m:
            gaps.append(m["teacher/delta_mean"])
        window = curve[-args.smooth :]
        if reached is None and len(window) == args.smooth and sum(window) / len(window) >= args.target:
            reached = it
            if not args.full:
                break
    per_it = (time.perf_counter() - t1) / len(curve)
    ev = tr.evaluate(["valid"])[0]
    tr.close()
    shutil.rmtree(out, ignore_errors=True)
    return {
        "method": method,
        "seed": seed,
        "reached": reached,
        "curve": curve,
        "final": curve[-1],
        "eval_success": ev["success"],
        "seconds_per_iteration": per_it,
        "init_seconds": t_init,
        "token_advantage_mean": adv_means,
        "teacher_gap_mean": gaps,
    }


def _fmt_reached(r: int | None, n: int) -> str:
    return str(r) if r is not None else f">{n}"


def first_reaching(curve: list[float], level: float, smooth: int) -> int | None:
    """First iteration (1-based) whose mean over the last ``smooth`` iterations reaches ``level``."""
    for i in range(smooth, len(curve) + 1):
        window = curve[i - smooth : i]
        if sum(window) / len(window) >= level:
            return i
    return None


def _median(its: list[int | None], n: int) -> str:
    med = statistics.median([x if x is not None else n + 1 for x in its])
    return f"{med:g}" if med <= n else f">{n}"


def table(results: list[dict], args: argparse.Namespace) -> str:
    """Per method: iterations to ``--target`` and to the ``--also`` levels (per seed, median), final numbers."""
    n = args.iterations
    levels = [*args.also, args.target]
    head = " | ".join(f"iterations to {lv:.0%} (per seed) | median" for lv in levels)
    lines = [
        f"| method | {head} | final train success | valid success (greedy) | s/iteration |",
        "|---|" + "---|---|" * len(levels) + "---|---|---|",
    ]
    for method in args.methods:
        rs = [r for r in results if r["method"] == method]
        if not rs:
            continue
        cells = []
        for lv in levels:
            its = [first_reaching(r["curve"], lv, args.smooth) for r in rs]
            cells.append(f"{', '.join(_fmt_reached(x, n) for x in its)} | {_median(its, n)}")
        lines.append(
            f"| {method} | {' | '.join(cells)} | {statistics.mean(r['final'] for r in rs):.2f} | "
            f"{statistics.mean(r['eval_success'] for r in rs):.2f} | "
            f"{statistics.mean(r['seconds_per_iteration'] for r in rs):.1f} |"
        )
    return "\n".join(lines)


def gap_table(results: list[dict], methods: list[str]) -> str:
    """Mean token advantage and mean teacher − student gap δ over all logged iterations (runs that logged them)."""
    lines = ["| method | mean token advantage | mean teacher − student gap δ | runs |", "|---|---|---|---|"]
    for method in methods:
        rs = [r for r in results if r["method"] == method and r.get("token_advantage_mean")]
        if not rs:
            continue
        adv = [x for r in rs for x in r["token_advantage_mean"]]
        gap = [x for r in rs for x in r.get("teacher_gap_mean") or []]
        gap_s = f"{statistics.mean(gap):+.4f}" if gap else "—"
        lines.append(f"| {method} | {statistics.mean(adv):+.4f} | {gap_s} | {len(rs)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seeds", type=int, default=3, help="seeds per method")
    p.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed .. first-seed + seeds - 1")
    p.add_argument("--iterations", type=int, default=25, help="most iterations per run")
    p.add_argument("--target", type=float, default=0.8, help="target training success rate")
    p.add_argument(
        "--smooth", type=int, default=2, help="iterations averaged before comparing with the target"
    )
    p.add_argument("--full", action="store_true", help="run every iteration (default: stop at the target)")
    p.add_argument("--rooms", type=int, default=5)
    p.add_argument("--distractors", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=10)
    p.add_argument("--tasks", type=int, default=24, help="tasks in the training split")
    p.add_argument("--n-tasks", type=int, default=8, help="tasks per batch")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--eval-tasks", type=int, default=24)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--also", type=float, nargs="*", default=[0.5], help="further success levels to tabulate")
    p.add_argument("--json", default=None, help="write the raw results here")
    p.add_argument(
        "--from-json",
        nargs="+",
        default=None,
        help="only re-print the table of saved --json files (their results merged)",
    )
    args = p.parse_args(argv)
    if args.from_json:
        merged: list[dict] = []
        for f in args.from_json:
            saved = json.loads(Path(f).read_text())
            for k in ("iterations", "target", "smooth", "methods"):
                setattr(args, k, saved["args"][k])
            print(f"# {f}: {saved['args']}")
            merged += saved["results"]
        print(table(sorted(merged, key=lambda r: r["seed"]), args))
        if any(r.get("token_advantage_mean") for r in merged):
            print()
            print(gap_table(merged, args.methods))
        return 0
    print(
        f"# credit assignment benchmark ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{platform.python_version()}): {vars(args)}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="stepgym-credit-"))
    results = []
    t0 = time.perf_counter()
    try:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for method in args.methods:
                r = run_one(method, seed, args, work)
                results.append(r)
                print(
                    f"{method:9s} seed {seed}: reached {_fmt_reached(r['reached'], args.iterations):>4s}  "
                    f"curve {' '.join(f'{x:.2f}' for x in r['curve'])}  valid {r['eval_success']:.2f}  "
                    f"{r['seconds_per_iteration']:.1f}s/it",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(results, args))
    print()
    print(gap_table(results, args.methods))
    print(f"\ntotal wall time: {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
