"""benchmarks/credit_fidelity.py: its scores equal independent computations (scipy, brute force), a perfect credit
scores AUROC 1, the bootstrap is paired, the quick run works end to end, and the endpoint path plays groups
against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import credit_fidelity as cf  # noqa: E402

from stepgym import schema  # noqa: E402


def brute_auroc(score: np.ndarray, positive: np.ndarray) -> float:
    pos, neg = score[positive], score[~positive]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auroc_matches_brute_force_and_scipy() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        score = rng.integers(-3, 4, size=n).astype(float)  # many ties
        positive = rng.random(n) < 0.4
        if positive.all() or not positive.any():
            continue
        assert cf.auroc(score, positive) == pytest.approx(brute_auroc(score, positive))
    stats = pytest.importorskip("scipy.stats")
    score, positive = rng.normal(size=40), rng.random(40) < 0.5
    u = stats.mannwhitneyu(score[positive], score[~positive]).statistic
    assert cf.auroc(score, positive) == pytest.approx(u / (positive.sum() * (~positive).sum()))


def test_perfect_credit_and_degenerate_inputs() -> None:
    gain = np.array([-1.0, 1.0, 0.0, 1.0, -2.0, 0.0])
    s = cf.score_steps(gain * 5.0, gain)
    assert s["auroc"] == 1.0 and s["neg_share"] == 1.0 and s["spearman"] == pytest.approx(1.0)
    flipped = cf.score_steps(-gain, gain)
    assert flipped["auroc"] == 0.0 and flipped["neg_share"] == 0.0
    assert cf.score_steps(np.ones(6), gain)["auroc"] == 0.5  # constant credit: chance
    assert np.isnan(cf.auroc(np.ones(3), np.array([True, True, True])))
    assert np.isnan(cf.negative_share(np.ones(3), np.array([True, False, False])))


def test_spearman_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 5, size=50).astype(float), rng.normal(size=50)
    assert cf.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert np.isnan(cf.spearman(np.ones(5), y[:5]))


def test_negative_share_by_hand() -> None:
    credit = np.array([-1.0, -3.0, 2.0, -0.0, -4.0])
    harmful = np.array([True, False, True, True, True])
    assert cf.negative_share(credit, harmful) == pytest.approx(5.0 / 8.0)


def test_bootstrap_is_paired_and_matches_a_direct_loop() -> None:
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(8), 6)
    gain = rng.choice([-1.0, 0.0, 1.0], size=len(groups))
    credits = {"grpo": rng.normal(size=len(groups)), "gigpo": gain + 0.3 * rng.normal(size=len(groups))}
    got = cf.paired_bootstrap(groups, credits, gain, np.random.default_rng(9), 200)
    # the same resamples drawn independently: whole groups, the same draw for both methods
    again = np.random.default_rng(9)
    diffs, base = [], []
    for _ in range(200):
        pick = again.integers(8, size=8)
        rows = np.concatenate([np.flatnonzero(groups == g) for g in pick])
        a = cf.auroc(credits["gigpo"][rows][gain[rows] != 0], gain[rows][gain[rows] != 0] > 0)
        b = cf.auroc(credits["grpo"][rows][gain[rows] != 0], gain[rows][gain[rows] != 0] > 0)
        diffs.append(a - b)
        base.append(b)
    assert got["gigpo-grpo"]["auroc"] == pytest.approx(tuple(np.quantile(diffs, [0.025, 0.975])))
    assert got["grpo"]["auroc"] == pytest.approx(tuple(np.quantile(base, [0.025, 0.975])))
    assert got["grpo-grpo"]["auroc"] == (0.0, 0.0)  # paired: a method minus itself never varies


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("credit_fidelity")
    assert cf.main(["--quick", "--out", str(out)]) == 0
    return json.loads((out / "results.json").read_text()), out


def test_quick_run_scores_every_env_and_method(quick) -> None:
    data, out = quick
    envs = {r["env"] for r in data["results"] if r["subset"] == "all"}
    assert {"CreditToy", "CreditFamily"} <= envs
    for r in data["results"]:
        assert set(r["scores"]) == set(cf.METHODS)
        assert r["exact_steps"] == r["harmful"] + r["zero"] + r["helpful"]
        for m in cf.METHODS:
            a = r["scores"][m]["auroc"]
            assert np.isnan(a) or 0.0 <= a <= 1.0
    toy = next(r for r in data["results"] if r["env"] == "CreditToy" and r["subset"] == "all")
    assert toy["presets"]["gigpo"] == "credit-gigpo"
    # the graph bases take ALFWorld's presets on the credit envs (both keyings), the ceiling its own
    assert toy["presets"]["graphgpo"] == toy["presets"]["graphgpo-obs"] == "alfworld-graphgpo"
    assert toy["presets"]["oracle"] == "oracle"
    # the ceiling's credit is the true gain (plus the episode term): on the exact credit envs it separates
    # helpful from harmful steps better than the outcome alone, and every difference to it has an interval
    for env in ("CreditToy", "CreditFamily"):
        r = next(r for r in data["results"] if r["env"] == env and r["subset"] == "all")
        assert r["scores"]["oracle"]["auroc"] >= max(r["scores"]["grpo"]["auroc"], 0.9)
        assert set(r["ci"]) >= {f"{m}-oracle" for m in cf.METHODS}
    assert "| graphgpo-obs |" in (out / "tables.md").read_text()
    assert "| CreditToy | all |" in (out / "tables.md").read_text()


def test_stand_in_teacher_gap() -> None:
    info = {"stepgym/admissible_actions": ["a", "b", "c"], "stepgym/expert_action": "a"}
    assert cf.gap("random", info, "a", None, 3.0) == 0.0
    up = cf.gap("random", info, "a", "a", 3.0)
    down = cf.gap("random", info, "b", "a", 3.0)
    assert up > 0 > down
    # teacher ∝ π_old · e^{3·[a]}: log of (e^3/(e^3+2)) / (1/3)
    assert up == pytest.approx(np.log(np.exp(3) / (np.exp(3) + 2) * 3))


class _Server:
    """A minimal chat-completions server: replies with the first admissible action its prompt lists."""

    def __init__(self) -> None:
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                prompt = body["messages"][-1]["content"]
                acts = re.findall(r"'([^']*)'", prompt.rsplit("Actions:", 1)[-1]) or ["wait"]
                reply = f"<action>{acts[outer.requests % len(acts)]}</action>"
                data = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.mark.network
def test_endpoint_groups_are_scored(tmp_path: Path) -> None:
    server = _Server()
    try:
        argv = [
            "--quick",
            "--only",
            "credittoy",
            "--out",
            str(tmp_path),
            "--model",
            "m",
            "--base-url",
            server.url,
        ]
        assert cf.main(argv) == 0
    finally:
        server.httpd.shutdown()
    assert server.requests > 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert "llm" in data["meta"]["agents"]
    llm = next(r for r in data["results"] if r["subset"] == "agent:llm")
    assert llm["steps"] > 0 and set(llm["scores"]) == set(cf.METHODS)


def test_readme_tables_are_the_committed_results() -> None:
    """docs/benchmarks.md's credit-fidelity region is rebuilt from benchmarks/results/credit_fidelity_<date>.json
    (scripts/doc_figures.py --write --only credit-fidelity)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import doc_figures

    assert doc_figures.CREDIT_FIDELITY.exists()
    assert doc_figures.main(["--check", "--only", "credit-fidelity"]) == 0


def test_record_opens_in_the_viewer_with_values_and_every_credit(tmp_path: Path) -> None:
    from stepgym import schema
    from stepgym.viewer import load_run

    argv = ["--quick", "--only", "credittoy", "--out", str(tmp_path / "o"), "--record", str(tmp_path / "rec")]
    assert cf.main(argv) == 0
    run = load_run(tmp_path / "rec")
    assert run.meta["shapers"] == list(cf.METHODS)
    steps = [s for g in run.groups.values() for e in g["episodes"] for s in e["steps"]]
    assert steps and all(set(s["adv"]) == set(cf.METHODS) for s in steps)
    assert all(schema.VALUE_GAIN in s["info"] and schema.VALUE_EXACT in s["info"] for s in steps)


def test_group_stats_singletons_and_purity_by_hand() -> None:
    """Groups {0,1,2} (exact states a, a, b), {3} (c) and {4,5} (d, d), counted by hand."""
    got = cf.group_stats(np.array([0, 0, 0, 1, 2, 2]), ["a", "a", "b", "c", "d", "d"])
    assert got["rows"] == 6 and got["groups"] == 3
    assert got["singleton_share"] == 1 / 6  # row 3 is alone
    assert got["purity"] == 5 / 6  # the 'b' row is not its group's majority state
    pure = cf.group_stats(np.array([0, 1, 2]), ["a", "a", "a"])
    assert pure["singleton_share"] == 1.0 and pure["purity"] == 1.0


def test_an_env_failure_aborts_that_episode_and_the_benchmark_goes_on(monkeypatch, capsys) -> None:
    """Failure semantics in the benchmark's own loop: a flaky env (an exception on some steps) aborts those
    episodes, which are left out of the groups and counted in one line; nothing raises."""
    import argparse

    from stepgym.wrappers.faults import FaultInjectionWrapper

    real = cf.ValueWrapper
    monkeypatch.setattr(
        cf, "ValueWrapper", lambda e, **kw: FaultInjectionWrapper(real(e, **kw), exception=0.05, seed=1)
    )
    spec = cf.EnvSpec("CreditToy", "StepGym/CreditToy-v0", {}, "credit", 4)  # as the quick run has it
    groups = cf.collect(spec, argparse.Namespace(group=4), ["random"], None)
    kept = [t for g in groups for t in g.trajs]
    assert kept and not any(t.aborted for t in kept)
    assert sum(len(g.trajs) for g in groups) < 4 * spec.tasks  # some episodes were aborted and left out
    assert re.search(
        r"CreditToy \(random\): episodes aborted and left out: \d+ env_exception", capsys.readouterr().err
    )


def test_tau2_bound_truth_and_noisy_gold_agent() -> None:
    """τ²-bench is scored against its bound: the bound's gain, −1 for the step that leaves the gold path, no claim
    once off it; the noisy gold agent plays the expert at e = 0 and never raises on a goal without tools."""
    on, off = {schema.SUBGOAL_KEY: "gold_writes:1/2"}, {schema.SUBGOAL_KEY: cf.OFF_GOLD_PATH}
    assert cf.bound_gain(on, {**on, schema.VALUE_GAIN: 1.0}) == 1.0
    assert cf.bound_gain(on, {**off, schema.VALUE_GAIN: 0.0}) == -1.0
    assert cf.bound_gain(off, {**off, schema.VALUE_GAIN: 0.0}) is None
    assert cf.bound_gain(on, {**on}) is None
    call = '{"arguments": {"user_id": "u1"}, "name": "get_user_details"}'
    goal = '<tools>\n{"function": {"name": "cancel", "parameters": {"required": ["order_id"]}}}\n</tools>'
    info = {schema.EXPERT_ACTION: call, schema.GOAL: goal}
    assert cf.Tau2Noise(0.0, 0).act("", info) == call
    outs = [cf.Tau2Noise(1.0, s).act("", info) for s in range(30)]
    assert call not in outs and any(o.startswith('{"arguments": {"order_id"') for o in outs)
    assert any(o in cf.Tau2Noise.MESSAGES for o in outs) and any(
        '"name": "get_user_details"' in o for o in outs
    )
    assert outs == [cf.Tau2Noise(1.0, s).act("", info) for s in range(30)]  # seeded
    assert isinstance(cf.Tau2Noise(1.0, 0).act("", {}), str)
