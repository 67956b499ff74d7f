"""The end-of-run report (stepgym.trainers.report): its wall time agrees with metrics.jsonl, and the credit
picture's labels are readable (every glyph in the default font, none cut)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepgym.trainers.report import _label, write_report

CONFIG = {
    "env": {"id": "StepGym/CreditToy-v0"},
    "model": {"name": "tiny"},
    "rollout": {"n_tasks": 2, "group_size": 2},
}


def _run(tmp_path: Path, iterations: int = 3) -> Path:
    with open(tmp_path / "metrics.jsonl", "w", encoding="utf-8") as f:
        for i in range(1, iterations + 1):
            f.write(json.dumps({"iteration": i, "time/iteration_s": 40.0, "rollout/success": 0.1 * i}) + "\n")
    return tmp_path


def test_wall_time_is_split_as_metrics_jsonl_counts_it(tmp_path: Path) -> None:
    text = write_report(_run(tmp_path), config=CONFIG, method="grpo", wall_seconds=130.4).read_text()
    assert "wall time: 130 s = 120 s in iterations (sum of `time/iteration_s`" in text
    assert "10 s of setup, warm-up, evaluation and checkpoints" in text


def test_a_run_without_iterations_does_not_blame_matplotlib(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    text = write_report(_run(tmp_path, 0), config=CONFIG, method="grpo").read_text()
    assert "matplotlib is not installed" not in text and "no iteration was recorded" in text


def test_credit_labels_are_ascii_short_and_name_invalid_steps() -> None:
    long = "go to countertop 1 and then take the apple ✓ from it"
    label = _label(long)
    assert label.isascii() and all(len(line) <= 16 for line in label.split("\n"))
    assert len(label.split("\n")) == 2 and label.endswith("...")
    assert _label("", valid=False) == "(no action)\n(invalid)"
    assert "✗" not in _label("open door", valid=False)


def test_credit_picture_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    steps = [
        {"grpo": 0.5, "shaped": 0.1 * k, "action": f"take key {k} from the drawer", "valid": k != 2}
        for k in range(8)
    ]
    credit = {
        "iteration": 3,
        "method": "gigpo",
        "trajectories": [{"task_id": "t-1", "won": True, "steps": steps}],
    }
    (tmp_path / "credit.json").write_text(json.dumps(credit))
    text = write_report(_run(tmp_path), config=CONFIG, method="gigpo", wall_seconds=200.0).read_text()
    assert "![credit.png](credit.png)" in text and (tmp_path / "report" / "credit.png").stat().st_size > 1000
