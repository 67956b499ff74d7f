# Over 400 lines: GroupEnv's parallel API and the peer hindsight it hands out.
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
it is re-exported here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from stepgym import schema
from stepgym.episodes import EpisodeRecorder
from stepgym.hindsight import peer_hindsight
from stepgym.schema import is_success
from stepgym.workers import (
    EnvRecipe,
    EnvWorkerError,
    Executor,
    ExecutorSpec,
    InProcessExecutor,
    OpFailure,
)
from stepgym.wrappers.protocols import ParentState, split_parent_states

__all__ = [
    "GroupConfig",
    "GroupEnv",
]

EnvFactory = Callable[..., gym.Env]
WrapperFn = Callable[[gym.Env], gym.Env]


# ---------------------------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupConfig:
    """How a :class:`GroupEnv` treats its rollouts (the same wherever its copies run).

    Args:
        task_option: the reset option that selects a task (used only to repair a copy that drew another task);
            ``None`` if the env has none.
        success_fn: what counts as a success for peer hindsight (default :func:`is_success`).
        final_correctness: add StepOPSD's ``final_correctness:`` line to the hindsight blocks.
        render_mode: ``"ansi"`` makes :meth:`GroupEnv.render` return every live rollout's text.
        on_failure: what an infrastructure failure of one rollout does (its env raised, its worker died or timed
            out, a service it needs did not answer): ``"raise"`` (default) stops the group with the error;
            ``"abort"`` ends that rollout's episode as **aborted** with its cause (``schema.ABORT_CAUSES``; its
            copy is rebuilt, its reset retried once) and the group goes on (docs/failures.md).
    """

    task_option: str | None = "task_id"
    success_fn: Callable[[schema.Trajectory], bool] = is_success
    final_correctness: bool = False
    render_mode: str | None = None
    on_failure: Literal["raise", "abort"] = "raise"

    def __post_init__(self) -> None:
        modes = GroupEnv.metadata["render_modes"]
        if self.render_mode is not None and self.render_mode not in modes:
            raise ValueError(
                f"GroupConfig.render_mode must be None or one of {modes}, got {self.render_mode!r}"
            )
        if self.on_failure not in ("raise", "abort"):
            raise ValueError(f"GroupConfig.on_failure must be 'raise' or 'abort', got {self.on_failure!r}")
        if not callable(self.success_fn):
            raise TypeError(
                f"GroupConfig.success_fn must be a function of a Trajectory, got {self.success_fn!r}"
            )


class GroupEnv(ParallelEnv[str, Any, Any]):
    """G rollouts of one task as a PettingZoo ``ParallelEnv`` (agents ``"rollout_0"`` … ``"rollout_{G-1}"``).

    Args:
        env: a registered env id (``gym.make(env, **env_kwargs)``) or a factory ``f(**env_kwargs) -> gym.Env``.
        group_size: G.
        env_kwargs: keyword arguments for every copy.
        wrappers: applied to every copy, first = innermost (e.g. ``[EnvFeedbackWrapper,
            functools.partial(TextInterfaceWrapper, fmt="alfworld")]``).
        executor: where the G copies run (:mod:`stepgym.workers`): ``"inprocess"`` (default), ``"process"`` (a
            local pool of two processes) or ``"ray"``, or an :class:`~stepgym.workers.ExecutorSpec` (the number of
            workers and the executor's options). With ``"process"`` and ``"ray"`` the env, its kwargs and the
            wrappers must pickle (no lambdas); a wrapper that keeps state in the parent
            (:mod:`stepgym.wrappers.protocols`, e.g. an ``ARGWrapper``'s graph) then has it kept here
            (:attr:`parent_states`), sent to the workers and, when it grows, grown here from each finished group
            (``docs/trainer.md``, Scale-out).
        config: how rollouts are treated (:class:`GroupConfig`: task option, success rule, hindsight, render mode).

    Several groups can share one executor: :meth:`on_executor` builds a group on some of its slots.

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
        executor: str | ExecutorSpec = "inprocess",
        config: GroupConfig | None = None,
    ):
        if isinstance(executor, Executor):
            raise TypeError(
                "GroupEnv(executor=...) takes a name or an ExecutorSpec; to put a group on an executor that you "
                "built (and share), use GroupEnv.on_executor(executor, slots=...)"
            )
        _check_size(group_size)
        spec = executor if isinstance(executor, ExecutorSpec) else ExecutorSpec(executor)
        wrappers, states = tuple(wrappers), ()
        if spec.kind != "inprocess":
            wrappers, states = split_parent_states(wrappers)
        built = spec.build(EnvRecipe(env, dict(env_kwargs or {}), wrappers), group_size)
        self._setup(built, range(group_size), owns=True, states=states, config=config)

    @classmethod
    def on_executor(
        cls, executor: Executor, slots: Sequence[int] | None = None, *, config: GroupConfig | None = None
    ) -> GroupEnv:
        """A group on ``slots`` of an executor that several groups share (default: all its slots; G is their
        number). The caller owns the executor: :meth:`close` leaves it running. A wrapper whose parent state
        grows (e.g. ``ARGWrapper(grow=True)``) is refused on a remote executor: each worker would grow its own."""
        slots = list(range(executor.n)) if slots is None else [int(s) for s in slots]
        _check_size(len(slots))
        if not isinstance(executor, InProcessExecutor):
            _, states = split_parent_states(executor.recipe.wrappers)
            if any(st.grows for st in states):
                raise ValueError(
                    "a wrapper whose parent state grows (ARGWrapper(grow=True)) on a shared remote executor would "
                    "grow a separate copy in each worker. Pass grow=False there and grow the state in this process "
                    "from each finished group (graph.add_trajectory(t) for t in group.trajectories), or give "
                    "GroupEnv executor='process'/'ray' (it then grows the state here and sends it to its workers)."
                )
        group = cls.__new__(cls)
        group._setup(executor, slots, owns=False, states=(), config=config)
        return group

    def _setup(
        self,
        executor: Executor,
        slots: Sequence[int],
        *,
        owns: bool,
        states: Sequence[ParentState],
        config: GroupConfig | None,
    ) -> None:
        cfg = config if config is not None else GroupConfig()
        if not isinstance(cfg, GroupConfig):
            raise TypeError(f"config must be a GroupConfig, got {type(cfg).__name__}")
        self.config = cfg
        self.group_size = len(slots)
        self.render_mode = cfg.render_mode
        self.task_option = cfg.task_option
        self.success_fn = cfg.success_fn
        self.final_correctness = bool(cfg.final_correctness)
        self.executor, self._owns_executor, self._slots = executor, owns, list(slots)
        self._states = tuple(states)
        # the payloads the workers hold (what the recipe carried), None when unknown
        self._sent: list[Any] | None = [st.payload() for st in self._states]
        self.possible_agents = [f"rollout_{i}" for i in range(self.group_size)]
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        # One space object per agent, returned every call (parallel_api_test checks identity).
        spaces = self.executor.call("spaces", self._slots, [None] * self.group_size)
        self.observation_spaces = {a: spaces[i][0] for a, i in self._index.items()}
        self.action_spaces = {a: spaces[i][1] for a, i in self._index.items()}
        self._rng: np.random.Generator | None = None
        self._recorders = [EpisodeRecorder() for _ in range(self.group_size)]
        self._hindsight: list[str | None] | None = None
        self._last_seed: int | None = None
        self._pending: tuple[str, int, Any] | None = None  # the call between *_async and *_wait
        self._broken = False
        self._abort = cfg.on_failure == "abort"
        self._epochs = [
            0
        ] * self.group_size  # each copy's executor epoch at its reset (a change: worker restarted)

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
        if self._states:
            payloads = [st.payload() for st in self._states]
            if payloads != self._sent:  # grown (or changed by the user) since the workers last got it
                graph_ticket = self.executor.submit("parent_state", self._slots, [payloads] * self.group_size)
                self._sent = payloads
        ticket = self.executor.submit("reset", self._slots, [(env_seed, dict(opts))] * self.group_size)
        self._pending = ("reset", ticket, (env_seed, opts, graph_ticket))

    def reset_wait(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        kind, ticket, (env_seed, opts, graph_ticket) = self._take_pending("reset")
        if self._abort:
            return self._reset_wait_tolerant(ticket, env_seed, opts, graph_ticket)
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
        return self._started(results, {})

    def _reset_wait_tolerant(
        self, ticket: int, env_seed: int, opts: dict[str, Any], graph_ticket: int | None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """``on_failure="abort"``: a copy whose reset failed is rebuilt and reset once more; if that fails too,
        its rollout starts aborted (it never joins ``agents``)."""
        state_failed = set()
        if graph_ticket is not None:
            state_failed = {
                i
                for i, r in enumerate(self.executor.result(graph_ticket, tolerate=True))
                if isinstance(r, OpFailure)
            }
        results = self.executor.result(ticket, tolerate=True)
        failed = [i for i, r in enumerate(results) if isinstance(r, OpFailure) or i in state_failed]
        if failed:
            self._copies_lost()
            slots = [self._slots[i] for i in failed]
            state_ticket = None
            if self._states:
                payloads = [st.payload() for st in self._states]
                state_ticket = self.executor.submit("parent_state", slots, [payloads] * len(slots))
            again = self.executor.submit("reset", slots, [(env_seed, dict(opts))] * len(slots))
            bad_state = (
                [isinstance(r, OpFailure) for r in self.executor.result(state_ticket, tolerate=True)]
                if state_ticket is not None
                else [False] * len(slots)
            )
            for i, r, b in zip(failed, self.executor.result(again, tolerate=True), bad_state, strict=True):
                results[i] = (
                    r if not b or isinstance(r, OpFailure) else OpFailure("env_exception", "parent state", r)
                )
        ok = [i for i, r in enumerate(results) if not isinstance(r, OpFailure)]
        if ok:
            fixed = self._same_task([results[i] for i in ok], env_seed, opts, [self._slots[i] for i in ok])
            for i, r in zip(ok, fixed, strict=True):
                results[i] = r
        lost = {i: r for i, r in enumerate(results) if isinstance(r, OpFailure)}
        return self._started(results, lost)

    def _started(
        self, results: list[Any], lost: Mapping[int, OpFailure]
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Start the recorders; rollouts in ``lost`` start aborted (not in ``agents``, nothing returned for them)."""
        tid = next((results[i][1].get(schema.TASK_ID) for i in range(len(results)) if i not in lost), None)
        self.agents = [a for a in self.possible_agents if self._index[a] not in lost]
        self._hindsight = None
        self._broken = False
        self._epochs = [self.executor.epochs[s] for s in self._slots]
        obs, infos = {}, {}
        for a, i in self._index.items():
            if i in lost:
                failure = lost[i]
                traj = self._recorders[i].start("", {schema.TASK_ID: tid} if tid is not None else {})
                traj.abort(failure.cause)
                traj.initial_info.update(schema.abort_info(failure.cause, failure.detail))
                continue
            o, info = results[i]
            self._recorders[i].start(o, info)
            obs[a], infos[a] = o, info
        if not self.agents:
            self._finish()
        return obs, infos

    def _same_task(
        self,
        results: list[tuple[Any, dict]],
        seed: int,
        opts: dict[str, Any],
        slots: Sequence[int] | None = None,
    ) -> list[tuple[Any, dict]]:
        slots = self._slots if slots is None else slots
        tids = [info.get(schema.TASK_ID) for _, info in results]
        if all(t == tids[0] for t in tids):
            return results
        if self.task_option is not None and tids[0] is not None:
            redo = [i for i, t in enumerate(tids) if t != tids[0]]
            again = self.executor.call(
                "reset",
                [slots[i] for i in redo],
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
        gone: dict[str, OpFailure] = {}
        if self._abort:  # a copy whose worker was restarted since its reset lost its episode: never step it
            for a in acting:
                i = self._index[a]
                slot = self._slots[i]
                if self.executor.epochs[slot] != self._epochs[i]:
                    # the cause of that restart (a hung step's restart is a step_timeout, not a death)
                    causes = getattr(self.executor, "restart_causes", None)
                    cause = (causes[slot] if causes else None) or "worker_death"
                    err = EnvWorkerError(
                        f"the env worker holding this copy was restarted ({cause})", cause=cause
                    )
                    gone[a] = OpFailure(cause, str(err), err)
            acting = [a for a in acting if a not in gone]
        ticket = self.executor.submit(
            "step", [self._slots[self._index[a]] for a in acting], [actions[a] for a in acting]
        )
        self._pending = ("step", ticket, (acting, [actions[a] for a in acting], gone))

    def step_wait(
        self,
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        _, ticket, (acting, acts, gone) = self._take_pending("step")
        if self._abort:
            return self._step_results(acting, acts, self.executor.result(ticket, tolerate=True), gone)
        try:
            results = self.executor.result(ticket)
        except Exception as e:
            self._broken = True  # the episode cannot continue on copies that may be gone: reset first
            self._copies_lost()
            if isinstance(e, EnvWorkerError):
                raise self._named(e, f"stepping task {self.task_id!r}, seed {self._last_seed}") from e
            raise
        return self._step_results(acting, acts, results, {})

    def _step_results(
        self, acting: list[str], acts: list[Any], results: list[Any], gone: Mapping[str, OpFailure]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        """Record the step. An :class:`OpFailure` (``on_failure="abort"``) ends that rollout as aborted: it leaves
        ``agents`` with ``truncations`` True (PettingZoo's way out), reward 0.0 that is never credited, its last
        observation again, and an info holding ``schema.ABORTED`` / ``ABORT_CAUSE`` / ``ABORT_DETAIL``; no step
        is recorded for it (no transition happened) and its trajectory is marked ``aborted``."""
        obs, rew, term, trunc, infos = {}, {}, {}, {}, {}
        outcomes = [*zip(acting, acts, results, strict=True), *((a, None, f) for a, f in gone.items())]
        for a, act, res in outcomes:
            i = self._index[a]
            if isinstance(res, OpFailure):
                self._copies_lost()
                traj = self._recorders[i].trajectory
                assert traj is not None
                traj.abort(res.cause)
                info = schema.abort_info(res.cause, res.detail)
                last = traj.steps[-1].next_observation if traj.steps else traj.initial_observation
                obs[a], rew[a], term[a], trunc[a], infos[a] = last, 0.0, False, True, info
                continue
            o, r, te, tr, info = res
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
        # A restarted worker rebuilt its copies from the recipe, with the state as it was then: send it again.
        self._sent = None

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
        finished = [t for t in trajs if not t.aborted]  # an aborted episode never grows a parent state (ARG)
        for st in self._states:
            st.update(finished)
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
    def parent_states(self) -> tuple[ParentState, ...]:
        """The states this process keeps for the copies' parent-state wrappers when they run in workers
        (:mod:`stepgym.wrappers.protocols`; an ``ARGWrapper``'s is an ``ARGParentState`` whose ``graph`` is the one
        graph), in wrapper order. Empty in-process (the wrappers' own state is then the one state)."""
        return self._states

    @property
    def finished(self) -> bool:
        """Every rollout of the current group has terminated, been truncated or been aborted."""
        return self._hindsight is not None

    def aborted(self) -> list[bool]:
        """Per rollout, whether its episode was aborted (``on_failure="abort"``; docs/failures.md)."""
        return [t.aborted for t in self.trajectories]

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
        if self._abort:  # a copy that failed (its rollout is aborted) has no answer: left out
            return lambda: {
                a: v
                for a, v in zip(agents, self.executor.result(ticket, tolerate=True), strict=True)
                if not isinstance(v, OpFailure)
            }
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


def _check_size(group_size: Any) -> None:
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
