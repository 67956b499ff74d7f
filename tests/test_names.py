"""Names users expect: one package for the CLIs, old import paths deprecated (not broken), lazy exports listed."""

from __future__ import annotations

import importlib
import subprocess
import sys

import gymnasium as gym
import pytest

from stepgym import schema
from stepgym._moved import MOVED_MODULES
from stepgym.envs.credit import CreditToyEnv


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

    from stepgym.envs.credit_family import CreditFamilyEnv

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
    from stepgym.envs.searchqa.env import step_budget  # SearchQA's default: max_turns 4 + the answer turn

    assert gym.spec("StepGym/SearchQA-v0").max_episode_steps == step_budget(None, None) + 1


def test_package_lists_its_lazy_exports_and_every_env_id() -> None:
    import stepgym

    assert {"GroupEnv", "peer_hindsight", "wrappers", "ENV_IDS"} <= set(dir(stepgym))
    for env_id in stepgym.ENV_IDS:
        assert f"``{env_id}``" in stepgym.__doc__, env_id


def test_wrappers_package_exports_only_wrappers() -> None:
    from stepgym import wrappers

    for name in wrappers.__all__:
        assert issubclass(getattr(wrappers, name), gym.Wrapper), name
    with pytest.warns(
        DeprecationWarning, match=r"stepgym\.wrappers\.parse_action moved to stepgym\.wrappers\.text"
    ):
        from stepgym.wrappers import parse_action
    from stepgym.wrappers.text import parse_action as real

    assert parse_action is real


def test_group_exports_no_private_helper() -> None:
    import stepgym.group

    for name in stepgym.group.__all__:
        assert getattr(stepgym.group, name).__module__.split(".")[-1][0] != "_", name


def test_group_env_of() -> None:
    from stepgym import GroupEnv

    group = GroupEnv("StepGym/CreditToy-v0", group_size=2)
    assert group.env_of("rollout_1") is group.envs[1]
    assert not hasattr(group, "env")  # PettingZoo users read .env as the wrapped env: no method of that name
