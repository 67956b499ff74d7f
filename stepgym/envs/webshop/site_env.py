"""``StepGym/WebShopSite-v0``: the WebShop site served on 127.0.0.1 and driven through a real headless Chromium.

The env starts :class:`~stepgym.envs.webshop.server.ShopSite` (ephemeral port, health-checked with a deadline) and
a Chromium through selenium (``/usr/bin/chromium`` + ``/usr/bin/chromedriver`` by default, headless, a fresh
``--user-data-dir``); ``close()`` stops both. Each action acts on the rendered page like a person would:
``search[q]`` fills ``#search_input`` and presses the Search button; ``click[x]`` clicks the element whose
``data-key`` is ``x`` lowercased (buttons, product links, option radios; for an option value shared by two groups
the later one, as upstream). Observations are WebShop's text mode of the browser's DOM
(:func:`~stepgym.envs.webshop.pages_html.html_to_text` on ``page_source``); the reward is read from the page
after ``Buy Now``. The symbolic state for the annotations is decoded from the browser's URL (the site keeps the
session state in its URLs), so annotations, clickables and rewards match the text env's (tests check this).

Like upstream's ``WebAgentSiteEnv`` this is slow (a page load per step) and meant for checking that what an agent
learned in text mode transfers to a real page, not for RL at scale.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any

from stepgym import schema
from stepgym._deps import require
from stepgym.envs.base import TextEnv
from stepgym.envs.webshop.core import SEARCH_PLACEHOLDER, WebShopCore, shared_core
from stepgym.envs.webshop.engine import ShopState, click_key, parse_action
from stepgym.envs.webshop.goals import Goal
from stepgym.envs.webshop.pages_html import html_to_text
from stepgym.envs.webshop.server import ShopSite, state_from_url
from stepgym.errors import ServiceUnavailableError

__all__ = ["CHROMIUM_FLAGS", "WebShopSiteEnv"]

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


# One round trip per page read: the DOM as the browser has it, the URL, and the clickables in upstream's order
# (buttons and product links, then option radios).
_SNAPSHOT_JS = """
const keys = [];
for (const sel of ['[data-key]:not(input)', 'input[data-key]'])
  for (const e of document.querySelectorAll(sel)) keys.push(e.getAttribute('data-key'));
const r = document.getElementById('reward-info');
return [document.documentElement.outerHTML, window.location.href, !!document.getElementById('search_input'),
        keys, r ? r.textContent : null];
"""
# Click the element a key names; for a key two elements share, the later one (options after buttons).
_CLICK_JS = """
let hit = null;
for (const sel of ['[data-key]:not(input)', 'input[data-key]'])
  for (const e of document.querySelectorAll(sel)) if (e.getAttribute('data-key') === arguments[0]) hit = e;
hit.click();
"""
_SEARCH_JS = """
document.getElementById('search_input').value = arguments[0];
document.querySelector('#search-form [data-key="search"]').click();
"""


class WebShopSiteEnv(TextEnv):
    """The WebShop site in a real browser; same observations, annotations and reward as :class:`WebShopEnv`.

    Example (needs the WebShop data and Chromium with chromedriver)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/WebShopSite-v0", split="test")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        >>> info[schema.ADMISSIBLE], reward
        (True, 0.0)
        >>> env.close()  # ends the browser
    """

    def __init__(
        self,
        split: str = "train",
        goals: str = "synthetic",
        search: str = "bm25s",
        *,
        data_root: str | os.PathLike[str] | None = None,
        catalogue_file: str | os.PathLike[str] | None = None,
        max_steps: int = 15,
        title_nouns: str = "heuristic",
        option_match: str = "upstream",
        invalid_feedback: bool = True,
        chromium: str = "/usr/bin/chromium",
        chromedriver: str = "/usr/bin/chromedriver",
        start_timeout: float = 30.0,
        page_timeout: float = 30.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self._webdriver = require("selenium.webdriver", "webshop", what="the WebShop site env (selenium)")
        self.core: WebShopCore = shared_core(
            data_root, goals, search, title_nouns, option_match, False, catalogue_file
        )
        self.split_goals = self.core.split(split)
        if not self.split_goals:
            raise ValueError(f"the {goals} goals of this catalogue have no '{split}' split")
        self.invalid_feedback = invalid_feedback
        self.page_timeout = page_timeout
        self.goal: Goal | None = None
        self.state = ShopState()
        self.driver: Any = None
        self._profile: str | None = None
        self._html, self._url, self._has_search, self._keys, self._reward_json = "", "", False, [], None
        self.site = ShopSite(self.core)
        try:
            self.site.start(timeout=start_timeout)
            self.driver = self._start_browser(chromium, chromedriver, start_timeout)
        except BaseException:
            self.close()
            raise

    @property
    def task_ids(self) -> list[str]:
        return [g.task_id for g in self.split_goals]

    # -- browser ----------------------------------------------------------------------------------------------
    def _start_browser(self, chromium: str, chromedriver: str, timeout: float) -> Any:
        for exe in (chromium, chromedriver):
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                raise ServiceUnavailableError(
                    f"{exe} not found. Fix: `apt-get install -y chromium chromium-driver`, or pass chromium=/chromedriver= "
                    f"paths to the env."
                )
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        self._profile = tempfile.mkdtemp(prefix="stepgym-chromium-")
        opts = Options()
        opts.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={self._profile}")
        opts.page_load_strategy = "normal"
        try:
            driver = self._webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
        except WebDriverException as exc:
            raise ServiceUnavailableError(
                f"could not start {chromium} through {chromedriver}: {exc.msg}"
            ) from exc
        driver.set_page_load_timeout(timeout)
        return driver

    def _load(self, act: Any) -> None:
        """Run ``act()`` (a click or submit that navigates) and wait until the new page has loaded."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.driver.find_element(By.TAG_NAME, "html")
        act()
        wait = WebDriverWait(self.driver, self.page_timeout)
        wait.until(ec.staleness_of(old))
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")

    def _snapshot(self) -> None:
        """Read the rendered page in one round trip: DOM, URL, search bar, clickables, purchase data."""
        html, url, has_search, keys, reward_json = self.driver.execute_script(_SNAPSHOT_JS)
        self._html, self._url = html, url
        self._has_search = bool(has_search)
        self._keys = list(
            dict.fromkeys(keys)
        )  # upstream's dict: first position, later duplicates win on click
        self._reward_json = reward_json

    def _observe(self) -> tuple[str, ShopState, tuple[float, dict[str, Any]] | None]:
        self._snapshot()
        _, state = state_from_url(self._url, self.core)
        reward = None
        if state.page == "done" and self._reward_json:
            data = json.loads(self._reward_json)
            reward = (float(data["reward"]), data["reward_info"])
        return html_to_text(self._html), state, reward

    # -- Gymnasium hooks --------------------------------------------------------------------------------------
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task_id" in options:
            self.goal = self.core.goal_by_task_id(str(options["task_id"]))
        elif "goal_index" in options:
            self.goal = self.core.goal_by_index(int(options["goal_index"]))
        else:
            self.goal = self.split_goals[int(self.np_random.integers(len(self.split_goals)))]
        sid = self.site.new_session(self.goal)
        self.driver.get(f"{self.site.base_url}/s/{sid}/")
        obs, self.state, _ = self._observe()
        return obs, self._info(obs, admissible=True, effective=False, problem="", won=False)

    def _info(
        self, obs: str, *, admissible: bool, effective: bool, problem: str, won: bool
    ) -> dict[str, Any]:
        assert self.goal is not None
        page = self.core.engine.page(self.state, self.goal)
        info = self.core.info(
            page, self.goal, admissible=admissible, effective=effective, problem=problem, won=won
        )
        # what the browser actually shows
        info[schema.WEBSHOP_AVAILABLE] = {"has_search_bar": self._has_search, "clickables": list(self._keys)}
        info[schema.ADMISSIBLE_ACTIONS] = ([SEARCH_PLACEHOLDER] if self._has_search else []) + [
            f"click[{k}]" for k in self._keys if k != "search"
        ]
        return info

    def _act(self, action: str) -> str:
        """Perform ``action`` in the browser; returns '' or why it is invalid (nothing happens then)."""
        name, arg = parse_action(action)
        if arg is None:
            return "expected search[keywords] or click[element]"
        if name == "search":
            arg = arg.lower()
            if not self._has_search:
                return "there is no search bar on this page (click 'Back to Search' first)"
            if not arg.strip():
                return "the search query is empty"
            # value set through JS: send_keys cannot type characters outside the BMP (emoji)
            self._load(lambda: self.driver.execute_script(_SEARCH_JS, arg))
            return ""
        if name != "click":
            return f"unknown action {name!r} (expected search[...] or click[...])"
        key = click_key(arg)
        if key == "search":
            return "use search[keywords] to search"
        if key not in self._keys:
            if self.state.page == "search":
                return f"{key!r} is not clickable here; this page only has the search bar"
            return f"{key!r} is not a button, product or option on this page"
        self._load(lambda: self.driver.execute_script(_CLICK_JS, key))
        return ""

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.goal is not None
        before = self.state
        why = problem or self._act(action)
        obs, self.state, got = self._observe()
        reward, breakdown = got if got is not None else (0.0, None)
        terminated = self.state.page == "done"
        won = terminated and reward == 1.0
        info = self._info(
            obs, admissible=not why, effective=self.state.key() != before.key(), problem=why, won=won
        )
        if why and self.invalid_feedback:
            obs = f"Invalid action: {why} [SEP] {obs}"
        if terminated or self._steps + 1 >= self.max_steps:
            info[schema.REWARD_INFO] = self.core.reward_info(
                self.state if terminated else None, self.goal, reward, breakdown
            )
        info[schema.FEEDBACK] = obs
        return obs, reward, terminated, info

    def close(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None:
            with contextlib.suppress(Exception):  # the browser may already be gone; closing must not raise
                driver.quit()
        site = getattr(self, "site", None)
        if site is not None:
            site.close()
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None
        super().close()
