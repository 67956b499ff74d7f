"""Where does step-level credit pay off? A sweep of ``StepGym/CreditFamily-v0``'s knobs for GRPO, GiGPO, ProAS,
AHEAD (oracle hints) and StepOPSD, with paired seeds and confidence intervals, that reruns on a CPU.

Why a softmax policy and not the bundled trainer: the ``credit-*`` presets train a tiny transformer at seconds per
iteration; ≥10 seeds × 5 methods × a dozen settings would take days on 2 cores. The study instead trains a *linear
softmax policy* over (observation sentence, action) indicator features plus a per-action bias, by the policy
gradient, and gets its advantages from stepgym's own ``shape_advantages`` with the ``credit-*`` presets' shaper
configs, on the same per-step batch format the trainer builds (group = task, one row per step, one token per
step). What the tiny model would add (tokenisation, a context window) is not what the study is about.

The teachers of AHEAD and StepOPSD need a model that reads a privileged context; a linear policy cannot, so both
are *modelled* (docs/credit_study.md): the teacher's logits are the policy's (AHEAD: θ_old; StepOPSD: a stale
snapshot refreshed every 10 updates) plus ``--hint-strength`` on the action the privileged text names (AHEAD: the
oracle hint's expert action, on the error steps of failed trajectories only; StepOPSD: the action the group's first
successful peer took in the same state). ProAS labels come from stepgym's ``AgenticReferenceGraph``, seeded with
the env's expert per task and grown online with the policy's successes. GiGPO anchors on ``STATE_KEY`` (the
trainer's default); ``gigpo-obs`` anchors on the observation text, as verl-agent does.

Per cell (setting × method × seed) it records the training success curve, iterations to 50% / 80% (mean of the last
``--smooth`` iterations), the area under the curve (mean success over all iterations), final greedy success on the
held-out ``valid`` tasks, and the share of advantage mass Σ|A| on decisive steps. Each finished cell is appended
as one JSON line to ``<out>/cells.jsonl`` (one ``write``; a torn last line is dropped on resume), so a killed sweep
loses only the cells in flight and a rerun skips the finished ones. ``summary.csv`` and the plots are rebuilt from
that file.

    python benchmarks/credit_study.py --out runs/credit_study --workers 2          # the full sweep
    python benchmarks/credit_study.py --quick --out /tmp/cs                        # smoke test (CI)
    python benchmarks/credit_study.py --out runs/credit_study --report-only        # tables and plots only
    python benchmarks/credit_study.py --report-only --out /tmp/figs \
        --cells benchmarks/results/credit_study_2026-11-30_cells.jsonl.gz          # the committed figures
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (str(REPO), str(REPO / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import gymnasium as gym  # noqa: E402
from credit_assignment import first_reaching  # noqa: E402

import stepgym  # noqa: E402, F401  (registers the envs)
from stepgym import schema  # noqa: E402
from stepgym.envs.credit.family import DECISIVE  # noqa: E402
from stepgym.graph_seeding import seed_graph_from_expert  # noqa: E402
from stepgym.reference_graph import AgenticReferenceGraph, default_state_key  # noqa: E402
from stepgym.shapers import GRAPH_BASES, ShapeConfig, StepBatch, TokenLayout, shape_advantages  # noqa: E402
from stepgym.trainers.presets import get_preset  # noqa: E402
from stepgym.wrappers import ValueWrapper  # noqa: E402
from stepgym.wrappers.hints import same_action  # noqa: E402

ENV_ID = "StepGym/CreditFamily-v0"
GRAPH = GRAPH_BASES
#: the five of before; the four graph / history bases keyed on ``STATE_KEY`` and, with ``-obs``, on the
#: observation text (their public code's keying); and the perfect-credit ceiling ``oracle`` (the true gain of
#: ``ValueWrapper``'s labels as step credit, with the episode term)
METHODS = (
    "grpo",
    "gigpo",
    "proas",
    "ahead",
    "stepopsd",
    *[f"{m}{keying}" for m in GRAPH for keying in ("", "-obs")],
    "oracle",
)
CEILING = "oracle"
EXTRA = ("gigpo-obs", "stepopsd-nonorm")  # variants run only in the settings that name them
CENTER = {
    "horizon": 10,
    "n_decisive": 2,
    "irreversible": True,
    "n_distractors": 1,
    "reward": "sparse",
    "alias": False,
}

#: name → (knobs changed from CENTER, extra methods)
SETTINGS: dict[str, tuple[dict, tuple[str, ...]]] = {
    "H5": ({"horizon": 5}, ()),
    "center": ({}, ("stepopsd-nonorm",)),
    "H40": ({"horizon": 40}, ()),
    "k1": ({"n_decisive": 1}, ()),
    "k4": ({"n_decisive": 4}, ()),
    "recoverable": ({"irreversible": False, "n_decisive": 4}, ()),
    "D4": ({"n_distractors": 4}, ()),
    "dense": ({"reward": "dense", "n_decisive": 4}, ()),
    "alias": ({"alias": True}, ("gigpo-obs",)),
}
QUICK_SETTINGS = {"center": ({"horizon": 8}, ()), "alias": ({"horizon": 8, "alias": True}, ("gigpo-obs",))}


# --------------------------------------------------------------------------------------------------------------
# The policy: linear softmax over (sentence, action) indicators plus a per-action bias
# --------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=65536)
def sentences(obs: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in obs.split(". ") if s.strip())


class Policy:
    """logit(a | o) = b[a] + Σ_{sentence s of o} w[s, a]; zero-initialised, i.e. uniform over admissible actions."""

    def __init__(self) -> None:
        self.w: dict[tuple[str, str], float] = defaultdict(float)
        self.b: dict[str, float] = defaultdict(float)

    def copy(self) -> Policy:
        p = Policy()
        p.w.update(self.w)
        p.b.update(self.b)
        return p

    def logits(self, obs: str, actions: list[str]) -> np.ndarray:
        ss, w, b = sentences(obs), self.w, self.b
        return np.array([b.get(a, 0.0) + sum(w.get((s, a), 0.0) for s in ss) for a in actions])

    def update(self, obs: str, actions: list[str], probs: np.ndarray, chosen: int, coef: float) -> None:
        """Gradient ascent step coef·∇ log π(chosen | obs), with ``probs`` = π(· | obs) at the rollout weights."""
        g = -probs
        g[chosen] += 1.0
        ss = sentences(obs)
        for a, ga in zip(actions, g, strict=True):
            self.b[a] += coef * ga
            for s in ss:
                self.w[(s, a)] += coef * ga


def softmax(z: np.ndarray, bonus: str | None = None, actions: list[str] | None = None, strength: float = 0.0):
    """softmax(z), with ``strength`` added to the logit of the action ``bonus`` names (the modelled teachers)."""
    if bonus is not None:
        z = z + strength * np.array([same_action(a, bonus) for a in actions], dtype=float)
    e = np.exp(z - z.max())
    return e / e.sum()


# --------------------------------------------------------------------------------------------------------------
# Rollouts in the trainer's per-step format
# --------------------------------------------------------------------------------------------------------------
@dataclass
class Step:
    obs: str
    actions: list[str]
    chosen: int
    logits: np.ndarray  # the rollout policy's (θ_old) logits over ``actions``
    info: dict  # the info of the state the action was taken in
    reward: float = 0.0
    next_info: dict = field(default_factory=dict)
    next_obs: str = ""  # the observation text after the step
    done: bool = False  # the episode ended on this step (terminated, not cut by the horizon)


@dataclass
class Episode:
    task_id: str
    group: int
    steps: list[Step]
    won: bool
    aborted: bool = (
        False  # an env failure cut it off (docs/failures.md): no outcome, no credit, not in a rate
    )


def play(
    env: gym.Env, policy: Policy, task_id: str, rng: np.random.Generator, greedy: bool = False
) -> Episode:
    """One episode; an exception from the env ends it aborted (the library's rule: stepgym.rollout.play_episode)."""
    try:
        obs, info = env.reset(options={"task_id": task_id})
    except Exception:
        return Episode(task_id, -1, [], False, aborted=True)
    steps: list[Step] = []
    while True:
        actions = list(info[schema.ADMISSIBLE_ACTIONS])
        z = policy.logits(obs, actions)
        k = (
            int(np.argmax(z))
            if greedy
            else min(int(np.searchsorted(softmax(z).cumsum(), rng.random())), len(z) - 1)
        )
        step = Step(obs, actions, k, z, info)
        try:
            obs, reward, terminated, truncated, info = env.step(actions[k])
        except Exception:  # no transition happened: the step is not kept
            return Episode(task_id, -1, steps, False, aborted=True)
        step.reward, step.next_info, step.next_obs, step.done = float(reward), info, obs, bool(terminated)
        steps.append(step)
        if terminated or truncated:
            return Episode(task_id, -1, steps, bool(info[schema.WON]))


def teacher_gaps(method: str, eps: list[Episode], stale: Policy, strength: float) -> np.ndarray:
    """δ = log π_teacher(a) − log π_old(a) per step row (the modelled teachers of the module docstring)."""
    out: list[float] = []
    peers: dict[int, dict[str, str]] = {}
    if method == "stepopsd":  # first successful peer of each group: its action per exact state
        for e in eps:
            if e.won and e.group not in peers:
                peers[e.group] = {s.info[schema.STATE_KEY]: s.actions[s.chosen] for s in e.steps}
    for e in eps:
        for s in e.steps:
            a = s.actions[s.chosen]
            p_old = softmax(s.logits)[s.chosen]
            if method == "ahead":
                expert = s.info.get(schema.EXPERT_ACTION)
                error = (not e.won) and expert is not None and not same_action(a, expert)
                p_t = softmax(s.logits, expert, s.actions, strength)[s.chosen] if error else p_old
            else:
                hint = peers.get(e.group, {}).get(s.info[schema.STATE_KEY])
                p_t = softmax(stale.logits(s.obs, s.actions), hint, s.actions, strength)[s.chosen]
            out.append(math.log(p_t) - math.log(p_old))
    return np.array(out)


def proas_labels(graph: AgenticReferenceGraph, eps: list[Episode]) -> tuple[np.ndarray, np.ndarray]:
    rea, pa = [], []
    for e in eps:
        keys = [default_state_key(e.steps[0].info)] + [default_state_key(s.next_info) for s in e.steps]
        lab = graph.label_path(e.task_id, keys, [s.actions[s.chosen] for s in e.steps])
        rea += lab.reasonable
        pa += lab.progress
    return np.array(rea, dtype=bool), np.array(pa, dtype=bool)


def grow(graph: AgenticReferenceGraph, eps: list[Episode]) -> None:
    for e in eps:
        if e.won:
            keys = [default_state_key(e.steps[0].info)] + [default_state_key(s.next_info) for s in e.steps]
            graph.add_path(e.task_id, keys, [s.actions[s.chosen] for s in e.steps], won=True)


def graph_inputs(batch: StepBatch, rows: list[tuple[Episode, Step]], method: str) -> None:
    """The graph / history bases' and the ceiling's inputs: the state before and after each step (``STATE_KEY``,
    or with ``-obs`` the observation text, their public code's keying), where the episode ended, and (the
    ceiling) the true gain ``VALUE_GAIN`` of each step."""
    if method.endswith("-obs"):
        batch.anchor_obs = [s.obs for _, s in rows]
        batch.next_obs = [s.next_obs for _, s in rows]
    else:
        batch.anchor_obs = [s.info[schema.STATE_KEY] for _, s in rows]
        batch.next_obs = [s.next_info[schema.STATE_KEY] for _, s in rows]
    batch.dones = [s.done for _, s in rows]
    if method == CEILING:
        batch.true_gain = [float(s.next_info[schema.VALUE_GAIN]) for _, s in rows]


# --------------------------------------------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------------------------------------------
def shaper_config(method: str):
    """The ``credit-*`` preset's shaper; ``stepopsd-nonorm`` drops StepOPSD's per-step budget normalisation; a graph
    base (either keying) has its ALFWorld shaper preset (``graphgpo-alfworld``: the ``credit-*`` presets take
    ALFWorld's shapers), the ceiling the ``oracle`` shaper preset."""
    base = method.split("-")[0]
    if base in (*GRAPH, CEILING):
        return ShapeConfig.from_preset(base if base == CEILING else f"{base}-alfworld")
    cfg = get_preset(f"credit-{base}").shaper
    return replace(cfg, step_norm=None) if method == "stepopsd-nonorm" else cfg


def run_cell(cell: dict) -> dict:
    """Train one (setting, method, seed) and return its metrics (a JSON-able dict)."""
    t0 = time.perf_counter()
    method, seed, a = cell["method"], cell["seed"], cell["args"]
    knobs = {**CENTER, **cell["knobs"]}
    env = gym.make(ENV_ID, n_tasks=a["tasks"], **knobs).unwrapped
    if method == CEILING:  # the ceiling reads the true gain of every step
        env = ValueWrapper(env)
    valid = gym.make(ENV_ID, split="valid", n_tasks=a["eval_tasks"], **knobs).unwrapped
    cfg = shaper_config(method)
    rng = np.random.default_rng(seed)  # identical across methods: same task order and initial policy
    policy, stale = Policy(), Policy()
    graph = AgenticReferenceGraph()
    if method == "proas":
        seed_graph_from_expert(graph, gym.make(ENV_ID, n_tasks=a["tasks"], **knobs), env.unwrapped.task_ids)
    curve, share, dec_rows = [], [], []
    aborted = 0
    for it in range(a["iterations"]):
        if method == "stepopsd" and it % 10 == 0:
            stale = policy.copy()  # the stale teacher: refreshed every 10 updates (initial weights for 1..10)
        tasks = rng.choice(len(env.unwrapped.task_ids), size=a["n_tasks"], replace=False)
        eps = []
        for g, ti in enumerate(tasks):
            for _ in range(a["group_size"]):
                e = play(env, policy, env.unwrapped.task_ids[ti], rng)
                e.group = g
                eps.append(e)
        rows = [(e, s) for e in eps for s in e.steps]
        n = len(rows)
        batch = StepBatch(
            group_ids=[e.group for e, _ in rows],
            traj_ids=[id(e) for e, _ in rows],
            rewards=[s.reward for _, s in rows],
            valid=[bool(s.next_info[schema.ADMISSIBLE]) for _, s in rows],
            anchor_obs=[s.obs if method == "gigpo-obs" else s.info[schema.STATE_KEY] for _, s in rows],
            layout=TokenLayout.from_step_rows(np.ones((n, 1))),
            aborted=[e.aborted for e, _ in rows],
        )
        if method.split("-")[0] in (*GRAPH, CEILING):
            graph_inputs(batch, rows, method)
        if method == "proas":
            batch.reasonable, batch.progress = proas_labels(graph, eps)
        if cfg.token_reweight is not None:
            batch.delta = teacher_gaps(method, eps, stale, a["hint_strength"])[:, None]
            batch.target = batch.layout if cfg.step_norm is not None else None
        adv = shape_advantages(batch, cfg, update_index=it).token_advantages[:, 0]
        if method == "proas":
            grow(graph, [e for e in eps if not e.aborted])  # an aborted episode never grows the graph
        decisive = np.array([bool(s.info.get(DECISIVE)) for _, s in rows])
        mass = np.abs(adv).sum()
        share.append(float(np.abs(adv[decisive]).sum() / mass) if mass > 0 else float("nan"))
        dec_rows.append(float(decisive.mean()))
        aborted += sum(e.aborted for e in eps)
        curve.append(float(np.mean([e.won for e in eps if not e.aborted] or [0.0])))
        coef = a["lr"] / n  # token-mean (the trainer's default aggregation): one token per step row
        for (_, s), av in zip(rows, adv, strict=True):
            if av != 0.0:
                policy.update(s.obs, s.actions, softmax(s.logits), s.chosen, coef * float(av))
    eval_rng = np.random.default_rng(0)
    played = [play(valid, policy, t, eval_rng, greedy=True) for t in valid.task_ids]
    held = float(np.mean([e.won for e in played if not e.aborted] or [0.0]))
    aborted += sum(e.aborted for e in played)
    return {
        "key": cell_key(cell),
        "setting": cell["setting"],
        "method": method,
        "seed": seed,
        "knobs": knobs,
        "curve": curve,
        "decisive_share": share,
        "decisive_rows": dec_rows,
        "valid_success": held,
        "random_success": env.unwrapped.random_success(),
        "aborted_episodes": aborted,
        "seconds": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------------------------------------------
# The results file: one JSON line per finished cell, appended atomically; resume skips finished cells
# --------------------------------------------------------------------------------------------------------------
TRAIN_ARGS = ("iterations", "n_tasks", "group_size", "tasks", "eval_tasks", "lr", "hint_strength")


def cell_key(cell: dict) -> str:
    """setting/method/seed plus a fingerprint of everything that shapes the result, so a rerun with other knobs
    or training arguments never mistakes an old cell for one of its own."""
    what = {"knobs": {**CENTER, **cell["knobs"]}, **{k: cell["args"][k] for k in TRAIN_ARGS}}
    fp = hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:10]
    return f"{cell['setting']}/{cell['method']}/{cell['seed']}/{fp}"


def load_cells(path: Path) -> list[dict]:
    """Finished cells; a torn last line (a run killed mid-write) is cut off so the next append starts clean."""
    if not path.exists():
        return []
    if path.suffix == ".gz":  # an archived sweep (benchmarks/results): read only
        return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line]
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
    return [json.loads(line) for line in data[:end].decode().splitlines() if line.strip()]


def append_cell(path: Path, result: dict) -> None:
    line = (json.dumps(result, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def plan(args: argparse.Namespace) -> list[dict]:
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    names = args.settings or list(settings)
    cells = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name in names:
            knobs, extra = settings[name]
            for method in [*args.methods, *extra]:
                cells.append(
                    {"setting": name, "method": method, "seed": seed, "knobs": knobs, "args": vars(args)}
                )
    return cells


# --------------------------------------------------------------------------------------------------------------
# Statistics, CSV and plots
# --------------------------------------------------------------------------------------------------------------
def metrics(r: dict, smooth: int) -> dict[str, float]:
    n = len(r["curve"])
    reach = {lv: first_reaching(r["curve"], lv, smooth) for lv in (0.5, 0.8)}
    share = [x for x in r["decisive_share"] if not math.isnan(x)]
    return {
        "it50": float(reach[0.5] if reach[0.5] is not None else n + 1),
        "it80": float(reach[0.8] if reach[0.8] is not None else n + 1),
        "auc": float(np.mean(r["curve"])),
        "final_train": float(np.mean(r["curve"][-smooth:])),
        "valid": r["valid_success"],
        "decisive_share": float(np.mean(share)) if share else float("nan"),
        "decisive_rows": float(np.mean(r["decisive_rows"])),
    }


def bootstrap_ci(d: np.ndarray, rng: np.random.Generator, n_boot: int = 10_000) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of paired differences ``d``."""
    if len(d) < 2:
        return float("nan"), float("nan")
    means = d[rng.integers(len(d), size=(n_boot, len(d)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


STAT_KEYS = ("it50", "it80", "auc", "valid", "decisive_share")


def summarise(results: list[dict], smooth: int) -> list[dict]:
    """One row per (setting, method): means over seeds and paired differences vs GRPO (``d_*``) and vs the
    perfect-credit ceiling (``c_*``: the method minus ``oracle``; NaN when the ceiling was not run) with 95%
    bootstrap CIs."""
    by = defaultdict(dict)
    for r in results:
        by[(r["setting"], r["method"])][r["seed"]] = metrics(r, smooth)
    rng = np.random.default_rng(12345)
    rows = []
    for (setting, method), per_seed in by.items():
        base = by.get((setting, "grpo"), {})
        seeds = sorted(per_seed)
        paired = [s for s in seeds if s in base]
        knobs = next(r["knobs"] for r in results if r["setting"] == setting)
        chance = next(r["random_success"] for r in results if r["setting"] == setting)
        row = {"setting": setting, "method": method, "seeds": len(seeds), "paired_seeds": len(paired)}
        row.update({k: knobs[k] for k in CENTER})
        row["random_success"] = round(chance, 4)
        n_it = len(next(r["curve"] for r in results if r["setting"] == setting))
        for lv in (
            "50",
            "80",
        ):  # seeds that reached the level within the run (it50/it80 are censored at n + 1)
            row[f"reached{lv}"] = sum(per_seed[s][f"it{lv}"] <= n_it for s in seeds)
        for k in (*STAT_KEYS, "final_train", "decisive_rows"):
            vals = [per_seed[s][k] for s in seeds if not math.isnan(per_seed[s][k])]
            row[k] = (
                float(np.mean(vals)) if vals else float("nan")
            )  # share: NaN for a run that never had credit
        ceiling = by.get((setting, CEILING), {})
        for prefix, ref, ref_name in (("d", base, "grpo"), ("c", ceiling, CEILING)):
            for k in STAT_KEYS:
                d = np.array([per_seed[s][k] - ref[s][k] for s in seeds if s in ref])
                d = d[~np.isnan(d)]
                own = method == ref_name or not len(d)
                lo, hi = (float("nan"), float("nan")) if own else bootstrap_ci(d, rng)
                row[f"{prefix}_{k}"] = float("nan") if own else float(d.mean())
                row[f"{prefix}_{k}_lo"], row[f"{prefix}_{k}_hi"] = lo, hi
        rows.append(row)
    order = {m: i for i, m in enumerate((*METHODS, *EXTRA))}
    names = list(dict.fromkeys(r["setting"] for r in results))
    rows.sort(key=lambda r: (names.index(r["setting"]), order.get(r["method"], 99)))
    return rows


#: (setting, method, reference): further paired comparisons printed under the table
CONTRASTS = (("alias", "gigpo-obs", "gigpo"), ("center", "stepopsd-nonorm", "stepopsd"))


def contrasts(results: list[dict], smooth: int) -> str:
    """Paired AUC differences between two methods other than GRPO (same seeds), with 95% bootstrap CIs."""
    rng = np.random.default_rng(54321)
    per = {(r["setting"], r["method"], r["seed"]): metrics(r, smooth)["auc"] for r in results}
    lines = []
    for setting, a, b in CONTRASTS:
        seeds = sorted(s for (st, m, s) in per if st == setting and m == a and (setting, b, s) in per)
        if not seeds:
            continue
        d = np.array([per[(setting, a, s)] - per[(setting, b, s)] for s in seeds])
        lo, hi = bootstrap_ci(d, rng)
        lines.append(
            f"- {setting}: AUC({a}) − AUC({b}) = {d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}] ({len(d)} seeds)"
        )
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})


def markdown(rows: list[dict]) -> str:
    """The headline table: AUC and held-out success, and the AUC difference vs GRPO with its 95% CI."""
    out = [
        "| setting | method | seeds | AUC | Δ AUC vs GRPO [95% CI] | Δ AUC vs ceiling [95% CI] | it→80% "
        "| Δ it→80% vs GRPO [95% CI] | valid | decisive share (rows) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, c, i = (
            _ci(r, f"{p}_{k}", fmt)
            for p, k, fmt in (("d", "auc", "+.3f"), ("c", "auc", "+.3f"), ("d", "it80", "+.1f"))
        )
        out.append(
            f"| {r['setting']} | {r['method']} | {r['seeds']} | {r['auc']:.3f} | {d} | {c} | {r['it80']:.1f} | {i} | "
            f"{r['valid']:.2f} | {r['decisive_share']:.3f} ({r['decisive_rows']:.3f}) |"
        )
    return "\n".join(out)


def _ci(row: dict, key: str, fmt: str) -> str:
    """``mean [lo, hi]`` of a paired difference, or "—" (the reference itself, or no paired seeds)."""
    if math.isnan(row[key]):
        return "—"
    return f"{row[key]:{fmt}} [{row[key + '_lo']:{fmt}}, {row[key + '_hi']:{fmt}}]"


def plot(results: list[dict], rows: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(r["setting"] for r in results))
    methods = [m for m in (*METHODS, *EXTRA) if any(r["method"] == m for r in results)]
    colors = {m: plt.get_cmap("tab20")(i % 20) for i, m in enumerate(methods)}  # 15 methods: more than 10
    cols = min(4, len(settings))
    nrows = math.ceil(len(settings) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.4 * nrows), squeeze=False, sharey=True)
    for ax, s in zip(axes.flat, settings, strict=False):
        for m in methods:
            curves = [r["curve"] for r in results if r["setting"] == s and r["method"] == m]
            if curves:
                ax.plot(np.mean(curves, axis=0), label=m, color=colors[m], lw=1.2)
        ax.set_title(s, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(settings) :]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=colors[m], label=m) for m in methods]
    axes[0][0].legend(handles=handles, fontsize=6)
    fig.supxlabel("iteration", fontsize=8)
    fig.supylabel("training success (mean over seeds)", fontsize=8)
    fig.tight_layout()
    curves_png = out / "credit_study_curves.png"
    fig.savefig(curves_png, dpi=80)
    plt.close(fig)

    others = [m for m in methods if m != "grpo"]
    fig, ax = plt.subplots(figsize=(7, 0.22 * len(settings) * len(others) + 1))
    y, labels = 0, []
    for s in settings:
        for m in others:
            r = next((r for r in rows if r["setting"] == s and r["method"] == m), None)
            if r is None or math.isnan(r["d_auc_lo"]):
                continue
            ax.errorbar(
                r["d_auc"],
                y,
                xerr=[[r["d_auc"] - r["d_auc_lo"]], [r["d_auc_hi"] - r["d_auc"]]],
                fmt="o",
                color=colors[m],
                ms=3,
            )
            labels.append(f"{s} · {m}")
            y += 1
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("Δ AUC vs GRPO (paired, 95% bootstrap CI)", fontsize=8)
    fig.tight_layout()
    forest_png = out / "credit_study_auc_diff.png"
    fig.savefig(forest_png, dpi=80)
    plt.close(fig)
    return [curves_png, forest_png]


def report(out: Path, smooth: int, keys: set[str], cells: Path) -> list[dict]:
    """summary.csv, summary.md and the plots from the finished cells of the planned sweep (``keys``)."""
    results = [r for r in load_cells(cells) if r["key"] in keys]
    if not results:
        raise SystemExit(f"no finished cells of this sweep in {cells}")
    rows = summarise(results, smooth)
    write_csv(rows, out / "summary.csv")
    table = markdown(rows)
    extra = contrasts(results, smooth)
    if extra:
        table += "\n\nOther paired contrasts (AUC, 95% bootstrap CI):\n\n" + extra
    (out / "summary.md").write_text(table + "\n")
    print(table)
    for p in plot(results, rows, out):
        print(f"wrote {p}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/credit_study", help="folder for cells.jsonl, summary.csv, plots")
    p.add_argument("--quick", action="store_true", help="two small settings, 2 seeds, few iterations (CI)")
    p.add_argument("--settings", nargs="*", default=None, help="subset of the settings (default: all)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--n-tasks", type=int, default=4, help="tasks (groups) per iteration")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tasks", type=int, default=24, help="tasks in the training split")
    p.add_argument("--eval-tasks", type=int, default=24, help="held-out valid tasks (greedy)")
    p.add_argument("--lr", type=float, default=20.0, help="SGD step on the token-mean loss")
    p.add_argument("--hint-strength", type=float, default=2.0, help="modelled teachers' logit bonus")
    p.add_argument("--smooth", type=int, default=2, help="iterations averaged for the it→50%%/80%% levels")
    p.add_argument("--workers", type=int, default=1, help="cells run in this many processes")
    p.add_argument("--report-only", action="store_true", help="only rebuild the CSV, table and plots")
    p.add_argument("--cells", default=None, help="report from this results file (.jsonl or .jsonl.gz)")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.iterations, args.tasks, args.eval_tasks = min(args.seeds, 2), 8, 8, 8
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        done = {r["key"] for r in load_cells(out / "cells.jsonl")}
        todo = [c for c in plan(args) if cell_key(c) not in done]
        print(
            f"# credit study: {len(done)} cells done, {len(todo)} to run, {args.workers} workers", flush=True
        )
        t0 = time.perf_counter()
        ctx = mp.get_context("spawn")
        with ctx.Pool(args.workers) if args.workers > 1 else _Serial() as pool:
            for r in pool.imap_unordered(run_cell, todo):
                append_cell(out / "cells.jsonl", r)
                print(
                    f"{r['setting']:12s} {r['method']:10s} seed {r['seed']:2d}: auc {np.mean(r['curve']):.3f} "
                    f"valid {r['valid_success']:.2f} ({r['seconds']:.1f}s)",
                    flush=True,
                )
        print(f"# sweep wall time: {time.perf_counter() - t0:.0f} s", flush=True)
    report(out, args.smooth, {cell_key(c) for c in plan(args)}, Path(args.cells or out / "cells.jsonl"))
    return 0


class _Serial:
    """In-process stand-in for a Pool (--workers 1)."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @staticmethod
    def imap_unordered(fn, items):
        return map(fn, items)


if __name__ == "__main__":
    raise SystemExit(main())
