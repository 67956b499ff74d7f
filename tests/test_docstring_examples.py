"""Every public env and wrapper class shows a short runnable example in its docstring, and the examples run.

The examples are the first thing a user copies (Gymnasium's habit), so they are doctests: a changed behaviour
that makes one wrong fails here. The benchmark envs' examples need their data (and the site env a browser).
"""

from __future__ import annotations

import doctest
import importlib

import gymnasium as gym
import pytest

import stepgym
from stepgym import wrappers

# Every public wrapper has its example now; a name here would be exempt.
_PENDING: set[str] = set()


def _public_classes() -> list[type]:
    envs = []
    for env_id in stepgym.ENV_IDS:
        module, name = gym.spec(env_id).entry_point.split(":")
        envs.append(getattr(importlib.import_module(module), name))
    from stepgym.envs.base import TextEnv

    return [
        TextEnv,
        stepgym.GroupEnv,
        *envs,
        *(getattr(wrappers, n) for n in wrappers.__all__ if n not in _PENDING),
    ]


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__name__)
def test_public_class_has_an_example(cls: type) -> None:
    tests = doctest.DocTestFinder(recurse=False).find(cls, cls.__name__)
    assert any(t.examples for t in tests), (
        f"{cls.__module__}.{cls.__name__} has no >>> example in its docstring"
    )


_NO_DATA = ["stepgym", "stepgym.envs.base", "stepgym.envs.credit.toy", "stepgym.group"]
_NO_DATA += ["stepgym.wrappers.feedback", "stepgym.wrappers.text", "stepgym.wrappers.hints"]
_NO_DATA += [
    "stepgym.values.wrapper",
    "stepgym.wrappers.arg",
    "stepgym.wrappers.protocols",
    "stepgym.graph_seeding",
]
_DATA = ["stepgym.envs.alfworld.env", "stepgym.envs.webshop.text_env", "stepgym.envs.searchqa.env"]


def _run(module_name: str) -> None:
    module = importlib.import_module(module_name)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module, module_name) if t.examples]
    assert tests, f"{module_name} has no examples"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples in {module_name} failed (see above)"
    )


@pytest.mark.parametrize("module_name", _NO_DATA)
def test_examples_run(module_name: str) -> None:
    _run(module_name)


@pytest.mark.parametrize("module_name", _DATA)
def test_benchmark_env_examples_run(module_name: str, data_dir: object) -> None:
    _run(module_name)


@pytest.mark.browser
def test_site_env_example_runs(data_dir: object) -> None:
    _run("stepgym.envs.webshop.site_env")
