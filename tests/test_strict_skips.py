"""Under STEPGYM_NO_SKIPS=1 (CI) a skipped test fails unless it needs a GPU, so a missing extra cannot hide tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = """
import pytest

def test_skips():
    pytest.skip("some package is missing")

def test_needs_gpu():
    pytest.skip("needs a CUDA GPU")

def test_passes():
    pass
"""


@pytest.mark.parametrize("strict", [False, True])
def test_skips_fail_only_when_strict(tmp_path: Path, strict: bool) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "STEPGYM_NO_SKIPS"}
    if strict:
        env["STEPGYM_NO_SKIPS"] = "1"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    if strict:
        assert run.returncode == 1, out
        assert "1 failed, 1 passed, 1 skipped" in out, out
        assert "FAILED test_sample.py::test_skips" in out
    else:
        assert run.returncode == 0, out
        assert "1 passed, 2 skipped" in out, out
