"""The viewer in a real headless Chromium: it loads a real recorded training run, navigation and filters work, the
numbers on screen are the recorded ones, hostile env text stays text, and the export works from file:// offline."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from _viewer_runs import EVIL, record_hostile_group, train_args

from stepgym.viewer import ViewerServer, export_html, load_run

pytest.importorskip("torch")
pytest.importorskip("selenium")
pytestmark = [pytest.mark.browser, pytest.mark.network]

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of two recordings: a real `stepgym train` run on CreditToy and a hostile GroupEnv group."""
    from stepgym.cli import main

    root = tmp_path_factory.mktemp("runs")
    assert main(train_args(root / "train")) == 0
    record_hostile_group(root / "toy")
    return root


@pytest.fixture(scope="module")
def run(runs: Path) -> Any:
    return load_run(runs)


@pytest.fixture(scope="module")
def driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    from stepgym.envs.webshop.site_env import CHROMIUM_FLAGS

    for exe in (CHROMIUM, CHROMEDRIVER):
        if not os.access(exe, os.X_OK):
            pytest.skip(f"{exe} missing: apt-get install -y chromium chromium-driver")
    profile = tempfile.mkdtemp(prefix="stepgym-view-test-")
    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument("--window-size=1400,1000")
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def url(run: Any) -> Any:
    with ViewerServer(run) as srv:
        yield srv.url


def wait(d: Any, cond: Any) -> Any:
    return WebDriverWait(d, 20).until(lambda drv: cond(drv))


def open_page(d: Any, address: str) -> None:
    d.get(address)
    wait(d, lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")


def listed(d: Any) -> list[str]:
    return [b.get_attribute("data-gid") for b in d.find_elements(By.CSS_SELECTOR, "#groups button")]


def choose(d: Any, select_id: str, value: str) -> None:
    Select(d.find_element(By.ID, select_id)).select_by_value(value)


def group_of(run: Any, method: str, mixed: bool) -> dict:
    for s in run.index:
        if s["method"] == method and (0 < s["wins"] < s["size"]) == mixed:
            return s
    raise AssertionError(f"no {'mixed' if mixed else 'unmixed'} group of {method} in the recording")


# ---------------------------------------------------------------------------------------------------------------
def test_page_loads_and_filters_work(driver: Any, url: str, run: Any) -> None:
    d = driver
    open_page(d, url)
    m = run.meta
    assert (
        f"{m['n_groups']} groups · {m['n_episodes']} episodes · {m['n_steps']} steps"
        in d.find_element(By.ID, "runinfo").text
    )
    assert listed(d) == [s["id"] for s in run.index]
    choose(d, "f-method", "toy-expert")
    assert listed(d) == [s["id"] for s in run.index if s["method"] == "toy-expert"]
    choose(d, "f-method", "")
    choose(d, "f-success", "none")
    assert listed(d) == [s["id"] for s in run.index if s["wins"] == 0]
    choose(d, "f-success", "mixed")
    assert listed(d) == [s["id"] for s in run.index if 0 < s["wins"] < s["size"]]
    choose(d, "f-success", "")
    choose(d, "f-iteration", "2")
    assert listed(d) == [s["id"] for s in run.index if s["iteration"] == 2]
    assert "of " + str(m["n_groups"]) + " groups" in d.find_element(By.ID, "count").text
    choose(d, "f-iteration", "")
    target = run.index[-1]["task_id"]
    d.find_element(By.ID, "search").send_keys(target)
    assert listed(d) == [
        s["id"] for s in run.index if target in f"{s['task_id']} {s['goal']} {s['task_type']}"
    ]


def test_group_and_episode_show_the_recorded_numbers(driver: Any, url: str, run: Any) -> None:
    d = driver
    s = group_of(run, "ProAS(GRPO)", mixed=True)
    grp = run.groups[s["id"]]
    open_page(d, url)
    d.find_element(By.CSS_SELECTOR, f'#groups button[data-gid="{s["id"]}"]').click()
    wait(d, lambda drv: drv.find_elements(By.ID, "group-grid"))
    heads = [
        b.get_attribute("data-rollout") for b in d.find_elements(By.CSS_SELECTOR, "#group-grid th button")
    ]
    assert heads == [str(e["rollout"]) for e in grp["episodes"]]
    wins = [e["won"] for e in grp["episodes"]]
    assert wins == sorted(wins, reverse=True) and any(wins) and not all(wins)  # successes first
    names = [n for n in run.meta["shapers"] if n in grp["episodes"][0]["steps"][0]["adv"]]
    shaper_a = names[0]  # the page falls back to the shapers the group was recorded with
    assert shaper_a == "ProAS(GRPO)" and len(names) == 3
    for e in grp["episodes"]:
        for st in e["steps"]:
            cell = d.find_element(By.CSS_SELECTOR, f'td[data-cell="{e["rollout"]}:{st["t"]}"]')
            assert cell.find_element(By.CSS_SELECTOR, '[data-testid="cell-adv"]').text == (
                f"{st['adv'][shaper_a]['step']:.4f}"
            )
    failed = next(e for e in grp["episodes"] if not e["won"])
    d.find_element(By.CSS_SELECTOR, f'#group-grid th button[data-rollout="{failed["rollout"]}"]').click()
    wait(d, lambda drv: drv.find_elements(By.ID, "episode"))
    assert d.find_element(By.ID, "outcome").text == "failure"
    for shaper_b in names[1:]:
        choose(d, "shaperB", shaper_b)
        wait(d, lambda drv, b=shaper_b: drv.find_elements(By.CSS_SELECTOR, f'[data-shaper="{b}"]'))
        for st in failed["steps"]:
            card = d.find_element(By.CSS_SELECTOR, f'section.step[data-t="{st["t"]}"]')
            assert card.find_element(By.CSS_SELECTOR, '[data-testid="reward"]').text == f"{st['reward']:.4f}"
            for name in (shaper_a, shaper_b):
                rec = st["adv"][name]
                shown = card.find_element(By.CSS_SELECTOR, f'[data-testid="adv-step"][data-shaper="{name}"]')
                assert float(shown.get_attribute("data-value")) == rec["step"]
                assert shown.text == f"{rec['step']:.4f}"
                spans = card.find_elements(
                    By.CSS_SELECTOR, f'[data-testid="heat"][data-shaper="{name}"] span'
                )
                assert [float(x.get_attribute("data-value")) for x in spans] == rec["tokens"]
                assert "".join(x.get_attribute("textContent") for x in spans) == "".join(st["tokens"])
            kv = {
                x.get_attribute("data-key"): x.text
                for x in card.find_elements(By.CSS_SELECTOR, "dd[data-key]")
            }
            assert kv["state_key"] == st["state_key"] and kv["subgoal_key"] == st["subgoal_key"]
            labels = f"{str(st['rea']).lower()} / {str(st['pa']).lower()} / {st['future_drift']:g}"
            assert kv["Rea / PA / Future-Drift"] == labels
            flags = {
                f.get_attribute("data-flag"): f.text
                for f in card.find_elements(By.CSS_SELECTOR, "[data-flag]")
            }
            assert flags["format_valid"].endswith("✓" if st["format_valid"] else "✗")
    d.find_element(By.ID, "back").click()
    wait(d, lambda drv: drv.find_elements(By.ID, "group-grid"))


def _assert_inert(d: Any, episode: dict) -> None:
    """The failed hostile episode: its markup is text, nothing ran; its hints sit at its error steps."""
    hints = [x.get_attribute("textContent") for x in d.find_elements(By.CSS_SELECTOR, '[data-testid="hint"]')]
    assert episode["error_steps"] and hints == [
        f"hint: {episode['hints'][str(t)]}" for t in episode["error_steps"]
    ]
    err = [int(x.get_attribute("data-t")) for x in d.find_elements(By.CSS_SELECTOR, "section.step.err")]
    assert err == episode["error_steps"]
    obs = d.find_elements(By.CSS_SELECTOR, '[data-testid="observation"]')
    assert obs and all(EVIL in o.get_attribute("textContent") for o in obs)
    assert EVIL in d.find_element(By.ID, "hindsight").get_attribute("textContent")
    main = d.find_element(By.ID, "main")
    assert not main.find_elements(By.TAG_NAME, "img") and not main.find_elements(By.TAG_NAME, "b")
    assert not main.find_elements(By.TAG_NAME, "script")
    assert d.execute_script("return window.__pwned === undefined") is True


def test_hostile_observation_renders_as_text(driver: Any, url: str, run: Any) -> None:
    d = driver
    toy = group_of(run, "toy-expert", mixed=True)
    open_page(d, f"{url}#group={toy['id']}&rollout=0")
    wait(d, lambda drv: drv.find_elements(By.ID, "episode"))
    _assert_inert(d, run.groups[toy["id"]]["episodes"][1])


def test_export_opens_offline(driver: Any, run: Any, tmp_path: Path) -> None:
    d = driver
    out = export_html(run, tmp_path / "view.html")
    open_page(d, out.resolve().as_uri())
    assert listed(d) == [s["id"] for s in run.index]
    toy = group_of(run, "toy-expert", mixed=True)
    d.find_element(By.CSS_SELECTOR, f'#groups button[data-gid="{toy["id"]}"]').click()
    wait(d, lambda drv: drv.find_elements(By.ID, "group-grid"))
    d.find_element(By.CSS_SELECTOR, '#group-grid th button[data-rollout="0"]').click()
    wait(d, lambda drv: drv.find_elements(By.ID, "episode"))
    failed = run.groups[toy["id"]]["episodes"][1]  # rollout 0 sorts after the success
    _assert_inert(d, failed)
    first = failed["steps"][0]
    shown = d.find_element(By.CSS_SELECTOR, '[data-testid="adv-step"][data-t="0"]')
    assert float(shown.get_attribute("data-value")) == first["adv"]["toy"]["step"]
    # nothing was fetched: the file carries everything (and its policy forbids connections)
    assert d.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_a_large_run_is_paginated_and_lazy(driver: Any, tmp_path: Path) -> None:
    """12,000 steps (synthetic episodes, only the size matters here): the list shows 50 groups a page and no step
    is sent to the page before its group is opened."""
    from stepgym import schema
    from stepgym.recording import GroupRecorder

    rec = GroupRecorder(tmp_path, meta={"method": "synthetic"})
    for g in range(250):
        trajs = []
        for _ in range(4):
            info = {schema.TASK_ID: f"task-{g}", schema.TASK_TYPE: f"type-{g % 3}"}
            steps = [schema.Step(f"obs {t}", f"act {t}", 0.0, "o", t == 11, False, {}) for t in range(12)]
            trajs.append(schema.Trajectory(f"task-{g}", "start", info, steps))
        adv = {"grpo": [[0.01 * t for t in range(12)] for _ in range(4)]}
        rec.record_trajectories(
            trajs, iteration=1 + g // 50, successes=[r == 0 for r in range(4)], advantages=adv
        )
    run = load_run(tmp_path)
    assert run.meta["n_steps"] == 12_000
    with ViewerServer(run) as srv:
        open_page(driver, srv.url)
        assert len(listed(driver)) == 50
        assert driver.find_element(By.ID, "page").text == "page 1 / 5"
        driver.find_element(By.ID, "next").click()
        assert listed(driver) == [s["id"] for s in run.index[50:100]]
        assert not driver.find_elements(By.CSS_SELECTOR, "td[data-cell]")
        fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert not [u for u in fetched if "api/group" in u]  # nothing but the index so far
        driver.find_element(By.CSS_SELECTOR, "#groups button").click()
        wait(driver, lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "td[data-cell]")) == 48)


def test_ground_truth_values_render_beside_the_credit(driver: Any, tmp_path: Path) -> None:
    """A CreditToy group played under ValueWrapper: the recorder keeps the value keys, and the episode view (served
    and exported) shows each step's true gain, exact or bound, beside the shapers' advantages."""
    from stepgym import schema
    from stepgym.group import GroupEnv
    from stepgym.recording import GroupRecorder
    from stepgym.wrappers import ValueWrapper

    group = GroupEnv("StepGym/CreditToy-v0", group_size=2, wrappers=[ValueWrapper])
    obs, infos = group.reset(seed=0)
    while group.agents:  # rollout 0 waits (wasted steps), rollout 1 follows the expert
        acts = {a: infos[a][schema.EXPERT_ACTION] if a == "rollout_1" else "wait" for a in group.agents}
        obs, _, _, _, infos = group.step(acts)
    steps = [len(t.steps) for t in group.trajectories]
    gains = [[s.info[schema.VALUE_GAIN] for s in t.steps] for t in group.trajectories]
    rec = GroupRecorder(tmp_path, meta={"method": "values"})
    rec.record_group(group, iteration=0, advantages={"grpo": [[0.5] * n for n in steps]})
    group.close()
    run = load_run(tmp_path)
    recorded = run.groups[run.index[0]["id"]]["episodes"]
    expert = next(e for e in recorded if e["rollout"] == 1)
    assert [s["info"][schema.VALUE_GAIN] for s in expert["steps"]] == gains[1]
    with ViewerServer(run) as srv:
        pages = [
            f"{srv.url}#group={run.index[0]['id']}&rollout=1",
            export_html(run, tmp_path / "v.html").resolve().as_uri()
            + f"#group={run.index[0]['id']}&rollout=1",
        ]
        for page in pages:
            open_page(driver, page)
            wait(driver, lambda drv: drv.find_elements(By.ID, "overview"))
            shown = driver.find_elements(By.CSS_SELECTOR, '#overview [data-testid="value-gain"]')
            assert [float(x.get_attribute("data-value")) for x in shown] == gains[1]
            assert all(x.get_attribute("data-exact") == "true" and x.is_displayed() for x in shown)
            assert shown[0].text == "+1"
            card = driver.find_element(
                By.CSS_SELECTOR, 'section.step[data-t="0"] dd[data-key="true value before → after"]'
            )
            assert card.text.startswith("5 → 4 · gain +1 · exact")
            assert (
                driver.find_element(By.CSS_SELECTOR, '[data-testid="adv-step"][data-t="0"]').get_attribute(
                    "data-value"
                )
                == "0.5"
            )


def test_a_damaged_recording_shows_a_warning_banner(driver: Any, runs: Path, tmp_path: Path) -> None:
    """A recording with a damaged part opens with a visible warning saying what was skipped (issue 52); an intact
    one shows none."""
    d = driver
    src = runs / "train" / "episodes.jsonl.gz"
    damaged = tmp_path / "damaged" / "episodes.jsonl.gz"
    damaged.parent.mkdir()
    raw = bytearray(src.read_bytes())
    raw[len(raw) * 2 // 3] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    run = load_run(damaged.parent)
    assert run.meta["warnings"]
    with ViewerServer(run) as srv:
        open_page(d, srv.url)
        banner = d.find_element(By.ID, "warnings")
        assert banner.is_displayed() and "damaged" in banner.text and "skipped" in banner.text
    with ViewerServer(load_run(runs / "train")) as srv:
        open_page(d, srv.url)
        assert not d.find_element(By.ID, "warnings").is_displayed()
