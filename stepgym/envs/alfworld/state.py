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

Every key is computed from a ``KeyFacts``: what the keys read of a state's facts. The native engine keeps one per
state, updated with the few facts each step adds and removes, so a step's keys never re-read the ~250 facts of
the state; for the TextWorld engine (and the functions below that take a fact list) one is built from the list.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = [
    "STATIC_PREDICATES",
    "FactTexts",
    "KeyFacts",
    "TaskTargets",
    "agent_location",
    "describe_fact",
    "fact_text_fields",
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
    """The texts of the fact ``name(args)``."""
    return FactTexts._make(fact_text_fields(name, tuple(args)))


def fact_text_fields(name: str, args: tuple[str, ...]) -> tuple[str, tuple[str, ...], str]:
    """``describe_fact`` as a plain tuple, the one rule for which facts describe the world now (a plain tuple
    for facts made by the hundred: the garbage collector stops tracking tuples of strings)."""
    name, world = _predicate(name)
    return (name, args, f"{name}({', '.join(args)})" if world else "")


@functools.lru_cache(maxsize=1024)
def _predicate(name: str) -> tuple[str, bool]:
    """A predicate's lower-case name, and whether its facts are world facts (decided once per name)."""
    name = name.lower()
    return name, not (name.startswith("not_") or name in STATIC_PREDICATES or name in HISTORY_PREDICATES)


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
    return KeyFacts(map(fact_texts, facts)).world()


def state_key(facts: Iterable[Any]) -> str:
    """A short, stable key of the world state (sha1 of the sorted world facts)."""
    return KeyFacts(map(fact_texts, facts)).state_key()


def step_keys(facts: Iterable[Any], targets: TaskTargets) -> tuple[str, str]:
    """``(state_key(facts), subgoal_key(facts, targets))``, reading each fact once."""
    return KeyFacts(map(fact_texts, facts)).keys(targets)


class TaskTargets:
    """The object types a task is about, from ``traj_data.json``'s ``pddl_params`` (e.g. Apple → DiningTable)."""

    def __init__(self, pddl_params: dict[str, Any]):
        def low(key: str) -> str:
            return str(pddl_params.get(key) or "").lower()

        self.objects = {t for t in (low("object_target"), low("mrecep_target")) if t}
        self.parent = low("parent_target")
        self.toggle = low("toggle_target")
        self._types: dict[str, str] = {}  # object name -> its type (asked again on every reset)

    def _type_of(self, name: str) -> str:
        kind = self._types.get(name)
        if kind is None:
            kind = self._types[name] = name.rsplit(" ", 1)[0].lower()
        return kind

    def is_target_object(self, name: str) -> bool:
        return self._type_of(name) in self.objects

    def is_parent(self, name: str) -> bool:
        return bool(self.parent) and self._type_of(name) == self.parent

    def is_toggle(self, name: str) -> bool:
        return bool(self.toggle) and self._type_of(name) == self.toggle


def progress_facts(facts: Iterable[Any], targets: TaskTargets) -> frozenset[str]:
    """The goal-relevant facts (see the module docstring)."""
    return KeyFacts(map(fact_texts, facts)).progress(targets)


def _progress_fact(name: str, args: tuple[str, ...], targets: TaskTargets) -> str:
    """The progress fact that the fact ``name(args)`` stands for, or "" (the rule of ``progress_facts``)."""
    if name == "holds":
        return f"holds({args[1]})"
    if (name == "inreceptacle" and targets.is_target_object(args[0]) and targets.is_parent(args[1])) or (
        name == "inreceptacleobject"
        and targets.is_target_object(args[0])
        and targets.is_target_object(args[1])
    ):
        return f"in({args[0]}, {args[1]})"
    if name in _OBJECT_PROPERTIES and targets.is_target_object(args[0]):
        return f"{name}({args[0]})"
    if name in ("ison", "istoggled") and targets.is_toggle(args[0]):
        return f"on({args[0]})"
    return ""


def agent_location(facts: Iterable[Any]) -> str:
    """The receptacle(s) at the agent's location, marked ``(open)`` when opened; ``"start"`` mid-room.

    Whether the receptacle in front of the agent is open is part of the location: opening it is real progress
    towards taking from or putting into it, while a drawer left open elsewhere no longer matters.
    """
    return KeyFacts(map(fact_texts, facts)).location()


def subgoal_key(facts: Iterable[Any], targets: TaskTargets) -> str:
    """Readable key: ``"at(desk 1); holds(alarmclock 2); on(desklamp 1)"`` (location first, then progress facts)."""
    return KeyFacts(map(fact_texts, facts)).subgoal_key(targets)


_LOCATION_PREDICATES = frozenset({"atlocation", "receptacleatlocation", "opened"})
_KEYED_PREDICATES = _LOCATION_PREDICATES | _PROGRESS_PREDICATES


def _count_in(counts: dict, key: Any) -> None:
    counts[key] = counts.get(key, 0) + 1


def _count_out(counts: dict, key: Any) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


class KeyFacts:
    """What the keys read of a state's facts: its world facts, and (by predicate, in fact order) the facts that
    the location and the progress facts are made of. Every key above is computed from one.

    Reading all ~250 facts of a state two or three times on every step was most of the keys' cost, while a step
    changes a handful of them. So an engine that knows which facts each step adds and removes (the native one)
    keeps one ``KeyFacts`` per state with :meth:`add`/:meth:`discard`; the others build one from the whole fact
    list. Once asked for a task's progress facts, it also keeps those up to date fact by fact. Each fact counts
    once per time it is added (a multiset), so adding then discarding it always restores the previous keys.
    """

    __slots__ = ("_by_pred", "_progress", "_state_key", "_targets", "_world")

    def __init__(self, texts: Iterable[tuple[str, tuple[str, ...], str]] = ()):
        self._world: dict[str, int] = {}  # world-fact text -> count
        self._by_pred: dict[str, dict[tuple[str, ...], int]] = {}  # of _KEYED_PREDICATES: args -> count
        self._targets: TaskTargets | None = None  # the task whose progress facts ``_progress`` counts
        self._progress: dict[str, int] = {}
        self._state_key = ""  # of _world, "" until asked (again) after a change
        for texts_ in texts:
            self.add(texts_)

    def add(self, texts: tuple[str, tuple[str, ...], str]) -> None:
        """Add one fact: its ``fact_texts`` (or the same three fields as a plain tuple)."""
        self._count(texts, _count_in)

    def discard(self, texts: tuple[str, tuple[str, ...], str]) -> None:
        """Remove one fact added before."""
        self._count(texts, _count_out)

    def _count(self, texts: tuple[str, tuple[str, ...], str], count: Any) -> None:
        """Count one fact in (``_count_in``) or out (``_count_out``) of every table that reads it."""
        name, args, world = texts
        if world:
            count(self._world, world)
            self._state_key = ""
        if name in _KEYED_PREDICATES:
            count(self._by_pred.setdefault(name, {}), args)
            if self._targets is not None and name in _PROGRESS_PREDICATES:
                progress = _progress_fact(name, args, self._targets)
                if progress:
                    count(self._progress, progress)

    def copy(self) -> KeyFacts:
        new = KeyFacts.__new__(KeyFacts)
        new._world = dict(self._world)
        new._by_pred = {name: dict(args) for name, args in self._by_pred.items()}
        new._targets, new._progress = self._targets, dict(self._progress)
        new._state_key = self._state_key
        return new

    def world(self) -> frozenset[str]:
        """See ``world_facts``."""
        return frozenset(self._world)

    def state_key(self) -> str:
        """See ``state_key`` (kept until the world facts change: many steps leave them as they are)."""
        if not self._state_key:
            text = "\n".join(sorted(self._world))
            self._state_key = "alfworld:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
        return self._state_key

    def location(self) -> str:
        """See ``agent_location``: the agent is where the last ``atlocation`` fact puts it."""
        at = self._by_pred.get("atlocation")
        if not at:
            return "start"
        where = next(reversed(at))[1]
        here = sorted(r for r, loc in self._by_pred.get("receptacleatlocation", ()) if loc == where)
        if not here:
            return "start"
        opened = {args[0] for args in self._by_pred.get("opened", ())}
        return ", ".join(r + (" (open)" if r in opened else "") for r in here)

    def progress(self, targets: TaskTargets) -> frozenset[str]:
        """See ``progress_facts``."""
        if targets is not self._targets:
            self._targets, self._progress = targets, {}
            for name in _PROGRESS_PREDICATES & self._by_pred.keys():
                for args, count in self._by_pred[name].items():
                    progress = _progress_fact(name, args, targets)
                    if progress:
                        self._progress[progress] = self._progress.get(progress, 0) + count
        return frozenset(self._progress)

    def subgoal_key(self, targets: TaskTargets) -> str:
        """See ``subgoal_key``."""
        return "; ".join([f"at({self.location()})", *sorted(self.progress(targets))])

    def keys(self, targets: TaskTargets) -> tuple[str, str]:
        """``(state_key, subgoal_key)``."""
        return self.state_key(), self.subgoal_key(targets)
