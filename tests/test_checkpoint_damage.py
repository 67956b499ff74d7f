"""Damaged checkpoints: every file of a checkpoint damaged in several ways is named in one line, a resume falls back
to the newest checkpoint that reads and says so, and a broken ``latest`` is reported (issue 42, item 1).

One real tiny run (``stepgym train --preset credit-grpo``, 2 iterations, a checkpoint after each) is copied and
damaged per case; the resumes run the real CLI with ``--run.iterations 1`` so that nothing trains after the load.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAIN = [
    "train",
    "--preset",
    "credit-grpo",
    "--run.no-progress",
    "--eval.limit",
    "1",
    "--warmup.steps",
    "0",
    "--rollout.n-tasks",
    "2",
    "--rollout.group-size",
    "2",
    "--run.no-report",
]


def _stepgym(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STEPGYM_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "stepgym.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("ckpt") / "run"
    out = _stepgym(*TRAIN, "--run.iterations", "2", "--run.save-every", "1", "--run.output-dir", str(run))
    assert out.returncode == 0, out.stderr
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["latest", "step_000001", "step_000002"], names
    return run


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _resume(run: Path, *extra: str) -> subprocess.CompletedProcess:
    return _stepgym(*TRAIN, "--run.iterations", "1", "--run.output-dir", str(run), *extra)


# ---------------------------------------------------------------------------------------------------------------
# The damages
# ---------------------------------------------------------------------------------------------------------------
def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _garbage(f: Path) -> None:
    size = max(64, f.stat().st_size)
    f.write_bytes(bytes((i * 37 + 11) % 256 for i in range(size)))


def _empty(f: Path) -> None:
    f.write_bytes(b"")


def _missing(f: Path) -> None:
    f.unlink()


def _wrong_type(f: Path) -> None:
    """A file of the right format holding the wrong thing."""
    import torch

    if f.name.endswith(".json"):
        f.write_text(
            {"trainer_state.json": "[1, 2]", "rng.json": '{"bit_generator": "MT19937", "state": 7}'}[f.name]
        )
    elif f.name == "optimizer.pt":
        torch.save({"weights": torch.zeros(3)}, f)
    elif f.name == "torch_rng.pt":
        torch.save({"cpu": torch.zeros(3)}, f)
    else:
        raise AssertionError(f.name)


DAMAGES = {"truncated": _truncate, "garbage": _garbage, "empty": _empty, "missing": _missing}
FILES = [
    "trainer_state.json",
    "model.safetensors",
    "optimizer.pt",
    "rng.json",
    "torch_rng.pt",
    "tokenizer/tokenizer.json",
]
CASES = [(f, d) for f in FILES for d in DAMAGES] + [
    (f, "wrong type") for f in ("trainer_state.json", "optimizer.pt", "rng.json", "torch_rng.pt")
]


@pytest.mark.parametrize(("name", "damage"), CASES, ids=[f"{f}-{d}" for f, d in CASES])
def test_each_damaged_file_is_named_once(trained: Path, tmp_path: Path, name: str, damage: str) -> None:
    from stepgym.trainers.checkpoint import checkpoint_problems

    ckpt = tmp_path / "step_000002"
    shutil.copytree(trained / "checkpoints" / "step_000002", ckpt)
    assert checkpoint_problems(ckpt) == []
    {**DAMAGES, "wrong type": _wrong_type}[damage](ckpt / name)
    problems = checkpoint_problems(ckpt)
    assert len(problems) == 1, problems
    named = ckpt / name if "/" not in name else ckpt / "tokenizer"
    assert problems[0].startswith(f"{named}: ") and "\n" not in problems[0], problems


def _assert_no_traceback(out: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in out.stderr, out.stderr
    return [line for line in out.stderr.splitlines() if line.startswith("stepgym train: ")]


@pytest.mark.slow
def test_resume_names_every_damaged_file_and_falls_back(run: Path) -> None:
    """The newest checkpoint has every file damaged, each in another way: one line per file, then the resume
    takes step_000001 and says so."""
    newest = run / "checkpoints" / "step_000002"
    _truncate(newest / "model.safetensors")
    _garbage(newest / "optimizer.pt")
    _empty(newest / "rng.json")
    _wrong_type(newest / "torch_rng.pt")
    _truncate(newest / "trainer_state.json")
    _missing(newest / "tokenizer" / "tokenizer.json")
    _missing(newest / "tokenizer" / "tokenizer_config.json")
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 0, out.stderr
    lines = _assert_no_traceback(out)
    for name in (
        "model.safetensors",
        "optimizer.pt",
        "rng.json",
        "torch_rng.pt",
        "trainer_state.json",
        "tokenizer",
    ):
        assert sum(f"step_000002{os.sep}{name}: " in line for line in lines) == 1, (name, out.stderr)
    assert any("resuming from" in line and "step_000001" in line for line in lines), out.stderr
    assert "done: 1 iterations" in out.stdout


@pytest.mark.slow
def test_every_checkpoint_damaged_is_one_error(run: Path) -> None:
    for step in ("step_000001", "step_000002"):
        _garbage(run / "checkpoints" / step / "optimizer.pt")
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 1
    lines = _assert_no_traceback(out)
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and "no checkpoint in" in errors[0] and "optimizer.pt" in errors[0], out.stderr
    assert "older checkpoint" not in out.stderr  # no advice to use a checkpoint that does not exist


@pytest.mark.slow
def test_a_broken_latest_is_reported(run: Path) -> None:
    _garbage(run / "checkpoints" / "latest")
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 0, out.stderr
    lines = _assert_no_traceback(out)
    assert any(f"checkpoints{os.sep}latest: " in line for line in lines), out.stderr
    (run / "checkpoints" / "latest").write_text("step_000009\n")
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 0 and "names step_000009, which is not a complete checkpoint" in out.stderr


@pytest.mark.slow
def test_a_damaged_checkpoint_named_explicitly_points_to_the_older_one(run: Path) -> None:
    newest = run / "checkpoints" / "step_000002"
    _truncate(newest / "trainer_state.json")
    out = _resume(run, "--run.resume", str(newest))
    assert out.returncode == 1
    (error,) = _assert_no_traceback(out)
    assert (
        "trainer_state.json" in error
        and f"resume from {run / 'checkpoints' / 'step_000001'} instead" in error
    )


@pytest.mark.slow
def test_weights_of_another_shape_are_one_line(run: Path) -> None:
    """A file that reads but does not fit the run fails the load with one line naming it."""
    import torch
    from safetensors.torch import save_file

    save_file(
        {"model.embed_tokens.weight": torch.zeros(3, 3)},
        str(run / "checkpoints" / "step_000002" / "model.safetensors"),
    )
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 1
    (error,) = _assert_no_traceback(out)
    assert "model.safetensors: does not fit this run" in error, out.stderr
