"""One lazy-export helper (stepgym.lazy) serves stepgym, stepgym.wrappers and stepgym.integrations."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from stepgym.lazy import lazy_exports


def test_exports_resolve_on_first_use_and_are_cached(monkeypatch):
    pkg = types.ModuleType("fake_pkg")
    monkeypatch.setitem(sys.modules, "fake_pkg", pkg)
    pkg.__getattr__, pkg.__dir__ = lazy_exports(
        "fake_pkg", {"dumps": "json", "load_json": "json:loads", "jsonmod": "json:"}
    )
    import json

    assert pkg.dumps is json.dumps and pkg.load_json is json.loads and pkg.jsonmod is json
    assert vars(pkg)["dumps"] is json.dumps  # cached: the next access does not call __getattr__
    assert {"dumps", "load_json", "jsonmod"} <= set(pkg.__dir__())
    with pytest.raises(AttributeError, match="module 'fake_pkg' has no attribute 'nope'"):
        pkg.__getattr__("nope")


def test_the_three_packages_import_nothing_until_used():
    code = (
        "import sys, stepgym, stepgym.wrappers, stepgym.integrations, stepgym.steps\n"
        "assert 'pettingzoo' not in sys.modules and 'stepgym.wrappers.hints' not in sys.modules\n"
        "assert 'stepgym.steps.tasks' not in sys.modules\n"
        "assert stepgym.GroupEnv.__name__ == 'GroupEnv' and 'pettingzoo' in sys.modules\n"
        "assert stepgym.wrappers.HintWrapper.__module__ == 'stepgym.wrappers.hints'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
