"""The bundled trainer runs each graph credit base end to end (docs/shapers.md §10–§14): a scripted iteration on
CreditToy fills StepBatch's next states from the env's state keys and shapes a finite batch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from test_trainer_core import scripted, tiny_config

from stepgym.shapers import ShapeConfig
from stepgym.steps.row import rows_step_batch
from stepgym.trainers.grpo import GRPOTrainer


@pytest.mark.parametrize(
    "preset", ["graphgpo-alfworld", "hgpo-alfworld", "rewardflow-alfworld", "g2po-alfworld"]
)
def test_scripted_iteration_with_each_graph_base(tmp_path: Path, preset: str) -> None:
    cfg = scripted(tiny_config(tmp_path / preset, ShapeConfig.from_preset(preset)), "noisy-expert:0.3")
    cfg = replace(cfg, run=replace(cfg.run, iterations=1))
    tr = GRPOTrainer(cfg)
    try:
        ro = tr.collect()
        batch, _ = rows_step_batch(
            ro.rows, reward_scale=10.0, invalid_rule="format_or_inadmissible", pad_id=tr.pad_id
        )
        # the state after row t is the state row t + 1 starts in (exact state keys)
        for i, (a, b) in enumerate(zip(ro.rows, ro.rows[1:], strict=False)):
            if a.traj == b.traj:
                assert batch.next_obs[i] == batch.anchor_obs[i + 1] == b.record["state_key"] is not None
        assert batch.next_obs is not None and batch.step_index is not None
        tr.train()
    finally:
        tr.close()
    rec = json.loads((tmp_path / preset / "metrics.jsonl").read_text().splitlines()[-1])
    assert all(np.isfinite(v) for v in rec.values() if isinstance(v, float)), rec
    assert 0.0 <= rec["rollout/success"] <= 1.0


def test_oracle_runs_with_value_labels_and_is_refused_without(tmp_path: Path) -> None:
    shaper = ShapeConfig.from_preset("oracle")
    cfg = scripted(tiny_config(tmp_path / "oracle", shaper), "noisy-expert:0.3")
    cfg = replace(cfg, run=replace(cfg.run, iterations=1), env=replace(cfg.env, value_labels=True))
    tr = GRPOTrainer(cfg)
    try:
        ro = tr.collect()
        batch, _ = rows_step_batch(
            ro.rows, reward_scale=10.0, invalid_rule="format_or_inadmissible", pad_id=tr.pad_id
        )
        assert batch.true_gain is not None and (batch.true_gain <= 1.0).all()  # +1 = an optimal step
        tr.train()
    finally:
        tr.close()
    bare = scripted(tiny_config(tmp_path / "bare", shaper), "noisy-expert:0.3")
    tr = GRPOTrainer(replace(bare, run=replace(bare.run, iterations=1)))
    try:
        with pytest.raises(ValueError, match="true_gain"):
            tr.train()
    finally:
        tr.close()
