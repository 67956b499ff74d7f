"""The WebShop site: HTTP behaviour (404s, no traversal, escaping) and the browser env against the text env."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.webshop.core import shared_core
from stepgym.envs.webshop.pages_html import html_to_text
from stepgym.envs.webshop.server import ShopSite
from stepgym.testing import assert_same_infos

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HAS_BROWSER = all(os.path.isfile(p) for p in (CHROMIUM, CHROMEDRIVER))
needs_browser = pytest.mark.skipif(not HAS_BROWSER, reason="needs Debian chromium + chromium-driver")
EVIL = '<script>window.__pwned = 1;</script><b onmouseover="x()">bold & "quoted"</b>'


@pytest.fixture(scope="module")
def ws(data_dir: Path) -> Path:
    root = data_dir / "webshop"
    if not (root / "data" / "items_shuffle_1000.documents.jsonl").is_file():
        pytest.skip("WebShop data not available")
    return root


@pytest.fixture(scope="module")
def evil_root(ws: Path, tmp_path_factory) -> tuple[Path, str]:
    """A copy of the data whose goal-0 target has markup in its title and description."""
    core = shared_core(ws, "synthetic", "bm25s")
    asin = core.goal_by_index(0).asin
    root = tmp_path_factory.mktemp("evil") / "webshop"
    (root / "data").mkdir(parents=True)
    shutil.copy(ws / "data" / "items_ins_v2_1000.json", root / "data")
    lines = []
    for line in (ws / "data" / "items_shuffle_1000.documents.jsonl").read_text().splitlines():
        doc = json.loads(line)
        if doc["id"] == asin:
            doc["product"]["Title"] = doc["product"]["name"] = EVIL + " " + doc["product"]["Title"]
            doc["product"]["Description"] = (
                '<img src="x" onerror="window.__pwned = 2">' + doc["product"]["Description"]
            )
        lines.append(json.dumps(doc))
    (root / "data" / "items_shuffle_1000.documents.jsonl").write_text("\n".join(lines) + "\n")
    return root, asin


def _request(site: ShopSite, method: str, path: str, body: str = "") -> tuple[int, str, dict[str, str]]:
    host, port = site.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    conn.request(method, path, body=body or None, headers=headers)  # the path is sent exactly as given
    resp = conn.getresponse()
    data = resp.read().decode("utf-8", "replace")
    out = (resp.status, data, dict(resp.getheaders()))
    conn.close()
    return out


@pytest.mark.network
def test_site_routes_404_and_traversal(evil_root) -> None:
    root, asin = evil_root
    core = shared_core(root, "synthetic", "bm25s")
    with ShopSite(core) as site:
        assert _request(site, "GET", "/healthz")[:2] == (200, "ok")
        status, _, headers = _request(site, "GET", "/start?task_id=webshop/synthetic/0")
        assert status == 303 and headers["Location"].startswith("/s/")
        sid = headers["Location"].split("/")[2]
        status, page, _ = _request(site, "GET", f"/s/{sid}/")
        assert status == 200 and html_to_text(page).startswith("WebShop [SEP] Instruction: [SEP] ")
        for path in [
            "/nope",
            "/static/style.css",
            "/templates/item_page.html",
            "/../../etc/passwd",
            f"/s/{sid}/../../../etc/passwd",
            f"/s/{sid}/%2e%2e/%2e%2e/etc/passwd",
            "/etc/passwd",
            f"/s/{sid}/item/..%2F..%2Fetc%2Fpasswd",
            f"/s/{sid}/item/NOSUCHASIN",
            f"/s/{sid}/results?q=",
            f"/s/{sid}/item/{asin}?o=%5B%5B%22color%22%2C%22nope%22%5D%5D",
            f"/s/{sid}/item/{asin}?p=-1",
            f"/s/{sid}/item/{asin}/Secrets",
            f"/s/{sid}/buy/{asin}",
            "/s/0123456789abcdef/",
            "/start?task_id=webshop/human/0",
            "/start?task_id=../../x",
        ]:
            status, body, _ = _request(site, "GET", path)
            assert status == 404, path
            assert "root:" not in body
        status, _, headers = _request(site, "POST", f"/s/{sid}/search", "search_query=Pillow+Cover")
        assert status == 303 and "results?q=pillow+cover&p=1" in headers["Location"]
        status, page, _ = _request(site, "GET", f"/s/{sid}/item/{asin}?q=x&p=1&o=%5B%5D")
        assert status == 200
        assert "<script>window" not in page and "&lt;script&gt;window.__pwned = 1;&lt;/script&gt;" in page
        assert '<img src="x"' not in page and EVIL in html_to_text(page)
        status, page, _ = _request(site, "POST", f"/s/{sid}/buy/{asin}?o=%5B%5D")
        assert status == 200 and "Thank you for shopping with us!" in html_to_text(page)
        assert site.purchases(sid)[0]["asin"] == asin
        base = site.base_url
    with pytest.raises(OSError):  # closed: nothing listens any more
        conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=2)
        conn.request("GET", "/healthz")
        conn.getresponse()


@needs_browser
@pytest.mark.browser
@pytest.mark.network
def test_site_env_escapes_product_text(evil_root) -> None:
    root, asin = evil_root
    env = gym.make("StepGym/WebShopSite-v0", data_root=root, split="all").unwrapped
    try:
        _, info = env.reset(options={"goal_index": 0})
        obs = ""
        while env.state.page != "item":
            obs, *_, info = env.step(info[schema.EXPERT_ACTION])
        assert any(seg.startswith(EVIL + " ") for seg in obs.split(" [SEP] "))  # rendered as text, not markup
        obs, *_ = env.step("click[description]")
        assert '<img src="x" onerror="window.__pwned = 2">' in obs
        assert env.driver.execute_script("return window.__pwned === undefined")
    finally:
        env.close()


def _script(t: int, info: dict) -> str:
    """A path with detours (paging, sub pages, junk) that ends with the oracle's purchase."""
    detours = ["click[next >]", "search[🙂 décor]", "click[next >]", "click[< prev]", "click[back to search]"]
    if t < len(detours):
        return detours[t]
    if t == 7 and info[schema.STATE_KEY].startswith("item"):
        return "click[features]"
    return info[schema.EXPERT_ACTION] or "click[buy now]"


@needs_browser
@pytest.mark.browser
@pytest.mark.network
def test_site_env_matches_text_env(ws: Path) -> None:
    text = gym.make("StepGym/WebShop-v0", split="all", max_steps=25).unwrapped
    site = gym.make("StepGym/WebShopSite-v0", split="all", max_steps=25).unwrapped
    try:
        tasks = text.task_ids[::345][:21]
        rewards = []
        for tid in tasks:
            o1, i1 = text.reset(options={"task_id": tid})
            o2, i2 = site.reset(options={"task_id": tid})
            assert o1 == o2
            assert_same_infos(i1, i2, f"{tid} reset")
            for t in range(25):
                a = _script(t, i1)
                o1, r1, term1, trunc1, i1 = text.step(a)
                o2, r2, term2, trunc2, i2 = site.step(a)
                assert o1 == o2, (tid, a)
                assert (r1, term1, trunc1) == (r2, term2, trunc2), (tid, a)
                assert_same_infos(i1, i2, f"{tid} {a}")
                if term1 or trunc1:
                    break
            assert term1, tid
            rewards.append(r1)
        assert len(rewards) >= 20 and sum(r == 1.0 for r in rewards) >= 15
    finally:
        site.close()
        text.close()
    assert site.driver is None


# ---------------------------------------------------------------------------------------------------------------
# A part that dies: a clear error, and nothing left behind
# ---------------------------------------------------------------------------------------------------------------
def _live_processes() -> dict[int, tuple[int, bytes]]:
    """Every live process as pid -> (parent pid, command line), from /proc (zombies count as ended)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X"):
            out[int(name)] = (int(fields[1]), cmdline)
    return out


def _env_processes(env) -> tuple[set[int], str]:
    """chromedriver and everything below it, and the Chromium profile folder, as the test sees them."""
    procs = _live_processes()
    tree = {env.driver.service.process.pid}
    while True:
        more = {p for p, (parent, _) in procs.items() if parent in tree} - tree
        if not more:
            break
        tree |= more
    flags = [arg for p in tree for arg in procs[p][1].split(b"\0") if arg.startswith(b"--user-data-dir=")]
    assert flags, "no Chromium under chromedriver"
    return tree, flags[0].split(b"=", 1)[1].decode()


def _assert_nothing_left(pids: set[int], profile: str) -> None:
    alive = _live_processes()
    assert not pids & alive.keys(), [alive[p][1][:80] for p in pids & alive.keys()]
    assert not [p for p, (_, cmd) in alive.items() if profile.encode() in cmd]
    assert not os.path.exists(profile)


def _kill_server(env) -> None:
    env.site.close()


def _kill_chromium(env) -> None:
    procs = _live_processes()
    driver_pid = env.driver.service.process.pid
    (browser,) = [
        p for p, (parent, cmd) in procs.items() if parent == driver_pid and b"--user-data-dir" in cmd
    ]
    os.kill(browser, 9)


def _kill_chromedriver(env) -> None:
    os.kill(env.driver.service.process.pid, 9)


@needs_browser
@pytest.mark.browser
@pytest.mark.network
@pytest.mark.parametrize(
    ("kill", "named"),
    [
        (_kill_server, r"local WebShop HTTP server \(at http://127\.0\.0\.1:\d+\) was stopped"),
        (_kill_chromium, r"Chromium \(pid \d+\) exited"),
        (_kill_chromedriver, r"chromedriver \(pid \d+\) exited \(killed by SIGKILL\)"),
    ],
    ids=["server", "chromium", "chromedriver"],
)
def test_dead_part_is_a_clear_error_and_close_leaves_nothing(ws: Path, kill, named: str) -> None:
    from stepgym.errors import ServiceUnavailableError

    env = gym.make("StepGym/WebShopSite-v0", split="all").unwrapped
    try:
        env.reset(options={"goal_index": 3})
        env.step("search[shoes]")
        pids, profile = _env_processes(env)
        assert len(pids) >= 3 and os.path.isdir(profile)
        kill(env)
        with pytest.raises(ServiceUnavailableError, match=named + r".*Fix: call env\.close\(\)"):
            env.step("click[next >]")
        with pytest.raises(ServiceUnavailableError, match=named):
            env.reset(options={"goal_index": 3})
    finally:
        env.close()
    _assert_nothing_left(pids, profile)
    env.close()  # a second close is harmless


@needs_browser
@pytest.mark.browser
@pytest.mark.network
def test_browser_writes_nothing_in_the_users_home(ws: Path, tmp_path: Path, monkeypatch) -> None:
    """Chromium keeps its crash reports under $XDG_CONFIG_HOME/chromium and dconf under $XDG_CACHE_HOME whatever
    --user-data-dir says; the env points them into its profile folder, so the home it runs in stays empty."""
    from stepgym.data import cache_dir

    monkeypatch.setenv("STEPGYM_CACHE", str(cache_dir()))  # stepgym's own index cache stays where it is
    home, config, cache = tmp_path / "home", tmp_path / "config", tmp_path / "cache"
    for path in (home, config, cache):
        path.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    env = gym.make("StepGym/WebShopSite-v0", split="all").unwrapped
    try:
        env.reset(options={"goal_index": 3})
        env.step("search[shoes]")
        pids, profile = _env_processes(env)
    finally:
        env.close()
    _assert_nothing_left(pids, profile)
    assert [str(p) for p in tmp_path.rglob("*") if p not in (home, config, cache)] == []


@needs_browser
@pytest.mark.browser
@pytest.mark.network
def test_interpreter_exit_leaves_nothing(ws: Path) -> None:
    """A program that never calls close() (here with chromedriver already dead) leaves no process or folder."""
    code = (
        "import os, gymnasium as gym, stepgym\n"
        "env = gym.make('StepGym/WebShopSite-v0', split='all').unwrapped\n"
        "env.reset(options={'goal_index': 3})\n"
        "print(env.driver.service.process.pid, flush=True)\n"
        "input()\n"
        "os.kill(env.driver.service.process.pid, 9)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        driver_pid = int(proc.stdout.readline())
        procs = _live_processes()
        pids = {driver_pid} | {p for p, (parent, _) in procs.items() if parent == driver_pid}
        (profile,) = {
            arg.split(b"=", 1)[1].decode()
            for p in pids
            for arg in procs[p][1].split(b"\0")
            if arg.startswith(b"--user-data-dir=")
        }
        proc.communicate("\n", timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0
    _assert_nothing_left(pids, profile)


@pytest.mark.network
def test_client_disconnecting_mid_response_is_no_traceback(ws: Path, capfd) -> None:
    core = shared_core(ws, "synthetic", "bm25s")
    with ShopSite(core) as site:
        sid = site.new_session(core.goals[0])
        host, port = site.base_url.removeprefix("http://").split(":")
        for _ in range(20):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(f"GET /s/{sid}/results?q=shoes&p=1 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not FIN
            sock.close()
        assert _request(site, "GET", "/healthz")[0] == 200  # still serving
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err
