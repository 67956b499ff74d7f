"""The WebShop site: HTTP behaviour (404s, no traversal, escaping) and the browser env against the text env."""

from __future__ import annotations

import http.client
import json
import os
import shutil
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
