"""Which step credit makes an agent learn faster on a real benchmark? Every shaper trains the same learner on the
same tasks and seeds, beside the learning curve of the ceiling (the outcome term plus each step's true drop in
optimal steps-to-go).

The envs are rows of :data:`ENVS` (env id, training split, held-out splits, step limit, feature set, learning
rate, warm start): ALFWorld (native engine; trained on its ``train`` games, evaluated on ``valid_seen`` and
``valid_unseen``, which are never trained on), Sokoban, TextCraft, BabyAI and WebShop text (trained on ``train``,
evaluated on ``test``). A new env is one more row. The default run is ALFWorld and Sokoban; ``--full`` runs every
row.

**The learner** (docs/learning_study.md says why): a softmax policy over the env's admissible actions
(``schema.ADMISSIBLE_ACTIONS``), logit(a) = Σ w[f] over sparse indicator features f of (goal, observation,
action) text and two facts an agent's history holds (the object it carries, whether it took this action before),
plus the env's own feature set (:data:`EXTRA_FEATURES`: Sokoban's grid, BabyAI's goal object, TextCraft's recipe
tree, WebShop's result titles), zero-initialised (uniform), NumPy/Python only, trained by the policy gradient with
the per-step advantages, token-mean aggregation (one "token" per step). The same learner, learning rate and budget
for every method of an env; the learning rate of each env was chosen on GRPO alone on seeds that are not reported
(``benchmarks/learning_study_lr.py``).

**The advantages** come from stepgym's own :func:`stepgym.shapers.shape_advantages` on the batch the bundled
trainer builds (:func:`stepgym.steps.row.rows_step_batch` over :class:`~stepgym.steps.row.StepRow`
rows, one token per step, the preset's reward scale and invalid rule), with the env's trainer-preset shaper
configs where they exist and ALFWorld's otherwise, as ``benchmarks/credit_fidelity.py`` picks them; Dr.GRPO is
the GRPO preset with ``base="drgrpo"``. The method list is ``credit_study.METHODS`` plus ``drgrpo``.
AHEAD's and StepOPSD's teachers are *modelled* as ``benchmarks/credit_study.py`` models them: the teacher's
logits are the policy's (AHEAD: θ_old; StepOPSD: a stale copy refreshed every 10 updates) plus
``--hint-strength`` on the action the privileged text names (AHEAD: the env's expert action, on the steps of
failed trajectories that left it; StepOPSD: the action the group's first successful peer took in the same
state). ProAS labels come from an ``AgenticReferenceGraph`` seeded with the env's expert on the training tasks and
grown with the policy's wins. The ceiling ``oracle`` reads ``VALUE_GAIN`` of :class:`stepgym.wrappers.ValueWrapper`.

**Per cell** (env × method × seed) it records the held-out success (sampled policy, fixed evaluation seed, the
same tasks for every method) at iteration 0 (untrained) and every ``--eval-every`` iterations, the training
success per iteration, and the wall time. One finished cell is one JSON line appended to ``<out>/cells.jsonl``; a
rerun skips finished cells (a torn last line is dropped). The report (tables, curves, the fidelity correlation)
is rebuilt from that file by ``benchmarks/learning_study_stats.py`` (paired differences to GRPO and to the ceiling,
Student-t intervals, Holm per family, the discovery/confirmation rule), written as ``summary.md`` and
``claims.json``.

    python benchmarks/learning_study.py --out runs/learning                   # default run (≤ 60 min, 2 cores)
    python benchmarks/learning_study.py --full --out runs/learning_full       # the full sweep (resumable)
    python benchmarks/learning_study.py --report-only --out /tmp/ls \
        --cells benchmarks/results/learning_study_2026-12-06b_cells.jsonl.gz  # the committed figures
    python benchmarks/learning_study_llm.py ...                              # the second learner: the bundled trainer
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import multiprocessing as mp
import re
import sys
import time
import zlib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (str(REPO), str(REPO / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import credit_study as cs  # noqa: E402
import gymnasium as gym  # noqa: E402
import learning_study_stats as st  # noqa: E402

import stepgym  # noqa: E402, F401  (registers the envs)
from stepgym import schema  # noqa: E402
from stepgym.graph_seeding import seed_graph_from_expert  # noqa: E402
from stepgym.reference_graph import AgenticReferenceGraph  # noqa: E402
from stepgym.shapers import ShapeConfig, StepBatch, shape_advantages  # noqa: E402
from stepgym.steps.record import step_annotations  # noqa: E402
from stepgym.steps.row import StepRow, rows_step_batch  # noqa: E402
from stepgym.trainers.presets import TRAINER_PRESETS, get_preset  # noqa: E402
from stepgym.wrappers import ValueWrapper  # noqa: E402
from stepgym.wrappers.hints import same_action  # noqa: E402

CEILING = "oracle"
#: credit_study's methods (GRPO, GiGPO, ProAS, AHEAD, StepOPSD, the graph bases with both keyings, the ceiling)
#: with Dr.GRPO after GRPO
METHODS = ("grpo", "drgrpo", *cs.METHODS[1:])


@dataclass(frozen=True)
class EnvRow:
    """One env of the study: a new env is one more entry in :data:`ENVS`."""

    name: str
    env_id: str
    train_split: str
    held_out: tuple[str, ...]  #: splits evaluated, never trained on
    max_steps: int  #: the step limit of an episode (training and evaluation)
    preset: str  #: the trainer-preset family of the shaper configs (``alfworld``, ``webshop``, ...)
    kwargs: tuple[tuple[str, Any], ...] = ()  #: extra ``gym.make`` kwargs
    #: kwargs that skip the expert where no method reads it (speed)
    no_expert: tuple[tuple[str, Any], ...] = ()
    train_tasks: int = 0  #: tasks drawn from the training split (0: all)
    #: the env's feature set on top of the generic ones (:data:`EXTRA_FEATURES`; "" none)
    feats: str = ""
    #: the learning rate of every method on this env (``--lr`` overrides): chosen on GRPO alone, on seeds that are
    #: not reported (``benchmarks/results/learning_study_lr_*``; docs/learning_study.md)
    lr: float = 20.0
    warm_tasks: int = 10  #: expert demos of the warm start (``--warm-tasks`` overrides)


ENVS: dict[str, EnvRow] = {
    e.name: e
    for e in (
        EnvRow(
            "ALFWorld",
            "StepGym/ALFWorld-v0",
            "train",
            ("valid_seen", "valid_unseen"),
            30,
            "alfworld",
            kwargs=(("game_cache_size", 400),),
            no_expert=(("expert", False),),
        ),
        EnvRow("Sokoban", "StepGym/Sokoban-v0", "train", ("test",), 30, "sokoban", feats="sokoban", lr=5.0),
        EnvRow(
            "TextCraft", "StepGym/TextCraft-v0", "train", ("test",), 30, "textcraft", feats="textcraft"
        ),  # lr 20 chosen
        EnvRow(
            "BabyAI",
            "StepGym/BabyAI-v0",
            "train",
            ("test",),
            20,
            "babyai",
            feats="babyai",
            lr=2.0,
            warm_tasks=4,
        ),
        # BabyAI's single-object level (go to the red ball, no distractors): the real env where the token-level
        # learner (the bundled trainer's tiny model) learns on a CPU after a noisy-expert warm-up; GoToLocal's seven
        # distractors it does not learn to read (docs/learning_study.md). Rate 2: chosen on GRPO by AUC among 0.5, 1, 2
        # and 5 on seeds 100-105 (learning_study_lr_babyai_redball_2026-12-08.md)
        EnvRow(
            "BabyAI-RedBall",
            "StepGym/BabyAI-v0",
            "train",
            ("test",),
            20,
            "babyai",
            kwargs=(("level", "BabyAI-GoToRedBallNoDists-v0"),),
            feats="babyai",
            lr=2.0,
            warm_tasks=4,
        ),
        EnvRow(
            "WebShop",
            "StepGym/WebShop-v0",
            "train",
            ("test",),
            15,
            "webshop",
            feats="webshop",
            lr=5.0,
            warm_tasks=40,
        ),
        # the credit-assignment toy (a line of 5 stations, one decisive choice of 3, 10 steps): not a benchmark, the
        # common ground of the two learners (benchmarks/learning_study_llm.py: the tiny model learns on it on a CPU)
        EnvRow(
            "CreditFamily",
            "StepGym/CreditFamily-v0",
            "train",
            ("valid",),
            10,
            "credit",
            kwargs=(("horizon", 5),),
            lr=100.0,  # chosen on GRPO by AUC on seeds 100-105 (learning_study_lr_creditfamily_2026-12-07.md)
        ),
        # tau2-bench's airline tasks (upstream's train/test splits, 30/20) with the deterministic stand-in user; the
        # learner chooses among the env's candidate calls (the expert's, other tools, a wrong argument, two stock
        # messages: candidate_calls=True, docs/tau2.md)
        EnvRow(
            "Tau2",
            "StepGym/Tau2-v0",
            "train",
            ("test",),
            12,
            "tau2",
            kwargs=(("domain", "airline"), ("candidate_calls", True)),
            feats="tau2",
            # chosen on GRPO by AUC among 0.2, 0.5 and 1 on seed 100 (learning_study_lr_tau2_2026-12-07.md)
            lr=1.0,
            # no warm start: the uniform policy over the candidates already wins about half the tasks (the stand-in
            # user is lenient), and a warm start on a few demos makes the policy nearly deterministic (no group
            # variance, nothing for GRPO to learn from)
            warm_tasks=0,
        ),
    )
}
DEFAULT_ENVS = ("ALFWorld", "Sokoban")
#: the study's methods: all but the ``-obs`` keyings of GraphGPO, HGPO and RewardFlow (G2PO keeps both; ``--methods``
#: runs those too)
DEFAULT_METHODS = tuple(m for m in METHODS if m not in ("graphgpo-obs", "hgpo-obs", "rewardflow-obs"))


# --------------------------------------------------------------------------------------------------------------
# The learner: a softmax over admissible actions with indicator features of (goal, observation, action, memory)
# --------------------------------------------------------------------------------------------------------------
STOP = frozenset(
    "a an the to in on from with of at and then some your task is you it its this that put".split()  # noqa: SIM905
)  # "put" is a verb in actions but a filler in goals ("put a clean apple in fridge")


def words(text: str) -> list[str]:
    """Lower-case letter runs without stop words (numbers dropped, so ``drawer 3`` and ``drawer 4`` share)."""
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w not in STOP]


def parse_action(action: str) -> tuple[str, tuple[str, ...]]:
    """(verb, argument words): ``take apple 1 from countertop 2`` → ("take", ("apple", "countertop"));
    ``click[buy now]`` → ("click", ("buy", "now"))."""
    toks = re.findall(r"[a-z]+", action.lower())
    if not toks:
        return "", ()
    return toks[0], tuple(w for w in toks[1:] if w not in STOP)


@dataclass(frozen=True)
class Context:
    """What the policy sees besides the action: goal and task type, the observation, and the agent's memory."""

    goal: frozenset[str]
    task_type: str
    obs_head: str  #: the first three words of the observation (its kind: "you arrive at", "you pick up", ...)
    obs_goal: bool  #: a goal word is in the observation
    held: str  #: the object the agent carries ("" none), tracked from its own take/put actions
    taken: frozenset[str]  #: actions taken earlier in this episode
    #: the env's own facts of the state (:data:`EXTRA_FEATURES`: the grid, the goal object's place, the recipe
    #: tree), ``("", ...)`` for an env without a feature set
    facts: tuple = ("",)


@lru_cache(maxsize=1 << 16)
def parse_cached(action: str) -> tuple[str, tuple[str, ...]]:
    return parse_action(action)


def features(ctx: Context, action: str) -> list[tuple]:
    """The indicator features of (ctx, action) except the history one (``rep``: :meth:`Policy.ids` adds it)."""
    f = word_features(ctx, action)
    if ctx.facts[0]:
        f += EXTRA_FEATURES[ctx.facts[0]][1](ctx.facts, action)
    return f


def word_features(ctx: Context, action: str) -> list[tuple]:
    """The generic features of :func:`features` (what the words of goal, observation and action say)."""
    verb, args = parse_cached(action)
    held_goal = bool(ctx.held) and ctx.held in ctx.goal
    f: list[tuple] = [
        ("v", verb),
        ("vt", verb, ctx.task_type),
        ("vo", verb, ctx.obs_head),
        ("vog", verb, ctx.obs_goal),
        ("vh", verb, bool(ctx.held), held_goal),
    ]
    for i, w in enumerate(args[:3]):
        m = w in ctx.goal
        f.append(("vm", verb, i, m))
        f.append(("vmh", verb, i, m, held_goal))
        f.append(("vmt", verb, i, m, ctx.task_type))
        # in word order: a frozenset iterates in hash order, which differs between processes (PYTHONHASHSEED),
        # and the order of a logit's terms decides its last bits (a sampled action can flip on them)
        f += [("va", verb, i, w, g) for g in sorted(ctx.goal)]  # e.g. where a goal object is found
    return f


# The env feature sets: (facts of the state from (info, observation, actions taken), features of (facts, action)).
# The generic features above read words; these read what a word-level reader cannot (where the box is, which
# way the goal object lies, which items the recipe needs). An LLM agent reads the same text.
_DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def sokoban_facts(info: dict, obs: str, taken: frozenset[str]) -> tuple:
    """The grid rows of the observation ('#' wall, '_' floor, 'O' target, 'X' box, '√' box on target, 'P'
    player, 'S' player on target)."""
    rows = tuple(line for line in obs.splitlines() if line and set(line) <= set("#_OX√PS"))
    return ("sokoban", rows)


def sokoban_features(facts: tuple, action: str) -> list[tuple]:
    """What the move meets (wall, box, free) and, for a push, what lies behind the box, whether the push brings
    the box nearer a target and whether it lands in a dead corner; where the nearest loose box lies from the
    player and the nearest free target from that box; whether the move brings the player nearer a cell from
    which the box can be pushed towards the target."""
    rows = facts[1]
    d = _DIRS.get(action)
    if d is None or not rows:
        return []
    cell = {(r, c): ch for r, line in enumerate(rows) for c, ch in enumerate(line)}
    at = lambda p: cell.get(p, "#")  # noqa: E731
    kind = lambda ch: "wall" if ch == "#" else "box" if ch in "X√" else "free"  # noqa: E731
    player = next((p for p, ch in cell.items() if ch in "PS"), None)
    boxes = [p for p, ch in cell.items() if ch == "X"]
    targets = [p for p, ch in cell.items() if ch in "OS"]
    if player is None:
        return []
    dist = lambda a, b: abs(a[0] - b[0]) + abs(a[1] - b[1])  # noqa: E731
    n1 = (player[0] + d[0], player[1] + d[1])
    n2 = (n1[0] + d[0], n1[1] + d[1])
    k1 = kind(at(n1))
    f: list[tuple] = [("sk1", action, k1)]
    if k1 == "box":
        k2 = kind(at(n2))
        f.append(("sk2", action, k2))
        if k2 == "free" and targets:
            near = min(dist(n2, t) for t in targets) - min(dist(n1, t) for t in targets)
            walls = [at((n2[0] + a, n2[1] + b)) == "#" for a, b in _DIRS.values()]
            corner = (walls[0] or walls[1]) and (walls[2] or walls[3]) and at(n2) not in "OS"
            f += [("skpush", action, _sign(near)), ("skdead", action, corner)]
    if boxes and targets:
        box = min(boxes, key=lambda b: dist(b, player))
        tgt = min(targets, key=lambda t: dist(t, box))
        rel = (_sign(box[0] - player[0]), _sign(box[1] - player[1]))
        want = (_sign(tgt[0] - box[0]), _sign(tgt[1] - box[1]))
        f += [("skb", action, rel), ("skt", action, want), ("skbt", action, rel, want)]
        spots = [(box[0] - a, box[1] - b) for a, b in ((want[0], 0), (0, want[1])) if (a, b) != (0, 0)]
        spots = [p for p in spots if at(p) != "#"]
        if spots and k1 != "wall":
            f.append(
                ("skap", action, _sign(min(dist(n1, p) for p in spots) - min(dist(player, p) for p in spots)))
            )
    return f


_SEE = re.compile(
    r"you see an? (?:(?:open|closed|locked) )?(\w+) (\w+) ((?:\d+ steps? (?:left|right|forward)(?: and )?)+)"
)


def babyai_facts(info: dict, obs: str, taken: frozenset[str]) -> tuple:
    """Where the goal object lies (left/ahead/right, steps forward), whether it is in view, and what stands one
    step ahead (a wall, an object, nothing)."""
    goal = set(words(str(info.get(schema.GOAL) or "")))
    low = obs.lower()
    best, ahead = None, "none"
    for m in _SEE.finditer(low):
        lat = fwd = 0
        for n, side in re.findall(r"(\d+) steps? (left|right|forward)", m.group(3)):
            if side == "forward":
                fwd = int(n)
            else:
                lat = -int(n) if side == "left" else int(n)
        if lat == 0 and fwd == 1:
            ahead = "object"
        if {m.group(1), m.group(2)} <= goal and (best is None or abs(lat) + fwd < abs(best[0]) + best[1]):
            best = (lat, fwd)
    if re.search(r"you see a wall 1 step forward", low):
        ahead = "wall"
    if best is None:
        return ("babyai", False, 0, 0, ahead)
    return ("babyai", True, _sign(best[0]), min(best[1], 3), ahead)


def babyai_features(facts: tuple, action: str) -> list[tuple]:
    _, seen, lat, fwd, ahead = facts
    return [
        ("bs", action, seen),
        ("bl", action, seen, lat),
        ("blf", action, seen, lat, fwd),
        ("ba", action, ahead),
    ]


_RECIPE = re.compile(r"craft (\d+) ([a-z ]+?) using (.+)")


def _item(text: str) -> str:
    return re.sub(r"^\d+ ", "", text.strip())


def textcraft_facts(info: dict, obs: str, taken: frozenset[str]) -> tuple:
    """The goal item, the recipe tree's items with their depth below the goal (the crafting commands of the
    goal text), and the items the agent got or crafted (its own actions)."""
    depth, craftable = _textcraft_tree(str(info.get(schema.GOAL) or "").lower())
    have = frozenset(textcraft_item(a) for a in taken)
    return ("textcraft", depth, craftable, have)


@lru_cache(maxsize=4096)
def _textcraft_tree(text: str) -> tuple[tuple, frozenset[str]]:
    """The recipe tree of a goal text: (item, depth) pairs in item order, and the craftable items."""
    m = re.search(r"goal: craft ([a-z ]+?)\.", text)
    goal = m.group(1) if m else ""
    recipes: dict[str, list[str]] = {}
    for r in _RECIPE.finditer(text):
        recipes.setdefault(r.group(2), []).extend(
            _item(x) for x in r.group(3).split(",")
        )  # every alternative
    depth = {goal: 0}
    frontier = [goal]
    while frontier:
        nxt = []
        for it in frontier:
            for ing in recipes.get(it, []):
                if ing not in depth:
                    depth[ing] = depth[it] + 1
                    nxt.append(ing)
        frontier = nxt
    return tuple(sorted(depth.items())), frozenset(recipes)


@lru_cache(maxsize=1 << 16)
def textcraft_item(action: str) -> str:
    """The item an action gets or crafts (``get 2 bamboo`` → bamboo; ``craft 1 stick using ...`` → stick)."""
    a = action.lower()
    m = re.match(r"(?:get|craft) \d+ ([a-z ]+?)(?: using .*)?$", a)
    return m.group(1) if m else ""


def textcraft_features(facts: tuple, action: str) -> list[tuple]:
    """Whether the action's item is in the goal's recipe tree (and how deep), is craftable, is already held."""
    _, depth, craftable, have = facts
    verb = parse_cached(action)[0]
    item = textcraft_item(action)
    dep = dict(depth).get(item, -1)
    return [
        ("td", verb, min(dep, 3)),
        ("tdh", verb, dep >= 0, item in have),
        ("tc", verb, dep >= 0, item in craftable),
    ]


def webshop_facts(info: dict, obs: str, taken: frozenset[str]) -> tuple:
    """The products of a results page (id, how many goal words its title shares, in quarters, its rank, whether
    its price is under the goal's limit) and how many options that name goal words were clicked so far."""
    text = str(info.get(schema.GOAL) or "")
    products, goal = _webshop_page(text, obs)
    chosen = sum(
        1
        for a in taken
        if a.startswith("click[")
        and a not in ("click[buy now]",)
        and set(words(a[6:-1])) <= goal
        and words(a[6:-1])
    )
    return ("webshop", products, min(chosen, 3))


@lru_cache(maxsize=8192)
def _webshop_page(text: str, obs: str) -> tuple[tuple, frozenset[str]]:
    """The products of a results page for a goal text (see :func:`webshop_facts`), and the goal words."""
    goal = set(words(text))
    m = re.search(r"price lower than ([\d.]+)", text.lower())
    limit = float(m.group(1)) if m else math.inf
    parts = [x.strip() for x in obs.split("[SEP]")]
    products = []
    for i, x in enumerate(parts[:-2]):
        if re.fullmatch(r"[A-Z0-9]{10}", x):
            title = set(words(parts[i + 1]))
            price = re.findall(r"\$([\d.]+)", parts[i + 2])
            share = round(4 * len(title & goal) / max(1, len(goal)))
            cheap = bool(price) and float(price[0]) < limit
            products.append((x.lower(), share, min(len(products), 3), cheap))
    return tuple(products), frozenset(goal)


def webshop_features(facts: tuple, action: str) -> list[tuple]:
    _, products, chosen = facts
    arg = action[6:-1] if action.startswith("click[") else ""
    for pid, share, rank, cheap in products:
        if pid == arg:
            return [("wp", share), ("wpr", rank), ("wpc", cheap), ("wps", share, rank)]
    return [("wb", action == "click[buy now]", chosen)]


def tau2_facts(info: dict, obs: str, taken: frozenset[str]) -> tuple:
    """tau2's phase (who spoke last: the user or a tool, and how many distinct calls the agent made, up to 3) and
    the candidate calls whose arguments all appeared in the conversation (``tau2/candidates_seen``)."""
    kind = "user" if obs.startswith("User:") else "tool" if obs.startswith("Tool result:") else "other"
    calls = min(sum(a.startswith("{") for a in taken), 3)
    return ("tau2", kind, calls, frozenset(info.get("tau2/candidates_seen") or ()))


@lru_cache(maxsize=1 << 14)
def tau2_name(action: str) -> str:
    """The tool a candidate calls, or ``msg:<first word>`` for a message to the user."""
    if action.startswith("{"):
        try:
            return str(json.loads(action).get("name"))
        except ValueError:
            return "call?"
    return "msg:" + (action.split(maxsplit=1) or [""])[0].lower()


def tau2_features(facts: tuple, action: str) -> list[tuple]:
    """The tool (or message kind) by phase, and whether a call's arguments were all seen in the conversation."""
    _, kind, calls, seen = facts
    name = tau2_name(action)
    is_call = action.startswith("{")
    s = action in seen
    return [
        ("tn", name, kind),
        ("tnc", name, calls),
        ("tns", name, s),
        ("tcs", is_call, s, kind),
        ("tcc", is_call, calls, kind),
    ]


EXTRA_FEATURES = {
    "webshop": (webshop_facts, webshop_features),
    "sokoban": (sokoban_facts, sokoban_features),
    "babyai": (babyai_facts, babyai_features),
    "textcraft": (textcraft_facts, textcraft_features),
    "tau2": (tau2_facts, tau2_features),
}


#: feature → column of the weight vector, shared by every policy of the process (weights start at zero, so the
#: order in which features are first seen changes nothing)
_IDS: dict[tuple, int] = {}
#: (the state's part of a context, its actions) → the feature ids of every action, concatenated, with a slot per
#: action for the history feature: (ids, starts, slots, "not taken before" ids, "taken before" ids). A state seen
#: again (another rollout, another evaluation) costs one lookup instead of every action's features.
_STATES: dict[tuple, tuple[np.ndarray, ...]] = {}
_STATES_MAX = 20_000
_WORDS_MAX = 200_000
_WORD_IDS: dict[tuple, tuple[list[int], int, int]] = {}


def _intern(f: tuple) -> int:
    i = _IDS.get(f)
    if i is None:
        i = _IDS[f] = len(_IDS)
    return i


class Policy:
    """logit(a | ctx) = Σ_f w[f] over :func:`features` plus the history feature ("took this action before");
    zero-initialised, i.e. uniform over admissible actions. Weights are one NumPy vector indexed by interned
    feature ids."""

    def __init__(self) -> None:
        self.w = np.zeros(1024)

    def copy(self) -> Policy:
        p = Policy()
        p.w = self.w.copy()
        return p

    def ids(self, ctx: Context, actions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The feature ids of every action (concatenated: each action's :func:`features`, then its history
        feature) and each action's start offset."""
        key = ((ctx.goal, ctx.task_type, ctx.obs_head, ctx.obs_goal, ctx.held, ctx.facts), tuple(actions))
        hit = _STATES.get(key)
        if hit is None:
            if len(_STATES) >= _STATES_MAX:
                _STATES.clear()
            flat: list[int] = []
            starts, slots, no, yes = [], [], [], []
            words_key = (ctx.goal, ctx.task_type, ctx.obs_head, ctx.obs_goal, ctx.held)
            extra = EXTRA_FEATURES[ctx.facts[0]][1] if ctx.facts[0] else None
            get = _WORD_IDS.get
            for a in actions:
                # features(ctx, a): the word features, which read the action only as parsed (verb and argument
                # words: "drawer 3" and "drawer 4" share them), kept per parsed action and word context; then the
                # env's features
                parsed = parse_cached(a)
                e = get((words_key, parsed))
                if e is None:
                    if len(_WORD_IDS) >= _WORDS_MAX:
                        _WORD_IDS.clear()
                    e = _WORD_IDS[(words_key, parsed)] = (
                        [_intern(x) for x in word_features(ctx, a)],
                        _intern(("rep", parsed[0], False)),
                        _intern(("rep", parsed[0], True)),
                    )
                starts.append(len(flat))
                flat += e[0]
                if extra is not None:
                    flat += [_intern(x) for x in extra(ctx.facts, a)]
                slots.append(len(flat))
                flat.append(0)
                no.append(e[1])
                yes.append(e[2])
            hit = _STATES[key] = tuple(np.array(x, dtype=np.int64) for x in (flat, starts, slots, no, yes))
        flat, starts, slots, no, yes = hit
        ids = flat.copy()
        if ctx.taken:
            ids[slots] = np.where([a in ctx.taken for a in actions], yes, no)
        else:
            ids[slots] = no
        if len(_IDS) > len(self.w):
            self.w = np.concatenate([self.w, np.zeros(max(len(_IDS), 2 * len(self.w)) - len(self.w))])
        return ids, starts

    def logits(self, ctx: Context, actions: list[str]) -> np.ndarray:
        ids, starts = self.ids(ctx, actions)
        return np.add.reduceat(self.w[ids], starts)

    def update(self, ctx: Context, actions: list[str], probs: np.ndarray, chosen: int, coef: float) -> None:
        """Gradient ascent step coef·∇ log π(chosen | ctx), ``probs`` = π(· | ctx) at the rollout weights."""
        g = -probs
        g[chosen] += 1.0
        ids, starts = self.ids(ctx, actions)
        counts = np.diff(np.append(starts, len(ids)))
        np.add.at(self.w, ids, coef * np.repeat(g, counts))

    def update_steps(self, steps: list[Step], advs: np.ndarray, coef: float) -> None:
        """:meth:`update` for every step with a nonzero advantage (``coef`` × advantage each, π at the rollout
        weights), as one ``np.add.at`` over the steps' ids in order: the same additions in the same order as one
        :meth:`update` per step, so the same weights to the bit."""
        ids, vals = [], []
        for s, av in zip(steps, advs, strict=True):
            if av != 0.0:
                g = -s.probs
                g[s.chosen] += 1.0
                counts = np.diff(np.append(s.starts, len(s.ids)))
                ids.append(s.ids)
                vals.append((coef * float(av)) * np.repeat(g, counts))
        if ids:
            np.add.at(self.w, np.concatenate(ids), np.concatenate(vals))


_WORD = re.compile(r"[a-z]+")


@lru_cache(maxsize=4096)
def _goal_words(goal: str) -> frozenset[str]:
    return frozenset(words(goal))


#: which of (goal, observation, actions taken) each env's facts read: their cache key
_FACTS_READ = {"sokoban": (False, True, False), "babyai": (True, True, False)}
_FACTS: dict[tuple, tuple] = {}


#: feature sets of envs whose goal text is the same for every task (tau2: the agent's instructions, the domain's
#: policy and its tools; the request is in the user's first message): no goal words, which would only multiply
#: every action's features by the thousands of words of the policy
GOALLESS = frozenset({"tau2"})


def context(info: dict, obs: str, held: str, taken: frozenset[str], feats: str = "") -> Context:
    goal_text = str(info.get(schema.GOAL) or "")
    goal = _goal_words(goal_text) if feats not in GOALLESS else frozenset()
    low = obs.lower()
    head = " ".join(m.group() for m in itertools.islice(_WORD.finditer(low), 3))
    if not feats:
        facts: tuple = ("",)
    elif feats in _FACTS_READ:  # facts of the text alone: one parse per (goal, observation)
        g, o, _ = _FACTS_READ[feats]
        key = (feats, goal_text if g else None, obs if o else None)
        facts = _FACTS.get(key)  # type: ignore[assignment]
        if facts is None:
            if len(_FACTS) >= _STATES_MAX:
                _FACTS.clear()
            facts = _FACTS[key] = EXTRA_FEATURES[feats][0](info, obs, taken)
    else:
        facts = EXTRA_FEATURES[feats][0](info, obs, taken)
    return Context(
        goal,
        str(info.get(schema.TASK_TYPE) or ""),
        head,
        any(g in low for g in goal),
        held,
        taken,
        facts,
    )


def feature_set(env: gym.Env) -> str:
    """The :data:`EXTRA_FEATURES` name of an env (its :data:`ENVS` row's ``feats``), "" if none."""
    spec = getattr(env.unwrapped, "spec", None)
    return next((e.feats for e in ENVS.values() if spec is not None and e.env_id == spec.id), "")


def carried(held: str, action: str, obs: str) -> str:
    """The carried object after ``action`` (the take/put verbs of ALFWorld; other envs never carry)."""
    verb, args = parse_cached(action)
    low = obs.lower()
    if verb == "take" and args and low.startswith("you pick up"):
        return args[0]
    if verb == "put" and (low.startswith("you put") or low.startswith("you move")):
        return ""
    return held


# --------------------------------------------------------------------------------------------------------------
# Rollouts
# --------------------------------------------------------------------------------------------------------------
def admissible(info: dict) -> list[str]:
    """The env's admissible actions; a free-text placeholder (WebShop's ``search[<your query>]``) gets the goal
    text as its query (the learner writes no text)."""
    goal = str(info.get(schema.GOAL) or "")
    return [a.replace("<your query>", goal) if "<" in a else a for a in info[schema.ADMISSIBLE_ACTIONS]]


@dataclass
class Step(cs.Step):
    ctx: Context | None = None
    probs: np.ndarray | None = None  #: π(· | ctx) at the rollout weights (``softmax(logits)``)
    ids: np.ndarray | None = None  #: the actions' feature ids (:meth:`Policy.ids`)
    starts: np.ndarray | None = None


def play(env: gym.Env, policy: Policy, task_id: str, rng: np.random.Generator, max_steps: int) -> cs.Episode:
    obs, info = env.reset(options={"task_id": task_id})
    steps: list[Step] = []
    held, taken = "", frozenset()
    feats = feature_set(env)
    for _ in range(max_steps):
        actions = admissible(info)
        ctx = context(info, obs, held, taken, feats)
        ids, starts = policy.ids(ctx, actions)
        z = np.add.reduceat(policy.w[ids], starts)  # Policy.logits
        p = cs.softmax(z)
        k = min(int(np.searchsorted(p.cumsum(), rng.random())), len(z) - 1)
        step = Step(obs, actions, k, z, info, ctx=ctx, probs=p, ids=ids, starts=starts)
        obs, reward, terminated, truncated, info = env.step(actions[k])
        step.reward, step.next_info, step.next_obs, step.done = float(reward), info, obs, bool(terminated)
        steps.append(step)
        held, taken = carried(held, actions[k], obs), taken | {actions[k]}
        if terminated or truncated:
            break
    return cs.Episode(task_id, -1, steps, bool(steps[-1].next_info.get(schema.WON, False)))


def warm_start(env: EnvRow, train: list[str], n_tasks: int, epochs: int, lr: float, steps: int) -> Policy:
    """The starting policy of every method: behaviour cloning on the env's expert (``schema.EXPERT_ACTION``) on
    the first ``n_tasks`` training tasks, ``epochs`` passes of SGD on log π(expert | ctx) with step ``lr``. An
    untrained (uniform) policy almost never finishes an ALFWorld task, so no outcome-based method would see a
    reward; an LLM starts from a pretrained prior, this learner from a small warm start (docs/learning_study.md)."""
    policy = Policy()
    if n_tasks <= 0 or epochs <= 0:
        return policy
    demo: list[tuple[Context, list[str], int]] = []
    e = make_env(env, env.train_split)
    for task in train[:: max(1, len(train) // n_tasks)][:n_tasks]:  # spread over the task types
        # a reset seed per task where the expert breaks ties with the env's generator (EXPERT_DRAWS): the demos,
        # and so every cell, the same in every process (the study's demos never met a tie: the same policy)
        seed = task_seed(task) if env.name in EXPERT_DRAWS else None
        obs, info = e.reset(seed=seed, options={"task_id": task})
        held, taken = "", frozenset()
        for _ in range(steps):
            expert = info.get(schema.EXPERT_ACTION)
            actions = admissible(info)
            k = next((i for i, a in enumerate(actions) if expert and same_action(a, expert)), None)
            if k is None:
                break
            demo.append((context(info, obs, held, taken, env.feats), actions, k))
            obs, _, terminated, truncated, info = e.step(actions[k])
            held, taken = carried(held, actions[k], obs), taken | {actions[k]}
            if terminated or truncated:
                break
    for _ in range(epochs):
        for ctx, actions, k in demo:
            policy.update(ctx, actions, cs.softmax(policy.logits(ctx, actions)), k, lr)
    return policy


def teacher_gaps(method: str, eps: list[cs.Episode], stale: Policy, strength: float) -> np.ndarray:
    """δ = log π_teacher(a) − log π_old(a) per step row: ``credit_study.teacher_gaps``'s modelled teachers, on
    this policy's contexts."""
    out: list[float] = []
    peers: dict[int, dict[str, str]] = {}
    if method == "stepopsd":
        for e in eps:
            if e.won and e.group not in peers:
                peers[e.group] = {s.info[schema.STATE_KEY]: s.actions[s.chosen] for s in e.steps}
    for e in eps:
        for s in e.steps:
            a = s.actions[s.chosen]
            p_old = cs.softmax(s.logits)[s.chosen]
            if method == "ahead":
                expert = s.info.get(schema.EXPERT_ACTION)
                error = (not e.won) and expert is not None and not same_action(a, expert)
                p_t = cs.softmax(s.logits, expert, s.actions, strength)[s.chosen] if error else p_old
            else:
                hint = peers.get(e.group, {}).get(s.info[schema.STATE_KEY])
                p_t = cs.softmax(stale.logits(s.ctx, s.actions), hint, s.actions, strength)[s.chosen]
            out.append(math.log(p_t) - math.log(p_old))
    return np.array(out)


# --------------------------------------------------------------------------------------------------------------
# The shaper of each method, and the trainer's batch
# --------------------------------------------------------------------------------------------------------------
def shaper_config(env: EnvRow, method: str) -> tuple[ShapeConfig, float, str]:
    """(shaper config, reward scale, invalid rule): the env's trainer preset when there is one, else ALFWorld's
    (``credit_fidelity.shaper_config``'s rule); ``drgrpo`` is the GRPO preset with the Dr.GRPO base; the ceiling
    is the ``oracle`` shaper preset with ALFWorld's reward scale."""
    base = method.removesuffix("-obs")
    name = f"{env.preset}-{'grpo' if base in ('drgrpo', CEILING) else base}"
    preset = get_preset(name if name in TRAINER_PRESETS else f"alfworld-{name.split('-', 1)[1]}")
    cfg = preset.shaper
    if base == "drgrpo":
        cfg = replace(cfg, base="drgrpo")
    elif base == CEILING:
        cfg = ShapeConfig.from_preset(CEILING)
    return cfg, preset.env.reward_scale, preset.env.invalid_rule


def step_rows(eps: list[cs.Episode], obs_keyed: bool) -> list[StepRow]:
    """The trainer's rows (one per step, one response token each): anchors are ``STATE_KEY`` (the trainer's
    default) or, for the ``-obs`` methods, the observation text."""
    rows = []
    for traj, e in enumerate(eps):
        for t, s in enumerate(e.steps):
            a = s.actions[s.chosen]
            after = {
                **s.next_info,
                schema.FORMAT_VALID: True,
                schema.ADMISSIBLE: bool(s.next_info.get(schema.ADMISSIBLE, True)),
                schema.PARSED_ACTION: a,
                schema.STATE_KEY: s.next_obs if obs_keyed else s.next_info[schema.STATE_KEY],
            }
            before = {schema.STATE_KEY: s.obs if obs_keyed else s.info[schema.STATE_KEY]}
            rows.append(
                StepRow(
                    group=e.group,
                    rollout=traj,
                    traj=traj,
                    t=t,
                    task_id=e.task_id,
                    prompt="",
                    prompt_ids=[],
                    response_ids=[0],
                    response_text=a,
                    observation=s.obs,
                    info=s.next_info,
                    record=step_annotations(before, a, s.reward, after, terminated=s.done),
                )
            )
    return rows


def advantages(
    method: str,
    env: EnvRow,
    eps: list[cs.Episode],
    *,
    it: int,
    graph: AgenticReferenceGraph | None,
    stale: Policy,
    strength: float,
) -> tuple[np.ndarray, StepBatch]:
    """Per-step advantages of ``method`` for the episodes ``eps`` (rows in (trajectory, step) order)."""
    cfg, scale, rule = shaper_config(env, method)
    labels = cs.proas_labels(graph, eps) if method == "proas" else (None, None)
    delta = teacher_gaps(method, eps, stale, strength)[:, None] if cfg.token_reweight is not None else None
    batch, _ = rows_step_batch(
        step_rows(eps, method.endswith("-obs")), reward_scale=scale, invalid_rule=rule, pad_id=-1
    )
    batch = replace(batch, reasonable=labels[0], progress=labels[1], delta=delta)
    if cfg.step_norm is not None:
        batch.target = batch.layout
    return shape_advantages(batch, cfg, update_index=it).token_advantages[:, 0], batch


# --------------------------------------------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------------------------------------------
def make_env(env: EnvRow, split: str, values: bool = False, expert: bool = True) -> gym.Env:
    kw = {**dict(env.kwargs), **({} if expert else dict(env.no_expert))}
    e = gym.make(env.env_id, split=split, **kw).unwrapped
    if not expert and not values and env.name == "BabyAI":
        # BabyAI has no switch for its expert: every info runs the solver for EXPERT_ACTION, which no method
        # but AHEAD reads (and ValueWrapper's values, which keep it); here the info says None instead (speed)
        e._search = _no_search  # type: ignore[attr-defined]
    return ValueWrapper(e) if values else e


def _no_search() -> Any:
    from stepgym.envs.babyai.solver import Solution

    return Solution(None, False, None)


def task_lists(env: EnvRow, args: dict) -> tuple[list[str], dict[str, list[str]]]:
    """The training tasks and the held-out tasks per split (a fixed shuffle, the same for every cell)."""
    pick = np.random.default_rng(20261206)
    train = list(make_env(env, env.train_split).task_ids)
    n_train = args.get("train_tasks") or env.train_tasks or len(train)
    train = [train[i] for i in sorted(pick.permutation(len(train))[:n_train])]
    held = {}
    for sp in env.held_out:
        ids = list(make_env(env, sp).task_ids)
        n = args.get("eval_tasks") or 40
        held[sp] = [ids[i] for i in sorted(pick.permutation(len(ids))[:n])]
    return train, held


def evaluate(envs: dict[str, gym.Env], held: dict[str, list[str]], policy: Policy, seed: int, steps: int):
    """Held-out success per split: one sampled episode per task, the same random stream for every method."""
    rng = np.random.default_rng([seed, 999])
    return {
        sp: float(np.mean([play(envs[sp], policy, t, rng, steps).won for t in ids]))
        for sp, ids in held.items()
    }


#: envs whose expert breaks ties with the env's own random generator (ALFWorld's picks among candidate objects):
#: ProAS's graph there is seeded with a reset seed per task (a function of the task id alone), so the graph, and
#: the cell, are the same on every run; elsewhere the expert is a function of the state and resets stay unseeded
EXPERT_DRAWS = frozenset({"ALFWorld"})
#: part of a ProAS cell's key on those envs: cells run before the per-task seed (whose graphs followed the OS's
#: seed of the env's generator, so a rerun could differ) keep their key and are never taken for these
SEEDED_ARG = "ProAS graph seeded with a reset seed per task"
#: the same for AHEAD's cells there: its modelled teacher reads the expert on the training env, whose generator is
#: seeded with the cell's seed before the first episode (before, the OS seeded it: reruns differed)
SEEDED_TEACHER = "AHEAD teacher's env generator seeded with the cell's seed"


def task_seed(task_id: str) -> int:
    """The reset seed of ``task_id``'s expert episode when a ProAS graph is seeded (see :data:`EXPERT_DRAWS`)."""
    return zlib.crc32(task_id.encode("utf-8"))


class ExpertSeeded:
    """ProAS's reference graph seeded with the env's expert on the training tasks, one task at a time when a cell
    first trains on it: the graph keeps one ARG per task, so a task's labels read only the expert's path of that
    task and the cell's own wins on it, and the expert need not play the thousands of training tasks a cell never
    draws (what ``seed_graph_from_expert`` on every training task cost each ProAS cell)."""

    def __init__(self, env: EnvRow) -> None:
        self.graph = AgenticReferenceGraph()
        self._row = env
        self._env: gym.Env | None = None
        self._seeded: set[str] = set()

    def seed(self, tasks: list[str]) -> None:
        new = [t for t in dict.fromkeys(tasks) if t not in self._seeded]
        if new:
            if self._env is None:
                self._env = make_env(self._row, self._row.train_split)
            if self._row.name in EXPERT_DRAWS:
                for t in new:
                    seed_graph_from_expert(self.graph, self._env, [t], seed=task_seed(t))
            else:
                seed_graph_from_expert(self.graph, self._env, new)
            self._seeded.update(new)


def training_env(env: EnvRow, method: str, seed: int) -> gym.Env:
    """The env a cell trains on. The expert's action is read by AHEAD's modelled teacher only (and the warm start
    / ProAS seeding, on envs of their own); where the expert breaks ties with the env's generator
    (:data:`EXPERT_DRAWS`), AHEAD's is seeded with the cell's seed (:data:`SEEDED_TEACHER`)."""
    tenv = make_env(env, env.train_split, values=method == CEILING, expert=method == "ahead")
    if method == "ahead" and env.name in EXPERT_DRAWS:
        tenv.np_random = np.random.default_rng(seed)
    return tenv


def run_cell(cell: dict) -> dict:
    """Train one (env, method, seed) cell and return its record (a JSON-able dict)."""
    t0 = time.perf_counter()
    method, seed, a = cell["method"], cell["seed"], cell["args"]
    env = ENVS[cell["env"]]
    steps = a.get("max_steps") or env.max_steps
    train, held = task_lists(env, a)
    overlap = set(train) & {t for ids in held.values() for t in ids}
    if overlap:
        raise RuntimeError(f"held-out tasks in the training list: {sorted(overlap)[:3]}")
    # the expert's action is read by AHEAD's modelled teacher only (and the warm start / ProAS seeding below)
    tenv = training_env(env, method, seed)
    eenvs = {sp: make_env(env, sp, expert=False) for sp in held}
    rng = np.random.default_rng(seed)  # identical across methods: same task order and initial policy
    policy = warm_start(env, train, a["warm_tasks"], a["warm_epochs"], a["warm_lr"], steps)
    stale = policy.copy()
    seeded = ExpertSeeded(env) if method == "proas" else None
    graph = seeded.graph if seeded is not None else None
    eval_its, held_curve, train_curve, trained_on = (
        [0],
        [evaluate(eenvs, held, policy, seed, steps)],
        [],
        set(),
    )
    for it in range(a["iterations"]):
        if method == "stepopsd" and it % 10 == 0:
            stale = policy.copy()
        tasks = [train[i] for i in rng.choice(len(train), size=a["n_tasks"], replace=False)]
        trained_on.update(tasks)
        eps = []
        for g, task in enumerate(tasks):
            for _ in range(a["group_size"]):
                e = play(tenv, policy, task, rng, steps)
                e.group = g
                eps.append(e)
        if seeded is not None:  # before a task's first labels, as if every training task were seeded first
            seeded.seed(tasks)
        adv, _ = advantages(method, env, eps, it=it, graph=graph, stale=stale, strength=a["hint_strength"])
        if method == "proas":
            cs.grow(graph, eps)
        train_curve.append(float(np.mean([e.won for e in eps])))
        rows = [s for e in eps for s in e.steps]
        policy.update_steps(rows, adv, a["lr"] / len(rows))  # token-mean loss, one token per step
        if (it + 1) % a["eval_every"] == 0 or it + 1 == a["iterations"]:
            eval_its.append(it + 1)
            held_curve.append(evaluate(eenvs, held, policy, seed, steps))
    return {
        "key": cell_key(cell),
        "args": {k: a.get(k) for k in TRAIN_ARGS},
        "env": env.name,
        "method": method,
        "seed": seed,
        "eval_its": eval_its,
        "held": held_curve,  # per eval point: split -> success
        "train_curve": train_curve,
        "trained_tasks": sorted(trained_on),
        "held_tasks": held,
        "seconds": time.perf_counter() - t0,
        **({"learner": a["learner"]} if a.get("learner") else {}),
    }


TRAIN_ARGS = (
    "iterations",
    "n_tasks",
    "group_size",
    "lr",
    "hint_strength",
    "eval_every",
    "train_tasks",
    "eval_tasks",
    "max_steps",
    "warm_tasks",
    "warm_epochs",
    "warm_lr",
)


def cell_key(cell: dict) -> str:
    """env/method/seed plus a fingerprint of everything that shapes the result (an old cell of other settings is
    never mistaken for one of this sweep)."""
    what = {"env": ENVS[cell["env"]].__dict__, **{k: cell["args"].get(k) for k in TRAIN_ARGS}}
    if cell["method"] == "proas" and cell["env"] in EXPERT_DRAWS:
        what["arg_seeding"] = SEEDED_ARG
    if cell["method"] == "ahead" and cell["env"] in EXPERT_DRAWS:
        what["teacher_seeding"] = SEEDED_TEACHER
    fp = hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:10]
    learner = cell["args"].get("learner")
    return f"{learner + '/' if learner else ''}{cell['env']}/{cell['method']}/{cell['seed']}/{fp}"


def env_args(args: argparse.Namespace, env: str) -> dict:
    """The cell settings of ``env``: the command line's, with the env row's learning rate and warm start where
    the command line leaves them unset."""
    a = dict(vars(args))
    row = ENVS[env]
    a["lr"] = row.lr if a.get("lr") is None else a["lr"]
    a["warm_tasks"] = row.warm_tasks if a.get("warm_tasks") is None else a["warm_tasks"]
    return a


#: the learner label of cells run at a learning rate per method (``--rates``): a family of its own in the statistics
OWN_RATE = st.OWN_RATE


def plan(args: argparse.Namespace) -> list[dict]:
    cells = [
        {"env": env, "method": m, "seed": seed, "args": env_args(args, env)}
        for seed in range(args.first_seed, args.first_seed + args.seeds)
        for env in args.envs
        for m in args.methods
    ]
    if getattr(args, "rates", None):
        chosen = read_rates(Path(args.rates))
        for c in cells:
            name = f"{c['env']}/{c['method']}"
            if name not in chosen:
                raise SystemExit(
                    f"{args.rates} has no learning rate for {name} (it has {', '.join(sorted(chosen))})"
                )
            c["args"] = {**c["args"], "lr": chosen[name], "learner": OWN_RATE}
    return cells


def read_rates(path: Path) -> dict[str, float]:
    """The chosen rate per ``env/method`` of a ``learning_study_lr.py --json`` file."""
    try:
        return {k: float(v) for k, v in json.loads(path.read_text(encoding="utf-8"))["chosen"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(f"--rates {path}: not a learning_study_lr.py --json file ({e})") from None


# --------------------------------------------------------------------------------------------------------------
# Reporting: per-cell metrics (the statistics are learning_study_stats.py's), the tables, the plots
# --------------------------------------------------------------------------------------------------------------
def held_curve(r: dict) -> np.ndarray:
    """Held-out success per eval point, the mean over the held-out splits."""
    return np.array([float(np.mean(list(h.values()))) for h in r["held"]])


def metrics(r: dict, grpo_final: float | None) -> dict[str, float]:
    """AUC (trapezoid mean of held-out success over iterations 0..T), final, gain over the starting policy, and
    the iterations to reach ``grpo_final`` (censored at T + eval_every when never reached)."""
    y, x = held_curve(r), np.array(r["eval_its"], dtype=float)
    auc = float(np.trapezoid(y, x) / x[-1]) if x[-1] > 0 else float(y[0])
    reach = float("nan")
    if grpo_final is not None:
        hit = [int(i) for i, v in zip(x, y, strict=True) if v >= grpo_final - 1e-12]
        step = x[1] - x[0] if len(x) > 1 else 1.0
        reach = float(hit[0]) if hit else float(x[-1] + step)
    return {"auc": auc, "final": float(y[-1]), "gain": float(y[-1] - y[0]), "reach": reach}


def _ranges(seeds: list[int]) -> str:
    """Sorted seeds as runs: ``0–9, 20–29``."""
    runs: list[list[int]] = []
    for x in seeds:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def run_facts(results: list[dict]) -> str:
    """What the cells were: seeds per method, iterations, batch, tasks, time (from the cells themselves)."""
    lines = []
    for env in dict.fromkeys(r["env"] for r in results):
        rs = [r for r in results if r["env"] == env]
        a = rs[0]["args"]
        held = rs[0]["held_tasks"]
        seeds = {m: sorted({r["seed"] for r in rs if r["method"] == m}) for m in METHODS}
        seeds = {m: s for m, s in seeds.items() if s}
        if len({tuple(s) for s in seeds.values()}) == 1:
            counts = f"{len(seeds)} methods, each on seeds {_ranges(next(iter(seeds.values())))}"
        else:
            counts = "seeds per method: " + ", ".join(f"{m} {_ranges(s)}" for m, s in seeds.items())
        lines.append(
            f"- **{env}**: {counts}; {a['iterations']} iterations of "
            f"{a['n_tasks']} training tasks × group {a['group_size']}, lr {a['lr']:g}, step limit "
            f"{a['max_steps'] or ENVS[env].max_steps}; held-out success every {a['eval_every']} iterations on "
            + ", ".join(f"{len(v)} `{k}`" for k, v in held.items())
            + f" tasks; warm start on {a['warm_tasks']} expert demos; "
            f"{len(rs)} cells, {sum(r['seconds'] for r in rs) / 60:.0f} min of cell wall time summed."
        )
    return "\n".join(lines)


def markdown(results: list[dict], claims: dict | None = None) -> str:
    """The tables of a run's cells (``summary.md``): what was run, then every comparison of ``claims``
    (``learning_study_stats.analyse`` of the cells when not given: paired Student-t, Holm per family, the
    discovery/confirmation verdicts) and the fidelity relation tested over methods."""
    claims = st.analyse(results) if claims is None else claims
    out = [run_facts(results), "", st.claims_markdown(claims)]
    if claims["fidelity"]:
        out += ["", st.fidelity_markdown(claims)]
    return "\n".join(out)


def plot(results: list[dict], out: Path, prefix: str = "learning_study") -> list[Path]:
    """One small PNG per env: mean held-out success over iterations per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for env in dict.fromkeys(r["env"] for r in results):
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        methods = [m for m in METHODS if any(r["env"] == env and r["method"] == m for r in results)]
        cmap = plt.get_cmap("tab20")
        for i, m in enumerate(methods):
            rs = [r for r in results if r["env"] == env and r["method"] == m]
            y = np.mean([held_curve(r) for r in rs], axis=0)
            style = {"lw": 2.2, "color": "black"} if m in ("grpo", CEILING) else {"lw": 1.0, "color": cmap(i)}
            ax.plot(rs[0]["eval_its"], y, label=m, ls="--" if m == CEILING else "-", **style)
        ax.set_xlabel("iteration", fontsize=8)
        ax.set_ylabel("held-out success (mean over seeds)", fontsize=8)
        ax.set_title(env, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=5.5, ncol=2)
        fig.tight_layout()
        path = out / f"{prefix}_curves_{env}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def report(out: Path, cells: Path, keys: set[str] | None) -> str:
    results = [r for r in cs.load_cells(cells) if keys is None or r["key"] in keys]
    if not results:
        raise SystemExit(f"no finished cells of this sweep in {cells}")
    claims = st.analyse(results)
    table = markdown(results, claims)
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    (out / "claims.json").write_text(
        json.dumps(claims, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(table)
    for p in plot(results, out):
        print(f"wrote {p}")
    return table


# --------------------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/learning_study", help="folder for cells.jsonl, summary.md, plots")
    p.add_argument(
        "--full", action="store_true", help="the full sweep: every env of ENVS, the default settings"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 seeds, 2 iterations, 4 eval tasks (its intervals are not meaningful)",
    )
    p.add_argument("--envs", nargs="+", default=None, choices=list(ENVS), help=f"default {DEFAULT_ENVS}")
    p.add_argument(
        "--methods", nargs="+", default=None, choices=list(METHODS), help="default: DEFAULT_METHODS"
    )
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--n-tasks", type=int, default=4, help="training tasks (groups) per iteration")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="SGD step on the token-mean loss, every method (default: the env row's)",
    )
    p.add_argument("--hint-strength", type=float, default=2.0, help="modelled teachers' logit bonus")
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--eval-tasks", type=int, default=40, help="tasks per held-out split")
    p.add_argument(
        "--train-tasks", type=int, default=0, help="training tasks drawn from (0: the whole split)"
    )
    p.add_argument("--max-steps", type=int, default=0, help="step limit (0: the env row's)")
    p.add_argument(
        "--warm-tasks", type=int, default=None, help="expert demos of the warm start (default: the env row's)"
    )
    p.add_argument("--warm-epochs", type=int, default=1)
    p.add_argument("--warm-lr", type=float, default=0.5)
    p.add_argument("--workers", type=int, default=1, help="cells run in this many processes")
    p.add_argument("--report-only", action="store_true", help="only rebuild the tables and plots")
    p.add_argument("--no-report", action="store_true", help="run the cells only (no tables, no plots)")
    p.add_argument("--cells", default=None, help="report from this results file (.jsonl or .jsonl.gz)")
    p.add_argument(
        "--rates",
        default=None,
        help="a learning rate per method: the --json file of learning_study_lr.py; the cells are the "
        f"'{OWN_RATE}' learner (their own family in the statistics)",
    )
    p.add_argument(
        "--reuse",
        nargs="+",
        default=(),
        help="cells files (.jsonl, .jsonl.gz) whose cells are taken, not run, for a planned cell of the same "
        "computation (its key but for the learner label: with --rates, a method whose own rate is the shared "
        "one)",
    )
    args = p.parse_args(argv)
    if args.full:
        args.envs = args.envs or list(ENVS)
    if args.quick:
        args.seeds, args.iterations, args.eval_every, args.eval_tasks = min(args.seeds, 2), 2, 1, 4
        args.n_tasks, args.group_size = 2, 4
    args.envs = args.envs or list(DEFAULT_ENVS)
    args.methods = args.methods or list(DEFAULT_METHODS)
    return args


def append_once(path: Path, record: dict) -> bool:
    """Append a finished cell to the cells file unless a cell of its key is there already (another process of
    the same sweep finished it first), under an exclusive lock on ``<cells>.lock``: every cell is written once,
    whole (one write; a torn last line of a killed run is cut off before the next append). False: not written."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (one process per cells file)
        fcntl = None
    with open(path.with_suffix(".lock"), "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if record["key"] in {r["key"] for r in cs.load_cells(path)}:
            return False
        cs.append_cell(path, record)
        return True


def computation(key: str) -> str:
    """A cell key without its learner label (``env/method/seed/fingerprint``): two cells of equal computations
    (one method at one rate in two families) have equal ones, and the same record but for the label."""
    return "/".join(key.split("/")[-4:])


def take_reused(todo: list[dict], files: list[Path], cells_path: Path) -> list[dict]:
    """Write the cells of ``todo`` that a record of ``files`` already computed (:func:`computation`) to the
    cells file, relabelled, with ``seconds`` 0 (nothing ran) and ``reused_from``; the rest still to run."""
    found: dict[str, dict] = {}
    for f in files:
        if not f.exists():
            raise SystemExit(f"--reuse: no cells file {f}")
        for r in cs.load_cells(f):
            found.setdefault(computation(r["key"]), r)
    left, taken = [], 0
    for c in todo:
        key = cell_key(c)
        src = found.get(computation(key))
        if src is None:
            left.append(c)
            continue
        record = {k: v for k, v in src.items() if k != "learner"}
        record.update(key=key, seconds=0.0, reused_from=src["key"])
        if c["args"].get("learner"):
            record["learner"] = c["args"]["learner"]
        taken += append_once(cells_path, record)
    print(f"# --reuse: {taken} cells taken from {len(files)} file(s), not run", flush=True)
    return left


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells_path = out / "cells.jsonl"
    keys = {cell_key(c) for c in plan(args)}
    if not args.report_only:
        done = {r["key"] for r in cs.load_cells(cells_path)}
        todo = [c for c in plan(args) if cell_key(c) not in done]
        if args.reuse and todo:
            todo = take_reused(todo, [Path(f) for f in args.reuse], cells_path)
        print(
            f"# learning study: {len(done)} cells done, {len(todo)} to run, {args.workers} workers",
            flush=True,
        )
        t0 = time.perf_counter()
        ctx = mp.get_context("spawn")
        with ctx.Pool(args.workers) if args.workers > 1 else cs._Serial() as pool:
            for r in pool.imap_unordered(run_cell, todo):
                y = held_curve(r)
                print(
                    f"{r['env']:9s} {r['method']:15s} seed {r['seed']:2d}: held-out {y[0]:.2f} → {y[-1]:.2f} "
                    f"({r['seconds']:.1f}s)" + ("" if append_once(cells_path, r) else " (already written)"),
                    flush=True,
                )
        print(f"# sweep wall time: {time.perf_counter() - t0:.0f} s", flush=True)
        if args.no_report:
            return 0
    report(out, Path(args.cells) if args.cells else cells_path, None if args.cells else keys)
    if not args.cells and args.seeds < FEW_SEEDS:
        print(few_seeds_warning(args.seeds), flush=True)
    return 0


#: Below this many seeds a bootstrap interval over seeds says nothing (2 seeds give intervals like [+0.19, +0.19]).
FEW_SEEDS = 5


def few_seeds_warning(seeds: int) -> str:
    return (
        f"# warning: {seeds} seed{'s' if seeds != 1 else ''} per cell: the intervals above are not meaningful "
        f"(a smoke run; the study uses --seeds 10)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
