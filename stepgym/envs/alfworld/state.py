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
from typing import Any

__all__ = [
    "STATIC_PREDICATES",
    "TaskTargets",
    "agent_location",
    "progress_facts",
    "state_key",
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


def _fact_text(fact: Any) -> tuple[str, tuple[str, ...]]:
    return fact.name.lower(), tuple(v.name for v in fact.arguments)


def world_facts(facts: Iterable[Any]) -> frozenset[str]:
    """The dynamic, present-tense facts as ``"pred(arg, arg)"`` strings."""
    out = set()
    for fact in facts:
        name, args = _fact_text(fact)
        if name.startswith("not_") or name in STATIC_PREDICATES or name in HISTORY_PREDICATES:
            continue
        out.add(f"{name}({', '.join(args)})")
    return frozenset(out)


def state_key(facts: Iterable[Any]) -> str:
    """A short, stable key of the world state (sha1 of the sorted world facts)."""
    text = "\n".join(sorted(world_facts(facts)))
    return "alfworld:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


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
    out = set()
    for fact in facts:
        name, args = _fact_text(fact)
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
    where, at_loc, opened = None, {}, set()
    for fact in facts:
        name = fact.name.lower()
        if name == "atlocation":
            where = fact.arguments[1].name
        elif name == "receptacleatlocation":
            at_loc.setdefault(fact.arguments[1].name, []).append(fact.arguments[0].name)
        elif name == "opened":
            opened.add(fact.arguments[0].name)
    if where is None or where not in at_loc:
        return "start"
    return ", ".join(r + (" (open)" if r in opened else "") for r in sorted(at_loc[where]))


def subgoal_key(facts: Iterable[Any], targets: TaskTargets) -> str:
    """Readable key: ``"at(desk 1); holds(alarmclock 2); on(desklamp 1)"`` (location first, then progress facts)."""
    facts = list(facts)
    return "; ".join([f"at({agent_location(facts)})", *sorted(progress_facts(facts, targets))])
