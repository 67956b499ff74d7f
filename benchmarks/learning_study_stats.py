"""The learning study's statistics: what a comparison of two credit methods may claim, from the committed cells.

Every number the page (docs/learning_study.md) and the README state about the learning study comes from here, through
a committed claims file (``benchmarks/results/learning_study_claims_*.json``) that this module writes and that
``scripts/doc_figures.py`` turns into tables. The procedures, each tested against scipy / statsmodels on known cases
(tests/test_learning_study_stats.py):

- **Paired per-seed differences.** A seed fixes the task order, the warm start and the evaluation stream, the same for
  every method of an env, so a comparison of method M with a reference R is the mean over seeds of
  ``metric(M, seed) - metric(R, seed)`` on the seeds both ran.
- **Student-t intervals and tests** on those differences (:func:`t_test`: the paired t test, 95% interval, two- and
  one-sided p), with the **effect size** Cohen's d_z (mean difference over its standard deviation).
- **A stratified bootstrap alternative** as rliable computes it (implemented here; rliable itself pulls plotting and
  econometrics packages the study does not need): the interquartile mean (:func:`iqm`), the probability of
  improvement P(X_M > X_R) + ½ P(X_M = X_R) over runs (:func:`prob_improvement`), and percentile intervals from
  resampling seeds within each stratum (:func:`stratified_bootstrap`).
- **Holm's step-down correction** (:func:`holm`) over each *family*: one env, one learner, one metric against one
  reference (every method's Δ AUC vs GRPO on ALFWorld is one family of 11), adjusted p-values in the tables.
- **Discovery and confirmation seeds kept apart** (:data:`DISCOVERY`, :data:`CONFIRMATION`): a claim stands only if it
  is significant after Holm on the discovery seeds *and* has the same sign with one-sided p < 0.05 on the
  confirmation seeds (:func:`verdict`); anything else is "no difference detected at this power", stated with its
  minimal detectable effect.
- **Power** of the paired t test from the noncentral t distribution (:func:`power`, :func:`seeds_needed`,
  :func:`mde`), at the Bonferroni level alpha/m of the family (Holm's first and strictest step, so a sample size that
  gives 80% power there gives at least 80% under Holm).
- **The fidelity-learning relation tested over methods** (:func:`fidelity_relation`): Spearman's rho across the methods
  of an env, a permutation test that permutes the fidelity scores over the methods (the methods are the sample), and a
  bootstrap interval that resamples methods and seeds together.

    python benchmarks/learning_study_stats.py claims --cells A.jsonl.gz B.jsonl.gz --out claims.json
    python benchmarks/learning_study_stats.py power --cells A.jsonl.gz B.jsonl.gz --out power.json

Cells of several files are merged by (env, learner, method, seed): the same cell in two files is kept once, two cells
of that key with different settings stop the run with one line. A cell without a ``learner`` field is the linear
learner's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
#: the committed cells the page reports: the reported run (seeds 0-9, 5 envs x 12 methods); the default run again on
#: seeds 20-29 (ALFWorld, Sokoban); the core methods on new seeds (Sokoban 10-19 and 30-39, ALFWorld 10-19 and
#: 30-31 (32 partial); TextCraft and WebShop 20-39); then (2026-12-07) TextCraft and WebShop 10-19, BabyAI's
#: confirmation seeds as far as they ran, CreditFamily 0-39; the token-level learner on CreditFamily; Sokoban at a
#: rate per method; then every real env at a rate per method, Tau2, and the token-level learner on Sokoban (seeds
#: 0-4 and 20-24); then Sokoban's RewardFlow at its own rate again, at 0.1, the maximum of a grid extended below
#: the first one's edge (0.5; those cells are ``learning_study_own_rate_sokoban_rewardflow_lr0.5_2026-12-07``);
#: then ALFWorld's ProAS cells of both linear families again (seeds 0-49), run by the code that seeds each task's
#: graph (the cells of before, whose graphs followed the OS's seed and did not rerun the same, are
#: ``learning_study_alfworld_proas_unseeded_2026-12-07``, out of the statistics; the per-method-rate family's are
#: the shared family's, taken with ``--reuse``: ProAS's own rate there is the shared one); and ALFWorld's AHEAD
#: cells (seeds 0-9, 20-29, 40-49), whose modelled teacher reads the same expert, rerun with its env's generator
#: seeded (``learning_study.SEEDED_TEACHER``; those of before: ``learning_study_alfworld_ahead_unseeded_2026-12-07``);
#: then (2026-12-08) the BabyAI-RedBall row: the linear learner's core methods on seeds 0-49, the token-level
#: learner's GRPO, GiGPO, GraphGPO and ceiling on seeds 0-9 and 20-29 (noisy-expert warm-up; no replication seeds)
CELLS = (
    RESULTS / "learning_study_2026-12-06b_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-06_seeds20-29_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-06c_seeds10-19_30-39_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-06c_seeds20-39_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_llm_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-07_alfworld_seeds32-39_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-07_replication_seeds40-49_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_2026-12-07_seeds40-49_cells.jsonl.gz",
    RESULTS / "learning_study_2026-12-07_replication_other_seeds40-49_cells.jsonl.gz",
    RESULTS / "learning_study_llm_2026-12-07_seeds40-49_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_webshop_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_textcraft_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_babyai_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_creditfamily_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_alfworld_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_tau2_2026-12-07_cells.jsonl",
    RESULTS / "learning_study_llm_sokoban_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_sokoban_rewardflow_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_alfworld_proas_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_own_rate_alfworld_proas_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_alfworld_ahead_2026-12-07_cells.jsonl.gz",
    RESULTS / "learning_study_babyai_redball_2026-12-08_cells.jsonl.gz",
    RESULTS / "learning_study_llm_babyai_redball_2026-12-08_cells.jsonl.gz",
)
CLAIMS = RESULTS / "learning_study_claims_2026-12-06.json"
#: the claims with every cell of the design's whole re-run (benchmarks/learning_study_design_time.py --per-class 40
#: --write-cells; the re-run records that differ are ``learning_study_design_rerun_2026-12-07_cells.jsonl.gz``)
#: standing in for the committed one
RERUN_CLAIMS = RESULTS / "learning_study_claims_rerun_2026-12-07.json"
POWER = RESULTS / "learning_study_power_2026-12-06.json"
FIDELITY = RESULTS / "credit_fidelity_2026-12-06.json"

#: the target design: discovery seeds 0-19, confirmation seeds 20-39 (seeds outside both, e.g. the learning-rate
#: selection's 100-105, are never analysed)
DISCOVERY = range(0, 20)
CONFIRMATION = range(20, 40)
#: seeds run after the claims were made, by neither discovery nor confirmation: a rerun on new seeds, which the
#: confirmed claims must survive (:func:`replication_summary`); they change no verdict
REPLICATION = range(40, 50)
ALPHA = 0.05
TARGET_POWER = 0.8
#: the minimal difference in learning-curve AUC the power analysis asks for (held-out success, 0..1)
MIN_DIFF = 0.02
#: the fewest paired seeds whose differences' standard deviation the power analysis plans with
MIN_POWER_SEEDS = 5
REFERENCE = "grpo"
CEILING = "oracle"
#: the core methods of the design (issue: at least 20 paired seeds per env for these)
CORE = ("grpo", "gigpo", "graphgpo", "hgpo", "rewardflow", "proas", "oracle")
#: the methods in table order (learning_study.METHODS; repeated here so this module imports no env code)
ORDER = (
    "grpo", "drgrpo", "gigpo", "proas", "ahead", "stepopsd", "graphgpo", "graphgpo-obs", "hgpo", "hgpo-obs",
    "rewardflow", "rewardflow-obs", "g2po", "g2po-obs", "oracle",
)  # fmt: skip
ENV_ORDER = ("ALFWorld", "Sokoban", "TextCraft", "BabyAI", "BabyAI-RedBall", "WebShop", "CreditFamily")
#: envs of the study that are toys, not benchmarks (never in the README's headline of real envs)
TOYS = ("CreditFamily",)
#: (metric, reference) of each family of comparisons; reference None: the metric itself against 0 (the gain)
FAMILIES = (("auc", REFERENCE), ("final", REFERENCE), ("auc", CEILING), ("gain", None))
N_BOOT = 10_000
N_PERM = 20_000
#: the thresholds of the performance profiles (final held-out success)
PROFILE_TAUS = (0.2, 0.4, 0.6, 0.8)

VERDICTS = {
    "confirmed": "significant after Holm on the discovery seeds, same sign and one-sided p < 0.05 on the "
    "confirmation seeds",
    "not confirmed": "significant after Holm on the discovery seeds, not confirmed on the confirmation seeds",
    "awaiting confirmation": "significant after Holm on the discovery seeds; no confirmation seeds yet",
    "no difference detected": "not significant after Holm on the discovery seeds",
}


# --------------------------------------------------------------------------------------------------------------
# Procedures
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TTest:
    """The paired (one-sample) Student-t test of differences ``d`` against 0."""

    n: int
    mean: float
    sd: float  #: standard deviation of d (ddof 1)
    lo: float  #: 95% (1 - alpha) Student-t interval of the mean
    hi: float
    p: float  #: two-sided
    p_greater: float  #: one-sided, H1: mean > 0
    p_less: float  #: one-sided, H1: mean < 0
    dz: float  #: Cohen's d_z = mean / sd (NaN when sd is 0)


def t_test(d: Sequence[float] | np.ndarray, alpha: float = ALPHA) -> TTest:
    """Student-t interval and p-values of the mean of paired differences ``d``; ``n < 2`` gives NaN everywhere
    but the mean. A constant nonzero ``d`` has p = 0 (the difference is exact); a constant zero one has p = 1."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    nan = float("nan")
    mean = float(d.mean()) if n else nan
    if n < 2:
        return TTest(n, mean, nan, nan, nan, nan, nan, nan, nan)
    sd = float(d.std(ddof=1))
    if sd <= 1e-12 * max(1.0, abs(mean)):  # constant up to rounding
        p = 1.0 if mean == 0.0 else 0.0
        pg = 0.0 if mean > 0 else 1.0 if mean < 0 else 0.5
        return TTest(n, mean, 0.0, mean, mean, p, pg, 1.0 - pg if mean else 0.5, nan)
    se = sd / math.sqrt(n)
    t = mean / se
    half = float(sps.t.ppf(1 - alpha / 2, n - 1)) * se
    return TTest(
        n,
        mean,
        sd,
        mean - half,
        mean + half,
        float(2 * sps.t.sf(abs(t), n - 1)),
        float(sps.t.sf(t, n - 1)),
        float(sps.t.cdf(t, n - 1)),
        mean / sd,
    )


def cohens_dz(d: Sequence[float] | np.ndarray) -> float:
    """Cohen's d_z of paired differences: mean / sd (ddof 1)."""
    d = np.asarray(d, dtype=float)
    sd = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
    return float(d.mean()) / sd if sd and not math.isnan(sd) else float("nan")


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (the smallest p times m, the next times m - 1, ..., made monotone and
    capped at 1); NaN p-values stay NaN and do not count in m."""
    p = np.asarray(p, dtype=float)
    out = np.full(len(p), np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    if not m:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out[order] = adj
    return out.tolist()


def iqm(x: Sequence[float] | np.ndarray) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% of the values (rliable's; scipy's ``trim_mean(x, 0.25)``),
    over the last axis (a batch of samples gives one value each)."""
    x = np.sort(np.asarray(x, dtype=float), axis=-1)
    n = x.shape[-1]
    cut = int(0.25 * n)
    v = x[..., cut : n - cut].mean(axis=-1)
    return float(v) if np.ndim(v) == 0 else v


def prob_improvement(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | np.ndarray:
    """P(X > Y) + ½ P(X = Y) over every pair of a run of X and a run of Y (the Mann-Whitney U statistic over n·m),
    over the last axis (leading axes: a batch)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    gt = (x[..., :, None] > y[..., None, :]).sum(axis=(-2, -1))
    eq = (x[..., :, None] == y[..., None, :]).sum(axis=(-2, -1))
    v = (gt + 0.5 * eq) / (x.shape[-1] * y.shape[-1])
    return float(v) if np.ndim(v) == 0 else v


def performance_profile(x: Sequence[float] | np.ndarray, taus: Sequence[float]) -> np.ndarray:
    """rliable's performance profile (the run-score distribution): for each threshold τ, the fraction of runs whose
    score exceeds τ, over the last axis (leading axes: a batch; the thresholds become the last axis)."""
    x = np.asarray(x, dtype=float)
    return (x[..., None, :] > np.asarray(taus, dtype=float)[:, None]).mean(axis=-1)


def boot_mean(d: np.ndarray) -> np.ndarray:
    return np.asarray(d).mean(axis=-1)


def stratified_bootstrap(
    strata: Sequence[Sequence[np.ndarray]],
    statistic: Callable[..., np.ndarray],
    rng: np.random.Generator,
    n_boot: int = N_BOOT,
    alpha: float = ALPHA,
) -> tuple[float, float]:
    """Percentile (1 - alpha) interval of ``statistic(*samples)``, resampling with replacement within each stratum.

    ``strata`` is a list of strata; each stratum a list of arrays that share their seeds (paired runs: one index draw
    for all of them). ``statistic`` gets one array of shape (n_boot, n) per array of every stratum, in order, and
    returns n_boot values (:func:`iqm`, :func:`prob_improvement`, :func:`boot_mean` do)."""
    args = []
    for stratum in strata:
        n = len(stratum[0])
        k = rng.integers(n, size=(n_boot, n))
        args += [np.asarray(a, dtype=float)[k] for a in stratum]
    vals = np.asarray(statistic(*args), dtype=float)
    vals = vals[~np.isnan(vals)]
    if not len(vals):
        return float("nan"), float("nan")
    return float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def power(dz: float, n: int, alpha: float = ALPHA, sides: int = 2) -> float:
    """Power of the paired t test with n pairs at effect size d_z (noncentral t; two-sided counts both tails)."""
    if n < 2:
        return float("nan")
    df, nc = n - 1, abs(dz) * math.sqrt(n)
    crit = float(sps.t.ppf(1 - alpha / sides, df))
    pw = float(sps.nct.sf(crit, df, nc))
    if sides == 2:
        pw += float(sps.nct.cdf(-crit, df, nc))
    if math.isnan(
        pw
    ):  # scipy's noncentral t fails far in the tail (large n): the normal limit is exact there
        pw = float(sps.norm.sf(crit - nc) + (sps.norm.cdf(-crit - nc) if sides == 2 else 0.0))
    return pw


def seeds_needed(
    delta: float,
    sd: float,
    alpha: float = ALPHA,
    target: float = TARGET_POWER,
    sides: int = 2,
    cap: int = 10_000,
) -> int:
    """The fewest paired seeds whose t test detects a mean difference ``delta`` (differences of standard deviation
    ``sd``) with power ``target`` (``cap + 1`` when even ``cap`` seeds do not)."""
    if sd == 0:
        return 2
    dz = abs(delta) / sd
    lo, hi = 2, 2
    while power(dz, hi, alpha, sides) < target:  # power rises with n: double, then bisect
        if hi >= cap:
            return cap + 1
        lo, hi = hi, min(2 * hi, cap)
    while lo < hi:
        mid = (lo + hi) // 2
        if power(dz, mid, alpha, sides) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def mde(n: int, sd: float, alpha: float = ALPHA, target: float = TARGET_POWER, sides: int = 2) -> float:
    """The minimal detectable effect: the smallest mean difference the t test with ``n`` paired seeds detects with
    power ``target`` (bisection on d_z, times ``sd``)."""
    if n < 2 or math.isnan(sd):
        return float("nan")
    lo, hi = 0.0, 1.0
    while power(hi, n, alpha, sides) < target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power(mid, n, alpha, sides) >= target else (mid, hi)
    return hi * sd


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (Pearson correlation of the average ranks); NaN when either side is constant."""
    rx, ry = sps.rankdata(x), sps.rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / den) if den > 0 else float("nan")


def permutation_p(
    xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], rng: np.random.Generator, n_perm: int = N_PERM
) -> tuple[float, float]:
    """Two-sided permutation test of the mean within-stratum Spearman rho: per stratum (env) the x values (fidelity
    scores) are permuted over the units (methods), ys held fixed. Returns (statistic, p); p = (1 + #{|perm| >=
    |observed|}) / (1 + n_perm). A stratum of n ≤ 7 units is enumerated exactly when it is the only one."""
    obs = float(np.mean([spearman(x, y) for x, y in zip(xs, ys, strict=True)]))
    if len(xs) == 1 and len(xs[0]) <= 7:
        import itertools

        x, y = xs[0], ys[0]
        vals = np.array([spearman(x[list(p)], y) for p in itertools.permutations(range(len(x)))])
        return obs, float(np.mean(np.abs(vals) >= abs(obs) - 1e-12))
    total = np.zeros(n_perm)
    for x, y in zip(xs, ys, strict=True):
        # rho of a permutation of x: the same ranks permuted, so one matrix product gives every permutation's rho
        rx, ry = sps.rankdata(x), sps.rankdata(y)
        rx, ry = rx - rx.mean(), ry - ry.mean()
        den = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
        perms = np.argsort(rng.random((n_perm, len(x))), axis=1)
        total += (rx[perms] @ ry) / den
    hits = int((np.abs(total / len(xs)) >= abs(obs) - 1e-12).sum())
    return obs, (1 + hits) / (1 + n_perm)


# --------------------------------------------------------------------------------------------------------------
# Cells → per-seed metrics
# --------------------------------------------------------------------------------------------------------------
def held_curve(r: dict) -> np.ndarray:
    """Held-out success per eval point, the mean over the held-out splits."""
    return np.array([float(np.mean(list(h.values()))) for h in r["held"]])


def cell_metrics(r: dict) -> dict[str, float]:
    """AUC (trapezoid mean of held-out success over iterations 0..T), final, start and the gain over the start."""
    y, x = held_curve(r), np.array(r["eval_its"], dtype=float)
    auc = float(np.trapezoid(y, x) / x[-1]) if x[-1] > 0 else float(y[0])
    return {"auc": auc, "final": float(y[-1]), "start": float(y[0]), "gain": float(y[-1] - y[0])}


def read_cells(path: Path) -> list[dict]:
    """The cells of one file (``.jsonl`` or ``.jsonl.gz``; blank lines and a torn last line are skipped)."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    out = []
    lines = raw.decode().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a run killed mid-write
                continue
            raise SystemExit(f"{path.name}: line {i + 1} is not a JSON cell") from None
    return out


def cell_id(r: dict) -> tuple[str, str, str, int]:
    return (r["env"], r.get("learner", "linear"), r["method"], int(r["seed"]))


def merge(paths: Sequence[Path]) -> tuple[list[dict], list[str]]:
    """Cells of every file, one per (env, learner, method, seed); notes on duplicates. Two cells of one key with
    different settings (``args``) stop with one line: they belong to different designs."""
    seen: dict[tuple, dict] = {}
    notes = []
    for path in paths:
        if not Path(path).exists():
            raise SystemExit(f"no cells file {path}")
        dup = 0
        for r in read_cells(Path(path)):
            k = cell_id(r)
            if k in seen:
                if seen[k].get("args") != r.get("args"):
                    raise SystemExit(
                        f"{Path(path).name}: cell {'/'.join(map(str, k))} was run with other settings in an "
                        "earlier file; analyse one design at a time"
                    )
                dup += 1
                continue
            seen[k] = r
        if dup:
            notes.append(f"{Path(path).name}: {dup} cells already in an earlier file, kept once")
    return list(seen.values()), notes


def table(cells: Sequence[dict]) -> dict[tuple[str, str, str], dict[int, dict[str, float]]]:
    """(env, learner, method) → seed → metrics."""
    out: dict[tuple[str, str, str], dict[int, dict[str, float]]] = defaultdict(dict)
    for r in cells:
        env, learner, method, seed = cell_id(r)
        out[(env, learner, method)][seed] = cell_metrics(r)
    return out


def _order(env: str, method: str) -> tuple[int, int, str, str]:
    e = ENV_ORDER.index(env) if env in ENV_ORDER else 99
    m = ORDER.index(method) if method in ORDER else 99
    return (e, m, env, method)


# --------------------------------------------------------------------------------------------------------------
# Comparisons, families, verdicts
# --------------------------------------------------------------------------------------------------------------
def _diffs(by: dict, env: str, learner: str, method: str, ref: str | None, metric: str, seeds: range):
    """(seeds, method values, reference values or None, differences) on the paired seeds within ``seeds``."""
    own = by.get((env, learner, method), {})
    other = by.get((env, learner, ref), {}) if ref else None
    common = sorted(s for s in own if s in seeds and (other is None or s in other))
    x = np.array([own[s][metric] for s in common])
    if other is None:
        return common, x, None, x
    y = np.array([other[s][metric] for s in common])
    return common, x, y, x - y


def verdict(p_holm: float, disc_mean: float, conf: TTest | None, alpha: float = ALPHA) -> str:
    """The discovery/confirmation rule: see :data:`VERDICTS`."""
    if math.isnan(p_holm) or p_holm >= alpha:
        return "no difference detected"
    if conf is None or conf.n < 2:
        return "awaiting confirmation"
    p1 = conf.p_greater if disc_mean > 0 else conf.p_less
    same = (conf.mean > 0) == (disc_mean > 0) and conf.mean != 0
    return "confirmed" if same and p1 < alpha else "not confirmed"


def _r(x: float, nd: int = 6) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


def compare(
    by: dict,
    family: tuple[str, str, str, str | None],
    method: str,
    rng: np.random.Generator,
    n_boot: int = N_BOOT,
) -> dict:
    """One comparison: ``method`` against the family's reference on its metric, on the discovery seeds (t test,
    d_z, paired bootstrap, IQM, probability of improvement) and on the confirmation seeds (t test)."""
    env, learner, metric, ref = family
    seeds, x, y, d = _diffs(by, env, learner, method, ref, metric, DISCOVERY)
    t = t_test(d)
    row: dict = {
        "env": env,
        "learner": learner,
        "method": method,
        "reference": ref or "start",
        "metric": metric,
        "discovery": {"seeds": seeds, **{k: _r(v) for k, v in asdict(t).items() if k != "n"}, "n": t.n},
    }
    disc = row["discovery"]
    if t.n >= 2:
        strata = [[d]]
        disc["boot_lo"], disc["boot_hi"] = map(_r, stratified_bootstrap(strata, boot_mean, rng, n_boot))
        if y is not None:
            disc["iqm"], disc["iqm_ref"] = _r(iqm(x)), _r(iqm(y))
            disc["poi"] = _r(prob_improvement(x, y))
            lo, hi = stratified_bootstrap([[x], [y]], prob_improvement, rng, n_boot)
            disc["poi_lo"], disc["poi_hi"] = _r(lo), _r(hi)
    for name, seeds_of in (("confirmation", CONFIRMATION), ("replication", REPLICATION)):
        cseeds, _, _, cd = _diffs(by, env, learner, method, ref, metric, seeds_of)
        c = t_test(cd) if len(cd) else None
        row[name] = (
            None
            if c is None
            else {"seeds": cseeds, **{k: _r(v) for k, v in asdict(c).items() if k != "n"}, "n": c.n}
        )
    return row


def _complete(by: dict, env: str, learner: str, method: str, ref: str | None) -> dict[str, str]:
    """How many seeds of the target design a comparison has on each split (the seeds both the method and the
    reference ran), where a split is incomplete."""
    have = set(by.get((env, learner, method), {}))
    if ref is not None:
        have &= set(by.get((env, learner, ref), {}))
    out = {}
    for name, want in (("discovery", DISCOVERY), ("confirmation", CONFIRMATION)):
        n = len(have & set(want))
        if n < len(want):
            out[name] = f"{n} of {len(want)} {name} seeds"
    return out


def claims(
    paths: Sequence[Path], fidelity_path: Path | None = FIDELITY, n_boot: int = N_BOOT, seed: int = 0
) -> dict:
    """Every comparison of every family of the merged cells files, with Holm-adjusted p, MDE and the verdict."""
    cells, notes = merge(paths)
    out = analyse(cells, fidelity_path, n_boot, seed)
    return {**out, "timing": timing(cells), "cells": [Path(p).name for p in paths], "notes": notes}


def timing(cells: Sequence[dict]) -> dict:
    """What the cells cost, from each cell's own wall time (``seconds``): per env and learner the cells, their median
    and total; and the target design's total (the core methods on discovery and confirmation seeds, every learner
    that ran them), the figure that says whether the whole design fits a budget on 2 cores. The times were taken on
    a shared machine under whatever load it had, so they bound what an idle machine takes from above."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    design: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in cells:
        env, learner, method, seed = cell_id(r)
        sec = r.get("seconds")
        if sec is None:
            continue
        by[(env, learner)].append(float(sec))
        if method in CORE and (seed in DISCOVERY or seed in CONFIRMATION):
            design[(env, learner)].append(float(sec))
    rows = [
        {"env": env, "learner": learner, "cells": len(v), "median_s": _r(float(np.median(v)), 1),
         "total_s": _r(float(np.sum(v)), 0), "design_cells": len(design.get((env, learner), [])),
         "design_s": _r(float(np.sum(design.get((env, learner), []))), 0)}
        for (env, learner), v in sorted(by.items(), key=lambda kv: (kv[0][1] != "linear", kv[0][1],
                                                                     *_order(kv[0][0], "")))
    ]  # fmt: skip
    return {
        "rows": rows,
        "total_s": _r(sum(r["total_s"] for r in rows), 0),
        "design_s": _r(sum(r["design_s"] for r in rows), 0),
        "design": f"the core methods ({', '.join(CORE)}) on seeds {DISCOVERY.start}-{CONFIRMATION.stop - 1}",
    }


def analyse(
    cells: Sequence[dict], fidelity_path: Path | None = FIDELITY, n_boot: int = N_BOOT, seed: int = 0
) -> dict:
    """:func:`claims` of cells already merged (one per (env, learner, method, seed))."""
    by = table(cells)
    rng = np.random.default_rng(seed)
    out_rows = []
    groups = sorted({(e, lrn) for e, lrn, _ in by}, key=lambda k: (k[1] != "linear", k[1], *_order(k[0], "")))
    for env, learner in groups:
        methods = sorted({m for e, lrn, m in by if (e, lrn) == (env, learner)}, key=lambda m: _order(env, m))
        for metric, ref in FAMILIES:
            if ref is not None and (env, learner, ref) not in by:
                continue
            fam = (env, learner, metric, ref)
            rows = [compare(by, fam, m, rng, n_boot) for m in methods if m != ref]
            rows = [r for r in rows if r["discovery"]["n"] >= 2]
            adj = holm([r["discovery"]["p"] if r["discovery"]["p"] is not None else math.nan for r in rows])
            m = sum(not math.isnan(a) for a in adj)
            for r, a in zip(rows, adj, strict=True):
                disc, conf = r["discovery"], r["confirmation"]
                disc["p_holm"] = _r(a)
                r["family_size"] = m
                sd = disc["sd"] if disc["sd"] is not None else math.nan
                disc["mde"] = _r(mde(disc["n"], sd, ALPHA / max(m, 1)))
                ct = None
                if conf is not None and conf["n"] >= 2:
                    ct = TTest(
                        **{k: (math.nan if conf[k] is None else conf[k]) for k in TTest.__dataclass_fields__}
                    )
                    conf["mde"] = _r(mde(conf["n"], sd, ALPHA, sides=1))
                r["verdict"] = verdict(a, disc["mean"], ct)
                rep = r["replication"]
                if rep is not None and r["verdict"] == "confirmed" and rep["n"] >= 2:
                    # the claimed direction on seeds nobody used to find or confirm it
                    up = disc["mean"] > 0
                    rep["sign_kept"] = (rep["mean"] > 0) == up and rep["mean"] != 0
                    rep["p_claimed"] = rep["p_greater"] if up else rep["p_less"]
                incomplete = _complete(by, env, learner, r["method"], ref)
                r["incomplete"] = incomplete
                out_rows.append(r)
    fid = fidelity_relation(by, fidelity_path, rng) if fidelity_path is not None else []
    profiles = [
        profile_row(by, env, learner, m, rng, n_boot)
        for env, learner in groups
        for m in sorted({m for e, lrn, m in by if (e, lrn) == (env, learner)}, key=lambda m: _order(env, m))
    ]
    return {
        "study": "learning_study",
        "design": {
            "discovery_seeds": [DISCOVERY.start, DISCOVERY.stop - 1],
            "confirmation_seeds": [CONFIRMATION.start, CONFIRMATION.stop - 1],
            "replication_seeds": [REPLICATION.start, REPLICATION.stop - 1],
            "replication": "seeds run after the verdicts, used by neither discovery nor confirmation: every "
            "confirmed claim's mean difference there must keep the confirmed sign (sign_kept); p_claimed is its "
            "one-sided p in the claimed direction (reported, not a condition: 10 seeds resolve less than 20)",
            "alpha": ALPHA,
            "families": "one env x one learner x one metric against one reference; Holm over each",
            "rule": VERDICTS,
            "interval": "95% Student-t interval of the mean paired difference over seeds",
            "bootstrap": f"percentile interval, {n_boot} resamples of seeds (paired: one draw for both methods)",
            "mde": "the smallest mean difference the paired t test detects with 80% power: two-sided at alpha/m "
            "(m: the family's size) on the discovery seeds, one-sided at alpha on the confirmation seeds",
        },
        "comparisons": out_rows,
        "fidelity": fid,
        "profiles": profiles,
    }


def profile_row(by: dict, env: str, learner: str, method: str, rng: np.random.Generator, n_boot: int) -> dict:
    """One method's performance profile on final held-out success over every seed of the design (discovery and
    confirmation: a description of the runs, not a test), each fraction with a 95% bootstrap interval over seeds."""
    runs = by[(env, learner, method)]
    seeds = sorted(s for s in runs if s in DISCOVERY or s in CONFIRMATION)
    x = np.array([runs[s]["final"] for s in seeds])
    frac = performance_profile(x, PROFILE_TAUS)
    ivs = [stratified_bootstrap([[x]], lambda b, t=t: performance_profile(b, [t])[..., 0], rng, n_boot)
           for t in PROFILE_TAUS]  # fmt: skip
    return {
        "env": env, "learner": learner, "method": method, "metric": "final", "n": len(seeds),
        "taus": list(PROFILE_TAUS), "fraction": [_r(f) for f in frac],
        "lo": [_r(lo) for lo, _ in ivs], "hi": [_r(hi) for _, hi in ivs],
    }  # fmt: skip


# --------------------------------------------------------------------------------------------------------------
# Fidelity vs learning, tested over methods
# --------------------------------------------------------------------------------------------------------------
def fidelity_scores(path: Path, metric: str = "auroc") -> dict[tuple[str, str], float]:
    """(env, method) → the credit-fidelity score on all steps (benchmarks/credit_fidelity.py's results file)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {
        (r["env"], m): float(v[metric])
        for r in data["results"]
        if r["subset"] == "all"
        for m, v in r["scores"].items()
        if not math.isnan(float(v[metric]))
    }


def fidelity_relation(
    by: dict, path: Path, rng: np.random.Generator, n_perm: int = N_PERM, n_boot: int = 2000
) -> list[dict]:
    """Per env (and pooled: the mean of the per-env rhos), Spearman's rho between each method's credit-fidelity AUROC
    and its mean Δ AUC vs GRPO on the discovery seeds; p from permuting the fidelity scores over the methods (within
    env), Holm over the per-env tests; a 95% interval from resampling methods and seeds together. Only methods run
    on every discovery seed GRPO ran on enter."""
    fid = fidelity_scores(path)
    per_env = {}
    for env, learner, ref in sorted(by, key=lambda k: _order(k[0], k[2])):
        # the linear learner on the real envs: the fidelity scores were measured there (the toy's study row and the
        # other learners' cells are not what the fidelity run scored)
        if ref != REFERENCE or learner != "linear" or env in TOYS:
            continue
        seeds = sorted(s for s in by[(env, learner, ref)] if s in DISCOVERY)
        pts = [
            m
            for e, lrn, m in by
            if (e, lrn) == (env, learner) and (env, m) in fid and set(seeds) <= set(by[(env, learner, m)])
        ]
        pts.sort(key=lambda m: _order(env, m))
        if len(pts) < 4 or len(seeds) < 2:
            continue
        diff = np.array(
            [
                [by[(env, learner, m)][s]["auc"] - by[(env, learner, ref)][s]["auc"] for s in seeds]
                for m in pts
            ]
        )
        per_env[(env, learner)] = (pts, np.array([fid[(env, m)] for m in pts]), diff, seeds)
    out = []
    for key, (pts, f, diff, seeds) in per_env.items():
        rho, p = permutation_p([f], [diff.mean(axis=1)], rng, n_perm)
        lo, hi = _fid_boot([(f, diff)], rng, n_boot)
        out.append({"env": key[0], "learner": key[1], "methods": pts, "n_methods": len(pts), "n_seeds": len(seeds),
                    "rho": _r(rho), "lo": _r(lo), "hi": _r(hi), "p": _r(p)})  # fmt: skip
    adj = holm([r["p"] for r in out])
    for r, a in zip(out, adj, strict=True):
        r["p_holm"] = _r(a)
    if len(per_env) > 1:
        fs = [v[1] for v in per_env.values()]
        gs = [v[2].mean(axis=1) for v in per_env.values()]
        rho, p = permutation_p(fs, gs, rng, n_perm)
        lo, hi = _fid_boot([(v[1], v[2]) for v in per_env.values()], rng, n_boot)
        out.append({"env": "pooled", "learner": "linear", "envs": [k[0] for k in per_env],
                    "n_methods": sum(len(v[0]) for v in per_env.values()),
                    "rho": _r(rho), "lo": _r(lo), "hi": _r(hi), "p": _r(p), "p_holm": None})  # fmt: skip
    return out


def _fid_boot(
    strata: list[tuple[np.ndarray, np.ndarray]], rng: np.random.Generator, n_boot: int
) -> tuple[float, float]:
    """Percentile interval of the mean within-env rho, resampling methods (rows) and seeds (columns) of each env."""
    vals = []
    for _ in range(n_boot):
        rhos = []
        for f, diff in strata:
            i = rng.integers(len(f), size=len(f))
            j = rng.integers(diff.shape[1], size=diff.shape[1])
            rhos.append(spearman(f[i], diff[np.ix_(i, j)].mean(axis=1)))
        v = float(np.mean(rhos))
        if not math.isnan(v):
            vals.append(v)
    if not vals:
        return float("nan"), float("nan")
    return float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))


# --------------------------------------------------------------------------------------------------------------
# Power analysis
# --------------------------------------------------------------------------------------------------------------
def power_analysis(paths: Sequence[Path], delta: float = MIN_DIFF, methods: Sequence[str] = CORE) -> dict:
    """Per env: the standard deviation of the paired Δ AUC vs GRPO of each core method (every seed of the design
    either split has), the seeds needed to detect ``delta`` with 80% power at the Bonferroni level of the family
    (two-sided alpha/m, m = the env's comparisons with GRPO), the seeds the one-sided confirmation test needs, and
    the minimal detectable effect at the seeds there are and at the target's 20."""
    cells, notes = merge(paths)
    by = table(cells)
    envs = sorted({e for e, _, m in by if m == REFERENCE}, key=lambda e: _order(e, ""))
    out = []
    seeds_all = range(DISCOVERY.start, CONFIRMATION.stop)
    for env in envs:
        learner = "linear"
        methods_here = [m for e, lrn, m in by if (e, lrn) == (env, learner)]
        m_family = len([m for m in methods_here if m != REFERENCE])
        a_disc = ALPHA / max(m_family, 1)
        n_disc = len([s for s in by[(env, learner, REFERENCE)] if s in DISCOVERY])
        rows = []
        for m in methods:
            if m == REFERENCE or (env, learner, m) not in by:
                continue
            _, _, _, d = _diffs(by, env, learner, m, REFERENCE, "auc", seeds_all)
            if len(d) < MIN_POWER_SEEDS:  # too few pairs to estimate a standard deviation from
                continue
            sd = float(np.std(d, ddof=1))
            if not sd > 0:  # identical differences on every seed: no variance to plan with
                continue
            rows.append(
                {
                    "method": m,
                    "n": len(d),
                    "sd": _r(sd),
                    "seeds_discovery": seeds_needed(delta, sd, a_disc),
                    "seeds_confirmation": seeds_needed(delta, sd, ALPHA, sides=1),
                    "mde_now": _r(mde(n_disc, sd, a_disc)),
                    "mde_20": _r(mde(len(DISCOVERY), sd, a_disc)),
                    "power_20": _r(
                        power(delta / sd, len(DISCOVERY), a_disc)
                        * power(delta / sd, len(CONFIRMATION), ALPHA, 1)
                    ),
                }
            )
        if not rows:
            notes.append(
                f"{env}: fewer than {MIN_POWER_SEEDS} paired seeds with varying differences, no power row"
            )
            continue
        sds = np.array([r["sd"] for r in rows])
        pooled = float(np.sqrt(np.mean(sds**2)))
        out.append(
            {
                "env": env,
                "learner": learner,
                "family_size": m_family,
                "alpha_discovery": _r(a_disc),
                "discovery_seeds_now": n_disc,
                "sd_pooled": _r(pooled),
                "seeds_discovery": seeds_needed(delta, pooled, a_disc),
                "seeds_confirmation": seeds_needed(delta, pooled, ALPHA, sides=1),
                "mde_now": _r(mde(n_disc, pooled, a_disc)),
                "mde_20": _r(mde(len(DISCOVERY), pooled, a_disc)),
                "methods": rows,
            }
        )
    return {
        "study": "learning_study",
        "cells": [Path(p).name for p in paths],
        "notes": notes,
        "delta_auc": delta,
        "power": TARGET_POWER,
        "alpha": ALPHA,
        "core_methods": list(methods),
        "how": "paired t test, noncentral t; standard deviation of the per-seed Δ AUC vs GRPO over every seed of "
        "0-39 the pair has; discovery: two-sided at alpha/m (Bonferroni = Holm's strictest step, m = the env's "
        "comparisons with GRPO); confirmation: one-sided at alpha; sd_pooled: root mean square of the core "
        "methods' standard deviations; power_20: the chance that a true difference of delta is confirmed with 20 "
        "discovery and 20 confirmation seeds (the product of both tests' power)",
        "envs": out,
    }


def power_markdown(p: dict) -> str:
    """The page's power table."""
    d = p["delta_auc"]
    out = [
        f"Paired seeds needed to detect a difference of **{d:g} in learning-curve AUC** with {p['power']:.0%} power "
        f"(paired t test; discovery two-sided at 0.05/m, confirmation one-sided at 0.05), from the committed variance, "
        f"and the minimal detectable effect (MDE) at the seeds there are and at 20:",
        "",
        "| env | m | sd of paired Δ AUC (core methods, RMS) | seeds for discovery | seeds for confirmation | "
        "MDE at the discovery seeds now | MDE at 20 seeds | per method: sd → discovery seeds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in p["envs"]:
        per = ", ".join(f"{r['method']} {r['sd']:.3f} → {r['seeds_discovery']}" for r in e["methods"])
        out.append(
            f"| {e['env']} | {e['family_size']} | {e['sd_pooled']:.3f} | {e['seeds_discovery']} | "
            f"{e['seeds_confirmation']} | {e['mde_now']:.3f} ({e['discovery_seeds_now']} seeds) | "
            f"{e['mde_20']:.3f} | {per} |"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------------
# Markdown from the claims file (scripts/doc_figures.py)
# --------------------------------------------------------------------------------------------------------------
FAMILY_TITLES = {
    ("auc", REFERENCE): "Δ learning-curve AUC vs GRPO (the headline)",
    ("final", REFERENCE): "Δ final held-out success vs GRPO",
    ("auc", CEILING): "Δ learning-curve AUC vs the ceiling",
    ("gain", "start"): "Gain in held-out success over the warm start (final − start)",
}
MARK = {"confirmed": "**confirmed**", "not confirmed": "not confirmed", "awaiting confirmation": "awaiting confirmation",
        "no difference detected": "no difference detected"}  # fmt: skip


def _iv(d: dict | None, key: str = "mean") -> str:
    if d is None or d.get(key) is None:
        return "—"
    if d.get("lo") is None:
        return f"{d[key]:+.3f}"
    return f"{d[key]:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def _p(x: float | None) -> str:
    if x is None:
        return "—"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def claims_markdown(c: dict) -> str:
    """The page's tables: one per family kind, a row per (env, method), discovery and confirmation side by side."""
    if not c["comparisons"]:
        return (
            f"No comparison: no method has two paired seeds among the discovery seeds {DISCOVERY.start}–"
            f"{DISCOVERY.stop - 1}. Cells of confirmation seeds are tested beside discovery cells: "
            "`python benchmarks/learning_study_stats.py claims --cells DISCOVERY_CELLS CONFIRMATION_CELLS`."
        )
    out = []
    for (metric, ref), title in FAMILY_TITLES.items():
        rows = [r for r in c["comparisons"] if r["metric"] == metric and r["reference"] == ref]
        if not rows:
            continue
        out += [
            f"**{title}.**",
            "",
            "| env | method | discovery: seeds | Δ [95% t CI] | p (Holm) | d_z | P(improvement) | MDE | "
            "confirmation: seeds | Δ [95% t CI] | one-sided p | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            d, k = r["discovery"], r["confirmation"]
            one = None
            if k is not None and d["mean"] is not None and k.get("p_greater") is not None:
                one = k["p_greater"] if d["mean"] > 0 else k["p_less"]
            poi = "—" if d.get("poi") is None else f"{d['poi']:.2f}"
            dz = "—" if d.get("dz") is None else f"{d['dz']:+.2f}"
            out.append(
                f"| {_where(r)} | {r['method']} | {d['n']} | {_iv(d)} | {_p(d['p_holm'])} | {dz} | {poi} | "
                f"{d['mde']:.3f} | {k['n'] if k else 0} | {_iv(k)} | {_p(one)} | {MARK[r['verdict']]} |"
            )
        out.append("")
    counts = defaultdict(int)
    for r in c["comparisons"]:
        counts[r["verdict"]] += 1
    out.append(
        f"{len(c['comparisons'])} comparisons: "
        + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
        + ". P(improvement): P(X > Y) + ½ P(X = Y) between the method's and the reference's runs; d_z: Cohen's "
        "d_z of the paired differences; MDE: the difference the family's Holm-corrected test detects with 80% power "
        "at its seeds."
    )
    inc = sorted({f"{r['env']}: {v}" for r in c["comparisons"] for v in r["incomplete"].values()})
    if inc:
        out.append("")
        out.append(
            "Seeds of the target design not run yet (per env, the fewest any method has): "
            + "; ".join(_fewest(c["comparisons"]))
            + "."
        )
    return "\n".join(out).rstrip()


def _where(r: dict) -> str:
    return r["env"] if r["learner"] == "linear" else f"{r['env']} ({r['learner']})"


def _fewest(rows: list[dict]) -> list[str]:
    by: dict[str, dict[str, int]] = defaultdict(dict)
    for r in rows:
        for split in ("discovery", "confirmation"):
            n = r[split]["n"] if r[split] else 0
            by[_where(r)][split] = min(by[_where(r)].get(split, 10**9), n)
    return [
        f"{env} {v['discovery']} of {len(DISCOVERY)} discovery, {v['confirmation']} of {len(CONFIRMATION)} confirmation"
        for env, v in by.items()
    ]


def _conclusion(r: dict) -> str:
    """A comparison's direction as the rule reads it: "faster"/"slower" (or "higher"/"lower" for the gain) when
    significant after Holm on the discovery seeds, else "no difference detected"."""
    if r["verdict"] == "no difference detected":
        return "no difference detected"
    up = r["discovery"]["mean"] > 0
    if r["metric"] == "auc":
        return "faster" if up else "slower"
    return "higher" if up else "lower"


#: the learner label of the cells run at a learning rate per method (``learning_study.py --rates``): a family of
#: its own in the statistics
OWN_RATE = "linear-own-lr"
#: how the tables name a learner (cells carry the key)
LEARNERS = {
    "linear": "linear",
    "llm": "token-level (bundled trainer, tiny model)",
    OWN_RATE: "linear, a rate per method",
}


def learners_table(c: dict) -> list[dict]:
    """Where the two learners can be compared: every (env, metric, reference, method) that both the linear learner
    and another learner ran, with each learner's conclusion and whether they agree (the same direction, or neither
    detects a difference)."""
    rows = [
        r
        for r in c["comparisons"]
        if (r["metric"], r["reference"]) in (("auc", REFERENCE), ("gain", "start"))
    ]
    by = {(r["env"], r["learner"], r["metric"], r["reference"], r["method"]): r for r in rows}
    out = []
    for (env, learner, metric, ref, method), other in by.items():
        lin = by.get((env, "linear", metric, ref, method))
        if learner == "linear" or lin is None:
            continue
        a, b = _conclusion(lin), _conclusion(other)
        out.append({"env": env, "learner": learner, "metric": metric, "reference": ref, "method": method,
                    "linear": lin, "other": other, "agree": a == b})  # fmt: skip
    return out


def learners_markdown(c: dict) -> str:
    """The two learners side by side: per env both ran, each comparison's estimate, verdict and whether the
    learners agree."""
    rows = learners_table(c)
    if not rows:
        return "No env has cells of both learners in the claims file."
    out = [
        "| env | comparison | method | linear: seeds | Δ [95% t CI] | verdict | other learner | seeds | "
        "Δ [95% t CI] | verdict | learners |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        what = "Δ AUC vs GRPO" if r["metric"] == "auc" else "gain over the start"
        lin, oth = r["linear"], r["other"]

        def seeds(x: dict) -> str:
            k = x["confirmation"]["n"] if x["confirmation"] else 0
            return f"{x['discovery']['n']} + {k}"

        agree = (
            f"agree ({_conclusion(lin)})"
            if r["agree"]
            else f"**disagree** ({_conclusion(lin)} / {_conclusion(oth)})"
        )
        out.append(
            f"| {r['env']} | {what} | {r['method']} | {seeds(lin)} | {_iv(lin['discovery'])} | {MARK[lin['verdict']]} "
            f"| {LEARNERS.get(r['learner'], r['learner'])} | {seeds(oth)} | {_iv(oth['discovery'])} "
            f"| {MARK[oth['verdict']]} | {agree} |"
        )
    n_agree = sum(r["agree"] for r in rows)
    out += ["", f"{n_agree} of {len(rows)} comparisons agree. Seeds: discovery + confirmation; Δ on the discovery "
            "seeds; a learner's direction is read after Holm on its discovery seeds (confirmed or not)."]  # fmt: skip
    return "\n".join(out)


def timing_markdown(c: dict) -> str:
    """The page's cost table: cells, median and summed wall time per env and learner, from the claims file."""
    t = c.get("timing")
    if not t:
        return "No cell times in the claims file."
    out = [
        "| env | learner | cells | median s per cell | total (CPU-hours) | design cells | design (CPU-hours) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in t["rows"]:
        out.append(
            f"| {r['env']} | {LEARNERS.get(r['learner'], r['learner'])} | {r['cells']} | {r['median_s']:.1f} | "
            f"{r['total_s'] / 3600:.2f} | {r['design_cells']} | {r['design_s'] / 3600:.2f} |"
        )
    out += [
        "",
        f"All committed cells: {t['total_s'] / 3600:.1f} CPU-hours. The design ({t['design']}, every learner that "
        f"ran them): {t['design_s'] / 3600:.1f} CPU-hours, {t['design_s'] / 7200:.1f} h of wall time on 2 cores "
        "at those cells' speeds.",
    ]
    return "\n".join(out)


def replication_summary(c: dict) -> list[dict]:
    """Per env and learner: the confirmed claims, how many have replication seeds, how many keep their sign there
    and how many are also one-sided significant there, and every claim whose sign flipped."""
    out: dict[tuple[str, str], dict] = {}
    for r in c["comparisons"]:
        if r["verdict"] != "confirmed":
            continue
        row = out.setdefault(
            (r["env"], r["learner"]),
            {"env": r["env"], "learner": r["learner"], "confirmed": 0, "replicated_seeds": 0, "sign_kept": 0,
             "significant": 0, "n_seeds": 0, "flipped": []},
        )  # fmt: skip
        row["confirmed"] += 1
        rep = r.get("replication")
        if rep is None or "sign_kept" not in rep:
            continue
        row["replicated_seeds"] += 1
        row["n_seeds"] = max(row["n_seeds"], rep["n"])
        row["sign_kept"] += bool(rep["sign_kept"])
        row["significant"] += bool(rep["sign_kept"] and rep["p_claimed"] < ALPHA)
        if not rep["sign_kept"]:
            row["flipped"].append(
                f"{r['method']} {r['metric']} vs {r['reference']}: {r['discovery']['mean']:+.3f} → {rep['mean']:+.3f}"
            )
    return sorted(out.values(), key=lambda x: (x["learner"] != "linear", x["learner"], *_order(x["env"], "")))


def replication_markdown(c: dict) -> str:
    """The page's replication table: every confirmed claim rerun on the replication seeds."""
    rows = replication_summary(c)
    seeds = c["design"].get("replication_seeds")
    if not rows or seeds is None:
        return "No confirmed claim in the claims file."
    out = [
        f"Every confirmed claim, rerun on seeds {seeds[0]}–{seeds[1]} (run after the verdicts; used by neither "
        "discovery nor confirmation):",
        "",
        "| env | learner | confirmed claims | with replication seeds | seeds | same sign | also one-sided p < 0.05 | "
        "sign flipped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['env']} | {LEARNERS.get(r['learner'], r['learner'])} | {r['confirmed']} | {r['replicated_seeds']} "
            f"| {r['n_seeds'] or '–'} | {r['sign_kept']} | {r['significant']} | {'; '.join(r['flipped']) or 'none'} |"
        )
    kept = sum(r["sign_kept"] for r in rows)
    tried = sum(r["replicated_seeds"] for r in rows)
    out += ["", f"{kept} of {tried} confirmed claims rerun on new seeds keep their sign."]
    return "\n".join(out)


def verdict_changes(before: dict, after: dict) -> dict:
    """Two claims files of the same design compared comparison by comparison (env, learner, method, metric,
    reference): how many of each verdict, and every comparison whose verdict differs (a rerun of the cells on
    another machine, or after a change, should change none of the confirmed ones)."""

    def key(r: dict) -> tuple:
        return (r["env"], r["learner"], r["method"], r["metric"], r["reference"])

    a, b = {key(r): r for r in before["comparisons"]}, {key(r): r for r in after["comparisons"]}
    changed = [
        {"comparison": "/".join(map(str, k)), "before": a[k]["verdict"], "after": b[k]["verdict"],
         "mean_before": a[k]["discovery"]["mean"], "mean_after": b[k]["discovery"]["mean"]}
        for k in sorted(a.keys() & b.keys())
        if a[k]["verdict"] != b[k]["verdict"]
    ]  # fmt: skip
    return {
        "compared": len(a.keys() & b.keys()),
        "only_before": len(a.keys() - b.keys()),
        "only_after": len(b.keys() - a.keys()),
        "confirmed_before": sum(r["verdict"] == "confirmed" for r in a.values()),
        "confirmed_after": sum(r["verdict"] == "confirmed" for r in b.values()),
        "changed": changed,
    }


def verdict_changes_markdown(v: dict) -> str:
    out = [
        f"{v['compared']} comparisons in both; confirmed claims: {v['confirmed_before']} before, "
        f"{v['confirmed_after']} after; verdicts changed: {len(v['changed'])}."
    ]
    if v["changed"]:
        out += [
            "",
            "| comparison | verdict before | verdict after | Δ before | Δ after |",
            "|---|---|---|---|---|",
        ]
        for c in v["changed"]:
            mb, ma = c["mean_before"], c["mean_after"]
            out.append(
                f"| {c['comparison']} | {c['before']} | {c['after']} | "
                f"{'—' if mb is None else f'{mb:+.3f}'} | {'—' if ma is None else f'{ma:+.3f}'} |"
            )
    return "\n".join(out)


def profiles_markdown(c: dict) -> str:
    """The performance profiles of the claims file: per env and learner, the fraction of runs whose final held-out
    success exceeds each threshold, with its 95% bootstrap interval."""
    rows = c.get("profiles") or []
    if not rows:
        return "No performance profiles in this claims file."
    taus = rows[0]["taus"]
    out = [
        "| env | learner | method | runs | " + " | ".join(f"final > {t:g}" for t in taus) + " |",
        "|---|---|---|---|" + "---|" * len(taus),
    ]
    for r in rows:
        cells = [
            f"{f:.2f} [{lo:.2f}, {hi:.2f}]" for f, lo, hi in zip(r["fraction"], r["lo"], r["hi"], strict=True)
        ]
        out.append(f"| {r['env']} | {r['learner']} | {r['method']} | {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def fidelity_markdown(c: dict) -> str:
    out = []
    for r in c["fidelity"]:
        where = r["env"] if r["env"] != "pooled" else "pooled (mean of the per-env ρ; permuted within env)"
        holm_p = "" if r["p_holm"] is None else f", Holm over the envs p = {_p(r['p_holm'])}"
        out.append(
            f"- {where}: Spearman ρ between credit-fidelity AUROC and Δ AUC vs GRPO over {r['n_methods']} methods "
            f"= **{r['rho']:+.2f}** [{r['lo']:+.2f}, {r['hi']:+.2f}] (bootstrap over methods and seeds); "
            f"permutation p = {_p(r['p'])}{holm_p}."
        )
    return "\n".join(out)


NAMES = {
    "grpo": "GRPO", "drgrpo": "Dr.GRPO", "gigpo": "GiGPO", "proas": "ProAS", "ahead": "AHEAD",
    "stepopsd": "StepOPSD", "graphgpo": "GraphGPO", "hgpo": "HGPO", "rewardflow": "RewardFlow", "g2po": "G2PO",
    "g2po-obs": "G2PO on observation keys", "oracle": "the ceiling",
}  # fmt: skip


def _seeds(rows: list[dict], split: str) -> str:
    seeds = sorted({s for r in rows if r[split] for s in r[split]["seeds"]})
    return f"{seeds[0]}–{seeds[-1]}" if seeds else "none"


def _names(rows: list[dict], sign: bool = False) -> str:
    return ", ".join(
        NAMES.get(r["method"], r["method"]) + (f" ({r['discovery']['mean']:+.3f})" if sign else "")
        for r in rows
    )


def _by_env(rows: list[dict]) -> str:
    """``env: method (Δ), ...; env: ...`` of confirmed comparisons, envs in their order of appearance."""
    return "; ".join(
        f"{e}: {_names([r for r in rows if r['env'] == e], True)}"
        for e in dict.fromkeys(r["env"] for r in rows)
    )


def headline(c: dict) -> str:
    """The README's learning-study bullet: what is confirmed, by which procedure; the rest in one clause."""
    rows = [r for r in c["comparisons"] if r["learner"] == "linear" and r["env"] not in TOYS]
    conf = [r for r in rows if r["verdict"] == "confirmed"]
    gains = [r for r in conf if r["reference"] == "start" and r["method"] == REFERENCE]
    auc = [r for r in rows if r["reference"] == REFERENCE and r["metric"] == "auc"]
    envs = list(dict.fromkeys(r["env"] for r in rows))
    confirm_envs = list(dict.fromkeys(r["env"] for r in rows if r["confirmation"]))
    faster = [r for r in auc if r["verdict"] == "confirmed" and r["discovery"]["mean"] > 0]
    slower = [r for r in auc if r["verdict"] == "confirmed" and r["discovery"]["mean"] < 0]
    mdes = [r["discovery"]["mde"] for r in auc if r["discovery"]["mde"] is not None]
    others = [e for e in envs if e not in confirm_envs]
    out = (
        f"* On {len(envs)} real envs ({', '.join(envs)}; one linear learner for every method, paired seeds, "
        "held-out tasks never trained on), a difference stands only if its paired Student-t test is significant "
        f"after Holm's correction over the env's comparisons on discovery seeds ({_seeds(rows, 'discovery')}) and "
        f"has the same sign with one-sided p < 0.05 on confirmation seeds ({_seeds(rows, 'confirmation')}"
        + ("" if not others else f", {', '.join(confirm_envs) or 'none'} so far")
        + ")."
    )
    if gains:
        out += (
            " Confirmed: GRPO improves over its warm start ("
            + ", ".join(f"{r['env']} {r['discovery']['mean']:+.2f}" for r in gains)
            + " held-out success);"
        )
    else:
        out += " Confirmed:"
    if faster:
        out += f" faster than GRPO by learning-curve AUC: {_by_env(faster)};"
    else:
        out += " **no method is confirmed to learn faster than GRPO** (learning-curve AUC);"
    if slower:
        out += f" slower: {_by_env(slower)}."
    out += (
        " Every other difference is *no difference detected at this power* (the smallest AUC difference the "
        f"corrected test detects with 80% power is {min(mdes):.2f}–{max(mdes):.2f} at these seeds)"
        + (f"; {', '.join(others)} await confirmation seeds." if others else ".")
    )
    rep = [x for x in replication_summary(c) if x["learner"] == "linear" and x["env"] not in TOYS]
    tried = sum(x["replicated_seeds"] for x in rep)
    if tried:
        a, b = c["design"]["replication_seeds"]
        out += (
            f" Rerun on new seeds ({a}–{b}, run after the verdicts and used by neither split), "
            f"{sum(x['sign_kept'] for x in rep)} of the {tried} confirmed claims rerun keep their sign."
        )
    own = [
        r
        for r in c["comparisons"]
        if r["learner"] == OWN_RATE
        and r["env"] not in TOYS
        and r["reference"] == REFERENCE
        and r["metric"] == "auc"
    ]
    if own:
        fast = [r for r in own if r["verdict"] == "confirmed" and r["discovery"]["mean"] > 0]
        slow = [r for r in own if r["verdict"] == "confirmed" and r["discovery"]["mean"] < 0]
        out += (
            " With each method at its own learning rate (chosen by AUC on selection seeds from the same rate grid, "
            "extended downwards where a method's best rate was its smallest; "
            f"{', '.join(dict.fromkeys(r['env'] for r in own))}), the same rule confirms faster than GRPO: "
            f"{_by_env(fast) or 'none'}; slower: {_by_env(slow) or 'none'}."
        )
    both = [r for r in learners_table(c) if r["learner"] == "llm"]
    if both:
        envs = list(dict.fromkeys(r["env"] for r in both))
        per_env = [
            f"{sum(r['agree'] for r in both if r['env'] == e)} of {sum(r['env'] == e for r in both)}"
            + (" conclusions" if i == 0 else "")
            + f" on {e}"
            for i, e in enumerate(envs)
        ]
        out += (
            f" A second learner, the bundled trainer's token-level policy (its tiny model, on {' and '.join(envs)}),"
            f" agrees with the linear one on {', '.join(per_env)}."
        )
        # an env where no method of this learner is confirmed to gain over its start: it did not learn there, so
        # its comparisons say nothing about credit
        idle = [
            e
            for e in envs
            if not any(
                r["env"] == e and r["metric"] == "gain" and r["other"]["verdict"] == "confirmed"
                and r["other"]["discovery"]["mean"] > 0
                for r in both
            )
        ]  # fmt: skip
        if idle:
            out += (
                f" On {' and '.join(idle)} it did not learn within the budget (no method's gain over its start is"
                " confirmed), so there the two learners differ in whether they learn, not in what credit does."
            )
    return out


# --------------------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------------------
def _dump(obj: dict, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("claims", "power", "compare"))
    ap.add_argument(
        "--files", nargs=2, type=Path, default=None, help="compare: two claims files (before, after)"
    )
    ap.add_argument(
        "--cells", nargs="+", type=Path, default=list(CELLS), help="cells files (.jsonl, .jsonl.gz)"
    )
    ap.add_argument(
        "--prefer",
        nargs="+",
        type=Path,
        default=[],
        help="cells files read before --cells: their cells stand in for the same (env, learner, method, seed) "
        "of those (e.g. the re-runs of benchmarks/learning_study_design_time.py --write-cells)",
    )
    ap.add_argument("--out", type=Path, default=None, help="the JSON file to write (default: print only)")
    ap.add_argument("--delta", type=float, default=MIN_DIFF, help="power: the AUC difference to detect")
    args = ap.parse_args(argv)
    if args.what == "compare":
        if args.files is None:
            ap.error("compare needs --files BEFORE AFTER (two claims files)")
        try:
            before, after = (json.loads(Path(f).read_text(encoding="utf-8")) for f in args.files)
            result = verdict_changes(before, after)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(
                f"compare: {args.files[0]} and {args.files[1]} are not two claims files ({e})"
            ) from None
        print(verdict_changes_markdown(result))
    elif args.what == "claims":
        result = claims([*args.prefer, *args.cells])
        print(claims_markdown(result))
        print()
        print(fidelity_markdown(result))
    else:
        result = power_analysis([*args.prefer, *args.cells], args.delta)
        print(power_markdown(result))
    if args.out is not None:
        _dump({"written": f"{dt.datetime.now(dt.UTC):%Y-%m-%d}", **result}, args.out)
        print(f"wrote {args.out} ({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
