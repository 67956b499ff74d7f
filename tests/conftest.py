"""Shared test setup.

Tests read benchmark data through the project's normal setting, ``$STEPGYM_DATA``. When it is unset and the
workspace has ``../shared/data`` beside the repository (CI, developer machines), it is pointed there. Caches go
to a per-session folder unless ``$STEPGYM_CACHE`` is set, so tests never touch a user's cache.

Tests skip what a machine lacks (an extra, a GPU). ``scripts/test.sh`` (and so CI) sets ``STEPGYM_NO_SKIPS=1``:
there every skip whose reason does not name a GPU (no CUDA, FAISS without GPU support, the GPU extra vLLM, which
``scripts/test_vllm_cpu.sh`` runs in a virtualenv of its own) is a failure, so a missing package cannot hide tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_SHARED = REPO.parent / "shared" / "data"
if not os.environ.get("STEPGYM_DATA") and _SHARED.is_dir():
    os.environ["STEPGYM_DATA"] = str(_SHARED)
if not os.environ.get("STEPGYM_CACHE"):
    os.environ["STEPGYM_CACHE"] = str(REPO / ".cache" / "test")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_ALLOWED_SKIP = ("CUDA", "GPU")


def _fail_if_forbidden_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if os.environ.get("STEPGYM_NO_SKIPS") != "1" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not any(word in reason for word in _ALLOWED_SKIP):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under STEPGYM_NO_SKIPS=1 (install everything scripts/setup.sh does): {reason}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    _fail_if_forbidden_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield  # a module-level importorskip skips the whole file at collection
    _fail_if_forbidden_skip(outcome.get_result())


@pytest.fixture(scope="session")
def data_dir() -> Path:
    root = os.environ.get("STEPGYM_DATA")
    if not root or not Path(root).is_dir():
        if os.environ.get("STEPGYM_REQUIRE_DATA") == "1":  # CI: missing data is a failure, not a skip
            pytest.fail(f"STEPGYM_REQUIRE_DATA=1 but STEPGYM_DATA={root!r} is not a folder")
        pytest.skip("benchmark data not available (set STEPGYM_DATA)")
    return Path(root)
