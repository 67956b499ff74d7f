"""The docs' command-output figures (docs/benchmarks.md) are the output of today's code
(scripts/doc_figures.py --check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_readme_figures_match_a_fresh_run(data_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/doc_figures.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, (
        "a docs figure is stale: run `python scripts/doc_figures.py --write`\n"
        + done.stdout[-4000:]
        + done.stderr[-2000:]
    )
