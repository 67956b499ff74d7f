"""benchmarks/credit_study.py: the quick sweep runs end to end (CSV, table, plots), cells are paired across methods,
and a killed sweep loses only the cells in flight and resumes without redoing or duplicating finished ones."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import credit_study as cs  # noqa: E402

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("credit_study")
    assert cs.main(["--quick", "--out", str(out), "--workers", "1"]) == 0
    return out


@pytest.mark.slow
def test_quick_sweep_writes_paired_cells_csv_and_plots(quick):
    cells = cs.load_cells(quick / "cells.jsonl")
    keys = [c["key"] for c in cells]
    assert len(keys) == len(set(keys))
    methods = {c["method"] for c in cells}
    assert set(cs.METHODS) <= methods and "gigpo-obs" in methods
    for c in cells:
        assert len(c["curve"]) == 8 and all(0.0 <= x <= 1.0 for x in c["curve"])
        assert 0.0 <= c["valid_success"] <= 1.0
        shares = [x for x in c["decisive_share"] if x == x]  # NaN when a batch had no advantage at all
        assert all(0.0 <= x <= 1.0 for x in shares)
    # the same seed starts every method from the same first batch of tasks: iteration 1 success is shared
    first = {}
    for c in cells:
        first.setdefault((c["setting"], c["seed"]), set()).add(c["curve"][0])
    assert all(len(v) == 1 for v in first.values())
    with open(quick / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == methods
    for r in rows:
        assert r["seeds"] == r["paired_seeds"] == "2"
        assert (r["d_auc"] == "nan") == (r["method"] == "grpo")
        # the distance to the perfect-credit ceiling, paired on the same seeds; none for the ceiling itself
        assert (r["c_auc"] == "nan") == (r["method"] == cs.CEILING)
        if r["method"] != cs.CEILING:
            assert float(r["c_auc_lo"]) <= float(r["c_auc"]) <= float(r["c_auc_hi"])
    assert {f"{m}{k}" for m in cs.GRAPH for k in ("", "-obs")} | {"oracle"} <= methods
    assert (quick / "summary.md").read_text().startswith("| setting | method |")
    for png in ("credit_study_curves.png", "credit_study_auc_diff.png"):
        assert (quick / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_killed_sweep_resumes_and_redoes_nothing(tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, str(REPO / "benchmarks" / "credit_study.py"), "--quick", "--settings", "center"]
    cmd += ["--out", str(out), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    results = out / "cells.jsonl"
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if results.exists() and results.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"the sweep ended before it could be killed: {proc.stderr.read()!r}"
    os.killpg(proc.pid, signal.SIGKILL)  # the whole sweep at once: parent and workers
    proc.wait()
    before = cs.load_cells(results)
    assert 2 <= len(before) < 2 * len(cs.METHODS)
    kept = results.read_bytes()
    assert cs.main(["--quick", "--settings", "center", "--out", str(out), "--workers", "1"]) == 0
    after_bytes = results.read_bytes()
    assert after_bytes.startswith(kept)  # finished cells are kept as they were, not rerun
    after = cs.load_cells(results)
    keys = [c["key"] for c in after]
    assert len(keys) == len(set(keys)) == 2 * len(cs.METHODS)  # every method × 2 seeds, each exactly once


def test_a_torn_last_line_is_dropped_and_the_next_append_is_clean(tmp_path):
    path = tmp_path / "cells.jsonl"
    cs.append_cell(path, {"key": "a", "x": 1})
    with open(path, "ab") as f:
        f.write(b'{"key": "b", "x"')  # a run killed mid-write
    assert [c["key"] for c in cs.load_cells(path)] == ["a"]
    cs.append_cell(path, {"key": "c", "x": 3})
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["a", "c"]


def test_cell_keys_change_with_knobs_and_training_args():
    args = {k: 1 for k in cs.TRAIN_ARGS}
    base = {"setting": "s", "method": "grpo", "seed": 0, "knobs": {}, "args": args}
    assert cs.cell_key(base) == cs.cell_key(dict(base))
    assert cs.cell_key(base) != cs.cell_key({**base, "knobs": {"horizon": 40}})
    assert cs.cell_key(base) != cs.cell_key({**base, "args": {**args, "lr": 2}})


def test_bootstrap_interval_of_paired_differences():
    rng = np.random.default_rng(0)
    assert cs.bootstrap_ci(np.full(10, 0.25), rng) == (0.25, 0.25)
    lo, hi = cs.bootstrap_ci(np.arange(10.0), rng)
    assert lo < 4.5 < hi
    assert all(np.isnan(cs.bootstrap_ci(np.array([1.0]), rng)))


def test_stepopsd_step_norm_leaves_one_token_steps_at_grpo_credit():
    # Why the study also runs stepopsd-nonorm: with one token per step, equal_step_mean_abs gives every step of a
    # trajectory the same magnitude, which undoes the teacher reweighting between steps.
    from stepgym.shapers import StepBatch, TokenLayout, shape_advantages

    n = 6
    layout = TokenLayout.from_step_rows(np.ones((n, 1)))
    batch = StepBatch(
        group_ids=[0] * n,
        traj_ids=[0, 0, 0, 1, 1, 1],
        rewards=[0, 0, 1, 0, 0, 0],
        layout=layout,
        delta=np.array([[2.0], [-1.0], [0.5], [1.0], [-3.0], [0.0]]),
        target=layout,
    )
    grpo = shape_advantages(batch, cs.shaper_config("grpo")).token_advantages
    opsd = shape_advantages(batch, cs.shaper_config("stepopsd")).token_advantages
    nonorm = shape_advantages(batch, cs.shaper_config("stepopsd-nonorm")).token_advantages
    for t in (0, 1):
        rows = slice(3 * t, 3 * t + 3)
        assert np.allclose(np.abs(opsd[rows]), np.abs(opsd[rows]).mean())  # equal per step
    assert not np.allclose(np.abs(nonorm[:3]), np.abs(nonorm[:3]).mean())
    assert np.allclose(np.sign(opsd), np.sign(grpo))


def test_the_committed_summary_is_what_the_committed_cells_give(tmp_path):
    results = REPO / "benchmarks" / "results"
    cells = results / "credit_study_2026-12-05_cells.jsonl.gz"
    assert cs.main(["--report-only", "--out", str(tmp_path), "--cells", str(cells)]) == 0
    for name in ("summary.csv", "summary.md"):
        committed = (results / f"credit_study_2026-12-05_{name}").read_text()
        assert (tmp_path / name).read_text() == committed, name


def test_graph_bases_get_both_keyings_and_the_ceiling_the_true_gain():
    """A graph base's batch is keyed on STATE_KEY, its ``-obs`` variant on the observation text (next_obs[t] is
    the text before step t+1); the ceiling reads VALUE_GAIN of each step; the configs are the shaper presets."""
    import gymnasium as gym

    from stepgym.wrappers import ValueWrapper

    env = ValueWrapper(gym.make(cs.ENV_ID, n_tasks=4, **{**cs.CENTER, "alias": True}).unwrapped)
    ep = cs.play(env, cs.Policy(), env.unwrapped.task_ids[0], np.random.default_rng(0))
    rows = [(ep, s) for s in ep.steps]
    for method in ("graphgpo", "graphgpo-obs", "oracle"):
        batch = cs.StepBatch(group_ids=[0] * len(rows), traj_ids=[0] * len(rows), rewards=[0.0] * len(rows))
        cs.graph_inputs(batch, rows, method)
        assert batch.next_obs[:-1] == batch.anchor_obs[1:]
        assert batch.dones == [False] * (len(rows) - 1) + [ep.steps[-1].done]
        if method.endswith("-obs"):
            assert batch.anchor_obs == [s.obs for s in ep.steps]
        else:
            assert batch.anchor_obs == [s.info[cs.schema.STATE_KEY] for s in ep.steps]
        assert (batch.true_gain is None) == (method != "oracle")
    assert cs.shaper_config("graphgpo-obs") == cs.shaper_config("graphgpo")
    assert cs.shaper_config("graphgpo").base == "graphgpo" and cs.shaper_config("oracle").base == "oracle"
