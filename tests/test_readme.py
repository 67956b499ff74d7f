"""The README stays true: its schema table, commands, presets and links match the code, and its code runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from stepgym import schema
from stepgym.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_schema_table_is_generated_from_the_schema():
    block = README.split("<!-- schema:begin", 1)[1].split("<!-- schema:end -->", 1)[0]
    table = block.split("-->", 1)[1].strip()
    assert table == schema.describe()


def test_the_two_commands_exist_and_ci_runs_the_test_command():
    assert (
        "bash scripts/setup.sh && STEPGYM_DATA=../shared/data stepgym train --preset alfworld-cpu" in README
    )
    assert "bash scripts/test.sh" in README
    assert (REPO / "scripts" / "setup.sh").is_file() and (REPO / "scripts" / "test.sh").is_file()
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_every_stepgym_command_and_preset_in_the_readme_exists():
    from stepgym.trainers.presets import PRESETS

    code = "\n".join(re.findall(r"```bash\n(.*?)```", README, flags=re.DOTALL))
    commands = set(re.findall(r"^stepgym (\w+)", code, flags=re.MULTILINE))
    commands |= set(re.findall(r"`stepgym (\w+)", README))
    assert commands and commands <= set(SUBCOMMANDS), commands - set(SUBCOMMANDS)
    presets = set(re.findall(r"--preset ([\w-]+)", README))
    assert presets and presets <= set(PRESETS), presets - set(PRESETS)


def test_every_relative_link_resolves():
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).exists(), target


def test_every_registered_env_is_in_the_readme():
    import stepgym

    for env_id in stepgym.ENV_IDS:
        assert f"`{env_id}`" in README, env_id


@pytest.mark.slow
@pytest.mark.usefixtures("data_dir")
def test_the_quick_tour_code_runs(tmp_path):
    """Every ```python block of the README, run in order as one script in a fresh interpreter, on the real data."""
    code = "\n".join(re.findall(r"```python\n(.*?)```", README, flags=re.S))
    assert "gym.make(" in code and "shape_advantages" in code
    script = tmp_path / "quick_tour.py"
    script.write_text(code, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=1200
    )
    assert run.returncode == 0, run.stderr[-4000:]
