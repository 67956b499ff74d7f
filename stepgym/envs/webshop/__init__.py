"""WebShop for stepgym: ``StepGym/WebShop-v0`` (text mode) and ``StepGym/WebShopSite-v0`` (real site + browser).

Importing this package registers both envs and loads no search engine, browser or server: ``bm25s``/``pyserini``
load when an env is made, ``selenium`` when a site env is made. The text env's value oracle is
:mod:`stepgym.envs.webshop.values`. See docs/webshop.md.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = [
    "WebShopConfig",
    "WebShopEnv",
    "WebShopSiteConfig",
    "WebShopSiteEnv",
]

_SPLITS = EnvSplits(("train", "eval", "test", "all"), "test")

register(
    "StepGym/WebShop-v0",
    "stepgym.envs.webshop:WebShopEnv",
    max_steps=15,
    text_format="webshop",
    splits=_SPLITS,
    value_oracle="stepgym.envs.webshop.values:WebShopOracle",
)
register(
    "StepGym/WebShopSite-v0",
    "stepgym.envs.webshop:WebShopSiteEnv",
    max_steps=15,
    text_format="webshop",
    splits=_SPLITS,
    no_values="the browser site env has no value oracle; use StepGym/WebShop-v0 (the same tasks as text)",
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "WebShopConfig": "stepgym.envs.webshop.text_env",
        "WebShopEnv": "stepgym.envs.webshop.text_env",
        "WebShopSiteConfig": "stepgym.envs.webshop.site_env",
        "WebShopSiteEnv": "stepgym.envs.webshop.site_env",
    },
)
