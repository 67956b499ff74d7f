"""Failure semantics in the bundled trainer (docs/failures.md): a worker process killed mid-run of ``stepgym train``
aborts the episodes it held and the run completes; aborted rows leave the advantages and the loss; the abort rate
per iteration and per cause is in the metrics; above ``rollout.max_abort_rate`` the run stops with one line naming
the causes and writes no checkpoint from that batch; a resumed run goes on counting."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from stepgym.cli import main


def _common(out: Path, *extra: str) -> list[str]:
    return [
        "--preset", "credit-grpo",
        "--run.output-dir", str(out),
        "--run.no-progress",
        "--run.no-tensorboard",
        "--run.no-report",
        "--rollout.backend", "scripted",
        "--rollout.scripted-policy", "noisy-expert:0.3",
        "--rollout.n-tasks", "4",
        "--rollout.group-size", "3",
        "--warmup.steps", "0",
        "--model.tokenizer-corpus-episodes", "8",
        "--eval.limit", "2",
        *extra,
    ]  # fmt: skip


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_worker_killed_mid_run_of_stepgym_train_does_not_end_the_run(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    # the fault wrapper kills the worker process holding an env at seeded steps (here: in iteration 3)
    args = _common(
        out,
        "--run.iterations", "3",
        "--rollout.env-executor", "process",
        "--rollout.env-workers", "4",
        "--rollout.faults", "kill=0.01,seed=0",
        "--rollout.max-abort-rate", "0.5",
    )  # fmt: skip
    assert main(["train", *args]) == 0
    m = _metrics(out)
    assert [x["iteration"] for x in m] == [1, 2, 3]  # every iteration ran
    killed = [x for x in m if x.get("rollout/aborted/worker_death", 0) > 0]
    assert killed, "no worker was killed: the test would prove nothing"
    assert all(0 < x["rollout/abort_rate"] <= 0.5 for x in killed)
    assert (out / "checkpoints" / "latest").is_file()
    # the rows of the aborted episodes left the credit: the credit file of the last iteration says so
    assert m[-1]["rollout/abort_rate_total"] == pytest.approx(
        sum(x["rollout/aborted_episodes"] for x in m) / 36
    )


def test_an_abort_rate_above_the_limit_stops_the_run_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "stopped"
    args = _common(
        out, "--run.iterations", "2", "--rollout.faults", "exception=0.3,seed=0", "--run.save-every", "1"
    )
    assert main(["train", *args]) == 1
    # the flaky env aborted some of the tokenizer corpus's episodes too: one warning line counts them
    err = capsys.readouterr().err.strip().splitlines()
    corpus = [x for x in err if x.startswith("tokenizer corpus:")]
    err = [x for x in err if x not in corpus]
    assert len(corpus) <= 1
    assert (
        len(err) == 1 and "env_exception" in err[0] and "max_abort_rate" in err[0] and "iteration 1" in err[0]
    )
    assert not (out / "checkpoints" / "latest").exists()  # nothing written from that batch


def test_aborted_rows_leave_the_loss_and_a_resumed_run_goes_on_counting(tmp_path: Path) -> None:
    from dataclasses import replace

    from stepgym.trainers.config import RunConfig
    from stepgym.trainers.grpo import GRPOTrainer
    from stepgym.trainers.presets import get_preset

    cfg = get_preset("credit-grpo")
    cfg = replace(
        cfg,
        run=RunConfig(
            output_dir=str(tmp_path / "r"), iterations=1, save_every=1, progress=False, tensorboard=False,
            report=False, credit_trajectories=0, threads=1,
        ),
        rollout=replace(
            cfg.rollout,
            backend="scripted", scripted_policy="noisy-expert:0.3", n_tasks=4, group_size=3,
            faults="exception=0.05,seed=2", max_abort_rate=1.0,
        ),
        warmup=replace(cfg.warmup, steps=0),
        model=replace(cfg.model, tokenizer_corpus_episodes=8),
        env=replace(cfg.env, eval_splits=()),
    )  # fmt: skip
    tr = GRPOTrainer(cfg)
    try:
        tr.train()
        ro, shaping = tr.last
        ab = np.array([r.aborted for r in ro.rows])
        assert ab.any(), "no episode was aborted: pick another fault seed"
        assert not shaping.token_advantages[ab].any()  # aborted rows: advantage 0 ...
        assert not shaping.shaped.token_loss_mask[ab].any()  # ... and out of the loss mask
        saved = dict(tr.abort_totals)
        assert saved["episodes"] == 12 and saved["env_exception"] == sum(t.aborted for t in ro.trajectories)
    finally:
        tr.close()
    state = json.loads((tmp_path / "r" / "checkpoints" / "step_000001" / "trainer_state.json").read_text())
    assert state["aborts"] == saved
    resumed = GRPOTrainer(
        replace(
            cfg,
            run=replace(cfg.run, resume=str(tmp_path / "r" / "checkpoints" / "step_000001"), iterations=2),
        )
    )
    try:
        assert resumed.abort_totals == saved
        resumed.train()
        assert resumed.abort_totals["episodes"] == 24
    finally:
        resumed.close()
