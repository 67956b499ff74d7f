"""For tests of an integration that runs in a virtualenv of its own (``scripts/test_<name>.sh``)."""

from __future__ import annotations

import importlib.util
import os


def installed_or_fail(module: str, flag: str, script: str) -> bool:
    """Whether ``module`` is importable. Under the dedicated run (``flag`` = 1, set by ``script``) a missing
    module is an error at collection, so that run cannot pass by defining no tests."""
    have = importlib.util.find_spec(module) is not None
    if os.environ.get(flag) == "1" and not have:
        raise RuntimeError(f"{flag}=1 but {module} is not installed (run {script})")
    return have
