"""Every benchmark script answers ``--help`` (a ``%`` in a help string once made ``credit_study.py --help`` crash).

Each runs as a subprocess, as a user types it; ``--help`` must exit 0 and print a usage line without starting the
benchmark itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def test_the_benchmarks_are_found() -> None:
    assert "credit_study.py" in SCRIPTS and len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_works(script: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout and "Traceback" not in out.stderr, out.stderr[-2000:]
