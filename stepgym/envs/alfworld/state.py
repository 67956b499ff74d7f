"""Symbolic states of ALFWorld, computed from the engine's facts (never from observation text).

``world_facts`` keeps the facts that describe the world *now*: it drops Fast Downward's negated bookkeeping atoms
(``not_atlocation`` …, which remember where the agent has been), the history predicates (``checked``,
``examined``, ``wasinreceptacle``) and the static ones (types, affordances, receptacle locations). Two paths that
end in the same world state therefore get the same key, and two different world states never share one, however
alike their observations read ("Nothing happens." included).

``subgoal_key`` is the coarser view that ProAS's graph uses by default: where the agent is (the receptacle at its
location, or ``start``) (and whether it is open) plus the *progress facts*: what the agent holds, and the task-relevant properties of the
task's objects (clean/hot/cool/sliced, placed in a receptacle of the goal's type, the lamp switched on). World
details that do not matter for the task (a drawer left open, an object moved elsewhere) do not split it, so
steps that differ only in them fall into one class.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = [
    "STATIC_PREDICATES",
    "FactTexts",
    "TaskTargets",
    "agent_location",
    "describe_fact",
    "fact_texts",
    "progress_facts",
    "state_key",
    "step_keys",
    "subgoal_key",
    "world_facts",
]

STATIC_PREDICATES = frozenset(
    {
        "receptacleatlocation",
        "openable",
        "isreceptacleobject",
        "receptacletype",
        "cancontain",
        "objecttype",
        "cleanable",
        "heatable",
        "coolable",
        "pickupable",
        "moveable",
        "toggleable",
        "sliceable",
    }
)
HISTORY_PREDICATES = frozenset({"checked", "examined", "wasinreceptacle"})
_OBJECT_PROPERTIES = ("isclean", "ishot", "iscool", "issliced")
_PROGRESS_PREDICATES = frozenset(
    {"holds", "inreceptacle", "inreceptacleobject", *_OBJECT_PROPERTIES, "ison", "istoggled"}
)


class FactTexts(NamedTuple):
    """What the keys read from one engine fact: its lower-case predicate, argument names and world-fact text."""

    name: str
    args: tuple[str, ...]
    world: str  # "pred(arg, arg)", or "" when the fact is not a world fact (see ``world_facts``)


def describe_fact(name: str, args: Iterable[str]) -> FactTexts:
    """The texts of the fact ``name(args)`` (the one rule for which facts describe the world now)."""
    name, args = name.lower(), tuple(args)
    dropped = name.startswith("not_") or name in STATIC_PREDICATES or name in HISTORY_PREDICATES
    return FactTexts(name, args, "" if dropped else f"{name}({', '.join(args)})")


def fact_texts(fact: Any) -> FactTexts:
    """``describe_fact`` of an engine fact (a TextWorld ``Proposition`` or a native ``Fact``).

    The native engine's facts are immutable and made once per game, so they carry their texts
    (``stepgym_texts``) and the keys cost a lookup per fact instead of string building on every step.
    """
    texts = getattr(fact, "stepgym_texts", None)
    if texts is None:
        texts = describe_fact(fact.name, [v.name for v in fact.arguments])
    return texts


def world_facts(facts: Iterable[Any]) -> frozenset[str]:
    """The dynamic, present-tense facts as ``"pred(arg, arg)"`` strings."""
    return _world(list(map(fact_texts, facts)))


def _world(texts: list[FactTexts]) -> frozenset[str]:
    return frozenset(t.world for t in texts if t.world)


def state_key(facts: Iterable[Any]) -> str:
    """A short, stable key of the world state (sha1 of the sorted world facts)."""
    return _state_key(list(map(fact_texts, facts)))


def _state_key(texts: list[FactTexts]) -> str:
    text = "\n".join(sorted(_world(texts)))
    return "alfworld:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def step_keys(facts: Iterable[Any], targets: TaskTargets) -> tuple[str, str]:
    """``(state_key(facts), subgoal_key(facts, targets))``, reading each fact once."""
    facts = list(facts)
    try:  # the native engine's facts carry their texts
        texts = [f.stepgym_texts for f in facts]
    except AttributeError:
        texts = list(map(fact_texts, facts))
    return _state_key(texts), _subgoal_key(texts, targets)


class TaskTargets:
    """The object types a task is about, from ``traj_data.json``'s ``pddl_params`` (e.g. Apple → DiningTable)."""

    def __init__(self, pddl_params: dict[str, Any]):
        def low(key: str) -> str:
            return str(pddl_params.get(key) or "").lower()

        self.objects = {t for t in (low("object_target"), low("mrecep_target")) if t}
        self.parent = low("parent_target")
        self.toggle = low("toggle_target")

    @staticmethod
    def _type_of(name: str) -> str:
        return name.rsplit(" ", 1)[0].lower()

    def is_target_object(self, name: str) -> bool:
        return self._type_of(name) in self.objects

    def is_parent(self, name: str) -> bool:
        return bool(self.parent) and self._type_of(name) == self.parent

    def is_toggle(self, name: str) -> bool:
        return bool(self.toggle) and self._type_of(name) == self.toggle


def progress_facts(facts: Iterable[Any], targets: TaskTargets) -> frozenset[str]:
    """The goal-relevant facts (see the module docstring)."""
    return _progress(list(map(fact_texts, facts)), targets)


def _progress(texts: list[FactTexts], targets: TaskTargets) -> frozenset[str]:
    out = set()
    for name, args, _ in texts:
        if name not in _PROGRESS_PREDICATES:
            continue
        if name == "holds":
            out.add(f"holds({args[1]})")
        elif (
            name == "inreceptacle" and targets.is_target_object(args[0]) and targets.is_parent(args[1])
        ) or (
            name == "inreceptacleobject"
            and targets.is_target_object(args[0])
            and targets.is_target_object(args[1])
        ):
            out.add(f"in({args[0]}, {args[1]})")
        elif name in _OBJECT_PROPERTIES and targets.is_target_object(args[0]):
            out.add(f"{name}({args[0]})")
        elif name in ("ison", "istoggled") and targets.is_toggle(args[0]):
            out.add(f"on({args[0]})")
    return frozenset(out)


def agent_location(facts: Iterable[Any]) -> str:
    """The receptacle(s) at the agent's location, marked ``(open)`` when opened; ``"start"`` mid-room.

    Whether the receptacle in front of the agent is open is part of the location: opening it is real progress
    towards taking from or putting into it, while a drawer left open elsewhere no longer matters.
    """
    return _location(list(map(fact_texts, facts)))


def _location(texts: list[FactTexts]) -> str:
    where, at_loc, opened = None, {}, set()
    for name, args, _ in texts:
        if name == "atlocation":
            where = args[1]
        elif name == "receptacleatlocation":
            at_loc.setdefault(args[1], []).append(args[0])
        elif name == "opened":
            opened.add(args[0])
    if where is None or where not in at_loc:
        return "start"
    return ", ".join(r + (" (open)" if r in opened else "") for r in sorted(at_loc[where]))


def subgoal_key(facts: Iterable[Any], targets: TaskTargets) -> str:
    """Readable key: ``"at(desk 1); holds(alarmclock 2); on(desklamp 1)"`` (location first, then progress facts)."""
    return _subgoal_key(list(map(fact_texts, facts)), targets)


def _subgoal_key(texts: list[FactTexts], targets: TaskTargets) -> str:
    return "; ".join([f"at({_location(texts)})", *sorted(_progress(texts, targets))])
