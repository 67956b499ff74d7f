"""The trainer's CUDA path (skipped without a GPU): log-probs match the CPU path, and a bf16-autocast iteration
updates every parameter with a finite loss. ``benchmarks/gpu_check.py`` measures throughput and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from stepgym.shapers import ShapeConfig  # noqa: E402
from stepgym.trainers.config import (  # noqa: E402
    EnvConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
    WarmupConfig,
)
from stepgym.trainers.grpo import GRPOTrainer  # noqa: E402
from stepgym.trainers.samples import pack, response_logprobs  # noqa: E402


def _cfg(out: Path, precision: str, backend: str = "hf") -> TrainConfig:
    return TrainConfig(
        run=RunConfig(output_dir=str(out), iterations=1, progress=False, tensorboard=False, report=False),
        env=EnvConfig(id="StepGym/CreditToy-v0", history=1),
        model=ModelConfig(name="tiny", device="cuda", precision=precision, tokenizer_corpus_episodes=16),
        rollout=RolloutConfig(
            n_tasks=2,
            group_size=4,
            max_prompt_tokens=256,
            max_response_tokens=8,
            backend=backend,
            scripted_policy="noisy-expert:0.5",
        ),
        shaper=ShapeConfig.from_preset("ahead"),
        warmup=WarmupConfig(steps=0),
        eval=EvalConfig(limit=2),
    )


@pytest.mark.gpu
def test_cuda_logprobs_match_cpu(tmp_path: Path) -> None:
    tr = GRPOTrainer(_cfg(tmp_path / "a", "fp32", backend="scripted"))
    rows = tr.collect().rows[:16]
    args = ([r.prompt_ids for r in rows], [r.response_ids for r in rows])
    with torch.no_grad():
        gpu, _ = response_logprobs(tr.model.eval(), pack(*args, pad_id=tr.pad_id, device="cuda"))
        cpu, _ = response_logprobs(tr.model.to("cpu"), pack(*args, pad_id=tr.pad_id, device="cpu"))
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-4)
    tr.close()


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16-autocast", "bf16"])
def test_cuda_iteration_updates_every_parameter(tmp_path: Path, precision: str) -> None:
    tr = GRPOTrainer(_cfg(tmp_path / precision, precision))
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    m = tr.step()
    assert m["actor/pg_loss"] == m["actor/pg_loss"] and m["rollout/rows"] > 0
    changed = [n for n, p in tr.model.named_parameters() if not torch.equal(before[n], p)]
    assert len(changed) == len(before)
    assert next(tr.model.parameters()).is_cuda
    tr.close()
