"""WebShop goals: synthetic (``items_ins_v2*.json``) and human (``human_goals.json``), with fixed indices.

**Order and indices are upstream's.** Upstream (``engine/goal.py`` + ``web_agent_text_env.SimServer``) builds its
goal list by walking the catalogue in file order and, for every product with an instruction, appending one goal
per option combination (synthetic: ``itertools.product`` over the sorted option names) or one goal per human
instruction that has attributes; it then shuffles the list with ``random.seed(233); random.shuffle(goals)``. The
shuffle depends only on the list length, so :func:`upstream_permutation` reproduces it with a local
``random.Random(233)`` (the global generator is never touched) and goal ``i`` here is upstream's goal ``i``.

**Human goals and the 1k catalogue.** ``human_goals.json`` is the instruction text of upstream's *full-catalogue*
human goal list in shuffled order (12,087 goals; test = 0-499, eval = 500-1499, train = 1500+). The 1000-product
catalogue is the first 1000 products of the full one, so its annotated products (13, whose ``instructions`` the
document file carries) are goals 0..12 of the unshuffled list; their index is their position under the shuffle of
``range(12087)``. This was checked: all 13 land on an entry of ``human_goals.json`` with the same text (up to
apostrophes and the final period). With the 1k catalogue that gives 13 human goals: none in test, one in eval
(1195), twelve in train. With the full catalogue every index maps. A catalogue that is not a prefix of upstream's
fails the text check and raises :class:`CorruptDataError`.

**Price bounds are a pure function of the goal.** Upstream draws the bound with the unseeded global ``random``
when the server starts, so goal ``i`` reads "lower than 40.00 dollars" in one worker and "30.00" in another. The
rule here keeps upstream's distribution: take the first four multiples of $10 above the product's (fixed, see
:func:`stepgym.envs.webshop.catalogue.product_price`) price, pick two distinct ones, and the bound is the larger
(no bound and no price text when fewer than two exist). The two picks come from
``sha256("stepgym/webshop/v0/price_upper/synthetic/<ASIN>")`` for synthetic goals (upstream draws once per
product, so all option variants of a product share a bound) and from ``.../human/<goal index>`` for human goals.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepgym.envs.webshop.catalogue import FIX, Catalogue, product_price
from stepgym.errors import CorruptDataError

__all__ = [
    "HUMAN_SPLITS",
    "Goal",
    "build_human_goals",
    "build_synthetic_goals",
    "price_upper_for",
    "split_indices",
    "upstream_permutation",
]

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_BOUND = 1_000_000.0
SHUFFLE_SEED = 233
HUMAN_SPLITS = {"test": (0, 500), "eval": (500, 1500), "train": (1500, None)}


@dataclass(frozen=True, eq=False)
class Goal:
    """One shopping task. ``index`` is upstream's goal index within its kind; ``task_id`` is stable everywhere."""

    kind: str  # "synthetic" | "human"
    index: int
    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: Any  # synthetic: dict option name -> value; human: tuple of option strings
    price_upper: float
    query: str
    category: str
    product_category: str
    name: str
    base_instruction: str = ""  # the instruction without options and price

    @property
    def task_id(self) -> str:
        return f"webshop/{self.kind}/{self.index}"

    def as_reward_goal(self) -> dict[str, Any]:
        opts = dict(self.goal_options) if isinstance(self.goal_options, dict) else list(self.goal_options)
        return {
            "attributes": list(self.attributes),
            "goal_options": opts,
            "price_upper": self.price_upper,
            "query": self.query,
            "product_category": self.product_category,
            "name": self.name,
        }

    def to_info(self) -> dict[str, Any]:
        """Plain-Python description (info dicts, CLI output)."""
        opts = dict(self.goal_options) if isinstance(self.goal_options, dict) else list(self.goal_options)
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "index": self.index,
            "asin": self.asin,
            "instruction_text": self.instruction_text,
            "attributes": list(self.attributes),
            "goal_options": opts,
            "price_upper": float(self.price_upper),
        }


def upstream_permutation(n: int) -> list[int]:
    """``perm`` with ``shuffled[i] = original[perm[i]]`` for upstream's ``random.seed(233); random.shuffle``."""
    perm = list(range(n))
    random.Random(SHUFFLE_SEED).shuffle(perm)
    return perm


def _two_distinct(key: str, n: int) -> tuple[int, int]:
    digest = hashlib.sha256(key.encode()).digest()
    a = int.from_bytes(digest[:8], "big") % n
    b = int.from_bytes(digest[8:16], "big") % (n - 1)
    if b >= a:
        b += 1
    return a, b


def price_upper_for(price: float, key: str) -> tuple[float, str]:
    """``(bound, instruction suffix)`` for a product ``price``; ``key`` names the goal (see module docstring)."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_BOUND, ""
    a, b = _two_distinct(f"stepgym/webshop/v0/price_upper/{key}", len(candidates))
    upper = max(candidates[a], candidates[b])
    return upper, f", and price lower than {upper:.2f} dollars"


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as exc:
        raise CorruptDataError(f"{path}: missing. Fix: {FIX}.") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptDataError(
            f"{path}: not valid JSON; the file looks truncated or corrupt. Fix: {FIX}."
        ) from exc


def build_synthetic_goals(catalogue: Catalogue, attr_path: Path) -> list[Goal]:
    """All synthetic goals in upstream's (shuffled) order."""
    attrs = _read_json(attr_path)
    if not isinstance(attrs, dict):
        raise CorruptDataError(f"{attr_path}: expected an object ASIN -> attributes. Fix: {FIX}.")
    original: list[Goal] = []
    for product in catalogue.products:
        entry = attrs.get(product["asin"]) or {}
        if not isinstance(entry, dict):
            raise CorruptDataError(f"{attr_path}: entry for {product['asin']} is not an object. Fix: {FIX}.")
        instruction = entry.get("instruction")
        if instruction is None:
            continue
        inst_attrs = entry.get("instruction_attributes")
        if not isinstance(instruction, str) or not isinstance(inst_attrs, list) or not inst_attrs:
            raise CorruptDataError(
                f"{attr_path}: {product['asin']} has an instruction but no instruction_attributes. "
                f"Fix: {FIX}."
            )
        upper, price_text = price_upper_for(product_price(product), f"synthetic/{product['asin']}")
        names = sorted(product["options"])
        for combo in itertools.product(*(product["options"][n] for n in names)):
            options = dict(zip(names, combo, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
            option_text = f" with {option_text}" if option_text else ""
            original.append(
                Goal(
                    kind="synthetic",
                    index=-1,
                    asin=product["asin"],
                    instruction_text=f"{instruction}{option_text}{price_text}",
                    attributes=tuple(inst_attrs),
                    goal_options=options,
                    price_upper=upper,
                    query=product["query"],
                    category=product["category"],
                    product_category=product["product_category"],
                    name=product["Title"],
                    base_instruction=instruction,
                )
            )
    perm = upstream_permutation(len(original))
    return [_with_index(original[j], i) for i, j in enumerate(perm)]


def _with_index(goal: Goal, index: int) -> Goal:
    return Goal(**{**goal.__dict__, "index": index})


def _norm(text: str) -> str:
    text = text.lower().replace("'", "").replace("’", "")
    return re.sub(r"\s+", " ", text).strip().rstrip(".").strip()


def build_human_goals(catalogue: Catalogue, human_goals_path: Path) -> list[Goal]:
    """The human goals whose product is in ``catalogue``, sorted by upstream index (see module docstring)."""
    texts = _read_json(human_goals_path)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise CorruptDataError(f"{human_goals_path}: expected a list of instruction strings. Fix: {FIX}.")
    original: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for product in catalogue.products:
        for ins in product.get("instructions") or []:
            if not isinstance(ins, dict) or not ins.get("instruction_attributes"):
                continue  # upstream skips instructions without attributes
            original.append((product, ins))
    if len(original) > len(texts):
        raise CorruptDataError(
            f"{human_goals_path}: {len(texts)} goals, but the catalogue carries {len(original)} "
            f"human instructions. Fix: {FIX}."
        )
    inverse = {j: i for i, j in enumerate(upstream_permutation(len(texts)))}
    goals: list[Goal] = []
    mismatched = 0
    for j, (product, ins) in enumerate(original):
        index = inverse[j]
        if _norm(texts[index]) != _norm(ins["instruction"]):
            mismatched += 1
        upper, price_text = price_upper_for(product_price(product), f"human/{index}")
        goals.append(
            Goal(
                kind="human",
                index=index,
                asin=product["asin"],
                instruction_text=ins["instruction"].strip(".") + price_text,
                attributes=tuple(ins["instruction_attributes"]),
                goal_options=tuple(ins.get("instruction_options") or ()),
                price_upper=upper,
                query=product["query"],
                category=product["category"],
                product_category=product["product_category"],
                name=product["name"],
                base_instruction=ins["instruction"].strip("."),
            )
        )
    if original and mismatched > 0.1 * len(original):
        raise CorruptDataError(
            f"{human_goals_path}: {mismatched} of {len(original)} human instructions of {catalogue.path} do not sit at "
            f"their upstream index; the catalogue is not a prefix of upstream's items_shuffle.json. Fix: {FIX}."
        )
    return sorted(goals, key=lambda g: g.index)


def split_indices(goals: list[Goal], split: str) -> list[int]:
    """Positions in ``goals`` (sorted by index) of the goals in ``split`` ("test", "eval", "train", "all")."""
    if split == "all":
        return list(range(len(goals)))
    if split not in HUMAN_SPLITS:
        raise ValueError(f"split must be one of {[*HUMAN_SPLITS, 'all']}, got {split!r}")
    lo, hi = HUMAN_SPLITS[split]
    return [k for k, g in enumerate(goals) if g.index >= lo and (hi is None or g.index < hi)]
