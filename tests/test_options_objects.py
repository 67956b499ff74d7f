"""Config objects instead of wide signatures: the env config dataclasses (still settable by name through
``gym.make``), the shapers' ``SharedOptions`` and the options each step-credit function takes."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401  (registers the envs)
from stepgym import shapers as S
from stepgym.envs import check_env_kwargs
from stepgym.envs.credit.family import CreditFamilyConfig, CreditFamilyEnv
from stepgym.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[1]

#: (module file, function) pairs narrowed to at most 8 parameters by passing config objects.
NARROWED = [
    ("stepgym/shapers/gigpo.py", "gigpo_terms"),
    ("stepgym/shapers/gigpo.py", "gigpo_advantage"),
    ("stepgym/shapers/graphgpo.py", "graphgpo_terms"),
    ("stepgym/shapers/hgpo.py", "hgpo_advantage"),
    ("stepgym/shapers/rewardflow.py", "rewardflow_terms"),
    ("stepgym/shapers/g2po.py", "g2po_terms"),
    ("stepgym/envs/alfworld/env.py", "__init__"),
    ("stepgym/envs/credit/family.py", "__init__"),
    ("stepgym/envs/searchqa/encoders.py", "__init__"),
    ("stepgym/envs/searchqa/env.py", "__init__"),
    ("stepgym/envs/searchqa/retrievers.py", "__init__"),
    ("stepgym/envs/webshop/site_env.py", "__init__"),
    ("stepgym/envs/webshop/text_env.py", "__init__"),
    ("stepgym/trainers/vllm_backend.py", "__init__"),
]


@pytest.mark.parametrize(("path", "name"), NARROWED)
def test_narrowed_functions_take_at_most_eight_parameters(path: str, name: str) -> None:
    found = 0
    for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
            assert len(names) <= 8, f"{path}:{node.lineno} {name} takes {len(names)}: {names}"
            found += 1
    assert found, f"no {name} in {path}"


def test_env_options_by_name_or_config_are_the_same_env() -> None:
    by_name = gym.make("StepGym/CreditFamily-v0", horizon=6, n_decisive=2, alias=True, irreversible=False)
    cfg = CreditFamilyConfig(alias=True, irreversible=False)
    by_config = gym.make("StepGym/CreditFamily-v0", horizon=6, n_decisive=2, config=cfg)
    assert by_name.unwrapped.config == by_config.unwrapped.config == cfg
    a, b = by_name.unwrapped, by_config.unwrapped
    assert (a.alias, a.irreversible, a.n_choices, a.max_steps) == (
        b.alias,
        b.irreversible,
        b.n_choices,
        b.max_steps,
    )
    assert by_name.reset(seed=3)[0] == by_config.reset(seed=3)[0]
    # a keyword wins over the config; defaults are the old keyword defaults
    assert CreditFamilyEnv(config=cfg, alias=False).alias is False
    plain = CreditFamilyEnv()
    assert (plain.n_choices, plain.irreversible, plain.n_distractors, plain.reward_mode, plain.alias) == (
        3,
        True,
        1,
        "sparse",
        False,
    )
    assert plain.max_steps == 20  # horizon 10 + slack (default: horizon)


def test_unknown_env_option_is_one_line_naming_the_options() -> None:
    with pytest.raises(InvalidArgumentError) as exc:
        gym.make("StepGym/CreditFamily-v0", irreversable=True)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(
        "CreditFamilyEnv takes no option irreversable; its options are split, n_tasks, horizon"
    )
    assert "irreversible" in msg and "alias" in msg
    with pytest.raises(InvalidArgumentError, match="config must be a CreditFamilyConfig"):
        CreditFamilyEnv(config={"alias": True})  # type: ignore[arg-type]
    # the command line's check sees the config fields as the env's options (and still drops data_root)
    assert check_env_kwargs("StepGym/CreditFamily-v0", {"alias": True, "data_root": "x"}) == {"alias": True}
    with pytest.raises(InvalidArgumentError, match=r"StepGym/CreditFamily-v0 takes no option nope; .*alias"):
        check_env_kwargs("StepGym/CreditFamily-v0", {"nope": 1})
    for env_id, field in (
        ("StepGym/SearchQA-v0", "strict_format"),
        ("StepGym/ALFWorld-v0", "engine"),
        ("StepGym/WebShop-v0", "search_anywhere"),
        ("StepGym/WebShopSite-v0", "chromium"),
    ):
        assert check_env_kwargs(env_id, {field: None}) == {field: None}, env_id
        with pytest.raises(InvalidArgumentError, match=f"{env_id} takes no option nope; .*{field}"):
            check_env_kwargs(env_id, {"nope": 1})


def test_registered_step_limit_keywords_stay_on_the_constructors() -> None:
    from stepgym.envs.alfworld import ALFWorldEnv
    from stepgym.envs.searchqa import SearchQAEnv
    from stepgym.envs.webshop import WebShopEnv, WebShopSiteEnv

    for cls in (ALFWorldEnv, SearchQAEnv, WebShopEnv, WebShopSiteEnv, CreditFamilyEnv):
        params = inspect.signature(cls.__init__).parameters
        assert {"split", "max_steps", "render_mode", "config"} <= set(params), cls.__name__
        assert cls.options_class is type(
            inspect.signature(cls).parameters["config"].default or cls.options_class()
        )


def _graph_batch() -> S.StepBatch:
    rng = np.random.default_rng(0)
    group, traj, rewards, anchor, nxt, valid = [], [], [], [], [], []
    for g in range(3):
        for t in range(4):
            states = [f"s{int(x)}" for x in rng.integers(0, 3, 4)]
            won = bool(rng.integers(0, 2))
            for k in range(3):
                group.append(g)
                traj.append(f"{g}-{t}")
                rewards.append(10.0 if (won and k == 2) else 0.0)
                anchor.append(states[k])
                nxt.append(states[k + 1])
                valid.append(bool(rng.random() > 0.2))
    return S.StepBatch(group, traj, rewards, valid, anchor, next_obs=nxt)


@pytest.mark.parametrize("base", ["gigpo", "graphgpo", "hgpo", "rewardflow", "g2po"])
def test_step_credit_functions_with_options_equal_the_pipeline(base: str) -> None:
    batch = _graph_batch()
    cfg = S.ShapeConfig(base=base, gamma=0.8, invalid_penalty=0.1, step_weight=0.5, singleton="zero")
    shared = S.SharedOptions.of(cfg)
    assert shared == S.SharedOptions(
        gamma=0.8, invalid_penalty=0.1, eps=1e-6, singleton="zero", step_weight=0.5
    )
    opts = cfg.options_for(base)
    if base == "gigpo":
        args = (batch.rewards, batch.group_ids, batch.traj_ids, batch.anchor_obs, batch.valid)
        direct = S.gigpo_advantage(*args, options=opts, shared=shared)
        terms = S.gigpo_terms(*args, options=opts, shared=shared)
        np.testing.assert_array_equal(direct, terms.combined(0.5))
    elif base == "hgpo":
        direct = S.hgpo_advantage(batch, options=opts, shared=shared)
    else:
        fn = {"graphgpo": S.graphgpo_terms, "rewardflow": S.rewardflow_terms, "g2po": S.g2po_terms}[base]
        direct = fn(batch, options=opts, shared=shared).combined(shared.step_weight)
    piped = S.shape_advantages(batch, cfg).base_advantages
    np.testing.assert_array_equal(direct, piped)


def test_rewardflow_keeps_its_own_default_discount() -> None:
    # one group: a → b → c → win and a → d → e → loss; the propagated values, so the step rewards, depend on γ
    batch = S.StepBatch(
        [0] * 6, list("AAABBB"), [0, 0, 1, 0, 0, 0], anchor_obs=list("abcade"), next_obs=list("bcwdef")
    )
    default = S.rewardflow_terms(batch)
    np.testing.assert_array_equal(
        default.returns, S.rewardflow_terms(batch, shared=S.SharedOptions(gamma=0.9)).returns
    )
    assert not np.array_equal(default.returns, S.rewardflow_terms(batch, shared=S.SharedOptions()).returns)
