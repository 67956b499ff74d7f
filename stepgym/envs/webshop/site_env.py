# Over 400 lines: the site env and its browser driving, one lifecycle.
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

A part that dies (the server stopped, Chromium or chromedriver killed) makes the next ``step``/``reset`` raise
:class:`~stepgym.errors.ServiceUnavailableError` naming what died and what to do, and so does every call after it.
``close()`` (and the interpreter's exit, through a finalizer) ends every process the env started, whatever state
the driver is in: it asks chromedriver to quit, then kills what is left, found by the unique profile folder on
Chromium's command lines and by process ancestry, and removes that folder. Chromium's home and XDG folders point
into the profile folder too, so nothing is written under the user's ``~/.config`` or ``~/.cache``.

Like upstream's ``WebAgentSiteEnv`` this is slow (a page load per step) and meant for checking that what an agent
learned in text mode transfers to a real page, not for RL at scale.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass
from typing import Any

from stepgym import schema
from stepgym._deps import require
from stepgym.envs.webshop.core import SEARCH_PLACEHOLDER
from stepgym.envs.webshop.engine import ShopState, click_key, parse_shop_action
from stepgym.envs.webshop.pages_html import html_to_text
from stepgym.envs.webshop.server import ShopSite, state_from_url
from stepgym.envs.webshop.text_env import ShopEnvBase
from stepgym.errors import SiteUnavailableError

__all__ = ["CHROMIUM_FLAGS", "WebShopSiteConfig", "WebShopSiteEnv"]

_FIX = (
    "Fix: call env.close() (it ends whatever is left of the browser and the server) and make a new env; if "
    "Chromium keeps dying, check free memory and /dev/shm."
)

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


class _OffSite(Exception):
    """The browser shows a page that is not the site's (Chrome's error page when the server is gone)."""


def _proc_stat(pid: int) -> tuple[int, str, str] | None:
    """``(parent pid, state letter, start time)`` of a live process, from ``/proc`` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie has ended; only its exit status is left to collect
        return None
    return int(fields[1]), fields[0], fields[19]


def _processes_of(roots: set[int], marker: str) -> set[int]:
    """Live processes that are ``roots``, carry ``marker`` on their command line, or descend from either."""
    parents: dict[int, int] = {}
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        stat = _proc_stat(pid)
        if stat is None:
            continue
        parents[pid] = stat[0]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.add(pid)
        except OSError:
            continue
    found |= roots & parents.keys()
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return found


class _Parts:
    """What a :class:`WebShopSiteEnv` started (server, chromedriver, Chromium, profile folder) and how to end it.

    It holds no reference to the env, so it can be the env's finalizer and run at interpreter exit.
    """

    def __init__(self, site: ShopSite) -> None:
        self.site = site
        self.driver: Any = None
        self.chromedriver: Any = None  # its subprocess.Popen
        self.browser: tuple[int, str] | None = None  # Chromium's main process: pid and start time
        self.profile: str | None = None

    def find_browser(self) -> None:
        """Remember Chromium's main process: chromedriver's child that runs with our profile folder."""
        if self.chromedriver is None or self.profile is None:
            return
        for pid in _processes_of(set(), f"--user-data-dir={self.profile}"):
            stat = _proc_stat(pid)
            if stat is not None and stat[0] == self.chromedriver.pid:
                self.browser = (pid, stat[2])
                return

    def dead(self) -> list[str]:
        """What has died, in words ('' parts alive)."""
        out = []
        if not self.site.running:
            out.append(f"the local WebShop HTTP server (at {self.site.last_url or 'no address'}) was stopped")
        else:
            try:
                with urllib.request.urlopen(f"{self.site.base_url}/healthz", timeout=5) as resp:
                    resp.read()
            except OSError as exc:
                out.append(f"the local WebShop HTTP server at {self.site.base_url} does not answer ({exc})")
        if self.chromedriver is not None and self.chromedriver.poll() is not None:
            out.append(
                f"chromedriver (pid {self.chromedriver.pid}) exited ({_exit_words(self.chromedriver.returncode)})"
            )
        if self.browser is not None:
            stat = _proc_stat(self.browser[0])
            if stat is None or stat[2] != self.browser[1]:
                out.append(f"Chromium (pid {self.browser[0]}) exited")
        return out

    def close(self) -> None:
        """End everything, whatever state it is in; never raises."""
        driver, self.driver = self.driver, None
        if driver is not None and self.chromedriver is not None and self.chromedriver.poll() is None:
            with contextlib.suppress(
                Exception
            ):  # a dead browser makes quit fail; what is left is killed below
                driver.quit()
        # Only pids that are certainly still ours: an exited chromedriver is reaped by poll() and its pid may be
        # reused; the browser's pid counts only with the start time it had.
        roots = set()
        if self.chromedriver is not None and self.chromedriver.poll() is None:
            roots.add(self.chromedriver.pid)
        if self.browser is not None and (_proc_stat(self.browser[0]) or (0, "", ""))[2] == self.browser[1]:
            roots.add(self.browser[0])
        marker = f"--user-data-dir={self.profile}" if self.profile else "\0never\0"
        for _ in range(3):  # a dying browser may still fork a helper: look again until nothing is left
            left = _processes_of(roots, marker) - {os.getpid()}
            if not left:
                break
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            _wait_gone(left)
        if self.chromedriver is not None:
            with contextlib.suppress(Exception):
                self.chromedriver.wait(timeout=5)  # collect our child's exit status (no zombie)
        self.site.close()
        if self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None


def _browser_environment(profile: str) -> dict[str, str]:
    """chromedriver's (and so Chromium's) environment: ours, with the home and XDG folders inside the profile.

    ``--user-data-dir`` moves the profile, but Chromium still writes its crash-report database under
    ``$XDG_CONFIG_HOME/chromium``, GTK's dconf under ``$XDG_CACHE_HOME``, NSS under ``$HOME/.pki``; inside the
    profile folder they go when it is removed, so an env leaves nothing in the user's home."""
    home = os.path.join(profile, "home")
    env = dict(os.environ)
    env["HOME"] = home
    for var, sub in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_DATA_HOME", ".local/share"),
    ):
        env[var] = os.path.join(home, sub)
    return env


def _wait_gone(pids: set[int], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(_proc_stat(p) is not None for p in pids):
        time.sleep(0.02)


def _first_line(exc: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message`` (selenium and urllib3 messages run to pages)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    return f"{type(exc).__name__}: {text if len(text) <= limit else text[:limit] + '...'}"


def _exit_words(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


@dataclass(frozen=True)
class WebShopSiteConfig:
    """:class:`WebShopSiteEnv`'s less common settings; any of them may also be passed to the env by name. The first
    four are :class:`~stepgym.envs.webshop.WebShopConfig`'s."""

    catalogue_file: str | os.PathLike[str] | None = None
    title_nouns: str = "heuristic"
    option_match: str = "upstream"
    invalid_feedback: bool = True
    chromium: str = "/usr/bin/chromium"
    """The Chromium executable."""
    chromedriver: str = "/usr/bin/chromedriver"
    """The chromedriver executable."""
    start_timeout: float = 30.0
    """Seconds to wait for the site server and the browser to start."""
    page_timeout: float = 30.0
    """Seconds to wait for a page."""


class WebShopSiteEnv(ShopEnvBase):
    """The WebShop site in a real browser; same observations, annotations and reward as :class:`WebShopEnv`.

    Takes :class:`~stepgym.envs.webshop.WebShopEnv`'s keywords (no ``search_anywhere``); ``config`` is a
    :class:`WebShopSiteConfig` (also settable field by name through ``gym.make``), which adds the browser's paths
    and timeouts.

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

    options_class = WebShopSiteConfig

    def _open(self, cfg: WebShopSiteConfig) -> None:
        self._webdriver = require("selenium.webdriver", "webshop", what="the WebShop site env (selenium)")
        self.page_timeout = cfg.page_timeout
        self.driver: Any = None
        self._broken = ""  # why the env cannot go on (a part died), once known
        self._html, self._url, self._has_search, self._keys, self._reward_json = "", "", False, [], None
        self.site = ShopSite(self.core)
        self._parts = _Parts(self.site)
        self._finalizer = weakref.finalize(self, self._parts.close)
        try:
            self.site.start(timeout=cfg.start_timeout)
            self.driver = self._start_browser(cfg.chromium, cfg.chromedriver, cfg.start_timeout)
        except BaseException:
            self.close()
            raise

    # -- browser ----------------------------------------------------------------------------------------------
    def _start_browser(self, chromium: str, chromedriver: str, timeout: float) -> Any:
        for exe in (chromium, chromedriver):
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                raise SiteUnavailableError(
                    f"{exe} not found. Fix: `apt-get install -y chromium chromium-driver`, or pass chromium=/chromedriver= "
                    f"paths to the env."
                )
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        parts = self._parts
        parts.profile = tempfile.mkdtemp(prefix="stepgym-chromium-")
        opts = Options()
        opts.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={parts.profile}")
        opts.page_load_strategy = "normal"
        service = Service(executable_path=chromedriver, env=_browser_environment(parts.profile))
        try:
            driver = self._webdriver.Chrome(service=service, options=opts)
        except WebDriverException as exc:
            parts.chromedriver = service.process
            raise SiteUnavailableError(
                f"could not start {chromium} through {chromedriver}: {exc.msg}"
            ) from exc
        parts.driver, parts.chromedriver = driver, service.process
        parts.find_browser()
        driver.set_page_load_timeout(timeout)
        return driver

    @contextlib.contextmanager
    def _browser_call(self, doing: str) -> Any:
        """Turn a failure of the browser, the driver or the server into a :class:`ServiceUnavailableError`."""
        if self._broken:
            raise SiteUnavailableError(self._broken)
        if self.driver is None:
            raise SiteUnavailableError("the WebShop site env is closed. Fix: make a new env.")
        from selenium.common.exceptions import WebDriverException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except (WebDriverException, HTTPError, OSError, _OffSite) as exc:
            dead = self._parts.dead()
            detail = _first_line(exc)
            if not dead:
                raise SiteUnavailableError(
                    f"the browser failed while {doing} ({detail}), with the server, chromedriver and Chromium "
                    f"alive (a page slower than page_timeout={self.page_timeout:g} s?). {_FIX}"
                ) from exc
            self._broken = f"the WebShop site env cannot go on: {'; '.join(dead)} (noticed while {doing}: {detail}). {_FIX}"
            raise SiteUnavailableError(self._broken) from exc

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
        if not url.startswith(f"{self.site.last_url}/s/"):
            raise _OffSite(f"the browser shows {url[:100]!r}, not a page of the site")
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
        self.goal = self._pick_goal(options)
        with self._browser_call("resetting"):
            sid = self.site.new_session(self.goal)
            self.driver.get(f"{self.site.last_url}/s/{sid}/")
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
        name, arg = parse_shop_action(action)
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
        with self._browser_call(f"playing {action[:80]!r}"):
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
        """End the browser tree, chromedriver and the server, and remove the profile folder (never raises)."""
        self.driver = None
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()  # runs _Parts.close once; a second close() does nothing
        super().close()
