"""Metrics per iteration: one JSON line each in ``metrics.jsonl`` and, when the package is there, TensorBoard.

``metrics.jsonl`` is the source of truth (the report is drawn from it, and a resumed run appends to it after
dropping the lines of iterations that will be redone). Values are plain floats; keys are ``area/name``
(``rollout/success``, ``adv/gigpo/std``, ``teacher/delta_std``, ``time/update_s``, ``eval/valid_seen/success``).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from stepgym.atomic import atomic_write_text
from stepgym.trainers.distributed import group_shard

__all__ = ["MetricsLogger", "NoMetrics", "read_metrics", "timing_metrics", "world_metrics"]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl`` (a torn last line, from a crash mid-write, is skipped)."""
    out = []
    p = Path(path)
    if not p.is_file():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _iteration(record: Any) -> float:
    """A metrics record's iteration (a record that has none, or not a number, sorts after every iteration)."""
    it = record.get("iteration") if isinstance(record, dict) else None
    return it if isinstance(it, int | float) and not isinstance(it, bool) else math.inf


class MetricsLogger:
    """Append-only JSONL plus optional TensorBoard ``SummaryWriter`` under ``output_dir``.

    ``resume_from`` truncates the JSONL to records with ``iteration <= resume_from`` (those after it are redone).
    """

    def __init__(
        self, output_dir: str | Path, *, tensorboard: bool = True, resume_from: int | None = None
    ) -> None:
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        if (
            resume_from is not None
        ):  # the interrupted run's lines after the checkpoint are redone: written once
            kept = [r for r in read_metrics(self.path) if _iteration(r) <= resume_from]
            atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
        elif self.path.exists():
            self.path.unlink()
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"))
            except ImportError:
                warnings.warn(
                    "tensorboard is not installed; metrics go to metrics.jsonl only "
                    "(pip install 'stepgym[train]')",
                    stacklevel=2,
                )

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        record = {"iteration": int(iteration)}
        for k, v in metrics.items():
            if isinstance(v, bool | int | float) and not isinstance(v, bool):
                fv = float(v)
                record[k] = fv if math.isfinite(fv) else None
            elif isinstance(v, bool):
                record[k] = float(v)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        if self.tb is not None:
            for k, v in record.items():
                if k != "iteration" and v is not None:
                    self.tb.add_scalar(k, v, global_step=iteration)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None


class NoMetrics:
    """The metrics sink of a rank other than 0 (rank 0 alone writes metrics.jsonl and TensorBoard)."""

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


def timing_metrics(t: dict[str, float], full: Any, *, epochs: int, teacher_s: float) -> dict[str, float]:
    """``time/*`` and ``perf/*`` of one iteration from its clock readings ``t`` (``start``, ``rollout``,
    ``old_logp``, ``end``; ``shape`` and ``update`` are durations) and its global batch ``full``."""
    n_train_tok = sum(len(r.prompt_ids) + len(r.response_ids) for r in full.rows)
    wall = t["end"] - t["start"]
    return {
        "time/iteration_s": wall,
        "time/rollout_s": t["rollout"] - t["start"],
        "time/generate_s": float(full.stats.get("gen_seconds", 0.0)),  # the rollout's model part ...
        "time/env_s": float(
            full.stats.get("env_seconds", 0.0)
        ),  # ... and its env part (they overlap when piped)
        "time/old_logp_s": t["old_logp"] - t["rollout"],
        "time/shape_s": t["shape"],
        "time/update_s": t["update"],
        "perf/rollout_tokens_per_s": full.stats["gen_tokens"] / max(full.stats["gen_seconds"], 1e-9),
        "perf/train_tokens_per_s": n_train_tok * epochs / max(t["update"], 1e-9),
        "perf/teacher_share": teacher_s / max(wall, 1e-9),
    }


def world_metrics(world: int, n_groups: int, rank_rows: list[int]) -> dict[str, float]:
    """``dist/world_size`` and, per rank, ``dist/rank_R/groups`` (its share of the batch's groups) and
    ``dist/rank_R/rows`` (the model turns it collected): a run says in its metrics that it was data-parallel."""
    out = {"dist/world_size": float(world)}
    for r, n_rows in enumerate(rank_rows):
        out[f"dist/rank_{r}/groups"] = float(len(group_shard(n_groups, r, world)))
        out[f"dist/rank_{r}/rows"] = float(n_rows)
    return out
