# Over 400 lines: the three places env copies run (in process, local processes, Ray) behind one interface.
"""Where env copies run: in this process, in a pool of local worker processes, or on Ray actors.

A :class:`~stepgym.GroupEnv` (and the trainer's collector, which drives many groups in lockstep) does not care
where its env copies live. An *executor* holds a fixed number of copies ("slots") and answers batched requests
on them. Three executors share one interface:

* :class:`InProcessExecutor` — the copies live in this process and step one after another (the default; no
  overhead, no parallelism).
* :class:`ProcessExecutor` — ``num_workers`` local worker processes (standard library only: fresh interpreters
  over socket pairs, so no ``__main__`` guard is needed), each holding a contiguous shard of the slots.
* :class:`RayExecutor` — the same shards on Ray actors (``pip install 'stepgym[ray]'``); ``address="auto"``
  joins a running cluster (``ray start --head`` on one machine, ``ray start --address=...`` on the others).

Design rules (the pattern of Ray-based agent-RL trainers, with their failure modes fixed):

* **Only recipes cross process boundaries.** An :class:`EnvRecipe` (env id or importable factory, kwargs,
  importable wrapper classes or ``functools.partial`` of them) is sent to each worker, which builds its copies
  there. Envs, engines, browsers and LLM clients never leave their worker. A recipe that cannot be pickled (a
  lambda, a local class) is refused when the executor is created, with the reason. A wrapper that keeps state in
  the parent (:mod:`stepgym.wrappers.protocols`, e.g. the ARG) has it kept and grown by ``GroupEnv`` in the driver;
  the ``parent_state`` operation sends it to the copies.
* **One remote call per worker per turn.** Requests are queued (:meth:`Executor.submit`) and sent together on the
  first :meth:`Executor.result`: every worker receives one message holding all of its pending operations, runs
  them in order and answers once. Many groups on one worker therefore cost one round trip per turn, which keeps
  fast envs (WebShop, ~0.4 ms a step) from drowning in call overhead.
* **Results are plain data** (observations, floats, bools, info dicts), so what the driver records is identical
  to what an in-process copy returns: trajectories and peer hindsight are byte-identical across executors for
  the same seeds (tested on CreditToy and ALFWorld).
* **Faults are loud and bounded.** Every call has a timeout. A worker that dies or does not answer in time is
  killed, restarted with fresh copies of its slots, and the call raises :class:`EnvWorkerError` naming the
  worker, its slots and the operation; the copies on it must be reset before they are stepped again (a group is
  never silently continued on a fresh copy). An exception inside an env is re-raised in the driver as
  :class:`EnvWorkerError` with the worker's traceback. :meth:`Executor.close` ends every process it started (and
  the Ray it started, with the last executor on it).
* **Calls can be in flight.** :meth:`Executor.send` starts the queued operations and returns; the trainer's collector
  uses it to let the workers step one wave of groups while it generates the actions of the next.
* **Data paths reach workers.** Local workers inherit the environment; Ray actors get ``STEPGYM_*`` and
  ``ALFWORLD_DATA`` through their runtime environment.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym

from stepgym.errors import StepGymError, abort_cause_of

__all__ = [
    "EnvRecipe",
    "EnvWorkerError",
    "Executor",
    "ExecutorSpec",
    "InProcessExecutor",
    "OpFailure",
    "ProcessExecutor",
    "RayExecutor",
    "make_executor",
]

#: Seconds a worker may take to answer one batched call (a turn of every group it holds) before it is restarted.
DEFAULT_TIMEOUT = 300.0
#: Environment variables that carry data and cache locations to workers on other machines.
_FORWARDED_ENV = ("STEPGYM_DATA", "STEPGYM_CACHE", "ALFWORLD_DATA", "XDG_CACHE_HOME", "STEPGYM_REQUIRE_DATA")


class EnvWorkerError(StepGymError):
    """An env worker died, timed out, or an env raised inside it. The worker's copies were rebuilt (fresh,
    not reset); reset the groups that used them before stepping again. ``cause`` is the ``schema.ABORT_CAUSES``
    entry an episode it cut off ends with ("worker_death", "step_timeout", "env_exception", a service's)."""

    def __init__(self, message: str, *, cause: str = "env_exception") -> None:
        super().__init__(message)
        self.cause = self.abort_cause = cause  # abort_cause: what errors.abort_cause_of reads


@dataclass(frozen=True)
class OpFailure:
    """What :meth:`Executor.result` returns, with ``tolerate=True``, in place of an operation that failed: the
    abort cause (``schema.ABORT_CAUSES``), one line on it, and the error strict callers get raised."""

    cause: str
    detail: str
    error: BaseException = field(repr=False, compare=False)


@dataclass(frozen=True)
class EnvRecipe:
    """How to build one env copy anywhere: ``gym.make(env, **kwargs)`` (or ``env(**kwargs)`` for an importable
    factory), then each wrapper in order (first = innermost). Everything must be picklable by reference
    (module-level classes and functions, ``functools.partial`` of them), never a lambda."""

    env: str | Callable[..., gym.Env]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: tuple[Callable[[gym.Env], gym.Env], ...] = ()

    def build(self) -> gym.Env:
        e = (
            gym.make(self.env, **dict(self.kwargs))
            if isinstance(self.env, str)
            else self.env(**dict(self.kwargs))
        )
        for w in self.wrappers:
            e = w(e)
        return e

    def check_picklable(self) -> None:
        """Raise ``ValueError`` naming the part of the recipe that cannot travel to another process."""
        for what, obj in (
            ("env", self.env),
            ("env_kwargs", dict(self.kwargs)),
            *(("wrapper", w) for w in self.wrappers),
        ):
            try:
                pickle.dumps(obj)
            except Exception as e:  # pickle raises several types (PicklingError, AttributeError, TypeError)
                raise ValueError(
                    f"the {what} {obj!r} cannot be sent to an env worker ({type(e).__name__}: {e}). Use a registered "
                    "env id or a module-level factory, and module-level wrapper classes or functools.partial of "
                    "them (no lambdas or local classes)."
                ) from None


@dataclass(frozen=True)
class ExecutorSpec:
    """Which executor a :class:`~stepgym.GroupEnv` starts for its own copies (:func:`make_executor` builds it).

    Args:
        kind: ``"inprocess"`` (default), ``"process"`` (a local pool) or ``"ray"``.
        num_workers: worker processes / actors for ``"process"`` and ``"ray"``.
        options: more keyword arguments for the executor (``timeout``, ``start_timeout``, ``num_cpus``,
            ``address``, ``ray_init_kwargs``: see :class:`ProcessExecutor` and :class:`RayExecutor`).
    """

    kind: str = "inprocess"
    num_workers: int = 2
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in EXECUTOR_KINDS:
            raise ValueError(f"ExecutorSpec.kind must be one of {EXECUTOR_KINDS}, got {self.kind!r}")
        if not isinstance(self.num_workers, int) or self.num_workers < 1:
            raise ValueError(f"ExecutorSpec.num_workers must be a positive int, got {self.num_workers!r}")

    def build(self, recipe: EnvRecipe, n: int) -> Executor:
        """The executor of ``n`` copies built from ``recipe``."""
        return make_executor(self.kind, recipe, n, num_workers=self.num_workers, **dict(self.options))


#: The executors :func:`make_executor` and :class:`ExecutorSpec` know by name.
EXECUTOR_KINDS = ("inprocess", "process", "ray")


# ---------------------------------------------------------------------------------------------------------------
# What a worker does: a shard of env copies answering a batch of operations
# ---------------------------------------------------------------------------------------------------------------
class _Shard:
    """The env copies of one worker, keyed by slot. Operations: ``reset`` (seed, options), ``step`` (action),
    ``attr`` (a wrapper attribute, e.g. the text interface's ``prompt``), ``unwrapped_attr`` (e.g. ``task_ids``),
    ``spaces`` (the observation and action spaces), ``parent_state`` (the payloads of the copy's
    :class:`~stepgym.wrappers.protocols.ParentStateWrapper` wrappers, innermost first: ``GroupEnv`` keeps and grows
    their state in the parent)."""

    def __init__(self, recipe: EnvRecipe, slots: Sequence[int], *, remote: bool = False):
        if (
            remote
        ):  # a Ray actor: an env worker, as a ProcessExecutor process (stepgym.wrappers.faults reads it)
            os.environ["STEPGYM_ENV_WORKER"] = "1"
        self.recipe = recipe
        self.envs = {s: recipe.build() for s in slots}

    def run(
        self, ops: Sequence[tuple[str, int, Any]], *, keep_exceptions: bool = False
    ) -> list[tuple[bool, Any]]:
        """Run the operations in order. An env's exception is returned as ``(abort cause, traceback)`` (a remote
        worker), or as the exception itself (``keep_exceptions``: in-process, where a strict caller sees the
        original exception). A copy whose ``reset`` / ``step`` raised is rebuilt from the recipe (its episode is
        over either way: the next operation on it must be a reset)."""
        out: list[tuple[bool, Any]] = []
        for op, slot, arg in ops:
            try:
                out.append((True, self._one(op, slot, arg)))
            except Exception as exc:  # reported to the driver (EnvWorkerError / OpFailure)
                out.append((False, exc if keep_exceptions else (abort_cause_of(exc), traceback.format_exc())))
                if op in ("reset", "step"):
                    self._rebuild(slot)
        return out

    def _rebuild(self, slot: int) -> None:
        with contextlib.suppress(Exception):  # a crashed copy may fail to close too
            self.envs[slot].close()
        with contextlib.suppress(Exception):  # keep the old copy: its next reset reports the failure again
            self.envs[slot] = self.recipe.build()

    def _one(self, op: str, slot: int, arg: Any) -> Any:
        env = self.envs[slot]
        if op == "reset":
            seed, options = arg
            return env.reset(seed=seed, options=options)
        if op == "step":
            return env.step(arg)
        if op == "attr":
            return env.get_wrapper_attr(arg)
        if op == "unwrapped_attr":
            name, default = arg
            return getattr(env.unwrapped, name, default)
        if op == "spaces":
            return env.observation_space, env.action_space
        if op == "parent_state":
            return _load_parent_states(env, arg)
        raise ValueError(f"unknown operation {op!r}")

    def close(self) -> None:
        for e in self.envs.values():
            # Best effort: one copy that fails to close must not keep the others open.
            with contextlib.suppress(Exception):
                e.close()

    def pid(self) -> int:
        """The worker's process id (:attr:`RayExecutor.pids`)."""
        return os.getpid()


def _load_parent_states(env: gym.Env, payloads: Sequence[Any]) -> None:
    """Hand each parent-state wrapper around ``env`` (innermost first) its payload from the parent."""
    from stepgym.wrappers.protocols import parent_state_wrappers

    wrappers = parent_state_wrappers(env)
    if len(wrappers) != len(payloads):
        raise ValueError(
            f"got {len(payloads)} parent states for {len(wrappers)} parent-state wrappers around this env copy"
        )
    for wrapper, payload in zip(wrappers, payloads, strict=True):
        wrapper.load_parent_state(payload)


def _worker_main(conn: Any, recipe: EnvRecipe, slots: list[int]) -> None:
    """Body of a :class:`ProcessExecutor` worker: build the shard, then answer batches until told to stop."""
    try:
        shard = _Shard(recipe, slots)
        conn.send(("ready", None))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if msg is None:
                break
            conn.send(("ok", shard.run(msg)))
    finally:
        shard.close()


# ---------------------------------------------------------------------------------------------------------------
# The executors
# ---------------------------------------------------------------------------------------------------------------
class Executor:
    """``n`` env copies (slots ``0..n-1``) built from one recipe, answering batched operations.

    :meth:`submit` queues operations and returns a ticket; :meth:`send` starts everything queued (one message
    per worker) without waiting; :meth:`result` sends the ticket if it is still queued, waits, and returns its
    results in order. :meth:`call` does both.

    Answers wait for their :meth:`result` call, but only the latest :attr:`max_uncollected` of them: a ticket
    nobody collects (a ``get_wrapper_attr_async`` never called, a group dropped mid-call) would otherwise keep
    its observations and infos for the executor's life. Answers arrive in ticket order, so the oldest are
    dropped first, and collecting a dropped ticket later raises ``ValueError`` saying so.
    """

    n: int
    recipe: EnvRecipe
    #: How many answered but uncollected tickets are kept (more than any lockstep collection leaves at once:
    #: one or two per group); set it on an instance to change it.
    max_uncollected: int = 4096

    def __init__(self, recipe: EnvRecipe, n: int):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"an executor needs at least one env copy, got {n!r}")
        self.recipe, self.n = recipe, n
        self._pending: list[tuple[int, list[tuple[str, int, Any]]]] = []
        # Answered tickets, in ticket order (the order answers arrive): the results, or the error that replaced them.
        self._answers: dict[int, list[Any]] = {}  # failed operations as OpFailure entries
        self._dropped_upto = -1  # the newest ticket whose answer was dropped uncollected
        self._in_flight: list[tuple[list[int], dict[int, list[tuple[str, int, Any]]], list[Any], Any]] = []
        self._next_ticket = 0
        #: per slot, how many times its worker was restarted (a copy whose number changed lost its episode)
        self.epochs: list[int] = [0] * n
        #: per slot, why its worker was last restarted (``"worker_death"`` or ``"step_timeout"``; None: never):
        #: an episode cut off by that restart ends with this cause, so each failure is counted under one cause
        self.restart_causes: list[str | None] = [None] * n

    # -- public --------------------------------------------------------------------------------------------
    def submit(self, op: str, slots: Sequence[int], args: Sequence[Any]) -> int:
        if len(slots) != len(args):
            raise ValueError("one argument per slot")
        for s in slots:
            if not 0 <= s < self.n:
                raise ValueError(f"slot {s} out of range 0..{self.n - 1}")
        ticket = self._next_ticket
        self._next_ticket += 1
        self._pending.append((ticket, [(op, s, a) for s, a in zip(slots, args, strict=True)]))
        return ticket

    def send(self) -> None:
        """Start everything queued (one message per worker) without waiting for the answers, so that the caller
        can work while the workers step (the trainer generates the next actions of other groups meanwhile).
        :meth:`result` waits; calls in flight are answered in the order they were sent."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        batches: dict[int, list[tuple[str, int, Any]]] = {}
        where: list[tuple[int, int, int]] = []  # (ticket, worker, index in that worker's batch)
        for ticket, ops in pending:
            for op in ops:
                w = self._worker_of(op[1])
                batches.setdefault(w, []).append(op)
                where.append((ticket, w, len(batches[w]) - 1))
        self._in_flight.append(([t for t, _ in pending], batches, where, self._send_batches(batches)))

    def result(self, ticket: int, *, tolerate: bool = False) -> list[Any]:
        """The ticket's results in order. An operation that failed (its env raised, its worker died or timed out)
        raises its error, or with ``tolerate=True`` is returned as an :class:`OpFailure` among the others
        (failure semantics: the caller ends that episode as aborted; docs/failures.md)."""
        if any(t == ticket for t, _ in self._pending):
            self.send()
        while ticket not in self._answers and self._in_flight:
            self._receive_oldest()
        if ticket not in self._answers:
            dropped = (
                f", or dropped: more than {self.max_uncollected} answers were left uncollected after it"
                if ticket <= self._dropped_upto
                else ""
            )
            raise ValueError(f"unknown or already collected ticket {ticket}{dropped}")
        answer = self._answers.pop(ticket)
        self._drop_uncollected()
        if not tolerate:
            failed = next((x for x in answer if isinstance(x, OpFailure)), None)
            if failed is not None:
                raise failed.error
        return answer

    def call(self, op: str, slots: Sequence[int], args: Sequence[Any]) -> list[Any]:
        return self.result(self.submit(op, slots, args))

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- shared machinery ----------------------------------------------------------------------------------
    def _worker_of(self, slot: int) -> int:
        raise NotImplementedError

    def _send_batches(self, batches: dict[int, list[tuple[str, int, Any]]]) -> Any:
        """Start each worker on its batch; return what :meth:`_wait_batches` needs to collect the answers."""
        raise NotImplementedError

    def _wait_batches(
        self, batches: dict[int, list[tuple[str, int, Any]]], handle: Any
    ) -> dict[int, list[tuple[bool, Any]] | EnvWorkerError]:
        """Every worker's answer to a sent batch (or the error that replaced it)."""
        raise NotImplementedError

    def _receive_oldest(self) -> None:
        tickets, batches, where, handle = self._in_flight.pop(0)
        answers = self._wait_batches(batches, handle)
        got: dict[int, list[Any]] = {ticket: [] for ticket in tickets}
        for ticket, w, k in where:
            ans = answers[w]
            if isinstance(ans, EnvWorkerError):
                got[ticket].append(OpFailure(ans.cause, str(ans).splitlines()[0], ans))
                continue
            ok, value = ans[k]
            if ok:
                got[ticket].append(value)
            elif isinstance(value, BaseException):  # in-process: the original exception
                got[ticket].append(
                    OpFailure(abort_cause_of(value), f"{type(value).__name__}: {value}", value)
                )
            else:
                cause, tb = value
                op, slot, _ = batches[w][k]
                err = EnvWorkerError(
                    f"{type(self).__name__}: the env in slot {slot} (worker {w}) raised during {op!r}:\n{tb}",
                    cause=cause,
                )
                last = tb.strip().splitlines()[-1] if tb.strip() else "error"
                got[ticket].append(OpFailure(cause, last, err))
        self._answers.update(got)

    def _drop_uncollected(self) -> None:
        """Forget the oldest answers beyond :attr:`max_uncollected` (called once the asked-for one is taken)."""
        while len(self._answers) > max(0, self.max_uncollected):
            # dicts keep insertion order, and answers arrive in ticket order
            oldest = next(iter(self._answers))
            del self._answers[oldest]
            self._dropped_upto = max(self._dropped_upto, oldest)


def _shards(n: int, workers: int) -> list[list[int]]:
    """Contiguous, as-equal-as-possible shards of ``range(n)`` (a group's copies stay together when they fit)."""
    workers = max(1, min(workers, n))
    base, extra = divmod(n, workers)
    out, start = [], 0
    for w in range(workers):
        size = base + (1 if w < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


class InProcessExecutor(Executor):
    """Every copy in this process (the default). Operations run in submission order, one after another, when a
    result is asked for; an exception raised by an env propagates unchanged from :meth:`result` (the other queued
    operations of that flush still run)."""

    def __init__(self, recipe: EnvRecipe, n: int):
        super().__init__(recipe, n)
        self._shard = _Shard(recipe, range(n))

    @property
    def envs(self) -> list[gym.Env]:
        """The local env objects (only this executor has them)."""
        return [self._shard.envs[s] for s in range(self.n)]

    def _worker_of(self, slot: int) -> int:
        return 0

    def _send_batches(self, batches):
        return None  # nothing runs until it is waited for: there is no one to run it meanwhile

    def _wait_batches(self, batches, handle):
        # An env's exception is kept as it is: a strict result() raises it unchanged, as without an executor.
        return {w: self._shard.run(ops, keep_exceptions=True) for w, ops in batches.items()}

    def close(self) -> None:
        self._shard.close()


class _ShardedExecutor(Executor):
    """An executor whose slots are split into contiguous shards, one per remote worker."""

    def __init__(self, recipe: EnvRecipe, n: int, num_workers: int):
        super().__init__(recipe, n)
        recipe.check_picklable()
        self._slots = _shards(n, num_workers)
        self._owner = {s: w for w, ss in enumerate(self._slots) for s in ss}

    @property
    def num_workers(self) -> int:
        return len(self._slots)

    def _worker_of(self, slot: int) -> int:
        return self._owner[slot]

    def _lost(
        self, w: int, why: str, ops: Sequence[tuple[str, int, Any]], state: str, cause: str = "worker_death"
    ) -> EnvWorkerError:
        kinds = sorted({op for op, _, _ in ops})
        return EnvWorkerError(
            f"{self._label} {w} (slots {self._slots[w][0]}..{self._slots[w][-1]}) {why} during {kinds}; {state}. "
            "Reset the groups that use these slots before stepping them again.",
            cause=cause,
        )

    def _bump(self, w: int, cause: str) -> None:
        for s in self._slots[w]:
            self.epochs[s] += 1
            self.restart_causes[s] = cause

    def _lost_to_restart(self, w: int, ops: Sequence[tuple[str, int, Any]]) -> EnvWorkerError:
        """A call that was in flight when an earlier one restarted its worker: its operations are lost to that
        restart, under the restart's cause (a hung step is a ``step_timeout`` for every call it cut off, not
        also a ``worker_death``)."""
        cause = self.restart_causes[self._slots[w][0]] or "worker_death"
        return self._lost(w, "was restarted while this call was queued", ops, "its copies are fresh", cause)

    def _start(self, w: int) -> None:
        """Start worker ``w`` building its copies (without waiting for it)."""
        raise NotImplementedError

    def _await_ready(self, w: int) -> None:
        """Wait (``start_timeout``) for worker ``w`` to have built its copies, or raise :class:`EnvWorkerError`."""
        raise NotImplementedError

    def _kill(self, w: int) -> None:
        """End worker ``w`` (best effort: it may already be gone)."""
        raise NotImplementedError

    def _start_all(self) -> None:
        """Start every worker, then wait for each; a failure ends the ones started and propagates."""
        try:
            for w in range(len(self._slots)):
                self._start(w)
            for w in range(len(self._slots)):
                self._await_ready(w)
        except BaseException:
            self.close()
            raise

    def _restart(
        self, w: int, why: str, ops: Sequence[tuple[str, int, Any]], cause: str = "worker_death"
    ) -> EnvWorkerError:
        """End worker ``w`` and start it with fresh copies; the error for the operations it held (``why``)."""
        self._kill(w)
        self._bump(w, cause)
        try:
            self._start(w)
            self._await_ready(w)
            state = "it was restarted with fresh (un-reset) copies"
        except EnvWorkerError as e:
            state = f"restarting it failed too ({e})"
        return self._lost(w, why, ops, state, cause)

    _label = "env worker"


class ProcessExecutor(_ShardedExecutor):
    """Copies sharded over ``num_workers`` local processes.

    Each worker is a fresh interpreter (``python -m stepgym._env_worker``) talking over a private socket pair: it
    inherits no threads or locks (unlike ``fork``), and unlike ``multiprocessing``'s ``spawn`` it never re-imports
    the user's main script, so a plain script or a notebook needs no ``if __name__ == "__main__":`` guard. The
    recipe (env, kwargs, wrappers) is unpickled in the worker, so what it names must be importable there: this
    process's ``sys.path`` is passed on, and classes defined in a ``__main__`` script are not importable.

    Args:
        recipe: how each copy is built (must pickle; checked here).
        n: number of copies.
        num_workers: worker processes (at most ``n``).
        timeout: seconds one batched call may take per worker before the worker is restarted.
        start_timeout: seconds a worker may take to build its copies.
    """

    def __init__(
        self,
        recipe: EnvRecipe,
        n: int,
        num_workers: int = 2,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        start_timeout: float = 600.0,
    ):
        super().__init__(recipe, n, num_workers)
        self.timeout, self.start_timeout = float(timeout), float(start_timeout)
        self._procs: list[Any] = [None] * len(self._slots)
        self._conns: list[Any] = [None] * len(self._slots)
        self._start_all()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None]

    def _start(self, w: int) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stepgym._env_worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        conn.send((self.recipe, self._slots[w]))
        self._procs[w], self._conns[w] = proc, conn

    def _await_ready(self, w: int) -> None:
        conn = self._conns[w]
        if not conn.poll(self.start_timeout):
            self._kill(w)
            raise EnvWorkerError(
                f"env worker {w} did not build its {len(self._slots[w])} env copies within "
                f"{self.start_timeout:.0f} s"
            )
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            self._kill(w)
            raise EnvWorkerError(f"env worker {w} died while building its env copies") from None
        if kind != "ready":
            self._kill(w)
            raise EnvWorkerError(f"env worker {w} could not build its env copies:\n{payload}")

    def _kill(self, w: int) -> None:
        p, conn = self._procs[w], self._conns[w]
        if conn is not None:
            conn.close()
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        self._procs[w] = self._conns[w] = None

    def _send_batches(self, batches):
        # Each batch's connection (a restart replaces it) and whether the send went through. A worker found dead
        # here is restarted only when this batch is waited for, after the calls sent to it before (which report
        # its death first, in order).
        sent: dict[int, tuple[Any, bool]] = {}
        for w, ops in batches.items():
            try:
                self._conns[w].send(ops)
                sent[w] = (self._conns[w], True)
            except (OSError, AttributeError):  # AttributeError: the connection is gone after a failed restart
                sent[w] = (self._conns[w], False)
        return sent

    def _wait_batches(self, batches, handle):
        out: dict[int, Any] = {}
        for w, (conn, ok) in handle.items():
            if conn is not self._conns[w]:  # an earlier call in flight restarted this worker
                out[w] = self._lost_to_restart(w, batches[w])
            elif not ok:
                out[w] = self._restart(w, "was dead", batches[w])
            elif not conn.poll(self.timeout):
                out[w] = self._restart(
                    w, f"did not answer within {self.timeout:.0f} s", batches[w], "step_timeout"
                )
            else:
                try:
                    _, out[w] = conn.recv()
                except (EOFError, OSError):
                    out[w] = self._restart(w, "died", batches[w])
        return out

    def close(self) -> None:
        for conn in self._conns:
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(None)
        for w, p in enumerate(self._procs):
            if p is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
            self._kill(w)


class RayExecutor(_ShardedExecutor):
    """Copies sharded over Ray actors (``pip install 'stepgym[ray]'``).

    Args:
        recipe, n, num_workers, timeout, start_timeout: as :class:`ProcessExecutor` (an actor's start never
            counts against ``timeout``).
        num_cpus: CPUs each actor reserves (fractions are fine: ``0.5`` packs two actors per core).
        address: ``None`` starts (or reuses) a local Ray; ``"auto"`` joins the running cluster.
        ray_init_kwargs: passed to ``ray.init`` when this executor starts Ray.

    When an executor connects to Ray itself (``ray.init``; nobody had), Ray stays up while any RayExecutor uses it
    and is shut down by the last one's :meth:`close`, so no Ray process outlives them. A Ray the caller started is
    left running (only the actors are ended).
    """

    #: RayExecutors alive on a Ray that an executor started (``ray.shutdown`` when the last one closes).
    _ray_users = 0
    _ray_ours = False

    def __init__(
        self,
        recipe: EnvRecipe,
        n: int,
        num_workers: int = 2,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        num_cpus: float = 1.0,
        address: str | None = None,
        ray_init_kwargs: Mapping[str, Any] | None = None,
        start_timeout: float = 600.0,
    ):
        super().__init__(recipe, n, num_workers)
        from stepgym._deps import require

        self._ray = require("ray", extra="ray")
        self.timeout = float(timeout)
        if not self._ray.is_initialized():
            env_vars = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
            kwargs = {"include_dashboard": False, "log_to_driver": False, **dict(ray_init_kwargs or {})}
            kwargs.setdefault("runtime_env", {"env_vars": env_vars})
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report unless the user opts in
            self._ray.init(address=address, **kwargs)
            RayExecutor._ray_ours = True
        self._uses_our_ray = RayExecutor._ray_ours
        RayExecutor._ray_users += self._uses_our_ray
        self._actor_cls = self._ray.remote(num_cpus=num_cpus)(_Shard)
        self.start_timeout = float(start_timeout)
        self._actors: list[Any] = [None] * len(self._slots)
        self._start_all()

    def _start(self, w: int) -> None:
        self._actors[w] = self._actor_cls.remote(self.recipe, self._slots[w], remote=True)

    def _await_ready(self, w: int) -> None:
        """Wait (``start_timeout``) for actor ``w`` to have built its copies: an actor's start (a process, the
        imports, the envs) is not a step, so it never counts against the call ``timeout`` (nor as a step_timeout)."""
        ray = self._ray
        try:
            ray.get(self._actors[w].pid.remote(), timeout=self.start_timeout)
        except ray.exceptions.GetTimeoutError:
            raise EnvWorkerError(
                f"Ray env worker {w} did not build its {len(self._slots[w])} env copies within "
                f"{self.start_timeout:.0f} s"
            ) from None
        except ray.exceptions.RayError as e:
            raise EnvWorkerError(f"Ray env worker {w} could not build its env copies: {e}") from None

    _label = "Ray env worker"

    @property
    def pids(self) -> list[int]:
        return [int(p) for p in self._ray.get([a.pid.remote() for a in self._actors], timeout=self.timeout)]

    def _kill(self, w: int) -> None:
        with contextlib.suppress(Exception):  # the actor may already be gone
            self._ray.kill(self._actors[w], no_restart=True)

    def _send_batches(self, batches):
        return {w: (self._actors[w], self._actors[w].run.remote(ops)) for w, ops in batches.items()}

    def _wait_batches(self, batches, handle):
        ray = self._ray
        out: dict[int, Any] = {}
        for w, (actor, ref) in handle.items():
            if actor is not self._actors[w]:  # an earlier call in flight restarted this worker
                out[w] = self._lost_to_restart(w, batches[w])
                continue
            try:
                out[w] = ray.get(ref, timeout=self.timeout)
            except ray.exceptions.GetTimeoutError:
                out[w] = self._restart(
                    w, f"did not answer within {self.timeout:.0f} s", batches[w], "step_timeout"
                )
            except ray.exceptions.RayActorError:
                out[w] = self._restart(w, "died", batches[w])
        return out

    def close(self) -> None:
        for a in self._actors:
            # Best effort: let each actor close its envs (browsers, servers), then end it; a dead one is skipped.
            with contextlib.suppress(Exception):
                self._ray.get(a.close.remote(), timeout=30)
            with contextlib.suppress(Exception):
                self._ray.kill(a, no_restart=True)
        self._actors = []
        if self._uses_our_ray:
            self._uses_our_ray = False
            RayExecutor._ray_users -= 1
            if RayExecutor._ray_users == 0 and RayExecutor._ray_ours:
                RayExecutor._ray_ours = False
                self._ray.shutdown()


def make_executor(
    kind: str | Executor,
    recipe: EnvRecipe,
    n: int,
    *,
    num_workers: int = 2,
    **kwargs: Any,
) -> Executor:
    """An executor by name: ``"inprocess"`` (default), ``"process"`` or ``"ray"`` (an instance passes through)."""
    if isinstance(kind, Executor):
        return kind
    if kind in (None, "inprocess"):
        return InProcessExecutor(recipe, n)
    if kind == "process":
        return ProcessExecutor(recipe, n, num_workers, **kwargs)
    if kind == "ray":
        return RayExecutor(recipe, n, num_workers, **kwargs)
    raise ValueError(f"unknown executor {kind!r}: use 'inprocess', 'process' or 'ray'")
