"""``ARGWrapper``: ProAS's reference-graph labels on every step of any Gymnasium text env.

The graph itself, and every rule of what is read from a step (state, edge action, rejection, success), live in
:mod:`stepgym.reference_graph`; the wrapper only drives a :class:`~stepgym.reference_graph.PathLabeler` online, so
its labels are exactly the offline ones (``AgenticReferenceGraph.label``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from stepgym import reference_graph as _rg
from stepgym import schema
from stepgym.episodes import EpisodeRecorder

__all__ = ["ARGParentState", "ARGWrapper"]


def grow_graph(
    graph: _rg.AgenticReferenceGraph,
    traj: schema.Trajectory,
    key: _rg.StateKeyFn,
    success_fn: _rg.SuccessFn,
) -> bool:
    """``ARGWrapper(grow=True)``'s rule for one finished episode: add it to ``graph`` when ``success_fn`` counts it
    as a success (states read with ``key``). Returns whether it was added. ``GroupEnv`` applies the same rule in
    the parent process when the wrapper's copies run in workers."""
    if not success_fn(traj):
        return False
    states, actions, errors = _rg.trajectory_path(traj, key)
    graph.add_path(traj.task_id, states, actions, won=True, errors=errors)
    return True


def warn_never_grown(episodes: int, stacklevel: int) -> None:
    """The ``RuntimeWarning`` of a growing graph that has seen ``episodes`` episodes end and no success."""
    warnings.warn(
        f"ARGWrapper(grow=True): {episodes} episodes ended and none counted as a success, so the "
        f"graph has not grown. If this env signals success another way, pass success_fn= (the default "
        "reads stepgym/won, else a positive reward on the terminating step).",
        RuntimeWarning,
        stacklevel=stacklevel,
    )


class ARGParentState:
    """The graph of an ``ARGWrapper`` whose copies run in workers (:class:`~stepgym.wrappers.protocols.ParentState`):
    kept in the parent, sent to the workers as its JSON text and, with ``grow``, grown there by the wrapper's own
    rule (:func:`grow_graph`) from each finished group, in rollout order."""

    def __init__(
        self,
        graph: _rg.AgenticReferenceGraph,
        key: _rg.StateKeyFn,
        success_fn: _rg.SuccessFn,
        grow: bool,
        warn_after: int,
    ) -> None:
        self.graph, self.key, self.success_fn, self.grow = graph, key, success_fn, bool(grow)
        self.warn_after, self.episodes, self.grown = int(warn_after), 0, 0

    @property
    def grows(self) -> bool:
        return self.grow

    def payload(self) -> str:
        return self.graph.to_json_text()

    def update(self, trajectories: Sequence[schema.Trajectory]) -> None:
        if not self.grow:
            return
        before = self.episodes
        for t in trajectories:
            self.episodes += 1
            self.grown += grow_graph(self.graph, t, self.key, self.success_fn)
        if self.grown == 0 and before < self.warn_after <= self.episodes:  # once, as the wrapper does
            warn_never_grown(self.episodes, stacklevel=6)  # the caller of GroupEnv.step


class ARGWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Adds ``stepgym/arg_state``, ``arg_reasonable`` and ``arg_progress`` to every info, and ``arg_labels``
    (reasonable, progress, future_drift lists) to the info of the step that ends the episode.

    Args:
        env: any Gymnasium text env whose info carries a state (see ``state_key``); the task is
            ``stepgym/task_id`` when the info has one, else ``""`` (one graph for the whole env).
        graph: the ARG to label against (default: a new, empty one with this ``state_key`` and ``success_fn``).
        state_key: overrides the graph's state key function (a callable of info, or an info key name).
        grow: add each successful episode to the graph when it ends (after labelling it). Trainers that label a
            whole batch should keep this False and grow the graph after labelling (ProAS: a batch is labelled
            against the graph as it stood before the batch's own successes).
        success_fn: which episodes count as successes for ``grow`` (default: the graph's ``success_fn``).
        warn_after: with ``grow``, warn (``RuntimeWarning``, once) when this many episodes have ended and none
            counted as a success, so a ``success_fn`` that never matches the env does not go unnoticed.

    :attr:`episodes` counts the episodes that ended and :attr:`grown` those added to the graph.

    Example (stepgym's credit-assignment toy, its graph seeded from the env's expert)::

        >>> import gymnasium as gym, stepgym
        >>> from stepgym.graph_seeding import seed_graph_from_expert
        >>> from stepgym.reference_graph import AgenticReferenceGraph
        >>> base = gym.make("StepGym/CreditToy-v0")
        >>> arg = AgenticReferenceGraph()
        >>> seed_graph_from_expert(arg, base, ["credit-train-00000"])
        1
        >>> env = ARGWrapper(base, graph=arg)
        >>> obs, info = env.reset(options={"task_id": "credit-train-00000"})
        >>> obs, reward, terminated, truncated, info = env.step(info[stepgym.schema.EXPERT_ACTION])
        >>> info[stepgym.schema.ARG_REASONABLE], info[stepgym.schema.ARG_PROGRESS]
        (True, True)
    """

    def __init__(
        self,
        env: gym.Env,
        graph: _rg.AgenticReferenceGraph | None = None,
        state_key: _rg.StateKeyFn | str | None = None,
        grow: bool = False,
        success_fn: _rg.SuccessFn | None = None,
        warn_after: int = 20,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, graph=graph, state_key=state_key, grow=grow, success_fn=success_fn, warn_after=warn_after
        )
        gym.Wrapper.__init__(self, env)
        self.graph = graph if graph is not None else _rg.AgenticReferenceGraph(state_key, success_fn)
        self._key = _rg.state_key_function(state_key) if state_key is not None else self.graph.state_key
        self.success_fn = success_fn if success_fn is not None else self.graph.success_fn
        self.grow = grow
        self.warn_after = int(warn_after)
        self.episodes = 0
        self.grown = 0
        self._warned = False
        self._labeler: _rg.PathLabeler | None = None
        self._recorder = EpisodeRecorder()

    # -- the parent-state protocol (stepgym.wrappers.protocols): the graph stays in the parent process ------------
    @classmethod
    def split_parent_state(
        cls,
        graph: _rg.AgenticReferenceGraph | None = None,
        state_key: _rg.StateKeyFn | str | None = None,
        grow: bool = False,
        success_fn: _rg.SuccessFn | None = None,
        warn_after: int = 20,
    ) -> tuple[Any, ARGParentState]:
        """The workers label against the graph read-only (``grow=False``); the parent keeps it (and grows it)."""
        graph = graph if graph is not None else _rg.AgenticReferenceGraph(state_key, success_fn)
        key = _rg.state_key_function(state_key) if state_key is not None else graph.state_key
        state = ARGParentState(
            graph, key, success_fn if success_fn is not None else graph.success_fn, grow, warn_after
        )
        worker = functools.partial(
            cls, graph=graph, state_key=state_key, grow=False, success_fn=success_fn, warn_after=warn_after
        )
        return worker, state

    def load_parent_state(self, payload: str) -> None:
        """Label against the graph sent as its JSON text from the next reset (keeping the state key and success
        rule)."""
        self.graph = _rg.graph_from_json(payload, self.graph.state_key_spec, self.graph.success_fn)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        state = self._key(info)
        self._labeler = self.graph.labeler(str(info.get(schema.TASK_ID, "")), state)
        self._recorder.start(obs, info)
        info[schema.ARG_STATE] = state
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._labeler is None:
            raise RuntimeError("ARGWrapper.step before reset")
        obs, reward, terminated, truncated, info = self.env.step(action)
        state = self._key(info)
        reasonable, progress = self._labeler.step(_rg.step_edge(action, info)[0], state)
        self._recorder.add(action, obs, reward, terminated, truncated, info)
        info[schema.ARG_STATE] = state
        info[schema.ARG_REASONABLE] = reasonable
        info[schema.ARG_PROGRESS] = progress
        if terminated or truncated:
            info[schema.ARG_LABELS] = self._labeler.labels().as_dict()
            self._episode_ended()
        return obs, reward, terminated, truncated, info

    def _episode_ended(self) -> None:
        self.episodes += 1
        traj = self._recorder.trajectory
        if not self.grow or traj is None:
            return
        if grow_graph(self.graph, traj, self._key, self.success_fn):
            self.grown += 1
        elif not self._warned and self.grown == 0 and self.episodes >= self.warn_after:
            self._warned = True
            warn_never_grown(self.episodes, stacklevel=4)
