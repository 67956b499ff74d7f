"""docs/byo_env.md ("Bring your own env") runs end to end, as written, from its own text.

The page holds two env modules (each a ```python block whose ``<!-- not run: the module NAME.py ... -->`` marker
names its file), Python blocks that use them, and ``stepgym`` commands in ```bash blocks. This test turns the page
into one script in a temporary folder: the modules are written there, the Python blocks run in page order, each
``stepgym train`` line runs as a subprocess (``python -m stepgym.cli``), and the ``stepgym serve`` line starts the
real server on a free port, which the following block's ``http://127.0.0.1:8000`` is pointed at. So the page cannot
drift from the code: an edit that breaks an example fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "byo_env.md"
_BLOCK = re.compile(
    r"(?:<!--\s*not run:(?P<reason>.*?)-->\s*\n)?```(?P<lang>python|bash)\n(?P<code>.*?)```", re.S
)
_MODULE = re.compile(r"the module (?P<name>\w+)\.py")
_URL = "http://127.0.0.1:8000"


def page_script(text: str) -> tuple[dict[str, str], str]:
    """``({module file: code}, script)`` for the page (see the module docstring)."""
    modules: dict[str, str] = {}
    parts = ["import subprocess, sys\n"]
    for m in _BLOCK.finditer(text):
        code, lang = m.group("code"), m.group("lang")
        named = _MODULE.search(m.group("reason") or "")
        if lang == "python" and named:
            modules[named.group("name") + ".py"] = code
        elif lang == "python":
            parts.append(code.replace(f'"{_URL}"', "SERVE_URL"))
        else:
            for line in code.splitlines():
                argv = shlex.split(line)
                if argv[:2] == ["stepgym", "train"]:
                    parts.append(
                        f"subprocess.run([sys.executable, '-m', 'stepgym.cli', *{argv[1:]!r}], check=True)\n"
                    )
                elif argv[:2] == ["stepgym", "serve"]:
                    port = argv.index("--port")
                    argv[port + 1] = "0"
                    parts.append(
                        f"server = subprocess.Popen([sys.executable, '-m', 'stepgym.cli', *{argv[1:]!r}], "
                        "stdout=subprocess.PIPE, text=True)\n"
                        "import atexit\n"
                        "atexit.register(server.terminate)  # also when a block fails\n"
                        "ready = server.stdout.readline()  # 'stepgym serve: ID at http://HOST:PORT (...)'\n"
                        "assert ' at http://' in ready, ready\n"
                        "SERVE_URL = ready.split(' at ')[1].split()[0]\n"
                    )
                elif argv:
                    raise AssertionError(f"docs/byo_env.md: a bash line this test does not run: {line}")
    parts.append("if 'server' in globals():\n    server.terminate()\n    server.wait(timeout=60)\n")
    return modules, "\n".join(parts)


def test_the_page_holds_both_modules_and_every_path() -> None:
    modules, script = page_script(PAGE.read_text(encoding="utf-8"))
    assert set(modules) == {"guess_env.py", "plain_env.py"}
    assert "stepgym.envs import EnvSplits, register" in modules["guess_env.py"]
    assert "gym.register(" in modules["plain_env.py"] and "stepgym" not in modules["plain_env.py"]
    for used in (
        "check_env(",
        "ARGWrapper(",
        "GroupEnv(",
        "step_batch_from_trajectories(",
        "StepGRPOTrainer(",
        "/step",
        "SERVE_URL",
    ):
        assert used in script, used
    assert script.count("'stepgym.cli', *['train'") == 2 and "'stepgym.cli', *['serve'" in script


@pytest.mark.slow
def test_the_bring_your_own_env_page_runs_end_to_end(tmp_path: Path) -> None:
    modules, script = page_script(PAGE.read_text(encoding="utf-8"))
    for name, code in modules.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    (tmp_path / "byo_env_md.py").write_text(script, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "byo_env_md.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500
    )
    assert run.returncode == 0, f"docs/byo_env.md:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    # what the page promises: both runs wrote their report; the plain env was evaluated on seeded tasks
    for name in ("guess", "say"):
        assert (tmp_path / "runs" / name / "report" / "report.md").is_file(), name
    assert "split `test`" in (tmp_path / "runs/guess/report/report.md").read_text(encoding="utf-8")
    assert "split `seeded`" in (tmp_path / "runs/say/report/report.md").read_text(encoding="utf-8")
    assert "declares no text format: using the 'plain' format" in run.stderr
    assert "Right! 1.0 1..8 won" in run.stdout  # the served env answered like the in-process one


def test_a_plain_env_needs_no_split_step_limit_or_task_list(tmp_path: Path, monkeypatch) -> None:
    """The capabilities the trainer reads, on the page's plain module (fast, no training)."""
    import gymnasium as gym

    from stepgym.envs import env_has_splits, env_make_kwargs
    from stepgym.errors import InvalidArgumentError
    from stepgym.steps.tasks import reset_args, task_rows

    modules, _ = page_script(PAGE.read_text(encoding="utf-8"))
    for name, code in modules.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    say, guess = "plain_env:MyOrg/Say-v0", "guess_env:MyOrg/Guess-v0"
    assert env_make_kwargs(say, split="train", max_steps=2) == {"max_episode_steps": 2}
    assert env_make_kwargs(guess, split="test", max_steps=2) == {"split": "test", "max_steps": 2}
    assert not env_has_splits(say) and env_has_splits(guess)
    assert gym.make(say, **env_make_kwargs(say, max_steps=2)).spec.max_episode_steps == 2
    with pytest.raises(InvalidArgumentError, match="has no split 'valid'; its splits are train, test"):
        env_make_kwargs(guess, split="valid")
    with pytest.raises(InvalidArgumentError, match="no env registered as 'plain_env:MyOrg/Nope-v0'"):
        env_make_kwargs("plain_env:MyOrg/Nope-v0")
    with pytest.raises(InvalidArgumentError, match="cannot import the module 'no_such_module'"):
        env_make_kwargs("no_such_module:MyOrg/Say-v0")
    rows = task_rows(say, limit=3)
    assert [r["task_id"] for r in rows] == ["seed:0", "seed:1", "seed:2"]
    assert reset_args("seed:2", 7) == (2, None) and reset_args("test-1", 7) == (7, {"task_id": "test-1"})
    with pytest.raises(ValueError, match="pass limit=N"):
        task_rows(say)
    # TRL's tool env plays a seeded row's task: the reset seed N draws it, the same every time
    from stepgym.integrations.trl import environment_factory

    tool_env = environment_factory(say)()
    first = tool_env.reset(task_id="seed:2")
    assert tool_env.reset(task_id="seed:2") == first
    word = gym.make(say).reset(seed=2)[0]
    assert word in first


@pytest.mark.slow
def test_cli_refusals_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "plain_env.py").write_text(page_script(PAGE.read_text(encoding="utf-8"))[0]["plain_env.py"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    for argv, message in (
        (["train", "--env.id", "plain_env:MyOrg/Nope-v0"], "no env registered as 'plain_env:MyOrg/Nope-v0'"),
        (["train", "--env.id", "nomodule:MyOrg/Say-v0"], "cannot import the module 'nomodule'"),
        (
            ["train", "--env.id", "plain_env:MyOrg/Say-v0", "--env.kwargs", '{"size": 3}'],
            "takes no option size",
        ),
        (["serve", "plain_env:MyOrg/Nope-v0"], "has no 'MyOrg/Nope-v0'"),
    ):
        run = subprocess.run(
            [sys.executable, "-m", "stepgym.cli", *argv, "--run.output-dir", str(tmp_path / "out")]
            if argv[0] == "train"
            else [sys.executable, "-m", "stepgym.cli", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 1 and message in run.stderr, (argv, run.stderr)
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
