"""Scale-out of the bundled trainer: env copies on worker processes give the same iteration as in-process copies,
and data-parallel training on 2 gloo ranks gives the same parameters and metrics as 1 rank on the same global
batch (tiny in-process model, CreditToy, the scripted backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from stepgym.shapers import ShapeConfig  # noqa: E402
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
from stepgym.trainers.distributed import group_shard  # noqa: E402
from stepgym.trainers.grpo import GRPOTrainer  # noqa: E402


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
    """The metrics that must not depend on the world size (times, rates and the dist/ record do)."""
    return {k: v for k, v in m.items() if not k.startswith(("time/", "perf/", "dist/"))}


def _iteration(out: Path, **rollout) -> tuple[dict[str, float], dict[str, torch.Tensor], str, np.ndarray]:
    """One trainer iteration: its metrics, parameters, trajectories (as text) and token advantages."""
    tr = GRPOTrainer(tiny_config(out, **rollout))
    try:
        m = tr.step()
        ro, shaping = tr.last
        if rollout.get("env_executor", "inprocess") != "inprocess":
            assert tr.collector._shared is not None and tr.collector._shared.num_workers == 2
        assert tr.collector.overlaps == tr.cfg.rollout.overlaps
        return _comparable(m), _params(tr.model), repr(ro.trajectories), shaping.token_advantages.copy()
    finally:
        tr.close()


def _assert_same_iteration(a, b) -> None:
    (m_a, p_a, t_a, adv_a), (m_b, p_b, t_b, adv_b) = a, b
    assert t_a == t_b
    assert np.array_equal(adv_a, adv_b)
    assert m_a == m_b
    assert m_a["rollout/mixed_groups"] > 0  # the batch carries a learning signal
    for name in p_a:
        assert torch.equal(p_a[name], p_b[name]), name


def test_process_executor_iteration_equals_inprocess(tmp_path: Path) -> None:
    ref = _iteration(tmp_path / "inprocess")
    _assert_same_iteration(_iteration(tmp_path / "process", env_executor="process", overlap="off"), ref)


def test_overlapped_iteration_equals_the_sequential_one(tmp_path: Path) -> None:
    """Overlap (auto: on with the process pool) pipelines two waves of groups; with its group-seeded requests the
    iteration is bitwise the sequential one (overlap off) and the in-process one."""
    on = _iteration(tmp_path / "on", env_executor="process")
    _assert_same_iteration(
        on, _iteration(tmp_path / "off", env_executor="process", overlap="off", group_seeds=True)
    )
    _assert_same_iteration(on, _iteration(tmp_path / "inprocess", group_seeds=True))


def test_group_seeded_requests_make_a_group_independent_of_its_batch(tmp_path: Path) -> None:
    """With per-group generators, a group's rollouts do not depend on which other groups share the backend
    calls: what lets W ranks with N/W groups each replay one rank with N groups."""
    tr = GRPOTrainer(tiny_config(tmp_path / "seeds"))
    try:
        ids = tr.train_task_ids
        tasks = [(ids[0], 11), (ids[1], 12), (ids[2], 13)]

        def play(which: list[int], call_seed: int) -> str:
            ro = tr.collector.collect(
                [tasks[i] for i in which],
                seed_rng=np.random.default_rng(call_seed),
                group_rngs=[np.random.default_rng([7, i]) for i in which],
            )
            return repr([t.steps for t in ro.trajectories])

        whole = play([0, 1, 2], 0)
        parts = play([0], 1)[:-1] + ", " + play([1, 2], 2)[1:]
        assert parts == whole
    finally:
        tr.close()


def test_the_hf_sampler_makes_a_seeded_request_independent_of_its_batch(tmp_path: Path) -> None:
    """HF generate samples each row from its own generator: a request with a seed gets the same reply alone, in
    any batch, under any call seed (what lets W ranks replay 1 rank with the default backend); an unseeded
    request's reply follows the call's seed."""
    import dataclasses

    from stepgym.trainers.backends import GenerationRequest, HFBackend

    cfg = tiny_config(tmp_path / "hf")
    tr = GRPOTrainer(dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, backend="hf")))
    try:
        assert isinstance(tr.backend, HFBackend)
        ids = [tr.tokenizer(f"look at thing {i} " * (i + 1))["input_ids"] for i in range(4)]
        seeded = [GenerationRequest(p, seed=100 + i) for i, p in enumerate(ids)]

        def replies(reqs: list, seed: int) -> list[list[int]]:
            return [g.response_ids for g in tr.backend.generate(reqs, seed=seed)]

        whole = replies(seeded, 1)
        assert replies(seeded[:1], 2) + replies(seeded[1:], 3) == whole
        assert replies(seeded[::-1], 4) == whole[::-1]
        assert len({tuple(r) for r in whole}) == len(whole)  # sampled, not all the same
        plain = [GenerationRequest(p) for p in ids]
        assert replies(plain, 5) == replies(plain, 5) and replies(plain, 5) != replies(plain, 6)
        before = torch.random.get_rng_state()
        replies(seeded, 1)
        assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is left alone
    finally:
        tr.close()


def test_a_run_records_its_world_size(tmp_path: Path) -> None:
    """config.json, the checkpoint's trainer state and every metrics line say how many ranks ran and each rank's
    share of the groups; a config that insists on another world size is refused before anything is built."""
    import dataclasses

    cfg = tiny_config(tmp_path / "one")
    tr = GRPOTrainer(cfg)
    try:
        tr.train()
    finally:
        tr.close()
    run = json.loads((tmp_path / "one" / "config.json").read_text(encoding="utf-8"))
    assert run["run"]["world_size"] == 1 and run["distributed"] == {"world_size": 1, "rank_groups": [[0, 4]]}
    state = json.loads(
        (tmp_path / "one/checkpoints/step_000001/trainer_state.json").read_text(encoding="utf-8")
    )
    assert state["world_size"] == 1 and state["rank_groups"] == [[0, 4]]
    line = json.loads((tmp_path / "one" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert line["dist/world_size"] == 1 and line["dist/rank_0/groups"] == 4 and line["dist/rank_0/rows"] > 0
    two = dataclasses.replace(
        cfg, run=dataclasses.replace(cfg.run, world_size=2, output_dir=str(tmp_path / "x"))
    )
    with pytest.raises(ValueError, match=r"run\.world_size=2 but this run has 1 rank"):
        GRPOTrainer(two)


def test_group_shards_are_whole_contiguous_and_cover_the_batch() -> None:
    for n, world in [(4, 2), (5, 2), (7, 3), (3, 3)]:
        shares = [group_shard(n, r, world) for r in range(world)]
        assert [g for sh in shares for g in sh] == list(range(n))
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    with pytest.raises(ValueError, match="whole group"):
        group_shard(1, 0, 2)


# ---------------------------------------------------------------------------------------------------------------
# Data-parallel: 2 gloo ranks == 1 rank on the same global batch; resume with the same world size is exact
# ---------------------------------------------------------------------------------------------------------------
TRAIN_ARGS = [
    "--rollout.backend", "scripted",
    "--rollout.scripted-policy", "noisy-expert:0.5",
    "--rollout.n-tasks", "4",
    "--rollout.group-size", "3",
    "--rollout.max-prompt-tokens", "192",
    "--rollout.max-response-tokens", "8",
    "--model.tokenizer-corpus-episodes", "8",
    "--env.history", "1",
    "--env.eval-splits",
    "--optim.lr", "1e-3",
    "--optim.mini-batches", "2",
    "--shaper.base", "gigpo",
    "--shaper.proas",
    "--shaper.invalid-penalty", "0.1",
    "--run.iterations", "2",
    "--run.save-every", "1",
    "--run.threads", "1",
    "--run.no-progress",
    "--run.no-tensorboard",
    "--run.no-report",
]  # fmt: skip


def _torchrun(nproc: int, out: Path, *extra: str) -> None:
    _torchrun_args(nproc, out, TRAIN_ARGS, *extra)


def _torchrun_args(nproc: int, out: Path, args: list[str], *extra: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd += ["-m", "stepgym.cli", "train", *args, "--run.output-dir", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out / "checkpoints" / f"step_{step:06d}" / "model.safetensors"))


def _metric_lines(out: Path) -> list[dict[str, float]]:
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [_comparable(json.loads(x)) for x in lines]


@pytest.mark.slow
def test_two_gloo_ranks_equal_one_rank_and_resume_exactly(tmp_path: Path) -> None:
    one, two, resumed = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    _torchrun(1, one)
    _torchrun(2, two)
    m1, m2 = _metric_lines(one), _metric_lines(two)
    assert len(m1) == len(m2) == 2  # rank 0 alone writes the metrics
    for a, b in zip(m1, m2, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-6, abs=1e-6), k
    assert m1[0]["rollout/mixed_groups"] > 0 and m1[0]["actor/optimizer_steps"] == 2
    assert m1[-1]["arg/added_trajectories"] > 0  # ProAS graphs grew (from all ranks' groups on every rank)
    assert (one / "checkpoints/step_000002/arg/graph.json").read_bytes() == (
        two / "checkpoints/step_000002/arg/graph.json"
    ).read_bytes()
    w0, w1, w2 = _weights(one, 1), _weights(one, 2), _weights(two, 2)
    moved = max(float((w1[k] - w0[k]).abs().max()) for k in w1)
    diff = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    assert moved > 1e-3 and diff < 1e-4, (moved, diff)  # equal up to float summation order, far below a step
    _torchrun(2, resumed, "--run.resume", str(two / "checkpoints" / "step_000001"))
    w3 = _weights(resumed, 2)
    assert all(torch.equal(w3[k], w2[k]) for k in w2)
    assert _metric_lines(resumed)[-1] == pytest.approx(m2[-1])


HF_ARGS = [a for a in TRAIN_ARGS if a not in ("--rollout.backend", "scripted", "--rollout.scripted-policy",
                                             "noisy-expert:0.5")] + ["--warmup.steps", "20"]  # fmt: skip


def _plain(out: Path, *extra: str) -> None:
    cmd = [sys.executable, "-m", "stepgym.cli", "train", *HF_ARGS, "--run.output-dir", str(out), *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    proc = subprocess.run(
        cmd, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_two_gloo_ranks_equal_a_plain_run_with_the_hf_backend(tmp_path: Path) -> None:
    """The default backend (HF generate, sampled at temperature 1) and the default seeding: `torchrun
    --nproc_per_node 2` ends where the same command on one plain process does, and records that it ran on 2."""
    one, two = tmp_path / "one", tmp_path / "two"
    _plain(one)
    _torchrun_args(2, two, HF_ARGS)
    m1, m2 = _metric_lines(one), _metric_lines(two)
    assert len(m1) == len(m2) == 2
    for a, b in zip(m1, m2, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-6, abs=1e-6), k
    w0, w1, w2 = _weights(one, 1), _weights(one, 2), _weights(two, 2)
    moved = max(float((w1[k] - w0[k]).abs().max()) for k in w1)
    diff = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    print("moved", moved, "diff", diff)
    assert moved > 1e-3 and diff < 1e-4, (moved, diff)  # equal up to float summation order, far below a step
    run = json.loads((two / "config.json").read_text(encoding="utf-8"))
    assert run["run"]["world_size"] == 2 and run["distributed"]["rank_groups"] == [[0, 2], [2, 4]]
    state = json.loads((two / "checkpoints/step_000002/trainer_state.json").read_text(encoding="utf-8"))
    assert state["world_size"] == 2 and state["rank_groups"] == [[0, 2], [2, 4]]
    line = json.loads((two / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert line["dist/world_size"] == 2 and line["dist/rank_0/groups"] == line["dist/rank_1/groups"] == 2
    assert (
        json.loads((one / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[-1])["dist/world_size"]
        == 1
    )
