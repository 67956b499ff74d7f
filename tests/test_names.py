"""Names users expect: one package for the CLIs, old import paths deprecated (not broken), lazy exports listed."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from stepgym._moved import MOVED_MODULES


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_old_module_paths_warn_and_are_the_new_module(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_old_module_paths_work_in_a_fresh_interpreter() -> None:
    code = "from stepgym.download import fetch; from stepgym.trainers.cli import parse_config; print(fetch.__module__)"
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True, text=True
    )
    assert out.returncode != 0 and "DeprecationWarning" in out.stderr  # it warns ...
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "stepgym.fetch"  # ... and works


def test_rollout_main_moved_to_the_cli_package() -> None:
    import stepgym.rollout
    from stepgym.cli.rollout import main

    with pytest.warns(DeprecationWarning, match="stepgym.cli.rollout.main"):
        assert stepgym.rollout.main is main
    assert "main" not in stepgym.rollout.__all__


def test_every_subcommand_lives_in_the_cli_package() -> None:
    from stepgym.cli import SUBCOMMANDS

    for target, _help in SUBCOMMANDS.values():
        module, func = target.split(":")
        assert module.startswith("stepgym.cli."), target
        assert callable(getattr(importlib.import_module(module), func))
