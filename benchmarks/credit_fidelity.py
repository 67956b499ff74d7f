"""Credit fidelity: each shaper's per-step advantages scored against the ground-truth step values.

Groups of rollouts are played with stepgym's own pieces: :class:`~stepgym.group.GroupEnv` (G copies of one task)
with :class:`~stepgym.wrappers.ValueWrapper` on every copy, driven by the reference agents of
:mod:`stepgym.agents` (the noisy expert at several error rates, the random agent) and, with ``--model``, by a model
behind an OpenAI-compatible endpoint (:class:`stepgym.llm_eval.LLMAgent` on the trainer's text interface). A group
is one (task, agent) pair, as a GRPO trainer samples a group from one policy. Every group's steps then get each
shaper's advantages from :func:`stepgym.shapers.shape_advantages` with the presets' ``ShapeConfig`` (one
"token" per step, as ``benchmarks/credit_study.py`` does): GRPO, GiGPO (anchored on ``STATE_KEY``), ProAS (labels
from an ``AgenticReferenceGraph`` seeded with the env's expert per task), AHEAD (oracle hints of
``OracleAnalyzer`` on failed rollouts) and StepOPSD (peer hindsight: ``stepgym.hindsight.first_correct_peers``).

AHEAD's and StepOPSD's teachers read privileged text; no model reads it here, so the teacher is a *stated
stand-in* (docs/credit_fidelity.md): its log-probabilities are the behaviour policy's plus ``--hint-strength`` on
the action the privileged text names (AHEAD: the expert action the hint of an error step names; StepOPSD: the
action the first successful peer took in the same state). The behaviour policy's probabilities are known for the
reference agents (noisy expert: 1 − e on the expert action, e spread over the others; random: uniform); for an
endpoint model they are taken as uniform over the admissible actions (also a stand-in).

The truth is ``VALUE_GAIN``: a step is *harmful* when its gain is negative, *helpful* when positive. Scores per
(env, subset, method): AUROC of the credit separating helpful from harmful steps, Spearman correlation of credit
and gain, and the share of negative credit mass that lands on harmful steps; only steps whose label is exact
(``VALUE_EXACT`` True) count (docs/credit_fidelity.md says why and how zero gains count). Intervals are 95%
percentile bootstrap intervals over groups, *paired*: one resample of the groups scores every method, so the
difference to GRPO has its own interval.

    python benchmarks/credit_fidelity.py                       # the default run (README table and plot)
    python benchmarks/credit_fidelity.py --quick --out /tmp/cf # smoke test (tests/test_credit_fidelity.py)
    python benchmarks/credit_fidelity.py --model NAME --base-url http://host:8000/v1   # add a served model
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import gymnasium as gym  # noqa: E402

import stepgym  # noqa: E402, F401  (registers the envs)
from stepgym import schema  # noqa: E402
from stepgym.agents import NoisyExpertAgent, RandomAgent  # noqa: E402
from stepgym.graph_seeding import seed_graph_from_expert  # noqa: E402
from stepgym.group import GroupConfig, GroupEnv  # noqa: E402
from stepgym.hindsight import NO_PEER, first_correct_peers  # noqa: E402
from stepgym.reference_graph import AgenticReferenceGraph, default_state_key  # noqa: E402
from stepgym.shapers import GRAPH_BASES, ShapeConfig, StepBatch, TokenLayout, shape_advantages  # noqa: E402
from stepgym.trainers.presets import TRAINER_PRESETS, get_preset  # noqa: E402
from stepgym.wrappers import ValueWrapper  # noqa: E402
from stepgym.wrappers.hints import OracleAnalyzer, same_action  # noqa: E402

GRAPH = GRAPH_BASES
#: the five of before, the four graph / history bases keyed on stepgym's exact state keys (``STATE_KEY``) and,
#: with ``-obs``, on the observation text as their public code keys states, and the perfect-credit ceiling
METHODS = (
    "grpo",
    "gigpo",
    "proas",
    "ahead",
    "stepopsd",
    *[f"{m}{keying}" for m in GRAPH for keying in ("", "-obs")],
    "oracle",
)
METRICS = ("auroc", "spearman", "neg_share")


# --------------------------------------------------------------------------------------------------------------
# Scoring functions (tested against scipy / brute force in tests/test_credit_fidelity.py)
# --------------------------------------------------------------------------------------------------------------
def rank_average(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    xs = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def auroc(score: np.ndarray, positive: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties count one half (Mann–Whitney U / n⁺n⁻). NaN without
    both classes."""
    score, positive = np.asarray(score, dtype=float), np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rank_average(score)
    return float((r[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (Pearson correlation of the average ranks); NaN when either side is constant."""
    if len(x) < 2:
        return float("nan")
    rx, ry = rank_average(x), rank_average(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / den) if den > 0 else float("nan")


def negative_share(credit: np.ndarray, harmful: np.ndarray) -> float:
    """Σ|A| over harmful steps with A < 0, divided by Σ|A| over all steps with A < 0 (NaN: no negative credit)."""
    credit, harmful = np.asarray(credit, dtype=float), np.asarray(harmful, dtype=bool)
    neg = credit < 0
    total = float(-credit[neg].sum())
    return float(-credit[neg & harmful].sum() / total) if total > 0 else float("nan")


def score_steps(credit: np.ndarray, gain: np.ndarray) -> dict[str, float]:
    """The three scores of one method on a set of exact steps: AUROC (helpful vs harmful; zero gains left out),
    Spearman with the gain (zeros included), share of negative credit on harmful steps (zeros in the denominator)."""
    credit, gain = np.asarray(credit, dtype=float), np.asarray(gain, dtype=float)
    signed = gain != 0
    return {
        "auroc": auroc(credit[signed], gain[signed] > 0),
        "spearman": spearman(credit, gain),
        "neg_share": negative_share(credit, gain < 0),
    }


def paired_bootstrap(
    groups: np.ndarray,
    credits: dict[str, np.ndarray],
    gain: np.ndarray,
    rng: np.random.Generator,
    n_boot: int,
    base: str = "grpo",
    ceiling: str = "oracle",
) -> dict[str, dict[str, tuple[float, float]]]:
    """95% percentile intervals of every method's scores and of its difference to ``base`` (``"m-grpo"``) and to
    the ``ceiling`` (``"m-oracle"``, when it was scored); each resample draws whole groups with replacement and
    scores every method on the same draw (the pairing)."""
    ids = np.unique(groups)
    rows_of = [np.flatnonzero(groups == g) for g in ids]
    draws: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _ in range(n_boot):
        pick = rng.integers(len(ids), size=len(ids))
        rows = np.concatenate([rows_of[i] for i in pick])
        g = gain[rows]
        scored = {m: score_steps(c[rows], g) for m, c in credits.items()}
        for m, s in scored.items():
            for k, v in s.items():
                draws[m][k].append(v)
                for ref in (base, ceiling):
                    if ref in scored:
                        draws[f"{m}-{ref}"][k].append(v - scored[ref][k])
    return {name: {k: _interval(v) for k, v in per.items()} for name, per in draws.items()}


def _interval(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) < 2:
        return (float("nan"), float("nan"))
    return (float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975)))


# --------------------------------------------------------------------------------------------------------------
# The envs and agents
# --------------------------------------------------------------------------------------------------------------
@dataclass
class EnvSpec:
    name: str
    env_id: str
    kwargs: dict[str, Any]
    preset: str  # preset family of the shaper configs: credit / alfworld / webshop / searchqa / sokoban
    tasks: int
    budget: int = 500
    #: what the gain is scored against: ``exact`` values (only ``VALUE_EXACT`` steps count), or τ²-bench's
    #: ``bound`` (its steps-to-go bound's change, with a step that leaves the gold path counted harmful)
    truth: str = "exact"


def env_specs(args: argparse.Namespace) -> list[EnvSpec]:
    q = args.quick
    alf = {"split": "valid_seen", "max_steps": args.alfworld_steps}
    specs = [
        EnvSpec("CreditToy", "StepGym/CreditToy-v0", {}, "credit", 4 if q else 12),
        EnvSpec(
            "CreditFamily",
            "StepGym/CreditFamily-v0",
            {"horizon": 10, "n_decisive": 3},
            "credit",
            4 if q else 12,
        ),
        EnvSpec("WebShop", "StepGym/WebShop-v0", {"split": "test"}, "webshop", 2 if q else 12),
        EnvSpec(
            "Search-QA", "StepGym/SearchQA-v0", {"dataset": "nq", "split": "test"}, "searchqa", 2 if q else 12
        ),
        EnvSpec("TextCraft", "StepGym/TextCraft-v0", {"split": "test"}, "textcraft", 4 if q else 12),
        EnvSpec(
            "ALFWorld", "StepGym/ALFWorld-v0", alf, "alfworld", 1 if q else args.alfworld_games, args.budget
        ),
        # 6x6 rooms with one box (the training rooms); exact values on every step, 20 steps (a random agent's
        # episodes run long; the noisy expert's end in a handful)
        EnvSpec(
            "Sokoban", "StepGym/Sokoban-v0", {"split": "test", "max_steps": 20}, "sokoban", 4 if q else 24
        ),
        # BabyAI-Text's GoToLocal, exact values everywhere (docs/babyai.md); 24 steps keep a group short
        EnvSpec("BabyAI", "StepGym/BabyAI-v0", {"split": "test", "max_steps": 24}, "babyai", 2 if q else 8),
        # τ²-bench's airline tasks with the deterministic stand-in user; its values are a bound (docs/tau2.md), so
        # it is scored against the bound's change, said as such (docs/credit_fidelity.md)
        EnvSpec(
            "Tau2",
            "StepGym/Tau2-v0",
            {"domain": "airline", "split": "test", "max_steps": 30},
            "tau2",
            1 if q else 8,
            truth="bound",
        ),
    ]
    only = set(filter(None, args.only.split(",")))
    return [s for s in specs if not only or s.name.lower() in only]


def no_value_envs() -> dict[str, str]:
    """Registered envs that declare no exact step values (``register(..., no_values=...)``), with their reason.

    Fidelity is scored against ``VALUE_GAIN``, so these have no rows: ``StepGym/ScienceWorld-v0`` (its state is too
    large to search; its step truth is the gold-path expert and the task score) and ``StepGym/WebShopSite-v0`` (the
    browser twin of WebShop, whose rows stand for it). The run lists them in its meta data and its output."""
    from stepgym.envs import registered_envs

    return {env_id: e.no_values for env_id, e in registered_envs().items() if e.no_values}


def pick_tasks(env: gym.Env, spec: EnvSpec) -> list[str]:
    """Evenly spread task ids (ALFWorld: round-robin over the task types, so each type gets games)."""
    ids = list(env.unwrapped.task_ids)
    if spec.name != "ALFWorld":
        return ids[:: max(1, len(ids) // spec.tasks)][: spec.tasks]
    by_type: dict[str, list[str]] = defaultdict(list)
    for t in ids:
        by_type[t.split("-")[0]].append(t)
    types = sorted(by_type)
    out: list[str] = []
    while len(out) < min(spec.tasks, len(ids)):
        for ty in types:
            k = sum(o.split("-")[0] == ty for o in out)
            if k < len(by_type[ty]) and len(out) < spec.tasks:
                out.append(by_type[ty][k * 7 % len(by_type[ty])])
    return out


class SearchQANoise:
    """The noisy expert on Search-QA, which lists no admissible actions: an error is a search for three random
    words of the question or (when ``answers``) a one-word guess (stated in docs/credit_fidelity.md).
    ``benchmarks/fault_injection.py`` uses it with ``answers=False``, so its errors never end an episode."""

    def __init__(self, error_rate: float, seed: int, *, answers: bool = True):
        self.error_rate, self.rng, self.answers = error_rate, np.random.default_rng(seed), answers

    def reset(self) -> None:
        return None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        expert = info.get(schema.EXPERT_ACTION) or "<answer>unknown</answer>"
        if self.rng.random() >= self.error_rate:
            return expert
        words = str(info.get(schema.GOAL) or observation).split() or ["nothing"]
        pick = [words[int(i)] for i in self.rng.integers(len(words), size=3)]
        if self.answers and self.rng.random() >= 0.5:
            return f"<answer>{pick[0]}</answer>"
        return f"<search>{' '.join(pick)}</search>"


class Tau2Noise:
    """The noisy gold agent on τ²-bench, which lists no admissible actions (a message is free text): with
    probability 1 − e the expert's next action (a gold call, or the closing message); otherwise one of three errors,
    equally likely: a tool of the domain (from the tool list in the goal) with its required arguments drawn from the
    values the expert's calls used so far, else made-up ids (mostly an invalid call, sometimes a needless read or a
    wrong write); the expert's call with one argument changed; or a message to the user that asks nothing useful.
    The random agent is this agent with e = 1 (stated in docs/credit_fidelity.md)."""

    MESSAGES = ("Could you tell me a bit more about that?", "One moment, please.", "Thanks for waiting.")

    def __init__(self, error_rate: float, seed: int):
        self.error_rate, self.rng = error_rate, np.random.default_rng(seed)
        self.values: dict[str, list[Any]] = {}
        self.tools: dict[str, list[str]] = {}

    def reset(self) -> None:
        self.values, self.tools = {}, {}

    def _read_tools(self, goal: str) -> None:
        if self.tools or "<tools>" not in goal:
            return
        for line in goal.split("<tools>", 1)[1].split("</tools>", 1)[0].splitlines():
            if line.strip():
                fn = json.loads(line)["function"]
                self.tools[fn["name"]] = list(fn.get("parameters", {}).get("required") or [])

    def _value(self, key: str) -> Any:
        seen = self.values.get(key) or []
        if seen and self.rng.random() < 0.7:
            return seen[int(self.rng.integers(len(seen)))]
        return f"{key.split('_')[0]}_{int(self.rng.integers(1000))}"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        from stepgym.envs.tau2.calls import call_text

        self._read_tools(str(info.get(schema.GOAL) or ""))
        expert = info.get(schema.EXPERT_ACTION)
        call = json.loads(expert) if isinstance(expert, str) and expert.startswith("{") else None
        for k, v in (call or {}).get("arguments", {}).items():
            if isinstance(v, (str, int, float)) and v not in self.values.setdefault(k, []):
                self.values[k].append(v)
        if expert and self.rng.random() >= self.error_rate:
            return str(expert)
        pick = int(self.rng.integers(3))
        if pick == 0 and self.tools:
            names = sorted(self.tools)
            name = names[int(self.rng.integers(len(names)))]
            return call_text(name, {k: self._value(k) for k in self.tools[name]})
        if pick == 1 and call and call["arguments"]:
            keys = sorted(call["arguments"])
            k = keys[int(self.rng.integers(len(keys)))]
            return call_text(call["name"], {**call["arguments"], k: self._value(k + "_other")})
        return self.MESSAGES[int(self.rng.integers(len(self.MESSAGES)))]


def make_agents(kind: str, spec: EnvSpec, n: int, seed: int, llm: Any = None) -> list[Any]:
    if kind == "llm":
        return [llm() for _ in range(n)]
    if spec.name == "Tau2":
        e = 1.0 if kind == "random" else float(kind.split("-")[1])
        return [Tau2Noise(e, seed + i) for i in range(n)]
    if kind == "random":
        return [RandomAgent(seed + i) for i in range(n)]
    e = float(kind.split("-")[1])
    if spec.name == "Search-QA":
        return [SearchQANoise(e, seed + i) for i in range(n)]
    return [NoisyExpertAgent(e, seed + i) for i in range(n)]


def behaviour_probs(kind: str, info: dict[str, Any]) -> tuple[list[str], np.ndarray]:
    """The acting policy's distribution over the state's admissible actions (the stand-in's π_old)."""
    acts = list(info.get(schema.ADMISSIBLE_ACTIONS) or [])
    expert = info.get(schema.EXPERT_ACTION)
    if expert and expert not in acts:
        acts.append(expert)
    if not acts:
        return [], np.zeros(0)
    if kind.startswith("noisy-") and expert and len(acts) > 1:
        e = float(kind.split("-")[1])
        p = np.array([1.0 - e if a == expert else e / (len(acts) - 1) for a in acts])
    else:
        p = np.full(len(acts), 1.0 / len(acts))
    return acts, p


# --------------------------------------------------------------------------------------------------------------
# Rollouts: one GroupEnv per env, one group per (task, agent kind)
# --------------------------------------------------------------------------------------------------------------
@dataclass
class Group:
    env: str
    task_id: str
    task_type: str
    kind: str
    trajs: list[schema.Trajectory] = field(default_factory=list)


def play_group(genv: GroupEnv, agents: list[Any], task_id: str, seed: int, prompts: bool) -> list:
    obs, infos = genv.reset(seed=seed, options={"task_id": task_id})
    for a in agents:
        a.reset()
    while genv.agents:
        acts = {}
        for name in genv.agents:
            agent = agents[int(name.rsplit("_", 1)[1])]
            seen = genv.env_of(name).get_wrapper_attr("prompt") if prompts else obs[name]
            acts[name] = agent.act(seen, infos[name])
        obs, _, _, _, infos = genv.step(acts)
    return list(genv.trajectories)


def collect(spec: EnvSpec, args: argparse.Namespace, kinds: list[str], llm: Any) -> list[Group]:
    wrappers: list[Any] = [lambda e: ValueWrapper(e, budget=spec.budget)]
    probe = gym.make(spec.env_id, **spec.kwargs)
    tasks = pick_tasks(probe, spec)
    out: list[Group] = []
    for kind in kinds:
        text = kind == "llm"
        ws = wrappers + (text_wrappers(spec) if text else [])
        # failure semantics (docs/failures.md): an env failure aborts that rollout's episode, which is left out of
        # the scores (its steps have no credit to compare), and the benchmark goes on
        genv = GroupEnv(
            spec.env_id,
            group_size=args.group,
            env_kwargs=spec.kwargs,
            wrappers=ws,
            config=GroupConfig(on_failure="abort"),
        )
        aborted: dict[str, int] = {}
        for ti, task in enumerate(tasks):
            seed = 1000 * ti + 17 * len(out)
            agents = make_agents(kind, spec, args.group, seed, llm)
            trajs = play_group(genv, agents, task, seed, text)
            for t in trajs:
                if t.aborted:
                    cause = t.abort_cause or "aborted"
                    aborted[cause] = aborted.get(cause, 0) + 1
            finished = [t for t in trajs if not t.aborted]
            if not finished:
                continue
            ttype = str(finished[0].initial_info.get(schema.TASK_TYPE) or "")
            out.append(Group(spec.name, task, ttype, kind, finished))
        genv.close()
        if aborted:
            causes = ", ".join(f"{n} {c}" for c, n in sorted(aborted.items()))
            print(
                f"credit_fidelity: {spec.name} ({kind}): episodes aborted and left out: {causes}",
                file=sys.stderr,
            )
    return out


def text_wrappers(spec: EnvSpec) -> list[Any]:
    from stepgym.wrappers.feedback import EnvFeedbackWrapper
    from stepgym.wrappers.text import TextInterfaceWrapper, resolve_format

    fmt = resolve_format(spec.env_id, "")
    return [EnvFeedbackWrapper, lambda e: TextInterfaceWrapper(e, fmt=fmt)]


def endpoint_agent(args: argparse.Namespace) -> Any:
    """A factory of :class:`~stepgym.llm_eval.LLMAgent` on ``--base-url`` (None without ``--model``)."""
    if not args.model:
        return None
    from stepgym.llm_client import ChatClient
    from stepgym.llm_eval import LLMAgent, Sampling

    client = ChatClient(
        base_url=args.base_url, model=args.model, api_key=os.environ.get("OPENAI_API_KEY", "")
    )
    sampling = Sampling(temperature=args.temperature, max_tokens=args.max_tokens, seed=0)
    return lambda: LLMAgent(client, sampling)


# --------------------------------------------------------------------------------------------------------------
# Each shaper's per-step credit on the collected groups
# --------------------------------------------------------------------------------------------------------------
def shaper_config(spec: EnvSpec, method: str) -> tuple[str, Any]:
    """The env's own preset when there is one (``webshop-gigpo``, ``searchqa-graphgpo``), else ALFWorld's (the
    credit envs: ``credit-*``, ``alfworld-graphgpo``); a graph base's ``-obs`` variant has its preset (only the
    keying differs); the ceiling ``oracle`` is the shaper preset of that name (no trainer preset: it reads
    labels)."""
    method = method.removesuffix("-obs")
    if method == "oracle":
        return "oracle", ShapeConfig.from_preset("oracle")
    name = f"{spec.preset}-{method}"
    if name not in TRAINER_PRESETS:
        name = f"alfworld-{method}"
    return name, get_preset(name).shaper


@dataclass
class Rows:
    """The flat per-step arrays of one env's groups (a row = a step, rows of a trajectory in time order)."""

    group: list[int] = field(default_factory=list)
    traj: list[int] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    anchor: list[str] = field(default_factory=list)
    next_anchor: list[str] = field(default_factory=list)  # the state key after the step
    obs: list[str] = field(default_factory=list)  # the observation text before the step
    next_obs: list[str] = field(default_factory=list)  # and after it
    done: list[bool] = field(default_factory=list)  # the episode ended on this step (not cut by the horizon)
    gain: list[float] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    task_type: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    won: list[bool] = field(default_factory=list)


#: τ²-bench's sub-goal key once the databases left the gold path (a write the gold path never makes)
OFF_GOLD_PATH = "off_gold_path"


def bound_gain(pre: dict[str, Any], info: dict[str, Any]) -> float | None:
    """The truth of a step on an env scored against its bound (``EnvSpec.truth == "bound"``, τ²-bench): the bound's
    gain (``VALUE_GAIN``: the steps-to-go bound's decrease, −1 for an episode ended lost), and −1 for the step
    that leaves the gold path (where the bound becomes unknown and the gain rule makes no claim)."""
    left = pre.get(schema.SUBGOAL_KEY) != OFF_GOLD_PATH and info.get(schema.SUBGOAL_KEY) == OFF_GOLD_PATH
    if left:
        return -1.0
    if pre.get(schema.SUBGOAL_KEY) == OFF_GOLD_PATH:
        return None  # off the gold path: no bound, no claim
    gain = info.get(schema.VALUE_GAIN)
    return None if gain is None else float(gain)


def flatten(groups: list[Group], truth: str = "exact") -> Rows:
    r = Rows()
    for gi, g in enumerate(groups):
        for ti, t in enumerate(g.trajs):
            for pre, step in zip(t.infos()[: len(t.steps)], t.steps, strict=True):
                r.group.append(gi)
                r.traj.append(gi * 1000 + ti)
                r.reward.append(float(step.reward))
                r.valid.append(bool(step.info.get(schema.ADMISSIBLE, True)))
                r.anchor.append(str(pre.get(schema.STATE_KEY)))
                r.next_anchor.append(str(step.info.get(schema.STATE_KEY)))
                r.obs.append(step.observation)
                r.next_obs.append(step.next_observation)
                r.done.append(bool(step.terminated))
                if truth == "bound":
                    gain = bound_gain(pre, step.info)
                    r.exact.append(gain is not None)  # "exact" here: scored against the bound
                else:
                    gain = step.info.get(schema.VALUE_GAIN)
                    r.exact.append(bool(step.info.get(schema.VALUE_EXACT)) and gain is not None)
                r.gain.append(float("nan") if gain is None else float(gain))
                r.task_type.append(g.task_type)
                r.kind.append(g.kind)
                r.won.append(t.success)
    return r


def acted(step: schema.Step, kind: str) -> str:
    """The env action of a step: for a model's reply the text interface's parsed action, else the action played
    (Search-QA writes its own ``PARSED_ACTION`` in another form, so only the model's groups read it)."""
    parsed = step.info.get(schema.PARSED_ACTION) if kind == "llm" else None
    return str(parsed) if isinstance(parsed, str) and parsed else str(step.action)


def proas_labels(spec: EnvSpec, groups: list[Group]) -> tuple[np.ndarray, np.ndarray]:
    """Rea/PA labels of every step against an ARG seeded with the env's expert on each task (not grown)."""
    graph = AgenticReferenceGraph()
    env = ValueWrapper(gym.make(spec.env_id, **spec.kwargs), budget=spec.budget, enabled=False)
    seed_graph_from_expert(graph, env, sorted({g.task_id for g in groups}), seed=0)
    rea: list[bool] = []
    pa: list[bool] = []
    for g in groups:
        for t in g.trajs:
            keys = [default_state_key(t.initial_info)] + [default_state_key(s.info) for s in t.steps]
            lab = graph.label_path(g.task_id, keys, [acted(s, g.kind) for s in t.steps])
            rea += lab.reasonable
            pa += lab.progress
    return np.array(rea, dtype=bool), np.array(pa, dtype=bool)


def gap(kind: str, pre: dict[str, Any], action: str, named: str | None, strength: float) -> float:
    """δ = log π_teacher(a) − log π_old(a) of the stand-in teacher (π_old plus ``strength`` on ``named``)."""
    acts, p = behaviour_probs(kind, pre)
    if named is None or not len(acts):
        return 0.0
    bonus = np.array([same_action(a, named) for a in acts], dtype=float)
    z = np.log(np.maximum(p, 1e-12)) + strength * bonus
    log_t = z - np.log(np.exp(z - z.max()).sum()) - z.max()
    hit = [i for i, a in enumerate(acts) if same_action(action, a)]
    if not hit:  # an action outside the list (an unparsed reply): only the normaliser moves
        return float(-np.log(np.exp(z - z.max()).sum()) - z.max())
    i = hit[0]
    return float(log_t[i] - np.log(max(p[i], 1e-12)))


def ahead_gaps(groups: list[Group], strength: float) -> np.ndarray:
    analyzer = OracleAnalyzer()
    out: list[float] = []
    for g in groups:
        for t in g.trajs:
            errors = set() if t.success else set(analyzer.analyze(t).error_steps)
            for i, (pre, s) in enumerate(zip(t.infos()[: len(t.steps)], t.steps, strict=True)):
                named = pre.get(schema.EXPERT_ACTION) if i in errors else None
                out.append(gap(g.kind, pre, acted(s, g.kind), named, strength))
    return np.array(out)


def stepopsd_gaps(groups: list[Group], strength: float) -> np.ndarray:
    out: list[float] = []
    for g in groups:
        peers = first_correct_peers([t.success for t in g.trajs], [0] * len(g.trajs))
        for t, peer in zip(g.trajs, peers.tolist(), strict=True):
            seen: dict[str, str] = {}
            if peer != NO_PEER:
                p = g.trajs[peer]
                seen = {
                    str(i.get(schema.STATE_KEY)): acted(s, g.kind)
                    for i, s in zip(p.infos()[: len(p.steps)], p.steps, strict=True)
                }
            for pre, s in zip(t.infos()[: len(t.steps)], t.steps, strict=True):
                named = seen.get(str(pre.get(schema.STATE_KEY)))
                out.append(gap(g.kind, pre, acted(s, g.kind), named, strength))
    return np.array(out)


def credits(spec: EnvSpec, groups: list[Group], rows: Rows, strength: float) -> dict[str, np.ndarray]:
    """method → per-step advantage (N,), from ``shape_advantages`` with one token per step."""
    n = len(rows.reward)
    out: dict[str, np.ndarray] = {}
    for method in METHODS:
        _, cfg = shaper_config(spec, method)
        batch = StepBatch(
            group_ids=rows.group,
            traj_ids=rows.traj,
            rewards=rows.reward,
            valid=rows.valid,
            anchor_obs=rows.anchor,
            layout=TokenLayout.from_step_rows(np.ones((n, 1))),
        )
        if method == "proas":
            batch.reasonable, batch.progress = proas_labels(spec, groups)
        if method == "ahead":
            batch.delta = ahead_gaps(groups, strength)[:, None]
        if method == "stepopsd":
            batch.delta = stepopsd_gaps(groups, strength)[:, None]
            batch.target = batch.layout if cfg.step_norm is not None else None
        if method.removesuffix("-obs") in (*GRAPH, "oracle"):
            graph_inputs(batch, rows, obs_keyed=method.endswith("-obs"))
        out[method] = shape_advantages(batch, cfg).token_advantages[:, 0]
    return out


def graph_inputs(batch: StepBatch, rows: Rows, obs_keyed: bool) -> None:
    """What the graph / history bases and the ceiling read: the state before and after each step (stepgym's
    ``STATE_KEY``, or with ``obs_keyed`` the observation text, as their public code keys states), whether the
    episode ended there, and the true gain (``VALUE_GAIN``; 0.0 where the label is unknown: the gain rule's
    "no claim", and such steps are not scored)."""
    if obs_keyed:
        batch.anchor_obs, batch.next_obs = list(rows.obs), list(rows.next_obs)
    else:
        batch.anchor_obs, batch.next_obs = list(rows.anchor), list(rows.next_anchor)
    batch.dones = list(rows.done)
    batch.true_gain = np.nan_to_num(np.array(rows.gain, dtype=float), nan=0.0)


# --------------------------------------------------------------------------------------------------------------
# Grouping diagnostics: how the step groups the methods build compare with the exact state
# --------------------------------------------------------------------------------------------------------------
#: keying → (the methods that build their step groups with it, similarity clustering)
KEYINGS = {
    "state key": ("gigpo, graphgpo, hgpo, rewardflow, g2po", False),
    "observation text": ("graphgpo-obs, hgpo-obs, rewardflow-obs, g2po-obs (GiGPO's public code)", False),
    "observation text, similarity ≥ 0.95": ("GiGPO's similarity mode", True),
}


def group_stats(codes: np.ndarray, exact: list[str]) -> dict[str, float]:
    """Of step groups ``codes`` (N,): the share of rows alone in their group, and the purity against the exact
    state (the share of rows whose exact state is their group's most common one)."""
    codes = np.asarray(codes)
    sizes = np.bincount(codes)
    majority: dict[int, int] = {}
    counts: dict[tuple[int, str], int] = defaultdict(int)
    for c, e in zip(codes.tolist(), exact, strict=True):
        counts[(c, e)] += 1
        majority[c] = max(majority.get(c, 0), counts[(c, e)])
    return {
        "rows": len(codes),
        "groups": len(sizes[sizes > 0]),
        "singleton_share": float((sizes[codes] == 1).mean()) if len(codes) else float("nan"),
        "purity": float(sum(majority.values()) / len(codes)) if len(codes) else float("nan"),
    }


def grouping(spec: EnvSpec, rows: Rows) -> list[dict]:
    """Per keying: step groups within each episode group as GiGPO builds them (``build_step_groups``), their
    singleton share and purity against the exact state (``STATE_KEY``, which stepgym's envs fill exactly)."""
    from stepgym.shapers import build_step_groups

    out = []
    for keying, (methods, similar) in KEYINGS.items():
        keys = rows.anchor if keying == "state key" else rows.obs
        codes = build_step_groups(rows.group, keys, similarity=similar, tau=0.95)
        out.append(
            {"env": spec.name, "keying": keying, "methods": methods, **group_stats(codes, rows.anchor)}
        )
    return out


def grouping_table(rows: list[dict]) -> str:
    """docs/credit_fidelity.md's grouping table: one row per (env, keying)."""
    lines = [
        "| env | keying (used by) | step rows | step groups | rows in singleton groups | purity vs exact state |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['keying']} ({r['methods']}) | {r['rows']} | {r['groups']} | "
            f"{r['singleton_share']:.1%} | {r['purity']:.3f} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Scores per env and subset, the results file, the table and the plot
# --------------------------------------------------------------------------------------------------------------
def subsets(spec: EnvSpec, rows: Rows) -> dict[str, np.ndarray]:
    """Row masks: the whole env, each agent kind, and for ALFWorld each task type."""
    kinds, types = np.array(rows.kind), np.array(rows.task_type)
    out = {"all": np.ones(len(kinds), dtype=bool)}
    if spec.name == "ALFWorld":
        out.update({f"type:{t}": types == t for t in sorted(set(rows.task_type))})
    out.update({f"agent:{k}": kinds == k for k in dict.fromkeys(rows.kind)})
    return out


def score_env(spec: EnvSpec, rows: Rows, cred: dict[str, np.ndarray], args: argparse.Namespace) -> list[dict]:
    gain, exact, group = np.array(rows.gain), np.array(rows.exact), np.array(rows.group)
    out = []
    rng = np.random.default_rng(args.seed)
    for name, mask in subsets(spec, rows).items():
        m = mask & exact
        if m.sum() < 2:
            continue
        g = gain[m]
        c = {k: v[m] for k, v in cred.items()}
        ci = paired_bootstrap(group[m], c, g, rng, args.boot)
        row = {
            "env": spec.name,
            "subset": name,
            "truth": spec.truth,
            "steps": int(mask.sum()),
            "exact_steps": int(m.sum()),
            "harmful": int((g < 0).sum()),
            "helpful": int((g > 0).sum()),
            "zero": int((g == 0).sum()),
            "groups": len(np.unique(group[m])),
            "presets": {k: shaper_config(spec, k)[0] for k in METHODS},
            "scores": {k: score_steps(v, g) for k, v in c.items()},
            "ci": ci,
        }
        out.append(row)
    return out


def fmt_cell(v: float, ci: tuple[float, float]) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def table(results: list[dict], metric: str, subset_prefix: str = "all", diff: bool = False) -> str:
    """A markdown table: one row per (env, subset) whose subset starts with ``subset_prefix``; ``diff``: each
    method minus GRPO with its paired interval."""
    present = methods_in(results)
    methods = [m for m in present if m != "grpo"] if diff else present
    names = [f"{m} − grpo" for m in methods] if diff else methods
    head = "| env | subset | exact steps (−/0/+) | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (3 + len(methods))]
    for r in results:
        if not r["subset"].startswith(subset_prefix):
            continue
        sc = r["scores"]
        cells = [
            fmt_cell(sc[m][metric] - sc["grpo"][metric], r["ci"][f"{m}-grpo"][metric])
            if diff
            else fmt_cell(sc[m][metric], r["ci"][m][metric])
            for m in methods
        ]
        counts = f"{r['exact_steps']} ({r['harmful']}/{r['zero']}/{r['helpful']})"
        lines.append(f"| {r['env']} | {r['subset']} | {counts} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def methods_in(results: list[dict]) -> list[str]:
    """The methods a results file scored, in ``METHODS`` order (an older file has fewer)."""
    scored = {m for r in results for m in r["scores"]}
    return [m for m in METHODS if m in scored]


NAMES = {
    "auroc": "AUROC (helpful vs harmful)",
    "spearman": "Spearman with the gain",
    "neg_share": "negative-credit share on harmful steps",
}


def report_tables(results: list[dict]) -> str:
    """The README's tables: each score over every env (subset ``all``), then AUROC per ALFWorld task type."""
    parts = [f"**{NAMES[m]}**\n\n{table(results, m, 'all')}" for m in METRICS]
    parts.append(f"**AUROC, each method minus GRPO (paired)**\n\n{table(results, 'auroc', 'all', diff=True)}")
    parts.append(f"**AUROC per ALFWorld task type**\n\n{table(results, 'auroc', 'type:')}")
    return "\n\n".join(parts)


def env_method_table(results: list[dict], env: str, subset: str = "all") -> str:
    """One env's scores, one row per method: AUROC, its paired difference to GRPO, Spearman and the negative-credit
    share, each with its interval (docs/credit_fidelity.md's τ²-bench table)."""
    r = next(x for x in results if x["env"] == env and x["subset"] == subset)
    sc, ci = r["scores"], r["ci"]
    lines = [
        f"{env}, {subset}: {r['exact_steps']} scored steps ({r['harmful']} harmful / {r['zero']} zero / "
        f"{r['helpful']} helpful) in {r['groups']} groups; truth: {r.get('truth', 'exact')}",
        "",
        "| method | AUROC | AUROC − GRPO | Spearman | negative-credit share on harmful steps |",
        "|---|---|---|---|---|",
    ]
    for m in methods_in([r]):
        diff = (
            fmt_cell(sc[m]["auroc"] - sc["grpo"]["auroc"], ci[f"{m}-grpo"]["auroc"]) if m != "grpo" else "—"
        )
        cells = [fmt_cell(sc[m]["auroc"], ci[m]["auroc"]), diff]
        cells += [fmt_cell(sc[m][k], ci[m][k]) for k in ("spearman", "neg_share")]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def method_table(results: list[dict], metric: str, subset: str = "all", ref: str = "") -> str:
    """One row per method, one column per env (its ``subset`` row): the score with its interval, or with ``ref``
    (``"grpo"``, ``"oracle"``) each method minus ``ref`` with its paired interval."""
    rows = [r for r in results if r["subset"] == subset]
    head = "| method | " + " | ".join(f"{r['env']} ({r['exact_steps']} steps)" for r in rows) + " |"
    lines = [head, "|" + "---|" * (1 + len(rows))]
    for m in methods_in(results):
        if ref and m == ref:
            continue
        cells = []
        for r in rows:
            sc = r["scores"]
            if ref:
                key = f"{m}-{ref}"
                ok = ref in sc and key in r["ci"]
                cells.append(fmt_cell(sc[m][metric] - sc[ref][metric], r["ci"][key][metric]) if ok else "—")
            else:
                cells.append(fmt_cell(sc[m][metric], r["ci"][m][metric]))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def docs_tables(results: list[dict]) -> str:
    """docs/credit_fidelity.md's tables: every method per env for each score, then the paired differences of
    AUROC and Spearman to GRPO and to the ceiling (``oracle``)."""
    parts = [f"**{NAMES[m]}**\n\n{method_table(results, m)}" for m in METRICS]
    for metric in ("auroc", "spearman"):
        for ref, what in (("grpo", "GRPO"), ("oracle", "the ceiling (oracle)")):
            label = f"{NAMES[metric]}, each method minus {what} (paired)"
            parts.append(f"**{label}**\n\n{method_table(results, metric, ref=ref)}")
    return "\n\n".join(parts)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r["subset"] == "all" or r["subset"].startswith("type:")]
    height = (0.1 * len(methods_in(rows)) + 0.3) * len(rows) + 1.6
    fig, axes = plt.subplots(1, len(METRICS), figsize=(15, height), sharey=True)
    y = np.arange(len(rows))
    for ax, metric in zip(axes, METRICS, strict=True):
        present = methods_in(rows)
        for j, m in enumerate(present):
            v = np.array([r["scores"][m][metric] for r in rows], dtype=float)
            lo = np.array([r["ci"][m][metric][0] for r in rows], dtype=float)
            hi = np.array([r["ci"][m][metric][1] for r in rows], dtype=float)
            off = (j - (len(present) - 1) / 2) * 0.6 / len(present)
            ax.errorbar(v, y + off, xerr=[np.abs(v - lo), np.abs(hi - v)], fmt="o", ms=3, label=m, capsize=0)
        if (
            metric != "neg_share"
        ):  # chance: AUROC 0.5, rho 0 (the share's chance level is the harmful base rate)
            ax.axvline(0.5 if metric == "auroc" else 0.0, color="grey", lw=0.6, ls="--")
        ax.set_title(NAMES[metric], fontsize=9)
    axes[0].set_yticks(y, [f"{r['env']} {r['subset'].replace('type:', '')}" for r in rows], fontsize=7)
    axes[0].invert_yaxis()
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(
        "Credit fidelity: per-step advantages vs true value gain (exact steps; 95% paired bootstrap)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="tiny run (the test's smoke run)")
    ap.add_argument("--out", default="runs/credit_fidelity", help="folder for results.json, tables.md, plot")
    ap.add_argument("--group", type=int, default=4, help="rollouts per group (G)")
    ap.add_argument("--error-rates", default="0.1,0.3,0.5", help="the noisy expert's error rates")
    ap.add_argument("--no-random", action="store_true", help="leave out the random agent's groups")
    ap.add_argument("--alfworld-games", type=int, default=18, help="ALFWorld games (round-robin over types)")
    ap.add_argument("--alfworld-steps", type=int, default=15, help="ALFWorld's step limit in these rollouts")
    ap.add_argument(
        "--budget", type=int, default=500, help="ALFWorld's value search budget (the wrapper's default)"
    )
    ap.add_argument("--hint-strength", type=float, default=3.0, help="the stand-in teacher's logit bonus")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated envs: credittoy,creditfamily,webshop,search-qa,textcraft,alfworld,sokoban,babyai,tau2",
    )
    ap.add_argument("--model", default="", help="also play groups with this model behind --base-url")
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://localhost:8000/v1"))
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--record", default="", help="also write the groups and credits for `stepgym view` here")
    ap.add_argument("--report-only", default="", help="rebuild tables.md and the plot from this results.json")
    ap.add_argument("--plot", default="", help="where to write the plot (default: <out>/credit_fidelity.png)")
    args = ap.parse_args(argv)
    if args.quick:
        args.group, args.boot, args.alfworld_steps, args.budget = 3, 100, 8, 50
        args.error_rates = (
            "0.3" if not args.error_rates or args.error_rates == "0.1,0.3,0.5" else args.error_rates
        )
    return args


def record(folder: Path, groups: list[Group], cred: dict[str, np.ndarray]) -> None:
    """Write the groups with every method's per-step credit as a recording ``stepgym view`` opens (the value keys
    are schema keys, so they travel in each step's info and the viewer shows them beside the credit)."""
    from stepgym.recording import GroupRecorder

    rec = GroupRecorder(folder, meta={"method": "credit_fidelity", "shapers": list(METHODS)})
    row = 0
    for gi, g in enumerate(groups):
        adv: dict[str, list[list[float]]] = {m: [] for m in METHODS}
        for t in g.trajs:
            for m in METHODS:
                adv[m].append([float(x) for x in cred[m][row : row + len(t.steps)]])
            row += len(t.steps)
        rec.record_trajectories(
            g.trajs, iteration=0, group=gi, successes=[t.success for t in g.trajs], advantages=adv
        )
    rec.writer.close()


def run_env(
    spec: EnvSpec, args: argparse.Namespace, kinds: list[str], llm: Any
) -> tuple[list[dict], list[dict]]:
    t0 = time.perf_counter()
    groups = collect(spec, args, kinds, llm)
    rows = flatten(groups, spec.truth)
    cred = credits(spec, groups, rows, args.hint_strength)
    out = score_env(spec, rows, cred, args)
    diagnostics = grouping(spec, rows)
    if args.record:
        record(Path(args.record) / spec.name, groups, cred)
    print(
        f"{spec.name:12s} {len(groups)} groups, {len(rows.gain)} steps, {sum(rows.exact)} exact, "
        f"{time.perf_counter() - t0:.0f}s",
        flush=True,
    )
    return out, diagnostics


def write_reports(data: dict, out: Path, plot_path: str) -> None:
    results = data["results"]
    tables = "\n\n".join(f"### {NAMES[m]}\n\n{table(results, m, '')}" for m in METRICS)
    docs = "\n\n## docs/credit_fidelity.md\n\n" + docs_tables(results)
    if data.get("grouping"):
        docs += "\n\n**Step groups against the exact state**\n\n" + grouping_table(data["grouping"])
    (out / "tables.md").write_text(tables + "\n\n## README\n\n" + report_tables(results) + docs + "\n")
    try:
        plot(results, Path(plot_path) if plot_path else out / "credit_fidelity.png")
    except ImportError:
        print("matplotlib not installed: no plot")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        data = json.loads(Path(args.report_only).read_text())
        write_reports(data, out, args.plot)
        print(report_tables(data["results"]))
        return 0
    kinds = [f"noisy-{float(e):g}" for e in args.error_rates.split(",") if e]
    kinds += [] if args.no_random else ["random"]
    llm = endpoint_agent(args)
    kinds += ["llm"] if llm else []
    t0 = time.perf_counter()
    results: list[dict] = []
    diagnostics: list[dict] = []
    skipped: list[str] = []
    for env_id, why in no_value_envs().items():
        print(f"{env_id} excluded (no exact step values): {why}", flush=True)
    for spec in env_specs(args):
        try:
            scored, grouped = run_env(spec, args, kinds, llm)
            results += scored
            diagnostics += grouped
        except Exception as exc:  # an env whose data is missing: say so, go on with the others
            if type(exc).__name__ not in ("DataNotFoundError", "DependencyNotInstalled"):
                raise
            skipped.append(f"{spec.name}: {exc}")
            print(f"{spec.name:12s} skipped: {exc}", flush=True)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "args": {k: v for k, v in vars(args).items()},
        "agents": kinds,
        "wall_s": round(time.perf_counter() - t0, 1),
        "load_avg": os.getloadavg()[0],
        "skipped": skipped,
        "no_values": no_value_envs(),
    }
    data = {"meta": meta, "results": results, "grouping": diagnostics}
    (out / "results.json").write_text(json.dumps(data, indent=1))
    write_reports(data, out, args.plot)
    print(table(results, "auroc"))
    print(f"wall {meta['wall_s']}s, load {meta['load_avg']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
