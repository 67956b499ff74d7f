"""The rollout collector: N task groups through :class:`stepgym.GroupEnv`, in lockstep, one row per model turn.

It speaks only the PettingZoo Parallel API of ``GroupEnv`` (``reset``/``step``/``agents``) and the Gymnasium
wrappers stepgym ships: every rollout env is wrapped in ``EnvFeedbackWrapper`` (format-valid / admissible /
effective flags, feedback text) and ``TextInterfaceWrapper`` (prompt rendering with the last K steps and the
admissible actions; strict parsing of the reply). All live agents of all groups are answered by **one** backend
call per step, which is what makes rollouts fast on a GPU (verl-agent batches the same way).

What comes back (:class:`Rollouts`): the step rows in (trajectory, step) order, the recorded
:class:`~stepgym.schema.Trajectory` of every rollout (the same info dicts the rows point to), the group of each
trajectory and the peer-hindsight block ``GroupEnv`` attached to each failed rollout of a mixed group.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.group import GroupEnv, is_success
from stepgym.trainers.backends import GenerationRequest, RolloutBackend
from stepgym.trainers.samples import PromptEncoder, StepRow
from stepgym.workers import EnvRecipe, Executor, make_executor
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import TextFormat, TextInterfaceWrapper

__all__ = ["Collector", "Rollouts"]


@dataclass
class Rollouts:
    """One batch of groups (see the module docstring). ``traj`` indices are ``group * G + rollout``."""

    rows: list[StepRow]
    trajectories: list[schema.Trajectory]
    traj_group: list[int]
    hindsight: list[str | None]
    task_ids: list[str]
    group_size: int
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def successes(self) -> list[bool]:
        return [bool(is_success(t)) for t in self.trajectories]

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
        anchor: ``"state_key"`` or ``"observation"`` (GiGPO's anchor state of each row).
        executor: where the env copies run (:mod:`stepgym.workers`): ``"inprocess"`` (each group in this process,
            the default), ``"process"`` or ``"ray"`` (all groups' copies sharded over ``num_workers`` workers of one
            shared executor; each turn is one batched call per worker, overlapped across workers).
        num_workers: worker processes / Ray actors.
        executor_kwargs: more executor arguments (``timeout``, ``num_cpus``, ``address``).
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
        anchor: str = "state_key",
        executor: str = "inprocess",
        num_workers: int = 2,
        executor_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.fmt = fmt
        self.history = history
        self.group_size = int(group_size)
        self.encoder = encoder
        self.backend = backend
        self.anchor = anchor
        self.executor = executor
        self.num_workers = int(num_workers)
        self.executor_kwargs = dict(executor_kwargs or {})
        self._pool: list[GroupEnv] = []
        self._shared: Executor | None = None

    def _wrappers(self) -> list[Callable[[Any], Any]]:
        return [
            EnvFeedbackWrapper,
            functools.partial(TextInterfaceWrapper, fmt=self.fmt, history_length=self.history),
        ]

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
                    )
                )
            return self._pool[:n]
        if len(self._pool) < n:
            self.close()
            g_size = self.group_size
            recipe = EnvRecipe(self.env_id, self.env_kwargs, tuple(self._wrappers()))
            self._shared = make_executor(
                self.executor, recipe, n * g_size, num_workers=self.num_workers, **self.executor_kwargs
            )
            self._pool = [
                GroupEnv(
                    self.env_id,
                    group_size=g_size,
                    executor=self._shared,
                    slots=range(k * g_size, (k + 1) * g_size),
                )
                for k in range(n)
            ]
        return self._pool[:n]

    def task_ids(self) -> list[str]:
        """The env's tasks in its fixed order (``env.unwrapped.task_ids``)."""
        ids = self.groups(1)[0].get_unwrapped_attr("task_ids")
        if ids is None:
            raise ValueError(f"{self.env_id!r} exposes no task_ids; tasks are drawn by seed instead")
        return list(ids)

    def close(self) -> None:
        for g in self._pool:
            g.close()
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        self._pool = []

    def _anchor(self, info: dict[str, Any], obs: Any) -> Any:
        if self.anchor == "state_key" and info.get(schema.STATE_KEY) is not None:
            return info[schema.STATE_KEY]
        return obs

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
        runs split a batch's groups over ranks; :mod:`stepgym.trainers.distributed`)."""
        if group_rngs is not None and len(group_rngs) != len(tasks):
            raise ValueError(f"{len(group_rngs)} group generators for {len(tasks)} groups")
        groups = self.groups(len(tasks))
        g_size = self.group_size
        last_info: list[dict[str, dict[str, Any]]] = []
        last_obs: list[dict[str, Any]] = []
        for g, (tid, seed) in zip(groups, tasks, strict=True):
            g.reset_async(seed=int(seed), options={"task_id": tid} if tid is not None else None)
        for g in groups:
            obs, infos = g.reset_wait()
            last_obs.append(obs)
            last_info.append(infos)
        rows: list[StepRow] = []
        stats = {"gen_seconds": 0.0, "env_seconds": 0.0, "gen_tokens": 0.0, "prompt_tokens": 0.0}
        while any(g.agents for g in groups):
            live = [(gi, a) for gi, g in enumerate(groups) for a in g.agents]
            waits = [g.get_wrapper_attr_async("prompt") for g in groups]  # one batched call per worker
            group_prompts = [w() for w in waits]
            requests, prompts = [], []
            for gi, a in live:
                prompt = group_prompts[gi][a]
                ids, cut = self.encoder.encode(prompt)
                prompts.append((prompt, ids, cut))
                req_seed = None if group_rngs is None else int(group_rngs[gi].integers(2**63 - 1))
                requests.append(GenerationRequest(ids, prompt, last_info[gi][a], seed=req_seed))
            t0 = time.perf_counter()
            gens = self.backend.generate(requests, seed=int(seed_rng.integers(2**31 - 1)), greedy=greedy)
            t1 = time.perf_counter()
            stats["gen_seconds"] += t1 - t0
            stats["gen_tokens"] += sum(len(x.response_ids) for x in gens)
            stats["prompt_tokens"] += sum(len(p[1]) for p in prompts)
            by_group: dict[int, dict[str, int]] = {}
            for k, (gi, a) in enumerate(live):
                by_group.setdefault(gi, {})[a] = k
            for (
                gi,
                members,
            ) in by_group.items():  # queue every group's step, then wait: workers run in parallel
                groups[gi].step_async({a: gens[k].text for a, k in members.items()})
            for gi, members in by_group.items():
                g = groups[gi]
                _, rew, _, _, infos = g.step_wait()
                for a, k in members.items():
                    info = infos[a]
                    r_idx = g.possible_agents.index(a)
                    traj = g.trajectories[r_idx]
                    step = traj.steps[-1]
                    prompt, ids, cut = prompts[k]
                    rows.append(
                        StepRow(
                            group=gi,
                            rollout=r_idx,
                            traj=gi * g_size + r_idx,
                            t=len(traj.steps) - 1,
                            task_id=traj.task_id,
                            prompt=prompt,
                            prompt_ids=list(ids),
                            response_ids=list(gens[k].response_ids),
                            response_text=gens[k].text,
                            prompt_truncated=cut,
                            finished=gens[k].finished,
                            observation=step.observation,
                            reward=float(rew[a]),
                            format_valid=bool(info.get(schema.FORMAT_VALID, False)),
                            admissible=bool(info.get(schema.ADMISSIBLE, True)),
                            action=info.get(schema.PARSED_ACTION),
                            info=info,
                            anchor=self._anchor(last_info[gi][a], last_obs[gi][a]),
                        )
                    )
                    last_info[gi][a] = info
                    last_obs[gi][a] = step.next_observation
            stats["env_seconds"] += time.perf_counter() - t1
            if progress is not None:
                progress.update(1)
        rows.sort(key=lambda r: (r.traj, r.t))
        trajectories = [t for g in groups for t in g.trajectories]
        hindsight = [h for g in groups for h in g.peer_hindsight()]
        traj_group = [gi for gi in range(len(groups)) for _ in range(g_size)]
        return Rollouts(rows, trajectories, traj_group, hindsight, [g.task_id for g in groups], g_size, stats)
