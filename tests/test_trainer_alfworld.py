"""The trainer on the real ALFWorld games: a scripted backend drives full iterations through GroupEnv, the
ProAS graph is seeded from the stored walkthroughs, AHEAD's teacher sees the oracle's hints, and evaluation runs on
the fixed split order. Tiny in-process model (no downloads); short episodes to keep CI time down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("textworld")

from stepgym.shapers import ShapeConfig
from stepgym.trainers.config import (
    EnvConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
    WarmupConfig,
)
from stepgym.trainers.grpo import GRPOTrainer


def alfworld_config(out: Path, preset: str, data_dir: Path) -> TrainConfig:
    return TrainConfig(
        run=RunConfig(
            output_dir=str(out),
            iterations=1,
            save_every=1,
            progress=False,
            tensorboard=False,
            report=True,
            threads=1,
        ),
        env=EnvConfig(
            id="StepGym/ALFWorld-v0",
            train_split="train",
            eval_splits=("valid_seen",),
            max_steps=6,
            kwargs=json.dumps({"task_types": ["pick_and_place_simple"]}),
            history=2,
        ),
        model=ModelConfig(name="tiny", tokenizer_corpus_episodes=2, tiny_vocab=1024),
        rollout=RolloutConfig(
            n_tasks=2,
            group_size=3,
            backend="scripted",
            scripted_policy="noisy-expert:0.4",
            max_prompt_tokens=1024,
            max_response_tokens=64,
        ),
        shaper=ShapeConfig.from_preset(preset),
        optim=OptimConfig(lr=1e-4, micro_batch_tokens=4096),
        warmup=WarmupConfig(steps=0),
        eval=EvalConfig(limit=3, parallel=3),
    )


@pytest.mark.parametrize("preset", ["proas-gigpo", "ahead"])
def test_scripted_iteration_on_alfworld(tmp_path: Path, data_dir: Path, preset: str) -> None:
    cfg = alfworld_config(tmp_path / preset, preset, data_dir)
    tr = GRPOTrainer(cfg)
    result = tr.train()
    ro, shaping = tr.last
    tr.close()
    rows = ro.rows
    assert len(ro.trajectories) == 6 and rows
    # The replies are the scripted ReAct replies, parsed by the strict ALFWorld parser.
    assert all(r.response_text.startswith("<think>") for r in rows)
    assert sum(bool(r.record["format_valid"]) for r in rows) == len(rows)
    # A row's state (its record's, the batch's anchor) is the env's symbolic state, not the observation text.
    assert all(
        isinstance(r.record["state_key"], str) and r.record["state_key"] != r.observation for r in rows
    )
    rec = json.loads((tmp_path / preset / "metrics.jsonl").read_text().splitlines()[-1])
    if preset == "proas-gigpo":
        assert rec["arg/vertices"] > 0 and rec["arg/tasks"] >= 2  # seeded from the walkthroughs of the batch
        assert 0.0 < rec["arg/reasonable_ratio"] <= 1.0  # expert steps follow walkthrough edges
    else:
        assert rec["teacher/privileged_rows"] == len(rows)  # env feedback reaches every step
        assert rec["teacher/items"] == len(rows)
    assert rec["eval/valid_seen/success"] >= 0.0
    ev = result["evals"][-1]
    assert ev["n_tasks"] == 3 and set(ev["per_type"]) == {"pick_and_place_simple"}
    assert (tmp_path / preset / "checkpoints" / "step_000001" / "model.safetensors").is_file()
