"""WebShop's value oracle: the fewest actions to buy a product earning the best reachable reward, on the real engine.

WebShop's pages form a small graph (:class:`~stepgym.envs.webshop.engine.ShopEngine`'s transition function); only
``search[...]`` has unbounded arguments. The oracle therefore reasons per page kind instead of searching blindly:

* **best reward** ``B``: the best reward (WebShop's own ``compute_reward``, every reachable option choice) over the
  *candidate products*: the goal's target and every product the oracle's candidate queries list (the expert's query,
  the target's name, the instruction). A bought product with reward >= ``B`` is a success;
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

import itertools
from dataclasses import dataclass
from typing import Any

from stepgym.envs.webshop.engine import PRODUCT_WINDOW, ShopState, click_key
from stepgym.values.base import Remember, Value

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
        candidates = dict.fromkeys([goal.asin, *(a for q in self.queries for a in engine.results(q))])
        self._choices = {asin: oracle.choices(asin, goal) for asin in candidates}
        self.best = max(max(r for r, _ in ch) for ch in self._choices.values())
        self._wins: dict[str, list[dict[str, str]]] = {}

    def winning(self, oracle: WebShopOracle, asin: str) -> list[dict[str, str]]:
        """The option choices (group -> value; groups left out stay as they are) with reward >= best."""
        wins = self._wins.get(asin)
        if wins is None:
            choices = self._choices.get(asin) or oracle.choices(asin, self.goal)
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
        out = []
        for rank, asin in enumerate(self.engine.results(query)):
            clicks = facts.clicks(self, asin, {})
            if clicks is not None:
                moves = abs(rank // PRODUCT_WINDOW + 1 - page)
                out.append(_Cost(moves + 1.0 + clicks + 1.0, moves + 1.0 + clicks + 1.0))
        return out

    def _search_cost(self, facts: _GoalFacts) -> _Cost:
        costs = [c for q in facts.queries for c in self._results_cost(q, 1, facts)]
        fewest = min(
            (facts.clicks(self, a, {}) for a in facts._choices if facts.clicks(self, a, {}) is not None),
            default=0,
        )
        lower = 1.0 + 1.0 + fewest + 1.0  # search, click a product, its options, buy
        if not costs:  # no candidate query lists a winner: the target's own name is the best guess left
            return _Cost(_NONE, lower)
        return _Cost(1.0 + min(c.cost for c in costs), lower)

    # -- products -------------------------------------------------------------------------------------------
    def choices(self, asin: str, goal: Any) -> list[tuple[float, dict[str, str]]]:
        """``(reward, options set by clicks)`` for every option choice a shopper can click on ``asin``."""
        key = (goal.task_id, asin)
        hit = self._choices.get(key)
        if hit is not None:
            return hit
        product = self.engine.catalogue.by_asin[asin]
        groups = _settable(product["options"])
        combos = 1
        for values in groups.values():
            combos *= len(values) + 1
        if combos > MAX_CHOICES:
            self.inexact_products[asin] = True
            picks = [self.engine.target_options(goal)] if asin == goal.asin else [{}]
        else:
            names = list(groups)
            picks = [
                {n: v for n, v in zip(names, pick, strict=True) if v is not None}
                for pick in itertools.product(*[[None, *groups[n]] for n in names])
            ]
        out = []
        for pick in picks:
            bought = ShopState("done", asin=asin, options=tuple(sorted(pick.items())))
            out.append((self.engine.reward(bought, goal)[0], pick))
        self._choices[key] = out
        return out


def _settable(options: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per group, the values a click can set: a click key shared by two groups sets the later group (the
    engine's rule), so the earlier group cannot get that value."""
    owner: dict[str, str] = {}
    for name, values in options.items():
        for value in values:
            owner[click_key(value)] = name
    return {
        name: [v for v in values if owner[click_key(v)] == name] for name, values in options.items()
    }
