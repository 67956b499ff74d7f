"""``stepgym serve`` as a new user meets it (issue 42, item 2): a factory module that cannot be imported and a busy
port are one line each; the documented ``mypkg.envs:make_env`` form finds a package in the current folder without
PYTHONPATH (the current folder joins the import path, as ``python -m`` does).

The command runs as ``python -P -m stepgym.cli``: ``-P`` keeps the current folder off ``sys.path``, as the
``stepgym`` console script does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STEPGYM_DEBUG"}
    # this checkout only: the user's own package is found from the current folder
    env["PYTHONPATH"] = str(REPO)
    return env


def _serve(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "stepgym.cli", "serve", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=120,
    )


def _one_line(out: subprocess.CompletedProcess, *fragments: str) -> None:
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stepgym serve: error: "), out.stderr
    for fragment in fragments:
        assert fragment in lines[0], out.stderr


def test_a_factory_module_that_cannot_be_imported_is_one_line(tmp_path: Path) -> None:
    _one_line(
        _serve("nosuchpkg.envs:make_env", "--port", "0", cwd=tmp_path), "nosuchpkg.envs", "No module named"
    )
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "envs.py").write_text("import nosuchdependency\n")
    _one_line(_serve("mypkg.envs:make_env", "--port", "0", cwd=tmp_path), "mypkg.envs", "nosuchdependency")
    (tmp_path / "mypkg" / "envs.py").write_text("def other():\n    pass\n")
    _one_line(_serve("mypkg.envs:make_env", "--port", "0", cwd=tmp_path), "mypkg.envs", "make_env")
    _one_line(
        _serve("StepGym/CreditToy-v0", "--wrapper", "mypkg.envs:NoWrapper", "--port", "0", cwd=tmp_path),
        "NoWrapper",
    )


def test_a_busy_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = _serve("StepGym/CreditToy-v0", "--port", str(port), cwd=tmp_path)
    _one_line(out, f"127.0.0.1:{port}", "--port")


def test_a_factory_in_the_current_folder_is_found(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "envs.py").write_text(
        "import gymnasium as gym\n\n\ndef make_env(**kwargs):\n"
        "    import stepgym  # noqa: F401\n\n    return gym.make('StepGym/CreditToy-v0', **kwargs)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "stepgym.cli", "serve", "mypkg.envs:make_env", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    try:
        line = proc.stdout.readline()
        assert " at http://" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(url + "/health", timeout=5).status_code == 200
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server never became healthy"
                time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(30)
