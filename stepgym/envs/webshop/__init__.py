"""WebShop for stepgym: ``StepGym/WebShop-v0`` (text mode) and ``StepGym/WebShopSite-v0`` (real site + browser).

Importing this package loads no search engine, browser or server: ``bm25s``/``pyserini`` load when an env is
made, ``selenium`` when a site env is made. See docs/webshop.md.
"""

from __future__ import annotations

from stepgym.envs.webshop.site_env import WebShopSiteConfig, WebShopSiteEnv
from stepgym.envs.webshop.text_env import WebShopConfig, WebShopEnv

__all__ = ["WebShopConfig", "WebShopEnv", "WebShopSiteConfig", "WebShopSiteEnv"]
