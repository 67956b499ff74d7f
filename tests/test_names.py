"""Names users expect: one package for the CLIs, no old import paths (an unreleased package keeps no shims), lazy
exports listed."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from stepgym import schema
from stepgym.envs.credit import CreditToyEnv

OLD_MODULES = (
    "stepgym.download",
    "stepgym.downloads",
    "stepgym.trainers.cli",
    "stepgym.trainers.arg",
    "stepgym.wrappers.arg_cli",
    "stepgym.envs.searchqa.cli",
    "stepgym.envs.webshop.cli",
    "stepgym.recording.trainer",
    "stepgym.wrappers._recording",
    "stepgym.integrations.steps",  # stepgym.steps.batch: the one StepBatch builder, below the trainers
    "stepgym.integrations.annotations",  # stepgym.steps.record: the step record
    "stepgym.integrations.teacher",  # stepgym.steps.teacher_context: what the teachers read, both layouts
    # issue 50: a step's data has one home, stepgym.steps
    "stepgym.step_record",  # stepgym.steps.record
    "stepgym.teacher_context",  # stepgym.steps.teacher_context
    "stepgym.integrations.episode",  # stepgym.steps.episode
    "stepgym.integrations.advantages",  # stepgym.steps.advantages (the one shape_rows)
    "stepgym.integrations.tasks",  # stepgym.steps.tasks
    "stepgym.trainers.advantages",  # stepgym.steps.advantages / stepgym.steps.row
    "stepgym.trainers.formats",  # TextFormat.reply_shape / span_mode
    # each built-in env's value oracle lives in its folder (stepgym.envs.<env>.values)
    "stepgym.values.alfworld",
    "stepgym.values.babyai",
    "stepgym.values.searchqa",
    "stepgym.values.sokoban",
    "stepgym.values.webshop",
)


@pytest.mark.parametrize("old", OLD_MODULES)
def test_an_unreleased_package_keeps_no_old_module_paths(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_old_names_are_gone_not_deprecated() -> None:
    import stepgym.rollout
    import stepgym.shapers
    import stepgym.wrappers
    import stepgym.wrappers.arg

    assert not hasattr(stepgym.rollout, "main")  # the CLI is stepgym.cli.rollout.main
    for name in ("parse_action", "AgenticReferenceGraph", "label_trajectory", "render_prompt"):
        assert not hasattr(stepgym.wrappers, name), name
    assert not hasattr(stepgym.wrappers.arg, "AgenticReferenceGraph")
    for name in ("policy_loss", "agg_loss", "clipped_surrogate"):  # the NumPy twins keep only their _np names
        assert not hasattr(stepgym.shapers, name), name
    assert not (Path(stepgym.__file__).parent / "_moved.py").exists()
    import stepgym.envs
    import stepgym.values.base

    # what an oracle returns and its interface are stepgym.envs.oracle's (also exported by stepgym.values)
    for name in ("StepsToWinOracle", "Remember", "ValueOracle"):
        assert not hasattr(stepgym.values.base, name), name
    assert not hasattr(stepgym.envs, "ALFWORLD_TASK_TYPES")  # stepgym.envs.alfworld.games.TASK_TYPES
    import stepgym.integrations
    import stepgym.steps.record
    import stepgym.steps.row
    import stepgym.trainers.samples

    for name in ("CreditFields", "credit_fields", "state_anchors"):  # dead helpers: only a test called them
        assert not hasattr(stepgym.steps.record, name), name
    for name in ("StepRow", "truncate_middle", "response_matrix"):  # a step's row: stepgym.steps.row
        assert getattr(stepgym.trainers.samples, name, None) in (None, getattr(stepgym.steps.row, name)), name
        assert name not in stepgym.trainers.samples.__all__, name
    for name in ("reward", "format_valid", "admissible", "action", "terminated", "anchor", "valid"):
        assert name not in stepgym.steps.row.StepRow.__dataclass_fields__, name  # the record holds them
        assert not hasattr(stepgym.steps.row.StepRow, name), name
    assert stepgym.integrations.__all__ == []  # no re-exports: the step names live in stepgym.steps
    import inspect

    from stepgym.steps.batch import build_step_batch

    assert not any(  # one way in: options=StepBatchOptions(...), no keyword rules
        p.kind is inspect.Parameter.VAR_KEYWORD
        for p in inspect.signature(build_step_batch).parameters.values()
    )
    import stepgym.trainers.teacher

    for name in (
        "ScoreItem",
        "TeacherStats",
        "ahead_items",
        "fit_privileged",
        "opsd_items",
        "prefix_token_counter",
        "span_mode_for",
    ):  # the teacher's contexts: stepgym.steps.teacher_context (the trainer keeps the forward passes)
        assert not hasattr(stepgym.trainers.teacher, name), name


def test_every_subcommand_lives_in_the_cli_package() -> None:
    from stepgym.cli import SUBCOMMANDS

    for target, _help in SUBCOMMANDS.values():
        module, func = target.split(":")
        assert module.startswith("stepgym.cli."), target
        assert callable(getattr(importlib.import_module(module), func))


def _expert_flags(env: gym.Env, seed: int) -> list[tuple[float, bool, bool]]:
    _, info = env.reset(seed=seed)
    flags = []
    while True:
        _, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        flags.append((reward, terminated, truncated))
        if terminated or truncated:
            return flags


def test_spec_reports_the_step_limit_and_truncation_stays_exact() -> None:
    env_id = "StepGym/CreditToy-v0"
    assert gym.spec(env_id).max_episode_steps == 10  # the registry reports the default limit ...
    n = len(_expert_flags(gym.make(env_id), seed=3))
    env = gym.make(env_id, max_steps=n)  # the expert wins on exactly the last allowed step
    assert (
        env.spec.max_episode_steps == n == env.unwrapped.max_steps
    )  # ... and an instance its own; gym.make's TimeLimit follows the env's limit
    assert env.get_wrapper_attr("_max_episode_steps") == n
    flags = _expert_flags(env, seed=3)
    assert flags[-1] == (1.0, True, False)  # a win on the last step is not also a truncation
    assert flags == _expert_flags(CreditToyEnv(max_steps=n), seed=3)
    assert gym.make(env.spec.id, **env.spec.kwargs).spec.max_episode_steps == n
    assert gym.make(env.spec).spec.max_episode_steps == n  # the spec re-creates the same env
    assert _expert_flags(gym.make(env.spec), seed=3) == flags
    # Gymnasium's own keyword sets the env's limit; one that contradicts the env's keyword is refused
    short = gym.make(env_id, max_episode_steps=2)
    assert short.unwrapped.max_steps == 2 == short.spec.max_episode_steps
    assert _expert_flags(short, seed=3) == _expert_flags(CreditToyEnv(max_steps=2), seed=3)
    with pytest.raises(ValueError, match="max_episode_steps=2 contradicts the env's own step limit 7"):
        gym.make(env_id, max_steps=7, max_episode_steps=2)


def test_registered_limits_are_the_envs_defaults() -> None:
    """What the registry says is what an env built with default keywords enforces (read from the classes'
    defaults: building the benchmark envs needs their data)."""
    import inspect

    from stepgym.envs.credit.family import CreditFamilyEnv

    def default(cls: type, name: str) -> int:
        return inspect.signature(cls.__init__).parameters[name].default

    assert gym.spec("StepGym/CreditFamily-v0").max_episode_steps == CreditFamilyEnv().max_steps
    assert gym.spec("StepGym/CreditToy-v0").max_episode_steps == CreditToyEnv().max_steps
    classes = {
        "StepGym/ALFWorld-v0": ("stepgym.envs.alfworld", "ALFWorldEnv", "max_steps", 0),
        "StepGym/WebShop-v0": ("stepgym.envs.webshop", "WebShopEnv", "max_steps", 0),
        "StepGym/WebShopSite-v0": ("stepgym.envs.webshop", "WebShopSiteEnv", "max_steps", 0),
    }
    for env_id, (module, name, kw, extra) in classes.items():
        cls = getattr(importlib.import_module(module), name)
        assert gym.spec(env_id).max_episode_steps == default(cls, kw) + extra, env_id
    from stepgym.envs.scienceworld.tasks import (
        STEP_LIMIT_CAP,
    )  # ScienceWorld's own limit is per task, up to it

    assert gym.spec("StepGym/ScienceWorld-v0").max_episode_steps == STEP_LIMIT_CAP
    from stepgym.envs.searchqa.env import step_budget  # SearchQA's default: max_turns 4 + the answer turn

    assert gym.spec("StepGym/SearchQA-v0").max_episode_steps == step_budget(None, None) + 1


def test_package_lists_its_lazy_exports_and_no_env_id_by_hand() -> None:
    """The env ids are the registry's (``stepgym.ENV_IDS``): the package docstring names that, not a copy."""
    import stepgym

    assert {"GroupEnv", "peer_hindsight", "wrappers", "ENV_IDS"} <= set(dir(stepgym))
    assert "stepgym.ENV_IDS" in stepgym.__doc__
    assert set(re.findall(r"``(StepGym/[\w-]+)``", stepgym.__doc__)) == set(), (
        "the docstring lists env ids by hand"
    )


def test_wrappers_package_exports_only_wrappers() -> None:
    from stepgym import wrappers

    for name in wrappers.__all__:
        assert issubclass(getattr(wrappers, name), gym.Wrapper), name
    assert not hasattr(wrappers, "parse_action")  # functions live in the wrapper's own module


@pytest.mark.parametrize(
    "family", ["alfworld", "babyai", "scienceworld", "searchqa", "sokoban", "textcraft", "webshop"]
)
def test_env_package_exports_its_envs_and_their_configs_only(family: str) -> None:
    """An env folder's package registers its env and exports the env classes (and their configs); every other
    name is imported from the module that defines it (one home per name)."""
    package = importlib.import_module(f"stepgym.envs.{family}")
    assert package.__all__, family
    for name in package.__all__:
        obj = getattr(package, name)
        assert isinstance(obj, type) and (issubclass(obj, gym.Env) or name.endswith("Config")), name
    assert set(package.__all__) <= set(dir(package))


def test_group_exports_no_private_helper() -> None:
    import stepgym.group

    for name in stepgym.group.__all__:
        assert getattr(stepgym.group, name).__module__.split(".")[-1][0] != "_", name


def test_group_env_of() -> None:
    from stepgym import GroupEnv

    group = GroupEnv("StepGym/CreditToy-v0", group_size=2)
    assert group.env_of("rollout_1") is group.envs[1]
    assert not hasattr(group, "env")  # PettingZoo users read .env as the wrapped env: no method of that name
