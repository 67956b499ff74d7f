"""WebShop's value oracle: the fewest actions to buy a product earning the best reachable reward, on the real engine.

WebShop's pages form a small graph (:class:`~stepgym.envs.webshop.engine.ShopEngine`'s transition function); only
``search[...]`` has unbounded arguments. The oracle therefore reasons per page kind instead of searching blindly:

* **best reward** ``B``: the best reward (WebShop's own ``compute_reward``, every reachable option choice) over the
  *candidate products*: the goal's target and the first results page of each of the oracle's candidate queries (the
  expert's query, the target's name, the instruction). A bought product with reward >= ``B`` is a success (any
  product, wherever listed, counts once it reaches ``B``). Products whose reward bound (:meth:`WebShopOracle.bound`)
  is below ``B`` are never enumerated;
* **option clicks** of a product from the options chosen so far: the fewest option clicks after which its reward is
  >= ``B`` (enumerated over every choice a click can make; a value shared by two groups sets the later one, as the
  engine does);
* **item page**: buy here (clicks + 1), or ``< Prev`` / ``Back to Search`` and go on from there; a sub-page needs one
  ``< Prev`` first;
* **results page** (query ``q``, page ``n``): a winning product on result page ``m``: ``|m - n|`` page clicks, one
  click on it, its option clicks, ``Buy Now``; or back to search;
* **search page**: one search, then the best candidate query's results page. Any other query is at least as long
  as ``3 + min option clicks``; when a candidate reaches that bound the value is exact, else it is an upper bound
  (``exact=False``).

``reachable`` is False only after buying below ``B`` (the episode is over). Limits, said plainly: a product that only
some other query lists and that beats every candidate is not seen, so ``B`` is the best over the candidates; a
product with more than :data:`MAX_CHOICES` option combinations is scored with the goal's target options only, and
its values are marked inexact.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

from stepgym.envs.oracle import Remember, Value
from stepgym.envs.webshop.engine import PRODUCT_WINDOW, ShopState, click_key
from stepgym.envs.webshop.reward import MATCH_THRESHOLD, normalize_color, token_set_ratio

__all__ = ["MAX_CHOICES", "WebShopOracle"]

MAX_CHOICES = 4_096
"""Option combinations enumerated per product (more: the target options only, inexact)."""
_EPS = 1e-9
_NONE = 1e9  # "no way found" inside the cost arithmetic (never a label)


@dataclass(frozen=True)
class _Cost:
    """A cost and a lower bound on the true cost (equal: exact)."""

    cost: float
    lower: float

    def plus(self, n: float) -> _Cost:
        return _Cost(self.cost + n, self.lower + n)


def _best(costs: list[_Cost]) -> _Cost:
    return _Cost(min(c.cost for c in costs), min(c.lower for c in costs))


class _GoalFacts:
    """What the oracle knows about one goal: the best reward and each candidate's winning option choices."""

    def __init__(self, oracle: WebShopOracle, goal: Any):
        engine = oracle.engine
        self.goal = goal
        self.queries = list(
            dict.fromkeys(
                [
                    engine.expert_query(goal),
                    goal.name.lower(),
                    goal.instruction_text.split(", and price lower than")[0].lower(),
                ]
            )
        )
        self.exact_options = True
        first_pages = (a for q in self.queries for a in engine.results(q)[:PRODUCT_WINDOW])
        self.candidates = list(dict.fromkeys([goal.asin, *first_pages]))
        # Cheapest first: a product whose reward bound is below the best so far needs no option enumeration.
        self.best = 0.0
        for asin in sorted(self.candidates, key=lambda a: -oracle.bound(a, goal)):
            if oracle.bound(asin, goal) < self.best - _EPS:
                break
            self.best = max(self.best, max(r for r, _ in oracle.choices(asin, goal)))
        self._wins: dict[str, list[dict[str, str]]] = {}
        self.listed: dict[str, list[tuple[int, int]]] = {}
        self.search: _Cost | None = None

    def winning(self, oracle: WebShopOracle, asin: str) -> list[dict[str, str]]:
        """The option choices (group -> value; groups left out stay as they are) with reward >= best."""
        wins = self._wins.get(asin)
        if wins is None:
            if oracle.bound(asin, self.goal) < self.best - _EPS:
                wins = self._wins[asin] = []  # no option choice can reach the best reward
                return wins
            choices = oracle.choices(asin, self.goal)
            wins = self._wins[asin] = [c for r, c in choices if r >= self.best - _EPS]
            if oracle.inexact_products.get(asin):
                self.exact_options = False
        return wins

    def clicks(self, oracle: WebShopOracle, asin: str, chosen: dict[str, str]) -> int | None:
        wins = self.winning(oracle, asin)
        if not wins:
            return None
        return min(sum(1 for g, v in w.items() if chosen.get(g) != v) for w in wins)


class WebShopOracle:
    """See the module docstring (``budget`` is not needed and ignored)."""

    unit_gain = False

    def __init__(self, env: Any, budget: int = 0):
        self.env = env
        self.engine = env.core.engine
        self._goals: dict[str, _GoalFacts] = {}
        self._choices: dict[tuple[str, str], list[tuple[float, dict[str, str]]]] = {}
        self.inexact_products: dict[str, bool] = {}
        self._terms_cache: dict[tuple[str, str], tuple[int, int, float, list[str]]] = {}

    # -- the label ------------------------------------------------------------------------------------------
    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        goal = self.env.goal
        facts = self._goals.get(goal.task_id)
        if facts is None:
            facts = self._goals[goal.task_id] = _GoalFacts(self, goal)
        state: ShopState = self.env.state
        if state.page == "done":
            reward, _ = self.engine.reward(state, goal)
            if reward >= facts.best - _EPS:
                return Value.won(reward)
            return Value.unreachable(reward)
        cost = self._cost(state, facts)
        if cost.cost >= _NONE:  # no candidate query lists a winning product: no bound to give
            return Value.unknown()
        exact = cost.cost == cost.lower and facts.exact_options
        return Value(cost.cost, exact, True, facts.best)

    # -- the page graph -------------------------------------------------------------------------------------
    def _cost(self, state: ShopState, facts: _GoalFacts) -> _Cost:
        search = self._search_cost(facts)
        if state.page == "search":
            return search
        back = search.plus(1)  # Back to Search, on every other page
        if state.page == "results":
            return _best([back, *self._results_cost(state.query, state.page_num, facts)])
        item = ShopState("item", state.query, state.page_num, state.asin, state.options)
        item_cost = _best([back, *self._item_cost(item, facts)])
        if state.page == "item_sub":
            return _best([back, item_cost.plus(1)])  # < Prev back to the item page
        return item_cost

    def _item_cost(self, state: ShopState, facts: _GoalFacts) -> list[_Cost]:
        out = [_best(self._results_cost(state.query, state.page_num, facts) or [_Cost(_NONE, _NONE)]).plus(1)]
        clicks = facts.clicks(self, state.asin, state.options_dict)
        if clicks is not None:
            out.append(_Cost(clicks + 1.0, clicks + 1.0))
        return [c for c in out if c.cost < _NONE]

    def _results_cost(self, query: str, page: int, facts: _GoalFacts) -> list[_Cost]:
        winners = facts.listed.get(query)
        if winners is None:  # (result page, option clicks) of each winning product this query lists
            winners = facts.listed[query] = [
                (rank // PRODUCT_WINDOW + 1, clicks)
                for rank, asin in enumerate(self.engine.results(query))
                if (clicks := facts.clicks(self, asin, {})) is not None
            ]
        return [_Cost(abs(m - page) + 1.0 + c + 1.0, abs(m - page) + 1.0 + c + 1.0) for m, c in winners]

    def _search_cost(self, facts: _GoalFacts) -> _Cost:
        if facts.search is None:
            facts.search = self._search_cost_of(facts)
        return facts.search

    def _search_cost_of(self, facts: _GoalFacts) -> _Cost:
        costs = [c for q in facts.queries for c in self._results_cost(q, 1, facts)]
        fewest = min(
            (c for a in facts.candidates if (c := facts.clicks(self, a, {})) is not None),
            default=0,
        )
        lower = 1.0 + 1.0 + fewest + 1.0  # search, click a product, its options, buy
        if not costs:  # no candidate query lists a winner: the target's own name is the best guess left
            return _Cost(_NONE, lower)
        return _Cost(1.0 + min(c.cost for c in costs), lower)

    # -- products -------------------------------------------------------------------------------------------
    def _terms(self, asin: str, goal: Any) -> tuple[int, int, float, list[str]]:
        """``(n_fixed, denom, r_type, goal options)`` of WebShop's reward for ``asin``.

        ``compute_reward`` is ``(n_att + n_opt + price_ok) / denom * r_type`` where only ``n_opt`` (the goal
        options some chosen value matches) depends on the options. One call with no options gives the rest
        (``n_fixed = n_att + price_ok``); the tests check the decomposition against the engine's own reward of
        every bought state."""
        key = (goal.task_id, asin)
        hit = self._terms_cache.get(key)
        if hit is None:
            reward, info = self.engine.reward(ShopState("done", asin=asin), goal)
            g = goal.goal_options
            if isinstance(g, dict):
                g_opts = list(g.items()) if self.engine.option_match == "upstream" else list(g.values())
            else:
                g_opts = list(g)
            denom = len(goal.attributes) + len(g_opts) + 1
            r_type = info["r_type"]
            n_fixed = round(reward * denom / r_type) if r_type else 0
            hit = self._terms_cache[key] = (n_fixed, denom, r_type, [normalize_color(o) for o in g_opts])
        return hit

    def bound(self, asin: str, goal: Any) -> float:
        """An upper bound on ``asin``'s reward over every option choice (every goal option matched)."""
        n_fixed, denom, r_type, g_opts = self._terms(asin, goal)
        return (n_fixed + len(g_opts)) / denom * r_type

    def choices(self, asin: str, goal: Any) -> list[tuple[float, dict[str, str]]]:
        """``(reward, options set by clicks)`` for every option choice a shopper can click on ``asin``."""
        key = (goal.task_id, asin)
        hit = self._choices.get(key)
        if hit is not None:
            return hit
        n_fixed, denom, r_type, g_opts = self._terms(asin, goal)
        groups = _settable(self.engine.catalogue.by_asin[asin]["options"])
        combos = 1
        for values in groups.values():
            combos *= len(values) + 1
        if combos > MAX_CHOICES:
            self.inexact_products[asin] = True
            target = self.engine.target_options(goal) if asin == goal.asin else {}
            groups = {n: [target[n]] for n in groups if n in target}
        # which goal options each value matches (option_reward's test), then each choice is a set union
        matches = {
            v: frozenset(i for i, g in enumerate(g_opts) if _matches(v, g))
            for values in groups.values()
            for v in values
        }
        names = list(groups)
        out = []
        for pick in itertools.product(*[[None, *groups[n]] for n in names]):
            matched = frozenset().union(*(matches[v] for v in pick if v is not None))
            chosen = {n: v for n, v in zip(names, pick, strict=True) if v is not None}
            out.append(((n_fixed + len(matched)) / denom * r_type, chosen))
        self._choices[key] = out
        return out


@functools.lru_cache(maxsize=1 << 16)
def _matches(value: str, goal_option: Any) -> bool:
    """``option_reward``'s test of one chosen value against one (normalised) goal option (products share values)."""
    return token_set_ratio(normalize_color(value), goal_option) > MATCH_THRESHOLD


def _settable(options: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per group, the values a click can set: a click key shared by two groups sets the later group (the
    engine's rule), so the earlier group cannot get that value."""
    owner: dict[str, str] = {}
    for name, values in options.items():
        for value in values:
            owner[click_key(value)] = name
    return {name: [v for v in values if owner[click_key(v)] == name] for name, values in options.items()}
