"""The real ``stepgym`` command, run as a subprocess: expected failures print one message, bugs a traceback.

Every case runs ``python -m stepgym.cli`` (the console script's ``main``) on this checkout, so what is checked is
what a user sees on stderr and as the exit status.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _stepgym(
    *args: str, extra_env: dict[str, str] | None = None, pythonpath: str = ""
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STEPGYM_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "stepgym.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def _assert_clean_failure(out: subprocess.CompletedProcess, *fragments: str) -> None:
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.splitlines()[0].startswith("stepgym ")
    for fragment in fragments:
        assert fragment in out.stderr, out.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_data_prints_the_fix_without_a_traceback(tmp_path: Path) -> None:
    out = _stepgym("rollout", "--limit", "1", extra_env={"STEPGYM_DATA": str(tmp_path)})
    _assert_clean_failure(out, "stepgym rollout: error: No alfworld data found", "stepgym download alfworld")
    assert "--debug" in out.stderr  # says how to get the traceback


@pytest.mark.parametrize("how", ["flag-first", "flag-last", "env"])
def test_debug_shows_the_traceback(tmp_path: Path, how: str) -> None:
    args = ["rollout", "--limit", "1"]
    env = {"STEPGYM_DATA": str(tmp_path)}
    if how == "flag-first":
        args = ["--debug", *args]
    elif how == "flag-last":
        args = [*args, "--debug"]
    else:
        env["STEPGYM_DEBUG"] = "1"
    out = _stepgym(*args, extra_env=env)
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "DataNotFoundError" in out.stderr
    assert "No alfworld data found" in out.stderr


def test_download_without_a_network_is_one_message(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{_closed_port()}"
    out = _stepgym("download", "webshop", "--dest", str(tmp_path / "w"), "--base-url", base)
    _assert_clean_failure(out, f"could not download {base}/")


def test_a_missing_extra_names_the_pip_command(tmp_path: Path, data_dir: Path) -> None:
    blocked = tmp_path / "blocked"
    (blocked / "alfworld").mkdir(parents=True)
    (blocked / "alfworld" / "__init__.py").write_text(
        "raise ImportError('not installed (blocked by the test)')\n"
    )
    out = _stepgym("rollout", "--limit", "1", pythonpath=str(blocked))
    _assert_clean_failure(out, "`alfworld` is not installed", "pip install 'stepgym[alfworld]'")


def test_an_unknown_env_id_is_one_message() -> None:
    out = _stepgym("rollout", "--env", "StepGym/NoSuchEnv-v0")
    _assert_clean_failure(out, "NoSuchEnv")


def test_an_unexpected_exception_keeps_its_traceback() -> None:
    # a string where the env expects an int reaches Python's own TypeError: a bug-shaped failure
    out = _stepgym("rollout", "--env-kwarg", 'max_steps="ten"')
    assert out.returncode != 0
    assert "Traceback" in out.stderr and "TypeError" in out.stderr


def test_unknown_command_and_help() -> None:
    out = _stepgym("nope")
    assert out.returncode == 2 and "unknown command 'nope'" in out.stderr
    out = _stepgym("--help")
    assert out.returncode == 0 and "--debug" in out.stdout and "rollout" in out.stdout
