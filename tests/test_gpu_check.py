"""``benchmarks/gpu_check.py`` is the one command a lent GPU runs; no GPU is lent to CI, so its ALFWorld, TRL and
verl parts run here on the CPU at toy sizes (``--device cpu --smoke``) and must print every number the GPU run
reports: the per-iteration time split, tokens/s and memory, and TRL's steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.usefixtures("data_dir")
def test_gpu_check_parts_run_on_a_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/gpu_check.py",
            "--device",
            "cpu",
            "--smoke",
            "--parts",
            "alfworld,trl,verl",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    its = result["alfworld"]["iterations"]
    assert [r["iteration"] for r in its] == [1, 2] and result["alfworld"]["backend"] == "hf"
    for r in its:
        assert {
            "generate_s",
            "env_s",
            "teacher_s",
            "update_s",
            "rollout_tokens_per_s",
            "peak_memory_gib",
        } <= set(r)
        assert r["generate_s"] > 0 and r["update_s"] > 0 and r["generate_s"] + r["env_s"] <= r["seconds"]
    assert result["trl"]["steps"] == 2 and result["trl"]["generation"] == "hf generate"
    assert result["verl"]["ran"] is False and "virtualenv" in result["verl"]["why"]
    assert "gpu_check: parts alfworld, trl, verl in" in done.stdout


def test_gpu_check_refuses_gpu_only_parts_on_a_cpu() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--parts", "throughput"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2 and "--device cpu runs only the parts" in done.stderr
