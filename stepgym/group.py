"""GroupEnv: the G rollouts of one task as a PettingZoo ``ParallelEnv``, and StepOPSD's peer hindsight.

A GRPO group is G rollouts of the same task. Seen from outside that is a parallel multi-agent env whose agents
(``"rollout_0"`` … ``"rollout_{G-1}"``) act in G independent copies of one task, so stepgym exposes it through the
PettingZoo Parallel API: any multi-agent rollout code can drive it, and PettingZoo's ``parallel_api_test`` checks
it. Finished rollouts leave ``agents`` (PettingZoo's rule); every rollout is recorded as a
:class:`~stepgym.schema.Trajectory` (:attr:`GroupEnv.trajectories`).

Same task: every copy is reset with the **same seed and the same options**, so a deterministic env (stepgym's
contract: every random choice from ``self.np_random``) gives every rollout the same task *and* the same random
stream after it. ``reset(seed=None)`` draws that seed from the group's own generator (seeded by the last explicit
seed), so a seeded sequence of groups is reproducible. The ``TASK_ID``\\ s are then compared; a copy that landed
on another task (an env that is not deterministic in its task choice) is re-reset with
``options={"task_id": …}`` (``task_option``), and a remaining mismatch is an error. Pass
``options={"task_id": ...}`` to pick the task yourself.

Peer hindsight (StepOPSD, ``shapers.md`` §5.6 and §8 items 22–23): when the whole group has finished, each
*failed* rollout of a group that has at least one success gets the **first successful peer in rollout order**,
rendered as the teacher's hindsight block; successes, all-success and all-failure groups get ``None`` explicitly.
It lands in ``schema.PEER_HINDSIGHT`` of every rollout's last recorded info (and of the info returned by the step
that finished the group), and :meth:`GroupEnv.peer_hindsight` returns it. The rule and the text are
:mod:`stepgym.hindsight`'s (``peer_hindsight`` computes the same from recorded trajectories, for other trainers;
it is re-exported here with ``render_trajectory_text`` and ``hindsight_block``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from stepgym import schema
from stepgym.hindsight import first_success_peers, hindsight_block, peer_hindsight, render_trajectory_text
from stepgym.workers import EnvRecipe, EnvWorkerError, Executor, InProcessExecutor, make_executor
from stepgym.wrappers._recording import EpisodeRecorder, is_success

__all__ = [
    "GroupEnv",
    "first_success_peers",
    "hindsight_block",
    "peer_hindsight",
    "render_trajectory_text",
]

EnvFactory = Callable[..., gym.Env]
WrapperFn = Callable[[gym.Env], gym.Env]


# ---------------------------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------------------------
class GroupEnv(ParallelEnv[str, Any, Any]):
    """G rollouts of one task as a PettingZoo ``ParallelEnv`` (agents ``"rollout_0"`` … ``"rollout_{G-1}"``).

    Args:
        env: a registered env id (``gym.make(env, **env_kwargs)``) or a factory ``f(**env_kwargs) -> gym.Env``.
        group_size: G.
        env_kwargs: keyword arguments for every copy.
        wrappers: applied to every copy, first = innermost (e.g. ``[EnvFeedbackWrapper,
            functools.partial(TextInterfaceWrapper, fmt="alfworld")]``).
        task_option: the reset option that selects a task (used only to repair a copy that drew another task);
            ``None`` if the env has none.
        success_fn: what counts as a success for peer hindsight (default :func:`is_success`).
        final_correctness: add StepOPSD's ``final_correctness:`` line to the hindsight blocks.
        render_mode: ``"ansi"`` makes :meth:`render` return every live rollout's text.
        executor: where the G copies run (:mod:`stepgym.workers`): ``"inprocess"`` (default), ``"process"`` (a
            local pool of ``num_workers`` processes) or ``"ray"``; or an :class:`~stepgym.workers.Executor`
            shared by several groups, with ``slots`` naming this group's G copies in it. With ``"process"`` and
            ``"ray"`` the env, its kwargs and the wrappers must pickle (no lambdas); an ``ARGWrapper``'s graph then
            stays here (:attr:`arg_graph`), reaches the workers as JSON and, with ``grow=True``, is grown here
            from each finished group (``docs/trainer.md``, Scale-out).
        num_workers: worker processes / actors for ``"process"`` and ``"ray"``.
        executor_kwargs: more arguments for the executor (``timeout``, ``num_cpus``, ``address``...).
        slots: with a shared executor, the G slots that hold this group's copies.

    ``step(actions)`` takes an action for any subset of the live agents (usually all of them); only those step,
    and the returned dicts hold exactly them. Acting for an agent that is not live is an error. ``step_async`` /
    ``step_wait`` (and ``reset_async`` / ``reset_wait``) split a call in two, so that many groups sharing one
    executor send one batched call per worker per turn; ``executor.send()`` starts the queued calls without waiting,
    and :meth:`abandon` drops a queued call after an error elsewhere. The results do not depend on the executor.

    Example::

        >>> from stepgym import GroupEnv
        >>> group = GroupEnv("StepGym/CreditToy-v0", group_size=2)
        >>> observations, infos = group.reset(seed=0)
        >>> sorted(observations)
        ['rollout_0', 'rollout_1']
        >>> observations, rewards, terminations, truncations, infos = group.step(
        ...     {agent: "wait" for agent in group.agents}
        ... )
        >>> rewards
        {'rollout_0': 0.0, 'rollout_1': 0.0}
        >>> group.env_of("rollout_1").unwrapped.max_steps
        10
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "stepgym_group_v0",
        "render_modes": ["ansi"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        env: str | EnvFactory,
        group_size: int = 8,
        env_kwargs: Mapping[str, Any] | None = None,
        wrappers: Sequence[WrapperFn] = (),
        *,
        task_option: str | None = "task_id",
        success_fn: Callable[[schema.Trajectory], bool] = is_success,
        final_correctness: bool = False,
        render_mode: str | None = None,
        executor: str | Executor = "inprocess",
        num_workers: int = 2,
        executor_kwargs: Mapping[str, Any] | None = None,
        slots: Sequence[int] | None = None,
    ):
        if not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.group_size = group_size
        self.render_mode = render_mode
        self.task_option = task_option
        self.success_fn = success_fn
        self.final_correctness = bool(final_correctness)
        self._arg: _ParentARG | None = None
        if isinstance(executor, Executor):
            if not isinstance(executor, InProcessExecutor):
                _, arg = _arg_in_parent(executor.recipe.wrappers)
                if arg is not None and arg.grow:
                    raise ValueError(
                        "ARGWrapper(grow=True) on a shared remote executor would grow a separate copy of the graph "
                        "in each worker. Pass grow=False there and grow the graph in this process from each "
                        "finished group (graph.add_trajectory(t) for t in group.trajectories), or give GroupEnv "
                        "executor='process'/'ray' (it then grows the graph here and sends it to its workers)."
                    )
            self._slots = list(range(group_size)) if slots is None else [int(s) for s in slots]
            if len(self._slots) != group_size:
                raise ValueError(f"slots must name {group_size} env copies, got {len(self._slots)}")
            self.executor, self._owns_executor = executor, False
        else:
            if slots is not None:
                raise ValueError("slots= only applies to a shared Executor instance")
            wrappers = tuple(wrappers)
            if executor not in (None, "inprocess"):
                wrappers, self._arg = _arg_in_parent(wrappers)
            recipe = EnvRecipe(env, dict(env_kwargs or {}), wrappers)
            self.executor = make_executor(
                executor, recipe, group_size, num_workers=num_workers, **dict(executor_kwargs or {})
            )
            self._slots, self._owns_executor = list(range(group_size)), True
        self.possible_agents = [f"rollout_{i}" for i in range(group_size)]
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        # One space object per agent, returned every call (parallel_api_test checks identity).
        spaces = self.executor.call("spaces", self._slots, [None] * group_size)
        self.observation_spaces = {a: spaces[i][0] for a, i in self._index.items()}
        self.action_spaces = {a: spaces[i][1] for a, i in self._index.items()}
        self._rng: np.random.Generator | None = None
        self._recorders = [EpisodeRecorder() for _ in range(group_size)]
        self._hindsight: list[str | None] | None = None
        self._last_seed: int | None = None
        self._pending: tuple[str, int, Any] | None = None  # the call between *_async and *_wait
        self._broken = False

    # -- spaces ----------------------------------------------------------------------------------------------
    def observation_space(self, agent: str) -> gym.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.action_spaces[agent]

    @property
    def envs(self) -> list[gym.Env]:
        """The env copies, when they live in this process (``executor="inprocess"``)."""
        if not isinstance(self.executor, InProcessExecutor):
            raise RuntimeError(
                f"the env copies of this group live in {type(self.executor).__name__}'s workers, not here; use "
                "get_wrapper_attr() / get_unwrapped_attr() to read from them"
            )
        local = self.executor.envs
        return [local[s] for s in self._slots]

    # -- API -------------------------------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Queue the reset of every copy (sent with the next ``*_wait`` of any group on the executor)."""
        self._check_idle()
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            env_seed = int(seed)
        else:
            if self._rng is None:
                self._rng = np.random.default_rng()
            env_seed = int(self._rng.integers(0, 2**31 - 1))
        self._last_seed = env_seed
        opts = dict(options or {})
        graph_ticket = None
        if self._arg is not None:
            text = self._arg.graph.to_json_text()
            if text != self._arg.sent:  # grown (or changed by the user) since the workers last got it
                graph_ticket = self.executor.submit("arg_graph", self._slots, [text] * self.group_size)
                self._arg.sent = text
        ticket = self.executor.submit("reset", self._slots, [(env_seed, dict(opts))] * self.group_size)
        self._pending = ("reset", ticket, (env_seed, opts, graph_ticket))

    def reset_wait(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        kind, ticket, (env_seed, opts, graph_ticket) = self._take_pending("reset")
        self._broken = True  # until this reset has fully succeeded
        try:
            if graph_ticket is not None:
                try:
                    self.executor.result(graph_ticket)
                except Exception:
                    with contextlib.suppress(Exception):
                        self.executor.result(ticket)
                    raise
            results = self.executor.result(ticket)
        except EnvWorkerError as e:
            self._copies_lost()
            raise self._named(
                e, f"resetting task {opts.get(self.task_option or '', '(drawn by seed)')!r}, seed {env_seed}"
            ) from e
        results = self._same_task(results, env_seed, opts)
        self.agents = list(self.possible_agents)
        self._hindsight = None
        self._broken = False
        obs, infos = {}, {}
        for a, i in self._index.items():
            o, info = results[i]
            self._recorders[i].start(o, info)
            obs[a], infos[a] = o, info
        return obs, infos

    def _same_task(
        self, results: list[tuple[Any, dict]], seed: int, opts: dict[str, Any]
    ) -> list[tuple[Any, dict]]:
        tids = [info.get(schema.TASK_ID) for _, info in results]
        if all(t == tids[0] for t in tids):
            return results
        if self.task_option is not None and tids[0] is not None:
            redo = [i for i, t in enumerate(tids) if t != tids[0]]
            again = self.executor.call(
                "reset",
                [self._slots[i] for i in redo],
                [(seed, {**opts, self.task_option: tids[0]})] * len(redo),
            )
            for i, r in zip(redo, again, strict=True):
                results[i] = r
            tids = [info.get(schema.TASK_ID) for _, info in results]
        if any(t != tids[0] for t in tids):
            raise RuntimeError(
                f"the {self.group_size} copies drew different tasks for seed {seed}: {sorted(set(map(str, tids)))}. "
                "The env is not deterministic given its seed; pass options={'task_id': ...} or set task_option."
            )
        return results

    def step(
        self,
        actions: Mapping[str, Any],
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Mapping[str, Any]) -> None:
        """Queue one step of the given live agents (sent with the next ``*_wait`` of any group on the executor)."""
        self._check_idle()
        if self._broken:
            raise RuntimeError(
                "this group's env copies were lost (worker restart or failed reset); reset() first"
            )
        bad = [a for a in actions if a not in self.agents]
        if bad:
            raise ValueError(f"actions for agents that are not live: {bad} (live: {self.agents})")
        acting = [x for x in self.agents if x in actions]
        ticket = self.executor.submit(
            "step", [self._slots[self._index[a]] for a in acting], [actions[a] for a in acting]
        )
        self._pending = ("step", ticket, (acting, [actions[a] for a in acting]))

    def step_wait(
        self,
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        _, ticket, (acting, acts) = self._take_pending("step")
        try:
            results = self.executor.result(ticket)
        except Exception as e:
            self._broken = True  # the episode cannot continue on copies that may be gone: reset first
            self._copies_lost()
            if isinstance(e, EnvWorkerError):
                raise self._named(e, f"stepping task {self.task_id!r}, seed {self._last_seed}") from e
            raise
        obs, rew, term, trunc, infos = {}, {}, {}, {}, {}
        for a, act, (o, r, te, tr, info) in zip(acting, acts, results, strict=True):
            i = self._index[a]
            self._recorders[i].add(act, o, r, te, tr, info)
            obs[a], rew[a], term[a], trunc[a], infos[a] = o, float(r), bool(te), bool(tr), info
        self.agents = [a for a in self.agents if not (term.get(a) or trunc.get(a))]
        if not self.agents and self._hindsight is None:
            self._finish()
        return obs, rew, term, trunc, infos

    def _named(self, e: EnvWorkerError, doing: str) -> EnvWorkerError:
        """The worker's error, saying which of this group's rollouts and which task it hit."""
        return EnvWorkerError(
            f"{e} [group rollouts {self.possible_agents[0]}..{self.possible_agents[-1]}, {doing}]"
        )

    def abandon(self) -> None:
        """Wait for a queued ``*_async`` call, if any, and drop its result (its error too): after an error
        elsewhere, the group can then be reset. The episode in progress is lost (``reset()`` first)."""
        if self._pending is None:
            return
        kind, ticket, extra = self._take_pending(self._pending[0])
        self._broken = True
        self._copies_lost()
        for t in (extra[2], ticket) if kind == "reset" and extra[2] is not None else (ticket,):
            with contextlib.suppress(Exception):
                self.executor.result(t)

    def _copies_lost(self) -> None:
        # A restarted worker rebuilt its copies from the recipe, with the graph as it was then: send it again.
        if self._arg is not None:
            self._arg.sent = None

    def _check_idle(self) -> None:
        if self._pending is not None:
            raise RuntimeError(f"a {self._pending[0]}_async() is waiting for its {self._pending[0]}_wait()")

    def _take_pending(self, kind: str) -> tuple[str, int, Any]:
        if self._pending is None or self._pending[0] != kind:
            raise RuntimeError(f"{kind}_wait() without a pending {kind}_async()")
        pending, self._pending = self._pending, None
        return pending

    def _finish(self) -> None:
        trajs = self.trajectories
        if self._arg is not None and self._arg.grow:
            self._arg.grow_from(trajs)
        self._hindsight = peer_hindsight(
            trajs, success_fn=self.success_fn, final_correctness=self.final_correctness
        )
        for t, h in zip(trajs, self._hindsight, strict=True):
            (t.steps[-1].info if t.steps else t.initial_info)[schema.PEER_HINDSIGHT] = h

    # -- group-level results ---------------------------------------------------------------------------------
    @property
    def trajectories(self) -> list[schema.Trajectory]:
        """The recorded rollouts of the current group, in rollout order (live ones are still growing)."""
        out = [r.trajectory for r in self._recorders]
        if any(t is None for t in out):
            raise RuntimeError("GroupEnv.reset() has not been called")
        return out  # type: ignore[return-value]

    @property
    def arg_graph(self) -> Any:
        """The ARG of the copies' ``ARGWrapper`` when they run in workers (``executor="process"``/``"ray"``): the
        one graph, kept in this process, sent to the workers as JSON and, with ``grow=True``, grown here from each
        finished group. ``None`` in-process (the wrapper's own ``graph`` is then the one graph) or without one."""
        return None if self._arg is None else self._arg.graph

    @property
    def finished(self) -> bool:
        """Every rollout of the current group has terminated or been truncated."""
        return self._hindsight is not None

    @property
    def task_id(self) -> str:
        return self.trajectories[0].task_id

    @property
    def seed(self) -> int | None:
        """The seed every copy was reset with for the current group."""
        return self._last_seed

    def successes(self) -> list[bool]:
        """Per rollout, whether it succeeded (``success_fn``)."""
        return [bool(self.success_fn(t)) for t in self.trajectories]

    def peer_hindsight(self) -> list[str | None]:
        """Per rollout, its peer-hindsight block or ``None`` (see the module docstring). Only once finished."""
        if self._hindsight is None:
            raise RuntimeError("peer hindsight exists only once every rollout of the group has finished")
        return list(self._hindsight)

    def env_of(self, agent: str) -> gym.Env:
        """The (wrapped) env copy ``agent`` acts in, when the copies live in this process (``executor="inprocess"``;
        elsewhere use :meth:`get_wrapper_attr`)."""
        return self.envs[self._index[agent]]

    def env(self, agent: str) -> gym.Env:
        """Deprecated name of :meth:`env_of` (PettingZoo users read ``.env`` as the wrapped env, not a method)."""
        import warnings

        warnings.warn(
            "GroupEnv.env(agent) is renamed GroupEnv.env_of(agent); the old name goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.env_of(agent)

    def get_wrapper_attr(self, name: str, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """``env.get_wrapper_attr(name)`` of each agent's copy (default: the live agents), wherever it runs."""
        return self.get_wrapper_attr_async(name, agents)()

    def get_wrapper_attr_async(
        self, name: str, agents: Sequence[str] | None = None
    ) -> Callable[[], dict[str, Any]]:
        """Queue :meth:`get_wrapper_attr`; the returned function waits for the answer (batched per worker)."""
        agents = list(self.agents if agents is None else agents)
        ticket = self.executor.submit(
            "attr", [self._slots[self._index[a]] for a in agents], [name] * len(agents)
        )
        return lambda: dict(zip(agents, self.executor.result(ticket), strict=True))

    def get_unwrapped_attr(self, name: str, default: Any = None) -> Any:
        """An attribute of the first copy's unwrapped env (e.g. ``task_ids``; ``default`` if it has none),
        wherever it runs."""
        return self.executor.call("unwrapped_attr", self._slots[:1], [(name, default)])[0]

    def prompts(self) -> dict[str, str]:
        """The current prompt of every live agent, when the copies carry a ``TextInterfaceWrapper``."""
        return self.get_wrapper_attr("prompt")

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        parts = []
        for a in self.possible_agents:
            t = self._recorders[self._index[a]].trajectory
            last = "" if t is None else (t.steps[-1].next_observation if t.steps else t.initial_observation)
            parts.append(f"[{a}{'' if a in self.agents else ', done'}] {last}")
        return "\n".join(parts)

    def close(self) -> None:
        """Close the copies (and end the workers, when this group started them)."""
        if self._owns_executor:
            self.executor.close()


# ---------------------------------------------------------------------------------------------------------------
# The ARG of copies that run in workers: one graph, here
# ---------------------------------------------------------------------------------------------------------------
class _ParentARG:
    """The graph of an ``ARGWrapper`` whose copies run in workers: kept and (with ``grow``) grown in this process by
    the wrapper's own rule, sent to the workers as JSON text (``sent``: the text they have, ``None`` if unknown)."""

    def __init__(
        self,
        graph: Any,
        key: Callable[[dict[str, Any]], str],
        success_fn: Callable,
        grow: bool,
        warn_after: int,
    ):
        self.graph, self.key, self.success_fn, self.grow = graph, key, success_fn, grow
        self.sent: str | None = graph.to_json_text()  # what the recipe carries to every worker
        self.warn_after, self.episodes, self.grown = int(warn_after), 0, 0

    def grow_from(self, trajectories: Sequence[schema.Trajectory]) -> None:
        from stepgym.wrappers.arg import grow_graph, warn_never_grown

        before = self.episodes
        for t in trajectories:  # rollout order
            self.episodes += 1
            self.grown += grow_graph(self.graph, t, self.key, self.success_fn)
        if self.grown == 0 and before < self.warn_after <= self.episodes:  # once, as the wrapper does
            warn_never_grown(self.episodes, stacklevel=6)  # the caller of GroupEnv.step


def _arg_in_parent(wrappers: Sequence[WrapperFn]) -> tuple[tuple[WrapperFn, ...], _ParentARG | None]:
    """Find the ``ARGWrapper`` (its class or a ``functools.partial`` of it) among ``wrappers``; return the wrappers
    with it replaced by one that labels against the graph read-only (``grow=False``), and the graph kept here."""
    from stepgym.reference_graph import AgenticReferenceGraph, _key_fn
    from stepgym.wrappers.arg import ARGWrapper

    out: list[WrapperFn] = []
    found: list[_ParentARG] = []
    for w in wrappers:
        fn, args, kw = (w.func, w.args, w.keywords) if isinstance(w, functools.partial) else (w, (), {})
        if not (isinstance(fn, type) and issubclass(fn, ARGWrapper)):
            out.append(w)
            continue
        bound = dict(inspect.signature(fn).bind_partial(None, *args, **kw).arguments)
        bound.pop("env", None)
        state_key, success_fn = bound.get("state_key"), bound.get("success_fn")
        graph = bound.get("graph")
        if graph is None:
            graph = AgenticReferenceGraph(state_key, success_fn)
        key = _key_fn(state_key) if state_key is not None else graph.state_key
        found.append(
            _ParentARG(
                graph,
                key,
                success_fn if success_fn is not None else graph.success_fn,
                bool(bound.get("grow", False)),
                bound.get("warn_after", inspect.signature(ARGWrapper).parameters["warn_after"].default),
            )
        )
        out.append(functools.partial(fn, **{**bound, "graph": graph, "grow": False}))
    if len(found) > 1:
        raise ValueError("a group's wrappers may hold one ARGWrapper (found several)")
    return tuple(out), (found[0] if found else None)
