"""stepgym's Gymnasium envs, registered under the ``StepGym`` namespace.

Entry points are strings, so registering imports none of the engines: TextWorld, the search indexes and the
browser load only when an env is made. Variants are keyword arguments (``split=``, ``goals=``, ``retriever=``),
never new id strings.
"""

from __future__ import annotations

import gymnasium

__all__ = ["ENV_IDS", "register_envs"]

_ENTRY_POINTS = {
    "StepGym/ALFWorld-v0": "stepgym.envs.alfworld:ALFWorldEnv",
    "StepGym/WebShop-v0": "stepgym.envs.webshop:WebShopEnv",
    "StepGym/WebShopSite-v0": "stepgym.envs.webshop:WebShopSiteEnv",
    "StepGym/SearchQA-v0": "stepgym.envs.searchqa:SearchQAEnv",
    "StepGym/CreditToy-v0": "stepgym.envs.credit:CreditToyEnv",
    "StepGym/CreditFamily-v0": "stepgym.envs.credit_family:CreditFamilyEnv",
}
ENV_IDS = tuple(_ENTRY_POINTS)


def register_envs() -> None:
    """Register every stepgym env with Gymnasium (idempotent).

    The step limit is enforced inside each env (it is part of the task, and ``truncated`` must be exact for the
    papers' protocol), so Gymnasium's ``TimeLimit`` is not added on top; ``env.spec.max_episode_steps`` still
    reports that limit (see :attr:`stepgym.envs.base.TextEnv.spec`).
    """
    for env_id, entry_point in _ENTRY_POINTS.items():
        if env_id in gymnasium.registry:
            continue
        gymnasium.register(id=env_id, entry_point=entry_point, disable_env_checker=False)
