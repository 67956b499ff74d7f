"""TextCraft's commands on a frozen recipe book: ``get``, ``craft ... using ...`` and ``inventory``, as upstream.

The rules and every message are those of upstream's ``TextCraft.step`` (``textcraft/env.py``, 0.0.3), restated:

* a command is read with upstream's three patterns (``craft (.*) using (.*)``, ``get ([0-9]+) (.*)``,
  ``inventory``), each matched at the start of the text, case-sensitive, with no trimming;
* ``get N <name>``: ``minecraft:<name with _ for spaces>`` must be a valid item that is neither craftable nor a
  tag; then N are added (``Got N <name>``), else ``Could not find <name>``;
* ``craft [N] <output> using <n1> <name1>, <n2> <name2>, ...``: every input must be held in at least its count
  (``Could not find enough items to craft <output id>``); the inputs must equal one of the output's recipes, input
  by input, a tag input accepting any item of the tag and every count exact, nothing extra (``Could not find a
  valid recipe for ...``); the inputs are removed and the recipe's own count added (``Crafted <count>
  <output id>``); N is ignored;
* ``inventory`` lists the held items in the order they were first added (an item that runs out is removed).

Upstream's reset appends, to the recipe list of every item it walks, the recipes of that item's ingredients, so
after a reset upstream also accepts ``craft <item> using <inputs of a recipe of one of its ingredients>`` (and
yields that ingredient). stepgym does not (docs/textcraft.md, "Differences from upstream").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepgym.envs.textcraft.recipes import PREFIX, Book, Ingredient, Recipe, display_name

__all__ = ["Engine", "Outcome"]

_CRAFT = re.compile(r"craft (.*) using (.*)")
_GET = re.compile(r"get ([0-9]+) (.*)")
_INVENTORY = re.compile(r"inventory")
_COUNT = re.compile(r"([0-9]+) (.*)")


@dataclass(frozen=True)
class Outcome:
    """What one command did: the observation, whether it was accepted, and what it changed."""

    observation: str
    accepted: bool
    crafted: str | None = None  # the item id a craft yielded
    kind: str = ""  # "get", "craft", "inventory" or "" (refused)


@dataclass(frozen=True)
class _Ref:
    """A name read from a command: an item id, or a tag (upstream's ``ItemTag``)."""

    item: str | None
    tag: str | None

    def __repr__(self) -> str:  # upstream's dataclass repr, quoted in one of its messages
        return f"ItemTag(tag={self.tag!r}, item_id={self.item!r})"


class _Failed(Exception):
    pass


class Engine:
    """One TextCraft world: the book, the goal and the inventory (``dict`` in insertion order, as upstream's)."""

    def __init__(self, book: Book, goal: str):
        self.book = book
        self.goal = goal
        self.inventory: dict[str, int] = {}

    # -- reading names --------------------------------------------------------------------------------------
    def _ref(self, text: str) -> _Ref:
        name = PREFIX + text.replace(" ", "_")
        return _Ref(None, name) if name in self.book.tags else _Ref(name, None)

    def step(self, command: str) -> Outcome:
        """Apply one command (any text); a refused one leaves the world as it was."""
        try:
            match = _CRAFT.match(command)
            if match:
                return self._craft(match.group(1), match.group(2))
            match = _GET.match(command)
            if match:
                return self._get(match.group(2), int(match.group(1)))
            if _INVENTORY.match(command):
                return Outcome(self.inventory_text(), True, kind="inventory")
            raise _Failed(f"Could not execute {command}")
        except _Failed as exc:
            return Outcome(str(exc), False)

    def inventory_text(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + "".join(f"[{display_name(k)}] ({v}) " for k, v in self.inventory.items())

    def _get(self, text: str, amount: int) -> Outcome:
        ref = self._ref(text)
        if ref.item is None or not self.book.gettable(ref.item):
            raise _Failed(f"Could not find {text}")
        self.inventory[ref.item] = self.inventory.get(ref.item, 0) + amount
        return Outcome(f"Got {amount} {text}", True, kind="get")

    def _craft(self, output_text: str, inputs_text: str) -> Outcome:
        counted = _COUNT.match(output_text)
        output = self._ref(counted.group(2) if counted else output_text)
        out_count = int(counted.group(1)) if counted else 1
        given: list[tuple[_Ref, int]] = []
        for part in inputs_text.split(","):
            m = _COUNT.match(part.strip())
            if not m:
                raise _Failed(f"Wrong item format: {part.strip()}")
            given.append((self._ref(m.group(2)), int(m.group(1))))
        for ref, count in given:
            if ref.item is None or self.inventory.get(ref.item, -1) < count:
                raise _Failed(f"Could not find enough items to craft {output.item}")
        recipe = self._matching(output, given)
        if recipe is None:
            raise _Failed(
                f"Could not find a valid recipe for ItemTagWithCount(item_tag={output!r}, count={out_count!r})"
            )
        for ref, count in given:
            assert ref.item is not None
            left = self.inventory[ref.item] - count
            if left == 0:
                del self.inventory[ref.item]
            else:
                self.inventory[ref.item] = left
        self.inventory[recipe.output] = self.inventory.get(recipe.output, 0) + recipe.count
        return Outcome(f"Crafted {recipe.count} {recipe.output}", True, recipe.output, "craft")

    def _accepts(self, want: Ingredient, ref: _Ref) -> bool:
        if want.item is not None:
            return ref.item == want.item
        return ref.tag == want.tag or (ref.item is not None and self.book.item_tag.get(ref.item) == want.tag)

    def _matching(self, output: _Ref, given: list[tuple[_Ref, int]]) -> Recipe | None:
        """The first recipe of ``output`` whose inputs the given ones are, one for one (upstream's ``craft``)."""
        if output.item is None:
            return None
        for recipe in self.book.recipes.get(output.item, ()):
            left = list(given)
            ok = True
            for want in recipe.inputs:
                found = next((g for g in left if self._accepts(want, g[0])), None)
                if found is None or found[1] != want.count:
                    ok = False
                    break
                left.remove(found)
            if ok and not left:
                return recipe
        return None
