"""The bundled trainer's recording hook: each iteration's batch, with the advantages of every compared shaper.

The trainer calls :meth:`TrainerRecorder.record` once per iteration with what it already has (the rollouts, the
shapers' :class:`~stepgym.shapers.StepBatch`, the shaped result and the ARG labels); everything else is
here, so recording never changes training: it reads the batch, draws its group sample from its *own* generator
(seeded by ``run.seed``), and the comparison shapers run on the same ``StepBatch`` through
:func:`~stepgym.shapers.shape_advantages` (no advantage maths of its own).

Per recorded step: the model's text as tokens (one string per generated token, decoded one by one so the viewer
can colour each), the configured shaper's per-step value (``ShapedAdvantages.step_advantages``, before token
reweighting) and per-token values (the advantages the loss used), the same for each comparison shaper, the ARG
labels (Rea/PA) the trainer computed with Future-Drift from them (``stepgym.labels.future_drift``), and AHEAD's
hints.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from stepgym.labels import future_drift
from stepgym.recording import FILE_NAME, EpisodeWriter, RecordConfig, RecordExtras, trajectory_records
from stepgym.recording.episode_file import truncate_after

__all__ = ["TrainerRecorder"]

log = logging.getLogger(__name__)

_DECIMALS = 6  #: advantages are stored rounded to 6 decimals (compact, and far below any visible difference)


class TrainerRecorder:
    """Writes ``<output_dir>/episodes.jsonl.gz`` for a :class:`~stepgym.trainers.grpo.GRPOTrainer`."""

    def __init__(self, trainer: Any, config: RecordConfig) -> None:
        from stepgym.shapers import ShapeConfig

        self.cfg = config
        self.tokenizer = trainer.tokenizer
        self.analyzer = trainer.analyzer
        self.method = trainer.cfg.method
        self.rng = random.Random(trainer.cfg.run.seed)
        configured = trainer.cfg.shaper
        presets = {name: ShapeConfig.from_preset(name) for name in config.compare}
        self.compare = {name: sc for name, sc in presets.items() if sc != configured}
        self._skipped: set[str] = set()
        header = {
            "source": "train",
            "method": self.method,
            "env_id": trainer.cfg.env.id,
            "shapers": [self.method, *self.compare],
            "shaper_configs": {self.method: asdict(configured)}
            | {k: asdict(v) for k, v in self.compare.items()},
            "record": asdict(config),
        }
        path = Path(trainer.out) / FILE_NAME
        if getattr(trainer, "resumed_from", None) is not None:
            # what the interrupted run recorded after its last checkpoint is played again: recorded once
            dropped = truncate_after(path, trainer.iteration)
            if dropped:
                log.info(
                    f"{path}: cut {dropped} record(s) of iterations after {trainer.iteration}, written after the "
                    "checkpoint this run resumes from"
                )
        elif path.exists():
            path.unlink()  # a fresh run in this folder: its recording starts empty, as metrics.jsonl does
        self.writer = EpisodeWriter(path, header, budget_bytes=int(config.budget_mb * 2**20))

    @classmethod
    def create(cls, trainer: Any) -> TrainerRecorder | None:
        """The recorder the trainer's config asks for (None when recording is off)."""
        cfg = getattr(trainer.cfg, "record", None) or RecordConfig()
        return cls(trainer, cfg) if cfg.enabled else None

    def _comparisons(self, batch: Any, update_index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        from stepgym.shapers import shape_advantages

        out, notes = {}, []
        for name, sc in self.compare.items():
            try:
                out[name] = shape_advantages(batch, sc, update_index=update_index)
            except ValueError as exc:  # the batch lacks this shaper's inputs (labels, teacher gaps)
                if name not in self._skipped:
                    self._skipped.add(name)
                    notes.append({"kind": "note", "message": f"shaper {name} not compared: {exc}"})
        return out, notes

    def record(self, iteration: int, ro: Any, batch: Any, shaping: Any, labels: Any = (None, None)) -> bool:
        """Record iteration ``iteration`` (1-based, as in metrics.jsonl); False when skipped or over budget."""
        if self.writer.full or (iteration - 1) % max(1, self.cfg.every):
            return False
        n_groups = len(ro.task_ids)
        groups = list(range(n_groups))
        if 0 < self.cfg.groups < n_groups:
            groups = sorted(self.rng.sample(groups, self.cfg.groups))
        shaped = {self.method: shaping.shaped}
        others, records = self._comparisons(batch, iteration - 1)
        shaped.update(others)
        index = {(r.traj, r.t): i for i, r in enumerate(ro.rows)}
        mask = shaping.mask
        rea, pa = labels if labels is not None else (None, None)
        trajs = [g * ro.group_size + k for g in groups for k in range(ro.group_size)]
        analyses = self._hints([ro.trajectories[i] for i in trajs])
        succ = ro.successes
        for pos, tr in enumerate(trajs):
            traj = ro.trajectories[tr]
            rows = [index[(tr, t)] for t in range(len(traj.steps))]
            adv = {name: [_adv(sh, i, int(mask[i].sum())) for i in rows] for name, sh in shaped.items()}
            drift = future_drift([bool(pa[i]) for i in rows]) if pa is not None else None
            extra = []
            for t, i in enumerate(rows):
                e: dict[str, Any] = {"tokens": self._token_texts(ro.rows[i].response_ids)}
                if rea is not None and pa is not None and drift is not None:
                    e.update(rea=bool(rea[i]), pa=bool(pa[i]), future_drift=float(drift[t]))
                extra.append(e)
            an = analyses[pos] if analyses is not None else None
            records += trajectory_records(
                traj,
                iteration=iteration,
                group=ro.traj_group[tr],
                rollout=tr % ro.group_size,
                extras=RecordExtras(
                    won=succ[tr],
                    peer_hindsight=ro.hindsight[tr],
                    advantages=adv,
                    step_extra=extra,
                    hints=None if an is None else an.hints,
                    error_steps=None if an is None else an.error_steps,
                ),
                max_text_chars=self.cfg.max_text_chars,
            )
        return self.writer.write(records)

    def _hints(self, trajectories: list[Any]) -> list[Any] | None:
        """AHEAD's hints for the recorded trajectories (the trainer's analyzer; the oracle is deterministic)."""
        if self.analyzer is None:
            return None
        from stepgym.wrappers.hints import analyze_many

        return analyze_many(trajectories, self.analyzer, failure_only=True)

    def _token_texts(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.decode([i]) for i in ids]


def _adv(shaped: Any, row: int, n_tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {"step": round(float(shaped.step_advantages[row]), _DECIMALS)}
    if shaped.token_advantages is not None:
        values = np.asarray(shaped.token_advantages[row, :n_tokens], dtype=float)
        out["tokens"] = np.round(values, _DECIMALS).tolist()
    return out
