# Over 400 lines: the playing loop of every phase, with generation overlapped with env steps.
"""The rollout collector: N task groups through :class:`stepgym.GroupEnv`, in lockstep, one row per model turn.

It speaks only the PettingZoo Parallel API of ``GroupEnv`` (``reset``/``step``/``agents``) and the Gymnasium
wrappers stepgym ships: every rollout env is wrapped in ``EnvFeedbackWrapper`` (format-valid / admissible /
effective flags, feedback text) and ``TextInterfaceWrapper`` (prompt rendering with the last K steps and the
admissible actions; strict parsing of the reply). All live agents of all groups are answered by **one** backend
call per step, which is what makes rollouts fast on a GPU (verl-agent batches the same way).

With env workers (``executor="process"`` / ``"ray"``) the GPU would still wait for the envs and the envs for the
GPU, so the collector overlaps them (``overlap``): the groups are split into two waves taken in a fixed order; while
the workers step one wave, the backend answers the other. One backend call per wave per turn; the seeds are drawn
in an order that does not depend on timing (see :meth:`Collector.collect`).

What comes back (:class:`Rollouts`): the step rows in (trajectory, step) order, the recorded
:class:`~stepgym.schema.Trajectory` of every rollout (the same info dicts the rows point to), the group of each
trajectory and the peer-hindsight block ``GroupEnv`` attached to each failed rollout of a mixed group.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.group import GroupConfig, GroupEnv
from stepgym.steps.record import step_annotations
from stepgym.steps.row import StepRow
from stepgym.trainers.backends import GenerationRequest, RolloutBackend
from stepgym.trainers.samples import PromptEncoder
from stepgym.workers import EnvRecipe, Executor, ExecutorSpec, make_executor
from stepgym.wrappers.text import TextFormat, text_wrappers

__all__ = ["Collector", "CollectorOptions", "Rollouts", "draw_tasks"]


@dataclass
class Rollouts:
    """One batch of groups (see the module docstring). ``traj`` indices are ``group * G + rollout``."""

    rows: list[StepRow]
    trajectories: list[schema.Trajectory]
    traj_group: list[int]
    hindsight: list[str | None]
    task_ids: list[str | None]
    """The task of each group (``None``: drawn by the group's reset seed)."""
    group_size: int
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def successes(self) -> list[bool]:
        return [t.success for t in self.trajectories]

    def abort_counts(self) -> dict[str, int]:
        """Aborted episodes per cause (docs/failures.md); empty when none was aborted."""
        out: dict[str, int] = {}
        for t in self.trajectories:
            if t.aborted:
                out[str(t.abort_cause)] = out.get(str(t.abort_cause), 0) + 1
        return out

    def rows_of(self, traj: int) -> list[StepRow]:
        return [r for r in self.rows if r.traj == traj]

    def subset_groups(self, keep: Sequence[int]) -> Rollouts:
        """The rollouts of the given groups only, renumbered 0..len(keep)-1 (dynamic sampling)."""
        keep = list(keep)
        remap = {g: i for i, g in enumerate(keep)}
        g_size = self.group_size
        trajs, tgroup, hind = [], [], []
        for g in keep:
            for r in range(g_size):
                trajs.append(self.trajectories[g * g_size + r])
                tgroup.append(remap[g])
                hind.append(self.hindsight[g * g_size + r])
        rows = []
        for row in self.rows:
            if row.group in remap:
                row.group = remap[row.group]
                row.traj = row.group * g_size + row.rollout
                rows.append(row)
        return Rollouts(rows, trajs, tgroup, hind, [self.task_ids[g] for g in keep], g_size, dict(self.stats))

    @staticmethod
    def concat(parts: Sequence[Rollouts]) -> Rollouts:
        """Several collections as one batch (groups renumbered in order)."""
        if not parts:
            raise ValueError("nothing to concatenate")
        g_size = parts[0].group_size
        rows, trajs, tgroup, hind, tids = [], [], [], [], []
        stats: dict[str, float] = {}
        offset = 0
        for p in parts:
            for row in p.rows:
                row.group += offset
                row.traj = row.group * g_size + row.rollout
                rows.append(row)
            trajs += p.trajectories
            tgroup += [g + offset for g in p.traj_group]
            hind += p.hindsight
            tids += p.task_ids
            for k, v in p.stats.items():
                stats[k] = stats.get(k, 0.0) + v
            offset += len(p.task_ids)
        return Rollouts(rows, trajs, tgroup, hind, tids, g_size, stats)


def draw_tasks(ids: Sequence[str] | None, n: int, rng: np.random.Generator) -> list[tuple[str | None, int]]:
    """``n`` ``(task_id, reset_seed)`` pairs: task ids drawn uniformly from ``ids`` (with replacement only when
    ``n`` exceeds them), each with a fresh seed; for an env without task ids (``ids`` is ``None``) the task is
    whatever ``reset(seed=...)`` draws, so each pair is ``(None, seed)``."""
    if not ids:
        return [(None, int(rng.integers(2**31 - 1))) for _ in range(n)]
    pick = rng.choice(len(ids), size=n, replace=n > len(ids))
    return [(ids[int(i)], int(rng.integers(2**31 - 1))) for i in pick]


@dataclass(frozen=True)
class CollectorOptions:
    """How a :class:`Collector` plays: where its env copies run and how it pipelines turns."""

    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    """Where the env copies run (:class:`~stepgym.workers.ExecutorSpec`): ``"inprocess"`` (each group in this
    process, the default), ``"process"`` or ``"ray"`` (all groups' copies sharded over ``num_workers`` workers of
    one shared executor; each turn is one batched call per worker, overlapped across workers); its ``options``
    (``timeout``, ``num_cpus``, ``address``) go to the executor."""
    overlap: str = "auto"
    """``"auto"`` (on with ``"process"`` / ``"ray"``), ``"on"`` or ``"off"``: pipeline waves of groups so that
    the workers step one wave while the backend answers the next (:meth:`Collector.collect`)."""
    value_labels: bool = False
    """Wrap each copy in :class:`~stepgym.values.ValueWrapper` (``schema.VALUE_GAIN`` on every step)."""
    on_failure: str = "abort"
    """Failure semantics of every phase that plays through a collector (format warm-up, training, evaluation;
    docs/failures.md): ``"abort"`` (default): an infrastructure failure of one rollout ends its episode as aborted
    and the batch goes on (``GroupConfig.on_failure``; its rows carry ``StepRow.aborted``, its trajectory
    ``aborted``). ``"raise"`` stops at the first failure with the error: only to debug an env."""
    faults: str = ""
    """Fault injection for tests and benchmarks (``"exception=P,kill=P,hang=P,seed=N"``, the innermost wrapper:
    :class:`~stepgym.wrappers.faults.FaultInjectionWrapper`); '' injects nothing."""

    def __post_init__(self) -> None:
        if self.overlap not in ("auto", "on", "off"):
            raise ValueError(f"overlap must be 'auto', 'on' or 'off', got {self.overlap!r}")


class Collector:
    """Collects groups of rollouts with a backend.

    Args:
        env_id: a registered Gymnasium id (or a factory ``f(**kwargs) -> gym.Env``).
        env_kwargs: keyword arguments of every env copy.
        fmt: the text format (prompts and parsing).
        history: K, the steps shown in the prompt (``None``: all).
        group_size: G.
        encoder: turns prompt text into token ids (chat template, truncation).
        backend: the rollout backend.
        options: :class:`CollectorOptions` (executor, overlap, value labels, what a
            failure does, fault injection).
    """

    def __init__(
        self,
        env_id: str | Callable[..., Any],
        env_kwargs: dict[str, Any],
        fmt: TextFormat,
        *,
        history: int | None,
        group_size: int,
        encoder: PromptEncoder,
        backend: RolloutBackend,
        options: CollectorOptions = CollectorOptions(),
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.fmt = fmt
        self.history = history
        self.group_size = int(group_size)
        self.encoder = encoder
        self.backend = backend
        self.options = options
        self.executor = options.executor.kind
        self.num_workers = int(options.executor.num_workers)
        self.executor_kwargs = dict(options.executor.options)
        self.overlap = options.overlap
        self.value_labels = bool(options.value_labels)
        self.group_config = GroupConfig(on_failure=options.on_failure)  # type: ignore[arg-type]
        self.faults = options.faults
        self._pool: list[GroupEnv] = []
        self._shared: Executor | None = None

    def _wrappers(self) -> list[Callable[[Any], Any]]:
        # innermost: ValueWrapper reads the engine's state key and task id (EnvConfig.value_labels)
        inner: list[Callable[[Any], Any]] = []
        if self.faults:
            import functools

            from stepgym.wrappers.faults import FaultInjectionWrapper, parse_faults

            inner.append(functools.partial(FaultInjectionWrapper, **parse_faults(self.faults)))
        if self.value_labels:
            from stepgym.values import ValueWrapper

            inner.append(ValueWrapper)
        return [*inner, *text_wrappers(self.fmt, history=self.history)]

    def groups(self, n: int) -> list[GroupEnv]:
        """``n`` GroupEnvs, created on first use and reused (ALFWorld caches parsed games per env).

        In-process, each group holds its own copies and the pool grows one group at a time. With workers, all
        groups share one executor of ``n × G`` copies (contiguous slots per group, so a group stays on one worker
        when it fits); asking for more groups than it holds rebuilds it."""
        if self.executor == "inprocess":
            while len(self._pool) < n:
                self._pool.append(
                    GroupEnv(
                        self.env_id,
                        group_size=self.group_size,
                        env_kwargs=self.env_kwargs,
                        wrappers=self._wrappers(),
                        config=self.group_config,
                    )
                )
            return self._pool[:n]
        if len(self._pool) < n:
            g_size = self.group_size
            recipe = EnvRecipe(self.env_id, self.env_kwargs, tuple(self._wrappers()))
            # the new executor first: a Ray that the old one started stays up for it
            shared = make_executor(
                self.executor, recipe, n * g_size, num_workers=self.num_workers, **self.executor_kwargs
            )
            self.close()
            self._shared = shared
            self._pool = [
                GroupEnv.on_executor(
                    self._shared, slots=range(k * g_size, (k + 1) * g_size), config=self.group_config
                )
                for k in range(n)
            ]
        return self._pool[:n]

    def task_ids(self) -> list[str] | None:
        """The env's tasks in its fixed order (``env.unwrapped.task_ids``), or ``None`` when the env has none: its
        tasks are then drawn by the reset seed (:func:`draw_tasks`)."""
        ids = self.groups(1)[0].get_unwrapped_attr("task_ids")
        return [str(t) for t in ids] if ids else None

    def close(self) -> None:
        for g in self._pool:
            g.close()
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        self._pool = []

    @property
    def overlaps(self) -> bool:
        """Whether :meth:`collect` pipelines waves of groups (``overlap``: ``"on"``, or ``"auto"`` with workers)."""
        return self.overlap == "on" or (self.overlap == "auto" and self.executor != "inprocess")

    def _waves(self, n: int) -> list[list[int]]:
        """The batch's groups in a fixed order of waves: every ``OVERLAP_WAVES``-th group, so each wave spans
        all the workers (a group's copies are contiguous on one worker)."""
        k = OVERLAP_WAVES if self.overlaps else 1
        return [w for w in (list(range(i, n, k)) for i in range(k)) if w]

    def collect(
        self,
        tasks: Sequence[tuple[str | None, int]],
        *,
        seed_rng: np.random.Generator,
        greedy: bool = False,
        progress: Any = None,
        group_rngs: Sequence[np.random.Generator] | None = None,
    ) -> Rollouts:
        """Play one group per ``(task_id, seed)`` to the end; ``seed_rng`` draws the backend's sampling seeds.

        ``group_rngs`` (one generator per group) also gives every request of a group its own seed, drawn in agent
        order each turn, so that a group's replies do not depend on the other groups of the call (data-parallel
        runs split a batch's groups over ranks; :mod:`stepgym.trainers.distributed`; overlapped waves, too).

        Overlap (:attr:`overlaps`): the groups are split into waves; each wave's step is sent to the workers and,
        while they step it, the backend answers the next wave. The waves take turns in a fixed order, whatever
        finishes first, so the seeds are drawn in the same order every run: one draw of ``seed_rng`` per turn
        (as without overlap; a wave's call seed is derived from the turn's draw and the wave), and each group's
        generator in agent order. With ``group_rngs`` (and a backend that honours request seeds) the rollouts are
        byte-identical with and without overlap."""
        if group_rngs is not None and len(group_rngs) != len(tasks):
            raise ValueError(f"{len(group_rngs)} group generators for {len(tasks)} groups")
        groups = self.groups(len(tasks))
        for g, (tid, seed) in zip(groups, tasks, strict=True):
            g.reset_async(seed=int(seed), options={"task_id": tid} if tid is not None else None)
        run = _Collection(self, groups, seed_rng, greedy, group_rngs)
        try:
            for g in groups:
                run.start(g.reset_wait())
            waves = self._waves(len(groups))
            flights = [run.launch(w, wave) for w, wave in enumerate(waves)]
            while any(f is not None for f in flights):
                for w, wave in enumerate(waves):
                    if flights[w] is not None:
                        run.land(flights[w])
                        flights[w] = run.launch(w, wave)
                if progress is not None:
                    progress.update(1)
        except BaseException:
            for g in groups:  # a wave may still be in flight: collect (and drop) it, so the groups can reset
                g.abandon()
            raise
        return run.rollouts()


#: Waves of groups the collector pipelines when it overlaps env stepping with generation.
OVERLAP_WAVES = 2


@dataclass
class _Flight:
    """One wave's turn on its way: the requests, their replies, and the tickets of the step and the next prompts."""

    wave: list[int]
    live: list[tuple[int, str]]
    prompts: list[tuple[str, list[int], bool]]
    gens: list[Any]
    next_prompts: dict[int, Callable[[], dict[str, Any]]]


class _Collection:
    """The state of one :meth:`Collector.collect`: each agent's last info, observation and prompt; the rows."""

    def __init__(self, col: Collector, groups: list[GroupEnv], seed_rng, greedy, group_rngs) -> None:
        self.col, self.groups, self.seed_rng, self.greedy, self.group_rngs = (
            col,
            groups,
            seed_rng,
            greedy,
            group_rngs,
        )
        self.last_info: list[dict[str, dict[str, Any]]] = []
        self.last_obs: list[dict[str, Any]] = []
        self.prompt: list[dict[str, str]] = []
        self.turn_seeds: list[int] = []
        self.turns: dict[int, int] = {}
        self.rows: list[StepRow] = []
        self.stats = {"gen_seconds": 0.0, "env_seconds": 0.0, "gen_tokens": 0.0, "prompt_tokens": 0.0}

    def start(self, reset: tuple[dict[str, Any], dict[str, dict[str, Any]]]) -> None:
        obs, infos = reset
        self.last_obs.append(obs)
        self.last_info.append(infos)
        if len(self.last_obs) == len(self.groups):  # every group is reset: one batched prompt call per worker
            waits = [g.get_wrapper_attr_async("prompt") for g in self.groups]
            self.prompt = [w() for w in waits]

    def _call_seed(self, w: int) -> int:
        """The seed of wave ``w``'s call at its next turn: the turn's draw of ``seed_rng`` (drawn once per turn, by
        the first wave to reach it), derived per wave so the waves' samples are not correlated."""
        t = self.turns.get(w, 0)
        self.turns[w] = t + 1
        while len(self.turn_seeds) <= t:
            self.turn_seeds.append(int(self.seed_rng.integers(2**31 - 1)))
        if w == 0:
            return self.turn_seeds[t]
        return int(np.random.SeedSequence([self.turn_seeds[t], w]).generate_state(1)[0] % (2**31 - 1))

    def launch(self, w: int, wave: list[int]) -> _Flight | None:
        """Answer wave ``w``'s live agents with one backend call, then send its step (and the reading of the next
        prompts) to the workers without waiting. ``None`` when the wave has finished."""
        live = [(gi, a) for gi in wave for a in self.groups[gi].agents]
        if not live:
            return None
        requests, prompts = [], []
        for gi, a in live:
            text = self.prompt[gi][a]
            ids, cut = self.col.encoder.encode(text)
            prompts.append((text, ids, cut))
            req_seed = None if self.group_rngs is None else int(self.group_rngs[gi].integers(2**63 - 1))
            requests.append(GenerationRequest(ids, text, self.last_info[gi][a], seed=req_seed))
        seed = self._call_seed(w)
        t0 = time.perf_counter()
        gens = self.col.backend.generate(requests, seed=seed, greedy=self.greedy)
        self.stats["gen_seconds"] += time.perf_counter() - t0
        self.stats["gen_tokens"] += sum(len(x.response_ids) for x in gens)
        self.stats["prompt_tokens"] += sum(len(p[1]) for p in prompts)
        next_prompts = {}
        for gi in wave:
            g = self.groups[gi]
            acting = {a: gens[k].text for k, (gj, a) in enumerate(live) if gj == gi}
            if acting:
                g.step_async(acting)
                next_prompts[gi] = g.get_wrapper_attr_async("prompt", list(acting))
        for gi in next_prompts:
            self.groups[gi].executor.send()  # one message per worker; a shared executor sends it once
        return _Flight(wave, live, prompts, gens, next_prompts)

    def land(self, f: _Flight) -> None:
        """Wait for a wave's step; record its rows and the next prompts."""
        t1 = time.perf_counter()
        g_size = self.col.group_size
        index = {key: k for k, key in enumerate(f.live)}
        for gi, read_prompts in f.next_prompts.items():
            g = self.groups[gi]
            _, rew, _, _, infos = g.step_wait()
            self.prompt[gi] = read_prompts()
            for a, info in infos.items():
                if info.get(
                    schema.ABORTED
                ):  # no transition happened: no row (the episode's rows are marked later)
                    continue
                k = index[(gi, a)]
                r_idx = g.possible_agents.index(a)
                traj = g.trajectories[r_idx]
                step = traj.steps[-1]
                prompt, ids, cut = f.prompts[k]
                # the step's record, read once from its infos (stepgym.steps.record): the batch builder keys it
                rec = step_annotations(
                    self.last_info[gi][a], step.action, float(rew[a]), info, terminated=bool(step.terminated)
                )
                self.rows.append(
                    StepRow(
                        group=gi,
                        rollout=r_idx,
                        traj=gi * g_size + r_idx,
                        t=len(traj.steps) - 1,
                        task_id=traj.task_id,
                        prompt=prompt,
                        prompt_ids=list(ids),
                        response_ids=list(f.gens[k].response_ids),
                        response_text=f.gens[k].text,
                        prompt_truncated=cut,
                        finished=f.gens[k].finished,
                        observation=step.observation,
                        next_observation=step.next_observation,
                        info=info,
                        record=rec,
                    )
                )
                self.last_info[gi][a] = info
                self.last_obs[gi][a] = step.next_observation
        self.stats["env_seconds"] += time.perf_counter() - t1

    def rollouts(self) -> Rollouts:
        groups, g_size = self.groups, self.col.group_size
        rows = sorted(self.rows, key=lambda r: (r.traj, r.t))
        trajectories = [t for g in groups for t in g.trajectories]
        for r in rows:
            r.aborted = trajectories[r.traj].aborted
        hindsight = [h for g in groups for h in g.peer_hindsight()]
        traj_group = [gi for gi in range(len(groups)) for _ in range(g_size)]
        return Rollouts(
            rows, trajectories, traj_group, hindsight, [g.task_id for g in groups], g_size, self.stats
        )
