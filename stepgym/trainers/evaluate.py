"""Evaluation on the fixed splits, the papers' protocol: every task of the split, in the env's fixed order.

For ALFWorld that is valid_seen (140 games) and valid_unseen (134) in full, max 50 steps, success = :attr:`stepgym.schema.Trajectory.success`, reported
per task type; plus *success within interaction budgets* (the share of tasks solved in at most B steps, B = 10,
20, …, 50), the measure behind AHEAD's efficiency claim. Tasks are played in lockstep batches of ``parallel``
episodes through the same collector as training (one group of size 1 per task), greedy by default.

An env without task ids (any Gymnasium text env: its reset seed draws the task) has no fixed split to play in
full; it is evaluated on the tasks the reset seeds ``seed, seed + 1, ...`` draw (``limit`` of them, or
:data:`SEEDED_EVAL_TASKS`), under the split name :data:`SEEDED_EVAL`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.trainers.collector import Collector

__all__ = [
    "SEEDED_EVAL",
    "SEEDED_EVAL_TASKS",
    "eval_metrics",
    "evaluate_policy",
    "format_summary",
    "summarise",
]

#: The split name of an evaluation of an env without splits (its tasks drawn by seed).
SEEDED_EVAL = "seeded"
#: Episodes of such an evaluation when no ``limit`` is given.
SEEDED_EVAL_TASKS = 100


def summarise(trajectories: Sequence[schema.Trajectory], budgets: Sequence[int]) -> dict[str, Any]:
    """Success overall, per task type and within each budget, from recorded episodes (one per task).

    Aborted episodes (an infrastructure failure cut them off; docs/failures.md) have no outcome: every number is
    over the finished episodes (``n_tasks`` of them), and ``n_aborted`` / ``aborted`` (per cause) count the others.
    """
    won, steps = [], []
    valid, total = 0, 0
    aborted: dict[str, int] = {}
    for t in trajectories:
        if t.aborted:
            aborted[str(t.abort_cause)] = aborted.get(str(t.abort_cause), 0) + 1
    trajectories = [t for t in trajectories if not t.aborted]
    for t in trajectories:
        won.append(t.success)
        steps.append(len(t.steps))
        for s in t.steps:
            total += 1
            valid += int(
                bool(s.info.get(schema.FORMAT_VALID, True)) and bool(s.info.get(schema.ADMISSIBLE, True))
            )
    n = len(trajectories)
    by_type = schema.success_by_type((t.task_type, ok) for t, ok in zip(trajectories, won, strict=True))
    won_a, steps_a = np.array(won, dtype=bool), np.array(steps)
    return {
        "n_tasks": n,
        "success": float(won_a.mean()) if n else 0.0,
        "per_type": {k: {"n": m, "success": wins / m} for k, (wins, m) in by_type.items()},
        "within": {str(b): float((won_a & (steps_a <= b)).mean()) if n else 0.0 for b in budgets},
        "valid_action_ratio": valid / total if total else 0.0,
        "mean_steps": float(steps_a.mean()) if n else 0.0,
        "n_aborted": sum(aborted.values()),
        "aborted": dict(sorted(aborted.items())),
    }


def format_summary(summary: Mapping[str, Any], title: str) -> str:
    """The console report of an evaluation summary, for both forms of ``stepgym eval`` (a checkpoint in process,
    an endpoint through :mod:`stepgym.llm_eval`): :func:`summarise`'s numbers, and those an endpoint evaluation
    adds when present (``n_planned`` / ``complete``, each validity flag's ratio, token usage and wall time)."""
    s = summary
    n = f"{s['n_tasks']} of {s['n_planned']}" if "n_planned" in s else str(s["n_tasks"])
    partial = "" if s.get("complete", True) else " (incomplete)"
    lines = [f"{title}: success {s['success']:.3f} over {n} tasks{partial}"]
    width = max([len(t) for t in s["per_type"]] + [9])
    for tt, row in s["per_type"].items():
        lines.append(f"  {tt.ljust(width)}  {row['success']:.3f}  ({row['n']} tasks)")
    lines.append("  within budget: " + ", ".join(f"{b} steps {v:.3f}" for b, v in s["within"].items()))
    valid = f"  valid-action ratio {s['valid_action_ratio']:.3f}"
    if "format_valid_ratio" in s:
        valid += (
            f" (format-valid {s['format_valid_ratio']:.3f}, admissible {s['admissible_ratio']:.3f}, "
            f"effective {s['effective_ratio']:.3f})"
        )
    lines.append(f"{valid}; mean steps {s['mean_steps']:.1f}")
    if s.get("n_aborted"):
        causes = ", ".join(f"{c} {k}" for c, k in s["aborted"].items())
        lines.append(
            f"  aborted: {s['n_aborted']} episodes cut off by an infrastructure failure ({causes}); not in the "
            "numbers above"
        )
    if "usage" in s:
        u = s["usage"]
        lines.append(
            f"  tokens: {u.get('prompt_tokens', 0)} prompt, {u.get('completion_tokens', 0)} completion in "
            f"{u.get('requests', 0)} requests; wall {s.get('wall_seconds', 0.0):.1f} s "
            f"({s.get('episodes_resumed', 0)} episodes resumed)"
        )
    return "\n".join(lines)


def evaluate_policy(
    collector: Collector,
    *,
    budgets: Sequence[int] = (10, 20, 30, 40, 50),
    limit: int = 0,
    greedy: bool = True,
    parallel: int = 64,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Play every task of ``collector``'s env once (a fixed sample of ``limit`` tasks, stratified by task type
    and seeded with ``seed``, when ``limit > 0``: :func:`stepgym.data.sample_tasks`) and summarise. An env
    without task ids plays the tasks its reset seeds ``seed, seed + 1, ...`` draw (``limit`` or
    :data:`SEEDED_EVAL_TASKS` of them).

    ``collector`` must have ``group_size == 1``. Episodes are reset with ``seed`` (fixed), and sampling seeds come
    from a generator seeded with it, so an evaluation is reproducible and does not touch the training RNG.
    The collector plays with failure semantics (an episode an env failure cuts off ends aborted: it is left out
    of the success rates and counted in ``n_aborted`` / ``aborted``; docs/failures.md).
    """
    if collector.group_size != 1:
        raise ValueError("evaluation plays each task once: build the collector with group_size=1")
    from stepgym.data import sample_tasks

    known = collector.task_ids()
    if known is None:  # no task ids: tasks drawn by the reset seed, seed, seed + 1, ...
        tasks = [(None, seed + i) for i in range(limit or SEEDED_EVAL_TASKS)]
    else:
        tasks = [(tid, seed) for tid in sample_tasks(known, limit, seed=seed)]
    rng = np.random.default_rng(seed)
    trajs: list[schema.Trajectory] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), desc="eval", leave=False)
    for start in range(0, len(tasks), max(1, parallel)):
        chunk = tasks[start : start + parallel]
        ro = collector.collect(chunk, seed_rng=rng, greedy=greedy)
        trajs += ro.trajectories
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return summarise(trajs, budgets)


def eval_metrics(results: list[dict[str, Any]]) -> dict[str, float]:
    """Flat ``eval/<split>/...`` metrics (success, valid-action ratio, within budgets, per type) of eval results."""
    m: dict[str, float] = {}
    for r in results:
        m[f"eval/{r['split']}/success"] = r["success"]
        m[f"eval/{r['split']}/valid_action_ratio"] = r["valid_action_ratio"]
        m[f"eval/{r['split']}/aborted_episodes"] = float(r.get("n_aborted", 0))
        for b, v in r["within"].items():
            m[f"eval/{r['split']}/within_{b}"] = v
        for tt, row in r["per_type"].items():
            m[f"eval/{r['split']}/type/{tt}"] = row["success"]
    if results:
        m["eval/success"] = float(np.mean([r["success"] for r in results]))
    return m
