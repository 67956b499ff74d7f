"""Scale-out of the bundled trainer: env copies on worker processes give the same iteration as in-process copies,
and data-parallel training on 2 gloo ranks gives the same parameters and metrics as 1 rank on the same global
batch (tiny in-process model, CreditToy, the scripted backend)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from stepgym.trainers.config import (  # noqa: E402
    EnvConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
    WarmupConfig,
)
from stepgym.trainers.grpo import GRPOTrainer  # noqa: E402
from stepgym.trainers.shapers import ShapeConfig  # noqa: E402


def tiny_config(out: Path, **rollout) -> TrainConfig:
    return TrainConfig(
        run=RunConfig(
            output_dir=str(out),
            iterations=1,
            save_every=0,
            progress=False,
            tensorboard=False,
            report=False,
            threads=1,
            credit_trajectories=0,
        ),
        env=EnvConfig(id="StepGym/CreditToy-v0", history=1, eval_splits=()),
        model=ModelConfig(name="tiny", tokenizer_corpus_episodes=8),
        rollout=RolloutConfig(
            n_tasks=4,
            group_size=3,
            max_prompt_tokens=192,
            max_response_tokens=8,
            backend="scripted",
            scripted_policy="noisy-expert:0.5",
            **rollout,
        ),
        shaper=ShapeConfig.from_preset("gigpo-alfworld"),
        optim=OptimConfig(lr=1e-3),
        warmup=WarmupConfig(steps=0),
        eval=EvalConfig(limit=2, parallel=2),
    )


def _params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _comparable(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if not k.startswith(("time/", "perf/"))}


def test_process_executor_iteration_equals_inprocess(tmp_path: Path) -> None:
    results = []
    for kind in ("inprocess", "process"):
        tr = GRPOTrainer(tiny_config(tmp_path / kind, env_executor=kind, env_workers=2))
        try:
            m = tr.step()
            traj = repr(tr.last[0].trajectories)
            results.append((_comparable(m), _params(tr.model), traj))
            if kind == "process":
                assert tr.collector._shared is not None and tr.collector._shared.num_workers == 2
        finally:
            tr.close()
    (m_a, p_a, t_a), (m_b, p_b, t_b) = results
    assert t_a == t_b
    assert m_a == m_b
    assert m_a["rollout/mixed_groups"] > 0  # the batch carries a learning signal
    for name in p_a:
        assert torch.equal(p_a[name], p_b[name]), name
