"""Damaged checkpoints: every file of a checkpoint damaged in several ways is named in one line, a resume falls back
to the newest checkpoint that reads and says so, and a broken ``latest`` is reported (issue 42, item 1). Damage
that still parses (a flipped byte in the weights, an edited iteration) is caught by the manifest's checksums, a
``latest`` that is not a file is repaired at save, and a resumed run writes every metrics line and recorded
episode once (issue 52, item 3).

One real tiny run (``stepgym train --preset credit-grpo``, 2 iterations, a checkpoint after each) is copied and
damaged per case; the resumes run the real CLI with ``--run.iterations 1`` so that nothing trains after the load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
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

    from stepgym.trainers.checkpoint import _manifest_of

    ckpt = run / "checkpoints" / "step_000002"
    save_file({"model.embed_tokens.weight": torch.zeros(3, 3)}, str(ckpt / "model.safetensors"))
    # a manifest that matches (the file was written as it is): the checksums pass, the load names the misfit
    (ckpt / "manifest.json").write_text(json.dumps(_manifest_of(ckpt)))
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 1
    (error,) = _assert_no_traceback(out)
    assert "model.safetensors: does not fit this run" in error, out.stderr


# ---------------------------------------------------------------------------------------------------------------
# Checksums (issue 52): damage that still parses
# ---------------------------------------------------------------------------------------------------------------
def _flip_middle(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


def _edit_iteration(f: Path) -> None:
    state = json.loads(f.read_text())
    state["iteration"] = 7
    f.write_text(json.dumps(state, indent=1, sort_keys=True))


def _copy_newest(trained: Path, tmp_path: Path) -> Path:
    ckpt = tmp_path / "step_000002"
    shutil.copytree(trained / "checkpoints" / "step_000002", ckpt)
    return ckpt


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("model.safetensors", _flip_middle),
        ("optimizer.pt", _flip_middle),
        ("trainer_state.json", _edit_iteration),
        ("tokenizer/tokenizer.json", _flip_middle),
    ],
    ids=["weights-flipped-byte", "optimizer-flipped-byte", "edited-iteration", "tokenizer-flipped-byte"],
)
def test_damage_that_still_parses_is_refused_by_its_checksum(
    trained: Path, tmp_path: Path, name: str, damage: Callable[[Path], None]
) -> None:
    from stepgym.trainers.checkpoint import checkpoint_problems

    ckpt = _copy_newest(trained, tmp_path)
    damage(ckpt / name)
    problems = checkpoint_problems(ckpt)
    assert len(problems) == 1, problems
    part = ckpt / name.split("/")[0]
    assert problems[0].startswith(f"{part}: ") and "SHA-256" in problems[0] and "\n" not in problems[0]


def test_a_flipped_weight_byte_passes_the_structure_check_alone(trained: Path, tmp_path: Path) -> None:
    """Why checksums are needed: the header of a weights file with a flipped byte in its data still reads."""
    from stepgym.trainers.checkpoint import _safetensors_problem

    ckpt = _copy_newest(trained, tmp_path)
    _flip_middle(ckpt / "model.safetensors")
    assert _safetensors_problem(ckpt / "model.safetensors") == ""


def test_a_deleted_or_damaged_manifest_is_damage(trained: Path, tmp_path: Path) -> None:
    from stepgym.trainers.checkpoint import checkpoint_problems

    ckpt = _copy_newest(trained, tmp_path)
    (ckpt / "manifest.json").unlink()
    (problem,) = checkpoint_problems(ckpt)
    assert problem.startswith(f"{ckpt / 'manifest.json'}: missing")
    (ckpt / "manifest.json").write_text('{"files": 3}')
    (problem,) = checkpoint_problems(ckpt)
    assert problem.startswith(f"{ckpt / 'manifest.json'}: cannot be read")


def test_a_checkpoint_from_before_manifests_loads_with_a_warning(
    trained: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Decision: a checkpoint written before manifests existed (no manifest, no ``checksums`` in its state) is
    resumed, after its structure checks, with one warning line saying its checksums could not be checked."""
    from stepgym.trainers.checkpoint import checkpoint_problems, resume_path

    root = tmp_path / "checkpoints"
    shutil.copytree(trained / "checkpoints", root)
    for ckpt in root.glob("step_*"):
        (ckpt / "manifest.json").unlink()
        state = json.loads((ckpt / "trainer_state.json").read_text())
        del state["checksums"]
        (ckpt / "trainer_state.json").write_text(json.dumps(state))
        assert checkpoint_problems(ckpt) == []
    with caplog.at_level("WARNING", logger="stepgym.trainers.checkpoint"):
        assert resume_path("auto", root) == root / "step_000002"
    (line,) = [r.getMessage() for r in caplog.records]
    assert "has no manifest.json" in line and "structure only" in line


def test_latest_replaced_by_a_folder_is_repaired_at_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from stepgym.trainers.checkpoint import find_latest, save_checkpoint

    def part(d: Path) -> None:
        (d / "rng.json").write_text("{}")

    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, {"iteration": 1}, {"rng": part})
    (root / "latest").unlink()
    (root / "latest").mkdir()
    (root / "latest" / "somebody's.txt").write_text("kept")
    with caplog.at_level("WARNING", logger="stepgym.trainers.checkpoint"):
        save_checkpoint(root, 2, {"iteration": 2}, {"rng": part})
    assert (root / "latest").read_text() == "step_000002\n"
    assert (root / "latest.moved-1" / "somebody's.txt").read_text() == "kept"
    (line,) = [r.getMessage() for r in caplog.records]
    assert "was not a file" in line and "latest.moved-1" in line
    assert find_latest(root) == root / "step_000002"
    manifest = json.loads((root / "step_000002" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["rng.json", "trainer_state.json"]


@pytest.mark.slow
def test_resume_refuses_a_flipped_byte_and_falls_back(run: Path) -> None:
    _flip_middle(run / "checkpoints" / "step_000002" / "model.safetensors")
    out = _resume(run, "--run.resume", "auto")
    assert out.returncode == 0, out.stderr
    lines = _assert_no_traceback(out)
    damaged = [line for line in lines if "model.safetensors: " in line]
    assert len(damaged) == 1 and "SHA-256" in damaged[0], out.stderr
    assert sum("resuming from" in line and "step_000001" in line for line in lines) == 1, out.stderr


# ---------------------------------------------------------------------------------------------------------------
# kill -9 and resume: every record written once
# ---------------------------------------------------------------------------------------------------------------
def _records_per_iteration(run: Path) -> tuple[list[int], dict[tuple[int, int, int], int]]:
    from collections import Counter

    from stepgym.recording import episode_key, read_records
    from stepgym.trainers.metrics import read_metrics

    metrics = [int(r["iteration"]) for r in read_metrics(run / "metrics.jsonl")]
    episodes = Counter(
        episode_key(r) for r in read_records(run / "episodes.jsonl.gz") if r.get("kind") == "episode"
    )
    return metrics, dict(episodes)


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["before its checkpoint", "after its checkpoint"])
def test_a_killed_run_resumed_writes_every_record_once(run: Path, killed: str) -> None:
    """A kill -9 after iteration 2's metrics and recording, before its checkpoint (simulated: step_000002 is
    removed, as it would never have been renamed into place) or after it; the resumed run redoes what needs
    redoing and every iteration appears once in metrics.jsonl and the recording."""
    ckpts = run / "checkpoints"
    iterations = 2
    if killed == "before its checkpoint":
        shutil.rmtree(ckpts / "step_000002")
        (ckpts / "latest").write_text("step_000001\n")
    else:
        iterations = 3
    before, recorded = _records_per_iteration(run)
    assert 2 in before and {k[0] for k in recorded} >= {1, 2}
    out = _stepgym(
        *TRAIN, "--run.iterations", str(iterations), "--run.output-dir", str(run), "--run.resume", "auto"
    )
    assert out.returncode == 0, out.stderr
    _assert_no_traceback(out)
    metrics, episodes = _records_per_iteration(run)
    assert sorted(i for i in metrics if i > 0) == list(range(1, iterations + 1)), metrics
    assert len(metrics) == len(set(metrics)), metrics
    assert episodes and all(n == 1 for n in episodes.values()), episodes
    assert {k[0] for k in episodes} == set(range(1, iterations + 1))


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_writing_every_record_once(tmp_path: Path) -> None:
    """A real kill -9: the run is killed as soon as metrics.jsonl holds iteration 3 (after iteration 3's metrics
    and recording, before the checkpoint of iteration 4); the resumed run redoes iteration 3 and goes on."""
    import signal
    import time

    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "STEPGYM_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    args = [*TRAIN, "--run.iterations", "4", "--run.save-every", "2", "--run.output-dir", str(run)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepgym.cli", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            text = (run / "metrics.jsonl").read_text() if (run / "metrics.jsonl").is_file() else ""
            if '"iteration": 3' in text:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = _stepgym(*TRAIN, "--run.iterations", "4", "--run.output-dir", str(run), "--run.resume", "auto")
    assert out.returncode == 0, out.stderr
    _assert_no_traceback(out)
    metrics, episodes = _records_per_iteration(run)
    assert sorted(i for i in metrics if i > 0) == [1, 2, 3, 4], metrics
    assert len(metrics) == len(set(metrics)), metrics
    assert episodes and all(n == 1 for n in episodes.values()), episodes
    assert {k[0] for k in episodes} == {1, 2, 3, 4}
