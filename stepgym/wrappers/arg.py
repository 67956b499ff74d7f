"""ProAS's Agentic Reference Graph (ARG) and the wrapper that labels every step against it.

ProAS (seed paper 001; maths in ``shapers.md`` §3) labels each step of an episode against a graph of known-good
progress built from successful trajectories:

* ``Rea_t`` – the transition ``(s_t, a_t, s_{t+1})`` is an ARG edge;
* ``PA_t``  – ``s_{t+1}`` is an ARG vertex the episode has not visited before (the visited set holds the initial
  state and every state seen so far, in the ARG or not); every PA step is also Rea (``Rea := Rea or PA``);
* ``D_t``   – Future-Drift, the number of non-advancing steps from t to the end (:func:`stepgym.labels.future_drift`).

How the graph is built (``AgenticReferenceGraph.add_trajectory``), per task (graphs never mix tasks):

1. **Only verified successes.** A trajectory that did not win is refused (``ValueError``).
2. **States are classes.** A state is what the ``state_key`` says (ALFWorld: ``stepgym/subgoal_key``, where the
   agent is plus the goal-relevant facts). Keys that a user's ``state_key`` maps together are one vertex; on top
   of that, **order-insensitive steps are merged**: when two successful paths go ``u -a-> x -b-> t`` and
   ``u -b-> y -a-> t`` (the same two actions in either order), ``x`` and ``y`` become one class.
3. **Errors and self-loops are pruned.** Steps the env marked inadmissible, and steps whose state class does not
   change, add no edge.
4. **Detours are loop-erased.** When a trajectory revisits a class, the steps between the two visits are cut, so
   each added path is simple.
5. **The union stays a DAG.** An edge ``u -> v`` is added only if ``v`` cannot already reach ``u``; an edge that
   would close a cycle is dropped and counted (``stats()["dropped_cycle_edges"]``). First come, first kept:
   this guarantees a DAG after any number of unions, at the cost of not labelling the reverse direction of a
   route two successes took in opposite orders. A class merge that would close a cycle is skipped the same way.

Storage is JSON (never pickle) with a format name and version, written atomically: a crash mid-save leaves the
previous file intact. Loading a truncated, foreign or future-version file raises a clear error.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import networkx as nx

from stepgym import schema
from stepgym.errors import CorruptDataError, FormatVersionError
from stepgym.labels import future_drift
from stepgym.schema import Trajectory

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ARGLabels",
    "ARGWrapper",
    "AgenticReferenceGraph",
    "default_state_key",
    "label_trajectory",
    "normalize_action",
]

FORMAT_NAME = "stepgym-arg"
FORMAT_VERSION = 1

StateKeyFn = Callable[[dict[str, Any]], str]


def normalize_action(action: Any) -> str:
    """The action as an edge label: lower-cased, whitespace collapsed (``"Go to  Desk 1"`` -> ``"go to desk 1"``)."""
    return " ".join(str(action).lower().split())


def default_state_key(info: dict[str, Any]) -> str:
    """``stepgym/subgoal_key`` if the env provides it, else ``stepgym/state_key``; an env with neither needs an
    explicit ``state_key`` (the raw observation is never used silently: every no-op reads "Nothing happens.")."""
    for key in (schema.SUBGOAL_KEY, schema.STATE_KEY):
        value = info.get(key)
        if value is not None:
            return str(value)
    raise ValueError(
        "this env's info has neither 'stepgym/subgoal_key' nor 'stepgym/state_key': pass state_key=<function of "
        "info returning a comparable state key> to ARGWrapper / AgenticReferenceGraph"
    )


def _action_of(action: Any, info: dict[str, Any]) -> str:
    """The action an edge is labelled with: the parsed action when a text interface recorded one (the raw model
    reply around it differs from rollout to rollout), else the action itself."""
    parsed = info.get(schema.PARSED_ACTION)
    return normalize_action(parsed if isinstance(parsed, str) and parsed else action)


def _key_fn(state_key: StateKeyFn | str | None) -> StateKeyFn:
    if state_key is None:
        return default_state_key
    if isinstance(state_key, str):
        name = state_key

        def by_name(info: dict[str, Any]) -> str:
            if name not in info:
                raise KeyError(f"info has no {name!r} (the ARG's state_key)")
            return str(info[name])

        return by_name
    return state_key


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

    def is_vertex(self, key: str) -> bool:
        return self.class_of(key) in self.g

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
        # Classes, with error steps and self-loops dropped, then loop-erased (a revisit cuts the detour).
        path: list[str] = [self.class_of(keys[0])]
        acts: list[str] = []
        for t, action in enumerate(actions):
            nxt = self.class_of(keys[t + 1])
            if errors[t] or nxt == path[-1]:
                continue
            if nxt in path:
                cut = path.index(nxt)
                del path[cut + 1 :]
                del acts[cut:]
                continue
            path.append(nxt)
            acts.append(action)
        for c in path:  # only states on the erased path become vertices (detours and errors do not)
            self._node(c)
        added = 0
        for u, a, v in zip(path, acts, path[1:], strict=False):
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

    def _merge_commuting(self, path: list[str], acts: list[str]) -> None:
        """Merge x and y when ``u -a-> x -b-> t`` and ``u -b-> y -a-> t`` both exist (order-insensitive steps)."""
        for i in range(len(acts) - 1):
            u, x, t = path[i], path[i + 1], path[i + 2]
            a, b = acts[i], acts[i + 1]
            if not (self.g.has_edge(u, x) and self.g.has_edge(x, t)):
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

    def label(self, keys: Sequence[str], actions: Sequence[str]) -> ARGLabels:
        visited = {self.class_of(keys[0])}
        rea, pa = [], []
        for t, action in enumerate(actions):
            s, s2 = keys[t], keys[t + 1]
            c2 = self.class_of(s2)
            progress = c2 in self.g and c2 not in visited
            reasonable = progress or self.has_edge(s, action, s2)
            visited.add(c2)
            rea.append(bool(reasonable))
            pa.append(bool(progress))
        return ARGLabels(rea, pa, [float(d) for d in future_drift(pa)])

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


class AgenticReferenceGraph:
    """Per-task ARGs (keyed by ``stepgym/task_id``); see the module docstring for how they are built.

    ``state_key`` maps an info dict to the state key (default: :func:`default_state_key`).
    """

    def __init__(self, state_key: StateKeyFn | str | None = None):
        self.state_key = _key_fn(state_key)
        self._tasks: dict[str, _TaskGraph] = {}

    # -- building -------------------------------------------------------------------------------------------
    def add_path(
        self,
        task_id: str,
        states: Sequence[str],
        actions: Sequence[Any],
        *,
        won: bool,
        errors: Sequence[bool] | None = None,
    ) -> int:
        """Add a successful path given as state keys ``s_0..s_T`` and actions ``a_0..a_{T-1}``.

        ``won`` must be True (failed trajectories are refused); ``errors[t]`` marks steps the env rejected.
        Returns the number of new edges.
        """
        if not won:
            raise ValueError(
                f"refusing a trajectory of task {task_id!r} that did not succeed: the ARG holds only "
                "verified successes"
            )
        if len(states) != len(actions) + 1:
            raise ValueError(f"need len(states) == len(actions) + 1, got {len(states)} and {len(actions)}")
        errs = list(errors) if errors is not None else [False] * len(actions)
        if len(errs) != len(actions):
            raise ValueError("errors must have one flag per action")
        graph = self._tasks.setdefault(task_id, _TaskGraph())
        return graph.add_path([str(s) for s in states], [normalize_action(a) for a in actions], errs)

    def add_trajectory(self, traj: Trajectory) -> int:
        """Add a recorded successful trajectory (refuses one that did not win)."""
        states = [self.state_key(i) for i in traj.infos()]
        errors = [
            s.info.get(schema.ADMISSIBLE) is False or s.info.get(schema.FORMAT_VALID) is False
            for s in traj.steps
        ]
        actions = [_action_of(s.action, s.info) for s in traj.steps]
        return self.add_path(traj.task_id, states, actions, won=traj.won, errors=errors)

    # -- labelling ------------------------------------------------------------------------------------------
    def label_path(self, task_id: str, states: Sequence[str], actions: Sequence[Any]) -> ARGLabels:
        """ProAS labels of a path against the graph as it stands (an unknown task has an empty graph)."""
        if len(states) != len(actions) + 1:
            raise ValueError(f"need len(states) == len(actions) + 1, got {len(states)} and {len(actions)}")
        graph = self._tasks.get(task_id, _TaskGraph())
        return graph.label([str(s) for s in states], [normalize_action(a) for a in actions])

    def label(self, traj: Trajectory) -> ARGLabels:
        actions = [_action_of(s.action, s.info) for s in traj.steps]
        return self.label_path(traj.task_id, [self.state_key(i) for i in traj.infos()], actions)

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

    # -- persistence ----------------------------------------------------------------------------------------
    def _to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "tasks": {tid: self._tasks[tid].to_json() for tid in sorted(self._tasks)},
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the graph as JSON, atomically (temp file + fsync + rename in the same folder)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._to_json(), f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], state_key: StateKeyFn | str | None = None
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
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise FormatVersionError(
                f"{path} is not a stepgym ARG file (format {data.get('format') if isinstance(data, dict) else None!r})"
            )
        version = data.get("version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise FormatVersionError(
                f"{path} was written in ARG format version {version!r}; this stepgym reads versions <= "
                f"{FORMAT_VERSION}. Upgrade stepgym to read it."
            )
        arg = cls(state_key)
        try:
            for tid, tdata in data["tasks"].items():
                arg._tasks[tid] = _TaskGraph.from_json(tdata)
        except (KeyError, TypeError, AttributeError) as exc:
            raise CorruptDataError(f"{path}: malformed ARG content ({type(exc).__name__}: {exc})") from exc
        return arg

    # -- seeding --------------------------------------------------------------------------------------------
    def seed_from_walkthroughs(self, env: gym.Env, task_ids: Iterable[str] | None = None) -> int:
        """Replay each task's stored walkthrough (``env.unwrapped.walkthrough``, ALFWorld) and add the wins.

        Returns the number of trajectories added."""
        from stepgym.schema import Step

        added = 0
        for tid in task_ids if task_ids is not None else env.unwrapped.task_ids:
            obs, info = env.reset(options={"task_id": tid})
            traj = Trajectory(
                task_id=str(info.get(schema.TASK_ID, tid)), initial_observation=obs, initial_info=info
            )
            for action in env.unwrapped.walkthrough:
                nxt, reward, term, trunc, info = env.step(action)
                traj.steps.append(Step(obs, action, float(reward), nxt, bool(term), bool(trunc), info))
                obs = nxt
                if term or trunc:
                    break
            if traj.won:
                self.add_trajectory(traj)
                added += 1
        return added

    def seed_from_agent(self, env: gym.Env, agent: Any, task_ids: Iterable[str] | None = None) -> int:
        """Play ``agent`` once per task and add its successful trajectories (e.g. an env's oracle expert)."""
        from stepgym.rollout import play_episode

        added = 0
        for tid in task_ids if task_ids is not None else env.unwrapped.task_ids:
            traj = play_episode(env, agent, options={"task_id": tid})
            if traj.won:
                self.add_trajectory(traj)
                added += 1
        return added


def label_trajectory(graph: AgenticReferenceGraph, traj: Trajectory) -> ARGLabels:
    """Offline ProAS labels of a recorded trajectory (what ``ARGWrapper`` computes online)."""
    return graph.label(traj)


class ARGWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Adds ``stepgym/arg_state``, ``arg_reasonable`` and ``arg_progress`` to every info, and ``arg_labels``
    (reasonable, progress, future_drift lists) to the info of the step that ends the episode.

    Args:
        env: any Gymnasium text env whose info carries a task id and a state (see ``state_key``).
        graph: the ARG to label against (default: the graph's own state key function).
        state_key: overrides the graph's state key function (a callable of info, or an info key name).
        grow: add each successful episode to the graph when it ends (after labelling it). Trainers that label a
            whole batch should keep this False and grow the graph after labelling (ProAS: a batch is labelled
            against the graph as it stood before the batch's own successes).
    """

    def __init__(
        self,
        env: gym.Env,
        graph: AgenticReferenceGraph | None = None,
        state_key: StateKeyFn | str | None = None,
        grow: bool = False,
    ):
        gym.utils.RecordConstructorArgs.__init__(self, graph=graph, state_key=state_key, grow=grow)
        gym.Wrapper.__init__(self, env)
        self.graph = graph if graph is not None else AgenticReferenceGraph(state_key)
        self._key = _key_fn(state_key) if state_key is not None else self.graph.state_key
        self.grow = grow
        self._task_id = ""
        self._states: list[str] = []
        self._actions: list[str] = []
        self._errors: list[bool] = []
        self._visited: set[str] = set()
        self._progress: list[bool] = []
        self._reasonable: list[bool] = []

    def _tg(self) -> _TaskGraph:
        return self.graph._tasks.get(self._task_id) or _TaskGraph()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._task_id = str(info.get(schema.TASK_ID, ""))
        state = self._key(info)
        self._states, self._actions, self._errors = [state], [], []
        self._reasonable, self._progress = [], []
        self._visited = {self._tg().class_of(state)}
        info[schema.ARG_STATE] = state
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        tg = self._tg()
        s, s2, a = self._states[-1], self._key(info), _action_of(action, info)
        c2 = tg.class_of(s2)
        progress = c2 in tg.g and c2 not in self._visited
        reasonable = progress or tg.has_edge(s, a, s2)
        self._visited.add(c2)
        self._states.append(s2)
        self._actions.append(a)
        self._errors.append(info.get(schema.ADMISSIBLE) is False or info.get(schema.FORMAT_VALID) is False)
        self._reasonable.append(bool(reasonable))
        self._progress.append(bool(progress))
        info[schema.ARG_STATE] = s2
        info[schema.ARG_REASONABLE] = bool(reasonable)
        info[schema.ARG_PROGRESS] = bool(progress)
        if terminated or truncated:
            labels = ARGLabels(
                list(self._reasonable), list(self._progress), [float(d) for d in future_drift(self._progress)]
            )
            info[schema.ARG_LABELS] = labels.as_dict()
            if self.grow and bool(info.get(schema.WON, False)):
                self.graph.add_path(self._task_id, self._states, self._actions, won=True, errors=self._errors)
        return obs, reward, terminated, truncated, info
