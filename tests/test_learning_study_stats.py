"""benchmarks/learning_study_stats.py: each procedure against scipy / statsmodels on known cases, the discovery /
confirmation rule on hand-made cells, the merge of cells files, and the committed claims and power files against a
fresh computation from the committed cells."""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_study_stats as st  # noqa: E402

statsmodels = pytest.importorskip("statsmodels")
from statsmodels.stats.multitest import multipletests  # noqa: E402
from statsmodels.stats.power import TTestPower  # noqa: E402
from statsmodels.stats.weightstats import DescrStatsW  # noqa: E402

RNG = np.random.default_rng(2026)
SAMPLES = [RNG.normal(0.03, 0.05, size=n) for n in (3, 5, 10, 20)] + [np.array([0.1, -0.2, 0.05, 0.0, 0.3])]


@pytest.mark.parametrize("d", SAMPLES)
def test_t_test_matches_scipy_and_statsmodels(d: np.ndarray) -> None:
    t = st.t_test(d)
    ref = sps.ttest_1samp(d, 0.0)
    assert t.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert t.p_greater == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-9)
    assert t.p_less == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="less").pvalue, rel=1e-9)
    lo, hi = DescrStatsW(d).tconfint_mean(alpha=0.05)
    assert (t.lo, t.hi) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    # the paired test of two samples is the one-sample test of their differences
    y = RNG.normal(size=len(d))
    assert st.t_test((y + d) - y).p == pytest.approx(sps.ttest_rel(y + d, y).pvalue, rel=1e-6)
    assert t.dz == pytest.approx(d.mean() / d.std(ddof=1)) == pytest.approx(st.cohens_dz(d))


def test_t_test_degenerate_cases() -> None:
    assert st.cohens_dz([1.0, 2.0, 3.0]) == pytest.approx(2.0)  # mean 2, sd 1
    one = st.t_test([0.4])
    assert one.n == 1 and one.mean == 0.4 and math.isnan(one.p) and math.isnan(one.lo)
    const = st.t_test([0.1, 0.1, 0.1])
    assert const.p == 0.0 and const.p_greater == 0.0 and const.lo == const.hi == pytest.approx(0.1)
    zero = st.t_test([0.0, 0.0])
    assert zero.p == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_holm_matches_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, size=rng.integers(1, 15))
    if seed % 2:
        p[: len(p) // 2] = p[0]  # ties
    want = multipletests(p, alpha=0.05, method="holm")[1]
    np.testing.assert_allclose(st.holm(p), want, rtol=1e-12)
    # NaN entries stay NaN and do not count in the family
    got = st.holm([*p, math.nan])
    assert math.isnan(got[-1])
    np.testing.assert_allclose(got[:-1], want, rtol=1e-12)


def test_holm_known_case() -> None:
    # m = 3, sorted 0.01, 0.03, 0.04: 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, max(0.06, 0.04 * 1) = 0.06 (monotone)
    assert st.holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])


@pytest.mark.parametrize("n", [4, 5, 8, 10, 13, 20])
def test_iqm_and_probability_of_improvement_match_scipy(n: int) -> None:
    x = RNG.normal(size=n)
    assert st.iqm(x) == pytest.approx(sps.trim_mean(x, 0.25))
    y = np.round(RNG.normal(0.3, 1, size=n + 2), 1)
    x = np.round(x, 1)  # ties count one half
    u = sps.mannwhitneyu(x, y).statistic
    assert st.prob_improvement(x, y) == pytest.approx(u / (len(x) * len(y)))
    batch = np.stack([x, x[::-1]])
    np.testing.assert_allclose(st.iqm(batch), [st.iqm(x)] * 2)


def test_performance_profile_counts_the_runs_above_each_threshold() -> None:
    x = np.array([0.1, 0.2, 0.5, 0.9])
    np.testing.assert_allclose(
        st.performance_profile(x, [0.0, 0.2, 0.45, 0.9, 1.0]), [1.0, 0.5, 0.5, 0.0, 0.0]
    )
    # the empirical survival function of the scores, and a batch gives one profile per row
    rng = np.random.default_rng(3)
    y = rng.uniform(size=50)
    taus = np.linspace(0, 1, 11)
    np.testing.assert_allclose(st.performance_profile(y, taus), [np.mean(y > t) for t in taus])
    batch = st.performance_profile(np.stack([x, 1 - x]), [0.5])
    np.testing.assert_allclose(batch, [[0.25], [0.5]])


def test_stratified_bootstrap_resamples_within_strata_and_pairs() -> None:
    rng = np.random.default_rng(0)
    a, b = np.zeros(6), np.ones(9)
    # resampling within each stratum: the difference of the strata means never moves
    lo, hi = st.stratified_bootstrap([[a], [b]], lambda x, y: x.mean(1) - y.mean(1), rng, 500)
    assert lo == hi == -1.0
    # paired arrays share one draw: x - y is 0.5 for every seed, so every resample's mean is 0.5
    x = rng.normal(size=10)
    lo, hi = st.stratified_bootstrap([[x + 0.5, x]], lambda u, v: (u - v).mean(1), rng, 500)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    # the percentile interval of a mean contains the sample mean and is near the normal one
    d = rng.normal(0.1, 1.0, size=40)
    lo, hi = st.stratified_bootstrap([[d]], st.boot_mean, rng, 20_000)
    se = d.std(ddof=1) / math.sqrt(len(d))
    assert lo < d.mean() < hi and hi - lo == pytest.approx(2 * 1.96 * se, rel=0.1)


@pytest.mark.parametrize(
    ("dz", "n", "sides"), [(0.3, 10, 2), (0.8, 12, 2), (0.5, 30, 1), (1.2, 5, 1), (0.05, 3000, 2)]
)
def test_power_matches_statsmodels(dz: float, n: int, sides: int) -> None:
    alt = "two-sided" if sides == 2 else "larger"
    for alpha in (0.05, 0.05 / 11):
        want = TTestPower().power(effect_size=dz, nobs=n, alpha=alpha, alternative=alt)
        assert st.power(dz, n, alpha, sides) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    ("delta", "sd", "alpha", "sides"),
    [(0.02, 0.063, 0.05 / 11, 2), (0.02, 0.05, 0.05, 1), (0.05, 0.04, 0.005, 2)],
)
def test_seeds_needed_and_mde_match_statsmodels(delta: float, sd: float, alpha: float, sides: int) -> None:
    alt = "two-sided" if sides == 2 else "larger"
    nobs = TTestPower().solve_power(effect_size=delta / sd, alpha=alpha, power=0.8, alternative=alt)
    assert st.seeds_needed(delta, sd, alpha, sides=sides) == math.ceil(nobs)
    for n in (10, 20):
        es = TTestPower().solve_power(nobs=n, alpha=alpha, power=0.8, alternative=alt)
        assert st.mde(n, sd, alpha, sides=sides) == pytest.approx(es * sd, rel=1e-4)
    assert st.seeds_needed(0.001, 10.0, 0.05, cap=500) == 501  # never within the cap


def test_spearman_and_exact_permutation_match_scipy() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=6), rng.normal(size=6)
    x[1] = x[0]  # a tie
    assert st.spearman(x, y) == pytest.approx(sps.spearmanr(x, y).statistic)
    rho, p = st.permutation_p([x], [y], rng)
    ref = sps.permutation_test(  # x permuted over the units, y held: the 720 orderings
        (x,),
        lambda a: sps.spearmanr(a, y).statistic,
        permutation_type="pairings",
        n_resamples=np.inf,
        vectorized=False,
    )
    assert rho == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)


def test_monte_carlo_permutation_is_near_the_exact_one() -> None:
    """Eleven methods (the study's size): the vectorised Monte Carlo p is within its error of scipy's exact
    distribution of Spearman's rho under independence; a perfect relation is rare under permutation."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=11)
    y = 0.6 * x + rng.normal(size=11)
    rho, p = st.permutation_p([x], [y], rng, 20_000)
    exact = sps.spearmanr(x, y).pvalue  # t approximation; the permutation p is close, not equal
    assert rho == pytest.approx(sps.spearmanr(x, y).statistic)
    assert abs(p - exact) < 0.03
    _, p_perfect = st.permutation_p([x], [x], rng, 20_000)
    assert p_perfect < 1e-3
    # two strata, one related and one reversed: their mean rho is 0 and the test finds nothing
    rho2, p2 = st.permutation_p([x, x], [x, -x], rng, 5000)
    assert rho2 == pytest.approx(0.0) and p2 > 0.5


@pytest.mark.parametrize(
    ("p_holm", "disc", "conf", "want"),
    [
        (0.01, 0.05, (0.03, 0.01, 0.99), "confirmed"),
        (0.01, -0.05, (-0.03, 0.99, 0.01), "confirmed"),
        (0.01, 0.05, (-0.03, 0.99, 0.01), "not confirmed"),  # opposite sign
        (0.01, 0.05, (0.01, 0.2, 0.8), "not confirmed"),  # same sign, p too large
        (0.01, 0.05, None, "awaiting confirmation"),
        (0.2, 0.05, (0.03, 0.001, 0.999), "no difference detected"),  # confirmation alone is not enough
    ],
)
def test_verdict_rule(p_holm: float, disc: float, conf: tuple | None, want: str) -> None:
    c = None
    if conf is not None:
        c = st.TTest(10, conf[0], 0.1, 0.0, 0.0, 0.1, conf[1], conf[2], 0.3)
    assert st.verdict(p_holm, disc, c) == want


def _cell(env: str, method: str, seed: int, curve: list[float], **extra) -> dict:
    return {
        "env": env, "method": method, "seed": seed, "eval_its": [0, 5, 10],
        "held": [{"test": v} for v in curve], "args": {"lr": 5.0}, **extra,
    }  # fmt: skip


def _write(path: Path, cells: list[dict]) -> Path:
    data = "".join(json.dumps(c) + "\n" for c in cells).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _design(tmp_path: Path) -> tuple[Path, Path]:
    """Discovery seeds 0-9 and confirmation seeds 20-29 of one env: ``real`` is faster than GRPO on both, ``fluke``
    on the discovery seeds only, ``same`` never; ``late`` has no confirmation cells."""
    rng = np.random.default_rng(1)
    disc, conf = [], []
    for seeds, out, fluke in ((range(10), disc, 0.1), (range(20, 30), conf, 0.0)):
        for s in seeds:
            base = [0.2, 0.3 + 0.05 * rng.normal(), 0.4 + 0.05 * rng.normal()]
            noise = lambda: 0.01 * rng.normal()  # noqa: E731
            out.append(_cell("Toy", "grpo", s, base))
            out.append(_cell("Toy", "real", s, [0.2, base[1] + 0.1 + noise(), base[2] + 0.1 + noise()]))
            out.append(_cell("Toy", "fluke", s, [0.2, base[1] + fluke + noise(), base[2] + fluke + noise()]))
            out.append(_cell("Toy", "same", s, [0.2, base[1] + noise(), base[2] + noise()]))
            if s < 10:
                out.append(_cell("Toy", "late", s, [0.2, base[1] + 0.1 + noise(), base[2] + 0.1 + noise()]))
    return _write(tmp_path / "a.jsonl.gz", disc), _write(tmp_path / "b.jsonl", conf)


def test_claims_follow_the_discovery_confirmation_rule(tmp_path: Path) -> None:
    a, b = _design(tmp_path)
    c = st.claims([a, b], fidelity_path=None, n_boot=500)
    rows = {(r["method"], r["metric"], r["reference"]): r for r in c["comparisons"]}
    assert rows[("real", "auc", "grpo")]["verdict"] == "confirmed"
    assert rows[("fluke", "auc", "grpo")]["verdict"] == "not confirmed"
    assert rows[("same", "auc", "grpo")]["verdict"] == "no difference detected"
    late = rows[("late", "auc", "grpo")]
    assert late["verdict"] == "awaiting confirmation" and late["confirmation"] is None
    assert late["incomplete"] == {
        "discovery": "10 of 20 discovery seeds",
        "confirmation": "0 of 20 confirmation seeds",
    }
    # the family's adjusted p-values are Holm's of its raw p-values (statsmodels)
    fam = [r for r in c["comparisons"] if (r["metric"], r["reference"]) == ("auc", "grpo")]
    assert {r["family_size"] for r in fam} == {4}
    raw = [r["discovery"]["p"] for r in fam]
    want = multipletests(raw, method="holm")[1]
    np.testing.assert_allclose([r["discovery"]["p_holm"] for r in fam], want, rtol=1e-4, atol=1e-6)
    real = rows[("real", "auc", "grpo")]["discovery"]
    assert real["seeds"] == list(range(10)) and real["lo"] < real["mean"] < real["hi"]
    assert real["poi"] > 0.5 and real["mde"] > 0
    # the docs tables name every comparison and its verdict; the README headline names the confirmed one only
    md = st.claims_markdown(c)
    assert "| Toy | real | 10 |" in md and "**confirmed**" in md and "Toy 10 of 20 discovery" in md
    only_conf = st.claims([b], fidelity_path=None, n_boot=200)
    assert not only_conf["comparisons"] and "No comparison" in st.claims_markdown(only_conf)
    head = st.headline(c)
    assert "faster than GRPO by learning-curve AUC: Toy: real (+0.07" in head and "fluke" not in head


def test_the_headline_adds_the_verdicts_at_a_rate_per_method(tmp_path: Path) -> None:
    """The same cells run again as the per-method-rate learner: the headline gives that family's confirmed claims
    in a sentence of their own (and none when it has none)."""
    a, b = _design(tmp_path)
    own = []
    for path in (a, b):
        for r in st.read_cells(path):
            own.append({**r, "learner": st.OWN_RATE})
    c = st.claims([a, b, _write(tmp_path / "own.jsonl", own)], fidelity_path=None, n_boot=200)
    head = st.headline(c)
    shared, _, at_own = head.partition("With each method at its own learning rate")
    assert "Toy: real (+0.07" in shared and "Toy: real (+0.07" in at_own and "fluke" not in at_own
    assert "slower: none." in at_own
    assert "its own learning rate" not in st.headline(st.claims([a, b], fidelity_path=None, n_boot=200))


def test_replication_seeds_check_every_confirmed_sign_and_change_no_verdict(tmp_path: Path) -> None:
    """Seeds 40-49, run after the verdicts: ``real`` keeps its sign there, ``turns`` (confirmed like ``real``) is
    slower there, so its flip is named; the verdicts are those of discovery and confirmation alone."""
    a, b = _design(tmp_path)
    rng = np.random.default_rng(7)
    extra = []
    for seed in range(10):  # ``turns``: confirmed on 0-9 / 20-29, like ``real``
        extra.append(_cell("Toy", "turns", seed, [0.2, 0.4 + 0.01 * rng.normal(), 0.5 + 0.01 * rng.normal()]))
    for seed in range(20, 30):
        extra.append(_cell("Toy", "turns", seed, [0.2, 0.4 + 0.01 * rng.normal(), 0.5 + 0.01 * rng.normal()]))
    rep = []
    for s in range(40, 50):
        base = [0.2, 0.3 + 0.05 * rng.normal(), 0.4 + 0.05 * rng.normal()]
        rep.append(_cell("Toy", "grpo", s, base))
        rep.append(_cell("Toy", "real", s, [0.2, base[1] + 0.1, base[2] + 0.1]))
        rep.append(_cell("Toy", "turns", s, [0.2, base[1] - 0.1, base[2] - 0.1]))
    c_before = st.claims([a, b, _write(tmp_path / "t.jsonl", extra)], fidelity_path=None, n_boot=200)
    c = st.claims([a, b, _write(tmp_path / "t.jsonl", extra), _write(tmp_path / "r.jsonl", rep)],
                  fidelity_path=None, n_boot=200)  # fmt: skip
    verdicts = lambda x: {(r["method"], r["metric"], r["reference"]): r["verdict"] for r in x["comparisons"]}  # noqa: E731
    assert verdicts(c) == verdicts(c_before)
    rows = {(r["method"], r["metric"], r["reference"]): r for r in c["comparisons"]}
    real, turns = rows[("real", "auc", "grpo")], rows[("turns", "auc", "grpo")]
    assert real["verdict"] == turns["verdict"] == "confirmed"
    assert real["replication"]["seeds"] == list(range(40, 50))
    assert real["replication"]["sign_kept"] and real["replication"]["p_claimed"] < 0.05
    assert not turns["replication"]["sign_kept"] and turns["replication"]["mean"] < 0
    assert rows[("same", "auc", "grpo")]["replication"] is None  # no cells on the replication seeds
    (summary,) = st.replication_summary(c)
    assert summary["confirmed"] >= summary["replicated_seeds"] > summary["sign_kept"] >= 1
    assert any(f.startswith("turns auc vs grpo") for f in summary["flipped"])
    md = st.replication_markdown(c)
    assert "turns auc vs grpo" in md and f"{summary['sign_kept']} of {summary['replicated_seeds']}" in md
    assert "No confirmed claim" in st.replication_markdown({"comparisons": [], "design": {}})


def test_timing_sums_the_cells_own_wall_times_and_the_designs_share() -> None:
    """The cost table reads each cell's ``seconds``: per env and learner, and the design's part (core methods on seeds
    0-39); a non-core method or a replication seed counts in the total only."""
    cells = [
        {**_cell("Toy", "grpo", 0, [0.1, 0.2, 0.3]), "seconds": 10.0},
        {**_cell("Toy", "gigpo", 25, [0.1, 0.2, 0.3]), "seconds": 30.0},
        {**_cell("Toy", "ahead", 1, [0.1, 0.2, 0.3]), "seconds": 100.0},  # not a core method
        {**_cell("Toy", "grpo", 45, [0.1, 0.2, 0.3]), "seconds": 1000.0},  # a replication seed
        {**_cell("Toy", "grpo", 0, [0.1, 0.2, 0.3], learner="llm"), "seconds": 7200.0},
        _cell("Toy", "oracle", 2, [0.1, 0.2, 0.3]),  # no recorded time: left out
    ]
    t = st.timing(cells)
    lin, llm = t["rows"]
    assert (lin["learner"], lin["cells"], lin["total_s"], lin["design_cells"], lin["design_s"]) == (
        "linear",
        4,
        1140.0,
        2,
        40.0,
    )
    assert (llm["learner"], llm["design_s"]) == ("llm", 7200.0)
    assert t["design_s"] == 7240.0 and t["total_s"] == 8340.0
    md = st.timing_markdown({"timing": t})
    assert "| Toy | linear | 4 | 65.0 |" in md and "2.0 CPU-hours, 1.0 h of wall time on 2 cores" in md


def test_the_two_learners_table_says_where_they_agree(tmp_path: Path) -> None:
    """The same design run by a second learner (cells with ``learner: "llm"``): ``real`` is faster for both, ``same``
    for neither; for the second learner ``fluke`` is slower on the discovery seeds, so the learners disagree there."""
    a, b = _design(tmp_path)
    llm = []
    for path in (a, b):
        for c in st.read_cells(path):
            if c["method"] == "fluke":  # the second learner: slower than GRPO on the discovery seeds
                c["held"] = [
                    {"test": v["test"] - (0.15 if i and c["seed"] < 10 else 0.0)}
                    for i, v in enumerate(c["held"])
                ]
            llm.append({**c, "learner": "llm"})
    c = st.claims([a, b, _write(tmp_path / "llm.jsonl", llm)], fidelity_path=None, n_boot=200)
    rows = {(r["method"], r["metric"]): r for r in st.learners_table(c)}
    assert {r["learner"] for r in rows.values()} == {"llm"}
    assert rows[("real", "auc")]["agree"] and st._conclusion(rows[("real", "auc")]["other"]) == "faster"
    assert (
        rows[("same", "auc")]["agree"]
        and st._conclusion(rows[("same", "auc")]["other"]) == "no difference detected"
    )
    fluke = rows[("fluke", "auc")]
    assert not fluke["agree"] and st._conclusion(fluke["linear"]) == "faster"
    assert st._conclusion(fluke["other"]) == "slower"
    assert ("grpo", "gain") in rows  # each learner's gain over its start
    md = st.learners_markdown(c)
    assert "| Toy | Δ AUC vs GRPO | fluke | 10 + 10 |" in md and "**disagree** (faster / slower)" in md
    assert "| token-level (bundled trainer, tiny model) | 10 + 10 |" in md
    assert st.learners_markdown(st.claims([a, b], fidelity_path=None, n_boot=200)).startswith(
        "No env has cells"
    )
    # the claims tables label the second learner's rows
    assert "| Toy (llm) | real |" in st.claims_markdown(c)
    head = st.headline(c)
    n = len(rows)
    assert (
        f"agrees with the linear one on {sum(r['agree'] for r in rows.values())} of {n} conclusions on Toy."
        in head
    )
    assert "did not learn" not in head
    # a second learner that never leaves its start: the headline says its disagreements are about learning at all
    rng = np.random.default_rng(3)  # noise around the start, so the paired tests have a variance
    flat = [
        {**r, "held": [r["held"][0]] + [{"test": r["held"][0]["test"] + 0.01 * rng.normal()} for _ in r["held"][1:]]}
        for r in llm
    ]  # fmt: skip
    still = st.claims([a, b, _write(tmp_path / "flat.jsonl", flat)], fidelity_path=None, n_boot=200)
    assert "On Toy it did not learn within the budget" in st.headline(still)


def test_merge_keeps_a_cell_once_and_refuses_mixed_settings(tmp_path: Path) -> None:
    c1 = _cell("Toy", "grpo", 0, [0.1, 0.2, 0.3])
    a = _write(tmp_path / "a.jsonl", [c1, _cell("Toy", "grpo", 1, [0.1, 0.2, 0.3])])
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps(c1) + "\n" + '{"env": "To')  # a torn last line
    cells, notes = st.merge([a, b])
    assert len(cells) == 2 and notes == ["b.jsonl: 1 cells already in an earlier file, kept once"]
    # another learner's cell of the same env, method and seed is another cell
    llm = _write(tmp_path / "c.jsonl", [_cell("Toy", "grpo", 0, [0.1, 0.1, 0.1], learner="llm")])
    assert len(st.merge([a, llm])[0]) == 3
    other = _write(tmp_path / "d.jsonl", [{**c1, "args": {"lr": 20.0}}])
    with pytest.raises(SystemExit, match="other settings"):
        st.merge([a, other])
    with pytest.raises(SystemExit, match="no cells file"):
        st.merge([tmp_path / "missing.jsonl"])


def test_power_analysis_reads_the_variance_of_the_pairs(tmp_path: Path) -> None:
    a, b = _design(tmp_path)
    p = st.power_analysis([a, b], delta=0.02, methods=("real", "same"))
    (env,) = p["envs"]
    assert env["family_size"] == 4 and env["discovery_seeds_now"] == 10
    real = next(r for r in env["methods"] if r["method"] == "real")
    d = []
    by = st.table(st.merge([a, b])[0])
    for s in [*range(10), *range(20, 30)]:
        d.append(by[("Toy", "linear", "real")][s]["auc"] - by[("Toy", "linear", "grpo")][s]["auc"])
    assert real["n"] == 20 and real["sd"] == pytest.approx(np.std(d, ddof=1), abs=1e-6)
    want = TTestPower().solve_power(effect_size=0.02 / real["sd"], alpha=0.05 / 4, power=0.8)
    assert real["seeds_discovery"] == math.ceil(want)
    assert "| Toy | 4 |" in st.power_markdown(p)
    # an env with too few paired seeds (or identical differences) gets a note, not a division by zero
    few = [_cell("Few", m, s, [0.5, 0.4, 0.3]) for m in ("grpo", "real") for s in (0, 20)]
    p = st.power_analysis([a, b, _write(tmp_path / "few.jsonl", few)], delta=0.02, methods=("real", "same"))
    assert [e["env"] for e in p["envs"]] == ["Toy"] and any(
        n.startswith("Few: fewer than") for n in p["notes"]
    )


def _strip(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "written"}


def _close(a, b) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _close(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _close(x, y)
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, abs=2e-6)
    else:
        assert a == b


def test_committed_claims_and_power_files_match_the_cells() -> None:
    """The committed files are what the module computes from the committed cells (regenerate with
    ``python benchmarks/learning_study_stats.py claims --out ...`` and ``power --out ...``)."""
    committed = json.loads(st.CLAIMS.read_text(encoding="utf-8"))
    _close(_strip(committed), json.loads(json.dumps(st.claims(list(st.CELLS)))))
    committed = json.loads(st.POWER.read_text(encoding="utf-8"))
    _close(_strip(committed), json.loads(json.dumps(st.power_analysis(list(st.CELLS)))))
    # the reading of ALFWorld GiGPO under Student-t, from the first two cells files (seeds 0-9 and the
    # confirmation seeds 20-29): not confirmed there; the seeds added since (10-19, 30-39) are what confirm it
    key = ("ALFWorld", "gigpo", "auc", "grpo")
    first = next(
        r
        for r in st.claims(list(st.CELLS[:2]))["comparisons"]
        if (r["env"], r["method"], r["metric"], r["reference"]) == key
    )
    assert (round(first["confirmation"]["lo"], 3), round(first["confirmation"]["hi"], 3)) == (-0.009, 0.059)
    assert first["verdict"] == "not confirmed"
    now = next(r for r in committed_claims() if (r["env"], r["method"], r["metric"], r["reference"]) == key)
    assert now["discovery"]["n"] == 20 and now["confirmation"]["n"] == 20 and now["verdict"] == "confirmed"
    # every confirmed claim was rerun on the replication seeds 40-49 and kept its sign there, but the token-level
    # learner's on BabyAI-RedBall, which has no replication seeds (the page says so)
    confirmed = [r for r in committed_claims() if r["verdict"] == "confirmed"]
    unreplicated = {(r["env"], r["learner"]) for r in confirmed if not (r.get("replication") or {}).get("n")}
    assert unreplicated <= {("BabyAI-RedBall", "llm")}
    assert all(
        r["replication"]["sign_kept"] for r in confirmed if (r["env"], r["learner"]) not in unreplicated
    )


def test_a_method_at_the_shared_rate_reproduces_its_shared_rate_cells() -> None:
    """A method whose own chosen rate is the env's shared rate ran its cells again under the per-method-rate
    label, in other processes and sessions (or took them with ``--reuse``): the records are the shared-rate cells'
    (curves, training success, tasks), every one. Two causes of difference are fixed and their cells rerun: the
    learner summed an action's features in set-iteration order, which follows Python's hash seed (it changed one
    sampled action of TextCraft's ProAS seed 43), and ALFWorld's ProAS graphs followed the OS's seed of the env's
    generator (``learning_study.EXPERT_DRAWS``)."""
    import learning_study as ls

    cells, _ = st.merge(list(st.CELLS))
    shared = {
        (r["env"], r["method"], int(r["seed"])): r for r in cells if r.get("learner", "linear") == "linear"
    }
    checked, differ, reused = 0, set(), 0
    for r in cells:
        if r.get("learner") != st.OWN_RATE or r["args"]["lr"] != ls.ENVS[r["env"]].lr:
            continue
        o = shared[(r["env"], r["method"], int(r["seed"]))]
        assert {**o["args"], "learner": None} == {**r["args"], "learner": None}
        assert ls.computation(r["key"]) == o["key"]
        checked += 1
        reused += "reused_from" in r
        if (o["held"], o["train_curve"], o["trained_tasks"]) != (
            r["held"],
            r["train_curve"],
            r["trained_tasks"],
        ):
            differ.add((r["env"], r["method"], int(r["seed"])))
    assert differ == set()
    assert checked >= 1000 and reused == 50  # ALFWorld's ProAS, seeds 0-49


def committed_claims() -> list[dict]:
    return json.loads(st.CLAIMS.read_text(encoding="utf-8"))["comparisons"]


def test_every_comparison_of_the_committed_claims_is_consistent() -> None:
    """Invariants of the committed file: Holm p ≥ raw p, the interval holds the estimate, a confirmed claim has the
    same sign on both seed sets, and the t interval excludes 0 exactly when the raw p is below 0.05."""
    rows = committed_claims()
    # 5 real envs x (11 + 11 + 11 + 12); CreditFamily's core methods and the 5 real envs at a rate per method
    # 6 + 6 + 6 + 7 each; the token-level learner and the rate per method on CreditFamily (4 methods) 3 + 3 + 3 + 4
    # each, and the token-level learner on Sokoban (the same 4) 3 + 3 + 3 + 4; BabyAI-RedBall's linear core methods
    # 6 + 6 + 6 + 7 and its token-level learner 3 + 3 + 3 + 4; Tau2's cells (one seed per split) make no comparison
    assert len(rows) == 5 * 45 + 7 * 25 + 4 * 13
    for r in rows:
        d = r["discovery"]
        assert d["p_holm"] >= d["p"] - 1e-9
        assert d["lo"] <= d["mean"] <= d["hi"]
        assert (d["p"] < 0.05) == (d["lo"] > 0 or d["hi"] < 0)
        if r["verdict"] == "confirmed":
            assert d["p_holm"] < 0.05 and np.sign(r["confirmation"]["mean"]) == np.sign(d["mean"])
    combos = list(itertools.product(["ALFWorld", "Sokoban"], ["confirmed", "not confirmed"]))
    assert any(r["env"] == e and r["verdict"] == v for e, v in combos for r in rows)


def test_the_docs_tables_and_readme_headline_are_the_claims_file() -> None:
    """docs/learning_study.md's tables and the README's learning-study bullet are generated from the committed claims
    and power files (scripts/doc_figures.py); an edited number, or a claims file changed without regenerating the
    docs, fails here."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import doc_figures

    names = [
        "learning-study",
        "learning-study-power",
        "learning-study-fidelity",
        "learning-study-headline",
        "learning-study-replication",
        "learning-study-design-time",
    ]
    argv = ["--check"] + [x for n in names for x in ("--only", n)]
    assert doc_figures.main(argv) == 0
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert doc_figures.learning_study_headline() in readme
    assert "one per env, chosen for GRPO" in readme  # the headline's learning-rate caveat stands beside it


def test_the_findings_quote_only_numbers_of_the_generated_tables() -> None:
    """Every number the page's findings quote appears in its generated tables (the prose cannot keep a number the
    claims file no longer has)."""
    import re

    page = (ROOT / "docs" / "learning_study.md").read_text(encoding="utf-8")
    findings = page[page.index("What the committed cells **show**") : page.index("What it **cannot** show:")]
    generated = "".join(
        m.group(1) for m in re.finditer(r"<!-- figure:[\w-]+ -->\n(.*?)\n<!-- /figure", page, re.S)
    ).replace("−", "-")
    quoted = re.findall(r"[+−-]?\d\.\d{2,3}", findings)
    assert len(quoted) > 20
    assert not [q for q in quoted if q.replace("−", "-") not in generated]


def test_verdict_changes_between_two_claims_files(tmp_path, capsys) -> None:
    """``compare``: the verdicts of two claims files of one design side by side; the committed file against
    itself changes nothing, one flipped verdict is listed with both estimates, and a file that is not a claims
    file is one line."""
    committed = json.loads(st.CLAIMS.read_text(encoding="utf-8"))
    same = st.verdict_changes(committed, committed)
    assert same["changed"] == [] and same["compared"] == len(committed["comparisons"]) > 100
    assert same["confirmed_before"] == same["confirmed_after"] > 0
    after = copy.deepcopy(committed)
    row = next(r for r in after["comparisons"] if r["verdict"] == "confirmed")
    row["verdict"], row["discovery"]["mean"] = "no difference detected", 0.001
    v = st.verdict_changes(committed, after)
    assert len(v["changed"]) == 1 and v["confirmed_after"] == v["confirmed_before"] - 1
    assert v["changed"][0]["comparison"].startswith(f"{row['env']}/{row['learner']}/{row['method']}/")
    text = st.verdict_changes_markdown(v)
    assert (
        "verdicts changed: 1" in text
        and "| confirmed | no difference detected |" in text
        and "+0.001" in text
    )
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(committed))
    b.write_text(json.dumps(after))
    assert st.main(["compare", "--files", str(a), str(b)]) == 0
    assert "verdicts changed: 1" in capsys.readouterr().out
    b.write_text("[1]")
    with pytest.raises(SystemExit, match="are not two claims files"):
        st.main(["compare", "--files", str(a), str(b)])
