"""The end-of-run report: learning curves, the credit picture, and a Markdown summary.

* ``learning_curves.png`` — training success, episode reward, valid-action ratio, response length, evaluation
  success and the teacher–student gap's Std(Δ) (StepOPSD's diagnostic) per iteration, from ``metrics.jsonl``.
* ``credit.png`` — the *credit picture*: for a few trajectories of the last batch (successes and failures from
  mixed groups), each step's advantage under plain GRPO next to the chosen shaper's (mean over the step's
  generated tokens). This is where the methods differ: GRPO gives every step of a trajectory the same value,
  GiGPO/ProAS/AHEAD/StepOPSD move credit onto particular steps.
* ``report.md`` — the configuration, final numbers, evaluation tables (success per task type, success within
  interaction budgets) and the two figures.

matplotlib is imported here only (Agg backend), so a missing matplotlib only skips the figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stepgym.trainers.metrics import read_metrics

__all__ = ["CURVES", "write_report"]

#: (metric key, panel title) of the learning-curve panels, in order; absent keys are skipped.
CURVES: tuple[tuple[str, str], ...] = (
    ("rollout/success", "training success rate"),
    ("rollout/episode_reward", "episode reward (env scale)"),
    ("rollout/valid_action_ratio", "valid-action ratio"),
    ("rollout/response_tokens", "response length (tokens)"),
    ("eval/success", "evaluation success (mean over splits)"),
    ("teacher/delta_std", "Std(Δ) teacher − student"),
)


def _series(records: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, int | float):
            xs.append(int(r["iteration"]))
            ys.append(float(v))
    return xs, ys


def _plot_curves(records: Sequence[dict[str, Any]], path: Path, title: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [(k, t) for k, t in CURVES if _series(records, k)[0]]
    if not panels:
        return False
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    for ax, (key, name) in zip(axes.ravel(), panels, strict=False):
        xs, ys = _series(records, key)
        ax.plot(xs, ys, marker="o", markersize=3)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _label(action: Any, valid: bool = True, width: int = 16) -> str:
    """A tick label for one step: the action on at most two lines of ``width`` characters (longer ones end in
    "..."), ASCII only so that every glyph is in matplotlib's default font (a "✗" once printed as a box)."""
    import textwrap

    text = action if isinstance(action, str) and action.strip() else "(no action)"
    text = "".join(ch if ch.isascii() and ch.isprintable() else "?" for ch in " ".join(text.split()))
    lines = textwrap.wrap(text, width, max_lines=2, placeholder="...") or [text[:width]]
    return "\n".join(lines) + ("" if valid else "\n(invalid)")


def _plot_credit(credit: dict[str, Any], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    trajs = credit.get("trajectories") or []
    if not trajs:
        return False
    fig, axes = plt.subplots(len(trajs), 1, figsize=(10, 2.9 * len(trajs)), squeeze=False)
    method = credit.get("method", "shaper")
    for ax, tr in zip(axes.ravel(), trajs, strict=True):
        steps = tr["steps"]
        x = np.arange(len(steps))
        ax.bar(x - 0.2, [s["grpo"] for s in steps], width=0.4, label="GRPO", color="#999999")
        ax.bar(x + 0.2, [s["shaped"] for s in steps], width=0.4, label=method, color="#1f77b4")
        ax.axhline(0, color="black", linewidth=0.6)
        labels = [_label(s["action"], bool(s["valid"])) for s in steps]
        ax.set_xticks(x)
        ax.set_xticklabels(
            labels,
            rotation=0 if len(steps) <= 6 else 30,
            ha="center" if len(steps) <= 6 else "right",
            fontsize=7,
        )
        ax.set_title(
            f"{_label(tr['task_id'], width=90)} - {'success' if tr['won'] else 'failure'}", fontsize=9
        )
        ax.set_ylabel("advantage")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(
        f"Credit picture (iteration {credit.get('iteration')}): per-step advantage, GRPO vs {method}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # "tight": no tick label is cut at the figure's edge
    plt.close(fig)
    return True


def _eval_tables(evals: Sequence[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for ev in evals:
        lines += [
            f"### Evaluation: split `{ev['split']}` at iteration {ev['iteration']} ({ev['n_tasks']} tasks)",
            "",
        ]
        lines += ["| task type | tasks | success |", "|---|---|---|"]
        for tt, row in sorted(ev["per_type"].items()):
            lines.append(f"| {tt} | {row['n']} | {row['success']:.3f} |")
        lines.append(f"| **all** | {ev['n_tasks']} | **{ev['success']:.3f}** |")
        lines += [
            "",
            "| budget (steps) | " + " | ".join(str(b) for b in ev["within"]) + " |",
            "|---|" + "---|" * len(ev["within"]),
            "| solved within | " + " | ".join(f"{v:.3f}" for v in ev["within"].values()) + " |",
            "",
        ]
    return lines


def _wall_time(records: Sequence[dict[str, Any]], wall_seconds: float | None) -> list[str]:
    """The run's wall time, split so that it agrees with ``metrics.jsonl``: the iterations' own time (the sum of
    ``time/iteration_s``) and the rest (model and env setup, the format warm-up, evaluations, checkpoints)."""
    in_iterations = sum(float(r.get("time/iteration_s") or 0.0) for r in records)
    if wall_seconds is None:
        return [f"- time in iterations: {in_iterations:.0f} s (sum of `time/iteration_s` in metrics.jsonl)"]
    rest = max(0.0, wall_seconds - in_iterations)
    return [
        f"- wall time: {wall_seconds:.0f} s = {in_iterations:.0f} s in iterations (sum of `time/iteration_s` in "
        f"metrics.jsonl) + {rest:.0f} s of setup, warm-up, evaluation and checkpoints"
    ]


def _abort_lines(records: Sequence[dict[str, Any]], config: dict[str, Any]) -> list[str]:
    """Aborted episodes (infrastructure failures, docs/failures.md): the run's total, per cause, and the worst
    iteration, against ``rollout.max_abort_rate``."""
    per_cause: dict[str, float] = {}
    total = 0.0
    for r in records:
        total += float(r.get("rollout/aborted_episodes", 0.0))
        for k, v in r.items():
            if k.startswith("rollout/aborted/"):
                per_cause[k.split("/", 2)[2]] = per_cause.get(k.split("/", 2)[2], 0.0) + float(v)
    if not total:
        return ["- aborted episodes: none", ""]
    worst = max(float(r.get("rollout/abort_rate", 0.0)) for r in records)
    causes = ", ".join(f"{c} {int(n)}" for c, n in sorted(per_cause.items()))
    limit = config.get("rollout", {}).get("max_abort_rate", "?")
    return [
        f"- aborted episodes: {int(total)} ({causes}); worst iteration {worst:.0%} "
        f"(limit rollout.max_abort_rate {limit}); their rows got no advantage and no loss",
        "",
    ]


def write_report(
    output_dir: str | Path,
    *,
    config: dict[str, Any],
    method: str,
    evals: Sequence[dict[str, Any]] = (),
    wall_seconds: float | None = None,
) -> Path:
    """Write ``report/`` under ``output_dir`` and return the path of ``report.md``."""
    out = Path(output_dir)
    rep = out / "report"
    rep.mkdir(parents=True, exist_ok=True)
    records = read_metrics(out / "metrics.jsonl")
    credit_path = out / "credit.json"
    credit = json.loads(credit_path.read_text(encoding="utf-8")) if credit_path.is_file() else {}
    figs: list[str] = []
    no_figures = "(no figures: no iteration was recorded)"
    try:
        if _plot_curves(records, rep / "learning_curves.png", f"{method} on {config['env']['id']}"):
            figs.append("learning_curves.png")
        if _plot_credit(credit, rep / "credit.png"):
            figs.append("credit.png")
    except ImportError:
        figs, no_figures = [], "(figures skipped: matplotlib is not installed)"
    last = records[-1] if records else {}
    lines = [f"# stepgym training report: {method} on `{config['env']['id']}`", ""]
    lines += [
        f"- model: `{config['model']['name']}`; iterations: {len(records)}; "
        f"batch: {config['rollout']['n_tasks']} tasks × {config['rollout']['group_size']} rollouts"
    ]
    lines += _wall_time(records, wall_seconds)
    lines.append("")
    keys = [
        "rollout/success",
        "rollout/episode_reward",
        "rollout/valid_action_ratio",
        "rollout/response_tokens",
        "rollout/episode_steps",
        "teacher/delta_std",
        "actor/pg_loss",
        "time/iteration_s",
    ]
    lines += ["| metric (last iteration) | value |", "|---|---|"]
    lines += [f"| {k} | {last[k]:.4g} |" for k in keys if isinstance(last.get(k), int | float)]
    lines.append("")
    lines += _abort_lines(records, config)
    lines += _eval_tables(evals)
    for f in figs:
        lines += [f"![{f}]({f})", ""]
    if not figs:
        lines += [no_figures, ""]
    lines += ["## Configuration", "", "```json", json.dumps(config, indent=1, default=str), "```", ""]
    path = rep / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
