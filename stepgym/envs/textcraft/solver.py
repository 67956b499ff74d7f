"""The exact fewest ``get`` + ``craft`` commands from an inventory to crafting a TextCraft goal, and a plan.

Why this is exact (docs/textcraft.md repeats it):

* Holding more never hurts (a craft only checks that enough is held), so one ``get`` of a base item serves every
  use of it: a plan fetches each base item it lacks once, in the amount it lacks. ``inventory`` changes nothing.
* The recipe graph of the book has no cycles (checked when a goal is prepared), so any multiset of crafts whose
  item balance never goes negative at the end can be played in an order (ingredients first): a plan is a multiset
  of crafts plus a set of fetched base items, and its length is their count.
* The search walks the goal's items consumers-first (a topological order), so when it reaches an item every craft
  that consumes it is chosen: its demand is known. It uses the held amount first (never worse), fetches a base
  item that is short (cost 1), and for a crafted item tries every *minimal* way to cover the shortfall with the
  item's recipe instances (a recipe with a member chosen for each tag input; several recipes and several members
  may be mixed, which matters when leftovers are held). A craft beyond a minimal cover can be dropped from any
  plan without making it longer or infeasible, so the minimum over these choices is the optimum. Subproblems are
  memoised by the pending demand (the next item is the first pending one in the order).
* Symmetry: members of a tag (the eight woods' planks) whose whole sub-tree is held nowhere, used by nothing else
  and shaped alike (same recipes and counts) are interchangeable; a plan using several of them never beats one
  using a single one (one fetch instead of several, and ``ceil(a/c) + ceil(b/c) >= ceil((a+b)/c)``), so the search
  tries only the first of each such class. ``tests/test_env_textcraft.py`` checks the values against a
  brute-force breadth-first search over engine commands.

The goal itself must be crafted (the episode ends on that craft), so a held goal item does not count.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from stepgym.envs.textcraft.recipes import Book, Recipe, display_name

__all__ = ["Craft", "GoalTree", "Plan", "feasible_items", "goal_tree"]

INF = math.inf


@dataclass(frozen=True)
class Craft:
    """A recipe with a concrete item for every tag input: the inputs as ``(item, count)`` in the recipe's order."""

    recipe: Recipe
    inputs: tuple[tuple[str, int], ...]

    @property
    def output(self) -> str:
        return self.recipe.output

    @property
    def count(self) -> int:
        return self.recipe.count

    @functools.cached_property
    def command(self) -> str:
        """The command that performs it: ``craft 4 oak planks using 1 oak logs``."""
        parts = ", ".join(f"{c} {display_name(i)}" for i, c in self.inputs)
        return f"craft {self.count} {display_name(self.output)} using {parts}"


@dataclass(frozen=True)
class Plan:
    """An optimal plan from a state: the crafts (with how often) and the base items to fetch (with how many)."""

    cost: float
    crafts: tuple[tuple[Craft, int], ...]
    gets: tuple[tuple[str, int], ...]

    @property
    def feasible(self) -> bool:
        return self.cost < INF


def feasible_items(book: Book) -> frozenset[str]:
    """Every item some sequence of commands can bring into the inventory (a fixpoint over the recipes)."""
    ok = {item for item in book.items if book.gettable(item)}
    changed = True
    while changed:
        changed = False
        for item, recipes in book.recipes.items():
            if item in ok:
                continue
            for recipe in recipes:
                if all(
                    (i.item in ok)
                    if i.item is not None
                    else any(m in ok for m in book.members.get(str(i.tag), ()))
                    for i in recipe.inputs
                ):
                    ok.add(item)
                    changed = True
                    break
    return frozenset(ok)


class GoalTree:
    """Everything about one goal the solver needs, prepared once: its items, their crafts, a topological order."""

    def __init__(self, book: Book, goal: str):
        self.book = book
        self.goal = goal
        ok = feasible_items(book)
        self.crafts: dict[str, tuple[Craft, ...]] = {}
        self.base: set[str] = set()
        order: list[str] = []
        state: dict[str, int] = {}  # 1 on the stack, 2 done

        def visit(item: str) -> None:
            if state.get(item) == 2:
                return
            if state.get(item) == 1:
                raise ValueError(f"the recipes of {goal} have a cycle through {item}")
            state[item] = 1
            if book.gettable(item):
                self.base.add(item)
            else:
                crafts = list(self._crafts_of(item, ok))
                self.crafts[item] = tuple(crafts)
                for craft in crafts:
                    for inp, _ in craft.inputs:
                        visit(inp)
            state[item] = 2
            order.append(item)

        visit(goal)
        self.order: tuple[str, ...] = tuple(reversed(order))  # consumers first
        self.index = {item: k for k, item in enumerate(self.order)}
        self.feasible = goal in ok
        #: ``get 1 <item>`` for every base item of the tree (the env lists them as admissible)
        self.get_commands = tuple(sorted(f"get 1 {display_name(b)}" for b in self.base))
        self._prepare_symmetry()

    def _crafts_of(self, item: str, ok: frozenset[str]) -> Iterator[Craft]:
        for recipe in self.book.recipes.get(item, ()):
            choices: list[list[tuple[str, int]]] = []
            for inp in recipe.inputs:
                if inp.item is not None:
                    names = [inp.item] if inp.item in ok else []
                else:
                    names = [m for m in self.book.members.get(str(inp.tag), ()) if m in ok]
                choices.append([(n, inp.count) for n in names])
            for combo in _product(choices):
                yield Craft(recipe, tuple(combo))

    # -- symmetry of tag members ----------------------------------------------------------------------------
    def _sub(self, item: str) -> frozenset[str]:
        out = {item}
        stack = [item]
        while stack:
            for craft in self.crafts.get(stack.pop(), ()):
                for inp, _ in craft.inputs:
                    if inp not in out:
                        out.add(inp)
                        stack.append(inp)
        return frozenset(out)

    def _shape(self, item: str) -> object:
        if item in self.base:
            return "base"
        return tuple(
            sorted(
                (repr((c.count, tuple((n, self._shape(i)) for i, n in c.inputs))) for c in self.crafts[item]),
            )
        )

    def _prepare_symmetry(self) -> None:
        """Classes of interchangeable tag members (held nowhere is checked per state)."""
        tag_members: dict[str, set[str]] = {}
        named: set[str] = set()  # items some recipe asks for by name
        for crafts in self.crafts.values():
            for craft in crafts:
                for inp, want in zip(craft.inputs, craft.recipe.inputs, strict=True):
                    if want.item is not None:
                        named.add(inp[0])
                    else:
                        tag_members.setdefault(str(want.tag), set()).add(inp[0])
        self.sub = {m: self._sub(m) for ms in tag_members.values() for m in ms}
        self.classes: list[tuple[str, ...]] = []
        for tag, members in tag_members.items():
            ordered = [m for m in self.book.members[tag] if m in members]
            private = []
            for m in ordered:
                inner = self.sub[m] - {m}
                used_outside = any(
                    inp in inner
                    for out, crafts in self.crafts.items()
                    if out not in self.sub[m]
                    for craft in crafts
                    for inp, _ in craft.inputs
                )
                if m not in named and not used_outside:
                    private.append(m)
            by_shape: dict[str, list[str]] = {}
            for m in private:
                by_shape.setdefault(repr(self._shape(m)), []).append(m)
            for group in by_shape.values():
                disjoint = all(
                    not (self.sub[a] & self.sub[b]) for k, a in enumerate(group) for b in group[k + 1 :]
                )
                if len(group) > 1 and disjoint:
                    self.classes.append(tuple(group))

    def _excluded(self, held: Mapping[str, int]) -> frozenset[str]:
        """Members the search may skip in this state: all but the first untouched member of each class."""
        out: set[str] = set()
        for group in self.classes:
            untouched = [m for m in group if not any(held.get(i, 0) > 0 for i in self.sub[m])]
            out.update(untouched[1:])
        return frozenset(out)

    # -- the search -----------------------------------------------------------------------------------------
    def solve(self, inventory: Mapping[str, int]) -> Plan:
        """An optimal plan from ``inventory`` (``Plan.cost`` is ``inf`` when the goal cannot be crafted)."""
        if not self.feasible:
            return Plan(INF, (), ())
        held = {k: v for k, v in inventory.items() if v > 0 and k != self.goal}
        excluded = self._excluded(held)
        usable: dict[str, tuple[Craft, ...]] = {}
        memo: dict[frozenset[tuple[str, int]], tuple[float, tuple]] = {}
        index = self.index
        base = self.base

        def crafts_of(item: str) -> tuple[Craft, ...]:
            if item not in usable:
                usable[item] = tuple(
                    c for c in self.crafts[item] if not any(i in excluded for i, _ in c.inputs)
                )
            return usable[item]

        def best(demand: frozenset[tuple[str, int]]) -> tuple[float, tuple]:
            # the pending item first in the topological order: every craft that consumes it is already chosen
            if not demand:
                return (0.0, ())
            if demand in memo:
                return memo[demand]
            item = min((i for i, _ in demand), key=index.__getitem__)
            need = dict(demand)
            short = need.pop(item) - held.get(item, 0)
            rest = frozenset(need.items())
            if short <= 0:
                result = best(rest)
            elif item in base:
                cost, plan = best(rest)
                result = (cost + 1, (("get", item, short), *plan))
            else:
                result = (INF, ())
                for cover in _covers(crafts_of(item), short):
                    more = dict(need)
                    n = 0
                    for craft, times in cover:
                        n += times
                        for inp, c in craft.inputs:
                            more[inp] = more.get(inp, 0) + c * times
                    cost, plan = best(frozenset(more.items()))
                    if cost + n < result[0]:
                        result = (cost + n, (("craft", cover), *plan))
            memo[demand] = result
            return result

        cost, steps = best(frozenset({(self.goal, 1)}))
        if cost == INF:
            return Plan(INF, (), ())
        made: list[tuple[Craft, int]] = []
        gets: list[tuple[str, int]] = []
        for step in steps:
            if step[0] == "get":
                gets.append((step[1], step[2]))
            else:
                made.extend(step[1])
        return Plan(cost, tuple(made), tuple(sorted(gets)))

    def next_command(self, inventory: Mapping[str, int], plan: Plan | None = None) -> str | None:
        """An optimal next command (a ``get`` of a missing base item first, then the deepest ready craft)."""
        plan = plan if plan is not None else self.solve(inventory)
        if not plan.feasible:
            return None
        if plan.gets:
            item, amount = plan.gets[0]
            return f"get {amount} {display_name(item)}"
        ready = [craft for craft, _ in plan.crafts if all(inventory.get(i, 0) >= c for i, c in craft.inputs)]
        if not ready:
            return None
        return max(ready, key=lambda c: (self.index[c.output], c.command)).command


def _product(choices: list[list[tuple[str, int]]]) -> Iterator[list[tuple[str, int]]]:
    if not choices:
        yield []
        return
    for head in choices[0]:
        for tail in _product(choices[1:]):
            yield [head, *tail]


def _covers(crafts: tuple[Craft, ...], short: int) -> Iterator[tuple[tuple[Craft, int], ...]]:
    """Every minimal way to make at least ``short`` items with these crafts (no craft could be left out)."""

    def rec(
        k: int, made: int, chosen: tuple[tuple[Craft, int], ...]
    ) -> Iterator[tuple[tuple[Craft, int], ...]]:
        if made >= short:
            if all(made - c.count < short for c, _ in chosen):
                yield chosen
            return
        if k == len(crafts):
            return
        craft = crafts[k]
        for times in range(math.ceil((short - made) / craft.count), -1, -1):
            yield from rec(k + 1, made + times * craft.count, (*chosen, (craft, times)) if times else chosen)

    yield from rec(0, 0, ())


@functools.lru_cache(maxsize=1024)
def goal_tree(book: Book, goal: str) -> GoalTree:
    """The prepared :class:`GoalTree` of ``goal`` (cached: one per goal per process)."""
    return GoalTree(book, goal)
