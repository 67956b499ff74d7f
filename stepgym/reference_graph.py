# Over 400 lines: the Agentic Reference Graph's construction, labels, growth and files.
"""ProAS's Agentic Reference Graph (ARG): per-task graphs of known-good progress, and the labels read from them.

The graph is a data structure, not a wrapper: trainers, offline labelers and :class:`~stepgym.wrappers.arg.ARGWrapper`
all use it through the same public methods, so the rules below are written once, here.

ProAS (*Progress-Aware Step Shaping*, docs/shapers.md §3) labels each step of an episode against the graph:

* ``Rea_t`` – the transition ``(s_t, a_t, s_{t+1})`` is an ARG edge;
* ``PA_t``  – ``s_{t+1}`` is an ARG vertex the episode has not visited before (the visited set holds the initial
  state and every state seen so far, in the ARG or not); every PA step is also Rea (``Rea := Rea or PA``);
* ``D_t``   – Future-Drift, the number of non-advancing steps from t to the end (:func:`stepgym.labels.future_drift`).

What is read from a step (:func:`step_edge`, :func:`trajectory_path`):

* **State**: what ``state_key(info)`` returns, turned into a string by :func:`state_id` (strings as they are,
  anything else as ``str()`` writes it, with sets and dicts sorted so a saved graph means the same in every
  process). ALFWorld's default key is ``stepgym/subgoal_key``, else ``stepgym/state_key``.
* **Action**: the parsed action when a text interface recorded one (the raw reply around it differs from rollout
  to rollout), else the action itself, normalised by :func:`stepgym.text_utils.normalize_action`.
* **Rejected**: the env marked the step inadmissible, or the reply did not parse (``FORMAT_VALID`` False, or a
  ``PARSED_ACTION`` that is not a non-empty string).
* **Success** (which trajectories may enter the graph): ``success_fn(trajectory)``; the default
  :func:`reached_goal` reads ``stepgym/won`` when the env reports it, else Gymnasium's convention: the episode
  *terminated* (not truncated) on a step with a positive reward.

How the graph is built (``add_trajectory`` / ``add_path``), per task (graphs never mix tasks):

1. **Only verified successes.** A trajectory that did not succeed is refused (``ValueError``).
2. **States are classes.** Keys that a user's ``state_key`` maps together are one vertex; on top of that,
   **order-insensitive steps are merged**: when two successful paths go ``u -a-> x -b-> t`` and
   ``u -b-> y -a-> t`` (the same two actions in either order), ``x`` and ``y`` become one class.
3. **Rejected steps and self-loops add no edge.** A rejected step that still changed the state (an env quirk, or
   a text interface's no-op) moves the path on without an edge: the next edge starts where the env really was.
4. **Detours are loop-erased.** When a trajectory revisits a class, the steps between the two visits are cut, so
   each added path is simple.
5. **The union stays a DAG.** An edge ``u -> v`` is added only if ``v`` cannot already reach ``u``; an edge that
   would close a cycle is dropped and counted (``stats()["dropped_cycle_edges"]``). First come, first kept:
   this guarantees a DAG after any number of unions, at the cost of not labelling the reverse direction of a
   route two successes took in opposite orders. A class merge that would close a cycle is skipped the same way.

Seeding a graph by playing known-good policies (an agent, the env's expert, stored walkthroughs) is a policy
loop, so it lives one layer up, in :mod:`stepgym.graph_seeding`.

Storage is JSON (never pickle) with a format name and version, written atomically with the permissions a normal
write gets: a crash mid-save leaves the previous file intact, and the next save removes the temporary file a
killed save left behind. Loading a truncated, foreign or future-version file raises a clear error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from stepgym import schema
from stepgym.atomic import atomic_write_json
from stepgym.errors import CorruptDataError, FormatVersionError
from stepgym.labels import future_drift
from stepgym.schema import Trajectory
from stepgym.text_utils import normalize_action

__all__ = [
    "ARG",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ARGLabels",
    "AgenticReferenceGraph",
    "PathLabeler",
    "default_state_key",
    "graph_from_json",
    "label_trajectory",
    "reached_goal",
    "state_id",
    "state_key_function",
    "step_edge",
    "trajectory_path",
]

FORMAT_NAME = "stepgym-arg"
FORMAT_VERSION = 1

StateKeyFn = Callable[[dict[str, Any]], Any]
SuccessFn = Callable[[Trajectory], bool]


# ---------------------------------------------------------------------------------------------------------------
# What the graph reads from a step: state, action, rejection, success
# ---------------------------------------------------------------------------------------------------------------
def _text(value: Any, text: Callable[[Any], str]) -> str:
    cls = type(value)
    if cls.__repr__ is object.__repr__ and cls.__str__ is object.__str__:
        raise TypeError(
            f"an ARG state key of type {cls.__name__} has no text form of its own (its repr is a memory address, "
            "different in every process): return a str, a number, or a tuple/list/set/dict of those from state_key"
        )
    return text(value)


def _canonical(value: Any) -> str:
    """``repr``-style text of a value inside a state key, with sets and dicts sorted."""
    if isinstance(value, tuple):
        items = [_canonical(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_canonical(v) for v in value) + "]"
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(sorted(_canonical(v) for v in value)) + "}" if value else "set()"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{_canonical(k)}: {_canonical(v)}" for k, v in value.items())) + "}"
    return _text(value, repr)


def state_id(key: Any) -> str:
    """The graph's name for a state key (the one conversion rule, used on every path).

    A string is itself. A tuple, list, set or dict gets the text ``str()`` gives it, except that sets and dicts
    are sorted, so the text does not depend on hash order and a graph saved by one process labels the same in
    another (``("a", 1)`` -> ``"('a', 1)"``, ``{"b", "a"}`` -> ``"{'a', 'b'}"``). Anything else is ``str(key)``
    (numbers, enums, ...). A type with no text form of its own (its ``repr`` is a memory address) raises
    ``TypeError``.
    """
    if isinstance(key, str):
        return key
    if isinstance(key, tuple | list | set | frozenset | dict):
        return _canonical(key)
    return _text(key, str)


def default_state_key(info: dict[str, Any]) -> str:
    """``stepgym/subgoal_key`` if the env provides it, else ``stepgym/state_key``; an env with neither needs an
    explicit ``state_key`` (the raw observation is never used silently: every no-op reads "Nothing happens.")."""
    for key in (schema.SUBGOAL_KEY, schema.STATE_KEY):
        value = info.get(key)
        if value is not None:
            return state_id(value)
    raise ValueError(
        "this env's info has neither 'stepgym/subgoal_key' nor 'stepgym/state_key': pass state_key=<function of "
        "info returning a comparable state key> to ARGWrapper / AgenticReferenceGraph"
    )


def state_key_function(state_key: StateKeyFn | str | None) -> Callable[[dict[str, Any]], str]:
    """The function of an info dict that a ``state_key`` argument stands for, returning :func:`state_id` of the
    key (one rule for every path): ``None`` is :func:`default_state_key`, a string names an info key (a missing
    one raises ``KeyError``), a callable is applied to the info."""
    if state_key is None:
        return default_state_key
    if isinstance(state_key, str):
        name = state_key

        def by_name(info: dict[str, Any]) -> str:
            if name not in info:
                raise KeyError(f"info has no {name!r} (the ARG's state_key)")
            return state_id(info[name])

        return by_name
    fn = state_key

    def keyed(info: dict[str, Any]) -> str:
        return state_id(fn(info))

    return keyed


def step_edge(action: Any, info: dict[str, Any]) -> tuple[str, bool]:
    """``(edge action, rejected)`` of one step, from the action taken and the info the step returned.

    The edge action is the parsed action when a text interface recorded one, else the action, normalised.
    Rejected: the env marked the step inadmissible, or the reply did not parse into an action.
    """
    parsed = info.get(schema.PARSED_ACTION)
    has_parsed = isinstance(parsed, str) and bool(parsed)
    rejected = (
        info.get(schema.ADMISSIBLE) is False
        or info.get(schema.FORMAT_VALID) is False
        or (schema.PARSED_ACTION in info and not has_parsed)
    )
    return normalize_action(parsed if has_parsed else action), bool(rejected)


def trajectory_path(
    traj: Trajectory, state_key: StateKeyFn | str | None = None
) -> tuple[list[str], list[str], list[bool]]:
    """What the graph reads from a recorded trajectory: states ``s_0..s_T``, edge actions and rejected flags."""
    key = state_key_function(state_key)
    states = [key(i) for i in traj.infos()]
    edges = [step_edge(s.action, s.info) for s in traj.steps]
    return states, [a for a, _ in edges], [r for _, r in edges]


def reached_goal(traj: Trajectory) -> bool:
    """The default success rule: ``stepgym/won`` when the env reports it; else Gymnasium's convention, the last
    step *terminated* the episode (not a truncation) with a positive reward."""
    last = traj.steps[-1].info if traj.steps else traj.initial_info
    if schema.WON in last:
        return bool(last[schema.WON])
    return bool(traj.steps) and traj.steps[-1].terminated and traj.steps[-1].reward > 0


# ---------------------------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ARGLabels:
    """Per-step ProAS labels of one episode (all of length T)."""

    reasonable: list[bool]
    progress: list[bool]
    future_drift: list[float]

    def as_dict(self) -> dict[str, list]:
        return {
            "reasonable": list(self.reasonable),
            "progress": list(self.progress),
            "future_drift": list(self.future_drift),
        }


class _TaskGraph:
    """One task's ARG: a DAG over state classes, with action-labelled edges and a class map of state keys."""

    def __init__(self) -> None:
        self.g = nx.DiGraph()
        self.cls: dict[str, str] = {}  # state key -> class representative (a member key)
        self.dropped_cycle_edges = 0
        self.trajectories = 0

    def class_of(self, key: str) -> str:
        return self.cls.get(key, key)

    def has_edge(self, u: str, action: str, v: str) -> bool:
        cu, cv = self.class_of(u), self.class_of(v)
        return self.g.has_edge(cu, cv) and action in self.g.edges[cu, cv]["actions"]

    def _node(self, key: str) -> str:
        c = self.class_of(key)
        if c not in self.g:
            self.g.add_node(c, members={key})
            self.cls[key] = c
        return c

    def add_path(self, keys: Sequence[str], actions: Sequence[str], errors: Sequence[bool]) -> int:
        """Add one successful path (``len(keys) == len(actions) + 1``); returns the number of new edges."""
        # Classes, loop-erased (a revisit cuts the detour); a step adds an edge only when it was accepted and
        # changed the class. A rejected step that changed the class is a jump (action None): no edge.
        path: list[str] = [self.class_of(keys[0])]
        acts: list[str | None] = []
        for t, action in enumerate(actions):
            nxt = self.class_of(keys[t + 1])
            if nxt == path[-1]:
                continue
            if nxt in path:
                cut = path.index(nxt)
                del path[cut + 1 :]
                del acts[cut:]
                continue
            path.append(nxt)
            acts.append(None if errors[t] else action)
        for c in path:  # only states on the erased path become vertices (detours do not)
            self._node(c)
        added = 0
        for u, a, v in zip(path, acts, path[1:], strict=False):
            if a is None:
                continue
            if self.g.has_edge(u, v):
                self.g.edges[u, v]["actions"].add(a)
                continue
            if nx.has_path(self.g, v, u):
                self.dropped_cycle_edges += 1
                continue
            self.g.add_edge(u, v, actions={a})
            added += 1
        self._merge_commuting(path, acts)
        self.trajectories += 1
        return added

    def _merge_commuting(self, path: list[str], acts: list[str | None]) -> None:
        """Merge x and y when ``u -a-> x -b-> t`` and ``u -b-> y -a-> t`` both exist (order-insensitive steps)."""
        for i in range(len(acts) - 1):
            u, x, t = path[i], path[i + 1], path[i + 2]
            a, b = acts[i], acts[i + 1]
            if a is None or b is None or not (self.g.has_edge(u, x) and self.g.has_edge(x, t)):
                continue
            for y in list(self.g.successors(u)):
                if y in (x, t) or not self.g.has_edge(y, t):
                    continue
                if b in self.g.edges[u, y]["actions"] and a in self.g.edges[y, t]["actions"]:
                    self._merge(x, y)

    def _merge(self, keep: str, gone: str) -> None:
        if nx.has_path(self.g, keep, gone) or nx.has_path(self.g, gone, keep):
            return  # merging would close a cycle
        for pred in list(self.g.predecessors(gone)):
            self._add_edge_actions(pred, keep, self.g.edges[pred, gone]["actions"])
        for succ in list(self.g.successors(gone)):
            self._add_edge_actions(keep, succ, self.g.edges[gone, succ]["actions"])
        members = self.g.nodes[gone]["members"]
        self.g.nodes[keep]["members"] |= members
        for m in members:
            self.cls[m] = keep
        self.g.remove_node(gone)

    def _add_edge_actions(self, u: str, v: str, actions: set[str]) -> None:
        if self.g.has_edge(u, v):
            self.g.edges[u, v]["actions"] |= actions
        else:
            self.g.add_edge(u, v, actions=set(actions))

    # -- persistence ----------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": [{"id": n, "members": sorted(self.g.nodes[n]["members"])} for n in sorted(self.g.nodes)],
            "edges": [
                {"source": u, "target": v, "actions": sorted(d["actions"])}
                for u, v, d in sorted(self.g.edges(data=True), key=lambda e: (e[0], e[1]))
            ],
            "dropped_cycle_edges": self.dropped_cycle_edges,
            "trajectories": self.trajectories,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _TaskGraph:
        tg = cls()
        for node in data["nodes"]:
            tg.g.add_node(node["id"], members=set(node["members"]))
            for m in node["members"]:
                tg.cls[m] = node["id"]
        for e in data["edges"]:
            tg.g.add_edge(e["source"], e["target"], actions=set(e["actions"]))
        tg.dropped_cycle_edges = int(data.get("dropped_cycle_edges", 0))
        tg.trajectories = int(data.get("trajectories", 0))
        if not nx.is_directed_acyclic_graph(tg.g):
            raise CorruptDataError("an ARG task graph in the file is not acyclic")
        return tg


_EMPTY = _TaskGraph()


class PathLabeler:
    """Labels one episode step by step against a task's graph as it stands at each step (the ProAS rule).

    Made by :meth:`AgenticReferenceGraph.labeler`; :meth:`AgenticReferenceGraph.label_path` and
    :class:`~stepgym.wrappers.arg.ARGWrapper` both label through it, so offline and online labels agree.
    """

    def __init__(self, graph: AgenticReferenceGraph, task_id: str, initial_state: Any) -> None:
        self._graph, self.task_id = graph, task_id
        self.state = state_id(initial_state)
        self._visited = {self._task().class_of(self.state)}
        self.reasonable: list[bool] = []
        self.progress: list[bool] = []

    def _task(self) -> _TaskGraph:
        return self._graph._tasks.get(self.task_id, _EMPTY)

    def step(self, action: Any, next_state: Any) -> tuple[bool, bool]:
        """Label the step ``state -action-> next_state``; returns ``(reasonable, progress)``."""
        tg, nxt = self._task(), state_id(next_state)
        c2 = tg.class_of(nxt)
        progress = c2 in tg.g and c2 not in self._visited
        reasonable = progress or tg.has_edge(self.state, normalize_action(action), nxt)
        self._visited.add(c2)
        self.state = nxt
        self.reasonable.append(bool(reasonable))
        self.progress.append(bool(progress))
        return bool(reasonable), bool(progress)

    def labels(self) -> ARGLabels:
        """The labels of the steps so far (Future-Drift computed over them)."""
        return ARGLabels(
            list(self.reasonable), list(self.progress), [float(d) for d in future_drift(self.progress)]
        )


# ---------------------------------------------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------------------------------------------
class AgenticReferenceGraph:
    """Per-task ARGs (keyed by ``stepgym/task_id``); see the module docstring for how they are built.

    Args:
        state_key: maps an info dict to the state key (a callable, or the name of an info key; default:
            :func:`default_state_key`). Non-string keys are converted by :func:`state_id`.
        success_fn: which recorded trajectories count as successes (default :func:`reached_goal`: the env's
            ``stepgym/won``, else terminated with a positive reward).

    Example (a two-step task built from raw sequences)::

        >>> arg = AgenticReferenceGraph()
        >>> arg.add_path("task", ["start", "half", "done"], ["do a", "do b"], won=True)
        2
        >>> arg.label_path("task", ["start", "half", "half"], ["Do  A", "wait"]).as_dict()
        {'reasonable': [True, False], 'progress': [True, False], 'future_drift': [1.0, 1.0]}
    """

    def __init__(self, state_key: StateKeyFn | str | None = None, success_fn: SuccessFn | None = None):
        self.state_key = state_key_function(state_key)
        #: the ``state_key`` argument as given (``None``, an info key name or a callable): what a copy of the graph
        #: in another process is built with (:attr:`state_key` itself may be a closure that does not pickle)
        self.state_key_spec = state_key
        self.success_fn: SuccessFn = success_fn if success_fn is not None else reached_goal
        self._tasks: dict[str, _TaskGraph] = {}

    # -- building -------------------------------------------------------------------------------------------
    def add_path(
        self,
        task_id: str,
        states: Sequence[Any],
        actions: Sequence[Any],
        *,
        won: bool,
        errors: Sequence[bool] | None = None,
    ) -> int:
        """Add a successful path given as state keys ``s_0..s_T`` and actions ``a_0..a_{T-1}``.

        ``won`` must be True (failed trajectories are refused); ``errors[t]`` marks steps the env rejected (they
        add no edge). Returns the number of new edges.
        """
        if not won:
            raise ValueError(
                f"refusing a trajectory of task {task_id!r} that did not succeed: the ARG holds only "
                "verified successes (see success_fn)"
            )
        if len(states) != len(actions) + 1:
            raise ValueError(f"need len(states) == len(actions) + 1, got {len(states)} and {len(actions)}")
        errs = [bool(e) for e in errors] if errors is not None else [False] * len(actions)
        if len(errs) != len(actions):
            raise ValueError("errors must have one flag per action")
        graph = self._tasks.setdefault(task_id, _TaskGraph())
        return graph.add_path([state_id(s) for s in states], [normalize_action(a) for a in actions], errs)

    def add_trajectory(self, traj: Trajectory) -> int:
        """Add a recorded trajectory; refuses one that did not succeed (``success_fn``)."""
        states, actions, errors = trajectory_path(traj, self.state_key)
        return self.add_path(traj.task_id, states, actions, won=self.success_fn(traj), errors=errors)

    # -- labelling ------------------------------------------------------------------------------------------
    def labeler(self, task_id: str, initial_state: Any) -> PathLabeler:
        """A :class:`PathLabeler` for one episode of ``task_id`` starting in ``initial_state``."""
        return PathLabeler(self, task_id, initial_state)

    def label_path(self, task_id: str, states: Sequence[Any], actions: Sequence[Any]) -> ARGLabels:
        """ProAS labels of a path against the graph as it stands (an unknown task has an empty graph)."""
        if len(states) != len(actions) + 1:
            raise ValueError(f"need len(states) == len(actions) + 1, got {len(states)} and {len(actions)}")
        lab = self.labeler(task_id, states[0])
        for action, nxt in zip(actions, states[1:], strict=True):
            lab.step(action, nxt)
        return lab.labels()

    def label(self, traj: Trajectory) -> ARGLabels:
        """ProAS labels of a recorded trajectory (what ``ARGWrapper`` computes online)."""
        states, actions, _ = trajectory_path(traj, self.state_key)
        return self.label_path(traj.task_id, states, actions)

    # -- inspection -----------------------------------------------------------------------------------------
    @property
    def task_ids(self) -> list[str]:
        return sorted(self._tasks)

    def graph(self, task_id: str) -> nx.DiGraph:
        """A copy of one task's DAG (nodes: class ids with ``members``; edges with ``actions``)."""
        return self._tasks[task_id].g.copy()

    def is_dag(self) -> bool:
        return all(nx.is_directed_acyclic_graph(t.g) for t in self._tasks.values())

    def stats(self) -> dict[str, int]:
        return {
            "tasks": len(self._tasks),
            "vertices": sum(t.g.number_of_nodes() for t in self._tasks.values()),
            "edges": sum(t.g.number_of_edges() for t in self._tasks.values()),
            "trajectories": sum(t.trajectories for t in self._tasks.values()),
            "dropped_cycle_edges": sum(t.dropped_cycle_edges for t in self._tasks.values()),
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AgenticReferenceGraph) and self._to_json()["tasks"] == other._to_json()["tasks"]
        )

    __hash__ = None  # type: ignore[assignment] - mutable

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A graph crosses process boundaries (env workers, copies) as its JSON text, never as pickled objects.
        return graph_from_json, (self.to_json_text(), self.state_key_spec, self.success_fn)

    # -- persistence ----------------------------------------------------------------------------------------
    def _to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "tasks": {tid: self._tasks[tid].to_json() for tid in sorted(self._tasks)},
        }

    def to_json_text(self) -> str:
        """The graph as the JSON text :meth:`save` writes (equal graphs give equal texts)."""
        return json.dumps(self._to_json(), indent=1, sort_keys=True)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the graph as JSON, atomically (temporary file + fsync + rename in the same folder).

        The file gets the permissions a plain ``open(path, "w")`` would give (the umask for a new file, the old
        mode when it replaces one). Temporary files of this path left by a save that was killed are removed.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path)
        return atomic_write_json(path, self._to_json(), indent=1, sort_keys=True)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        state_key: StateKeyFn | str | None = None,
        success_fn: SuccessFn | None = None,
    ) -> AgenticReferenceGraph:
        """Read a graph written by :meth:`save`; clear errors for truncated, foreign or newer files."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CorruptDataError(
                f"{path} is not valid JSON (truncated or corrupt ARG file?): {exc}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise CorruptDataError(f"{path} is not a text file: {exc}") from exc
        return cls._from_data(data, str(path), state_key, success_fn)

    @classmethod
    def _from_data(
        cls, data: Any, where: str, state_key: StateKeyFn | str | None, success_fn: SuccessFn | None
    ) -> AgenticReferenceGraph:
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise FormatVersionError(
                f"{where} is not a stepgym ARG file (format {data.get('format') if isinstance(data, dict) else None!r})"
            )
        version = data.get("version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise FormatVersionError(
                f"{where} was written in ARG format version {version!r}; this stepgym reads versions <= "
                f"{FORMAT_VERSION}. Upgrade stepgym to read it."
            )
        arg = cls(state_key, success_fn)
        try:
            for tid, tdata in data["tasks"].items():
                arg._tasks[tid] = _TaskGraph.from_json(tdata)
        except (KeyError, TypeError, AttributeError) as exc:
            raise CorruptDataError(f"{where}: malformed ARG content ({type(exc).__name__}: {exc})") from exc
        return arg


ARG = AgenticReferenceGraph
"""Short alias of :class:`AgenticReferenceGraph`."""


def _pid_running(pid: int) -> bool:
    if os.name != "posix":
        return True  # no safe liveness probe: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(path: Path) -> None:
    """Delete this path's temporaries that no save is writing any more: ``.<name>.<pid>.<8 hex>.tmp`` whose
    writer process is gone (a killed save), and ``.<name>.<8 chars>.tmp`` from older versions (no writer to ask).
    Other files, other graphs' temporaries included, are left alone."""
    ours = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    legacy = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    for tmp in path.parent.iterdir():
        m = ours.fullmatch(tmp.name)
        if (m is not None and not _pid_running(int(m.group(1)))) or legacy.fullmatch(tmp.name):
            tmp.unlink(missing_ok=True)


def graph_from_json(
    text: str, state_key: StateKeyFn | str | None = None, success_fn: SuccessFn | None = None
) -> AgenticReferenceGraph:
    """The graph whose :meth:`~AgenticReferenceGraph.to_json_text` is ``text`` (how a graph crosses to another
    process: pickling one sends this text), with the given state key and success rule (as the constructor takes
    them). A foreign, newer or malformed text raises the errors :meth:`~AgenticReferenceGraph.load` raises."""
    return AgenticReferenceGraph._from_data(json.loads(text), "an ARG sent as JSON", state_key, success_fn)


def label_trajectory(graph: AgenticReferenceGraph, traj: Trajectory) -> ARGLabels:
    """Offline ProAS labels of a recorded trajectory (what ``ARGWrapper`` computes online)."""
    return graph.label(traj)
