"""Where a server's envs live: in the server process, or spread over ``stepgym.workers`` processes.

A session borrows one env copy (a *slot*) from the pool for its lifetime and gives it back when it ends; the
copy is reused by a later session (its next ``reset`` starts a fresh episode), so a server that has served a
million sessions holds no more envs than it ever held at once, and a slow env's construction (ALFWorld loads its
games) is paid once per copy, not once per session.

* :class:`InProcessPool` builds copies on demand in the server process and steps them on the event loop's thread:
  the fastest choice for cheap envs (CreditToy, WebShop's BM25 engine), and the one whose steps cannot be
  interrupted (a step that hangs hangs the server; use workers for envs that can).
* :class:`WorkerPool` holds ``num_workers`` :class:`stepgym.workers.ProcessExecutor` processes, each with a fixed
  number of slots, so CPU-heavy envs (ALFWorld) step in parallel with the server's networking. Every call has the
  executor's deadline: a worker that does not answer in time is killed and restarted, and the sessions whose
  copies lived on it are told to reset (never continued on a fresh copy).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from stepgym.errors import StepGymError
from stepgym.workers import EnvRecipe, EnvWorkerError, ProcessExecutor

__all__ = ["CapacityError", "EnvLostError", "EnvPool", "InProcessPool", "WorkerPool", "make_pool"]


class CapacityError(StepGymError):
    """Every env slot is in use (the server answers CAPACITY_REACHED at once instead of waiting)."""


class EnvLostError(StepGymError):
    """The env copy of a session was lost (its worker died or timed out); the session must reset."""

    abort_cause: str = "worker_death"  #: or "step_timeout" (docs/failures.md)


class EnvPool:
    """``capacity`` env slots built from one recipe; see the module docstring."""

    capacity: int
    #: Steps run synchronously on the event loop's thread (no deadline can interrupt them; no task per call).
    inline: bool = False

    def __init__(self) -> None:
        self._free: list[int] = []
        self._used: set[int] = set()

    def acquire(self) -> int:
        """A free slot, or :class:`CapacityError` when all are taken."""
        if self._free:
            slot = self._free.pop()
        elif len(self._used) < self.capacity:
            slot = self._new_slot()
        else:
            raise CapacityError(f"all {self.capacity} env slots are in use")
        self._used.add(slot)
        return slot

    def release(self, slot: int) -> None:
        if slot in self._used:
            self._used.discard(slot)
            self._free.append(slot)

    @property
    def in_use(self) -> int:
        return len(self._used)

    def generation(self, slot: int) -> int:
        """Changes when the slot's copy is rebuilt (a session that reset on an older generation lost its env)."""
        return 0

    async def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        raise NotImplementedError

    async def step(self, slot: int, action: str) -> tuple[Any, float, bool, bool, dict]:
        raise NotImplementedError

    def _new_slot(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class InProcessPool(EnvPool):
    """Copies in the server process, built when first needed (at most ``capacity``)."""

    def __init__(self, recipe: EnvRecipe, capacity: int) -> None:
        super().__init__()
        self.recipe, self.capacity = recipe, int(capacity)
        self._envs: list[Any] = []

    def _new_slot(self) -> int:
        self._envs.append(self.recipe.build())
        return len(self._envs) - 1

    inline = True

    def reset_now(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        return self._envs[slot].reset(seed=seed, options=options)

    def step_now(self, slot: int, action: str) -> tuple[Any, float, bool, bool, dict]:
        return self._envs[slot].step(action)

    async def reset(self, slot, seed, options):
        return self.reset_now(slot, seed, options)

    async def step(self, slot, action):
        return self.step_now(slot, action)

    def close(self) -> None:
        for env in self._envs:
            with contextlib.suppress(
                Exception
            ):  # best effort: one copy that fails to close must not keep the rest open
                env.close()
        self._envs.clear()


class WorkerPool(EnvPool):
    """``num_workers`` worker processes with ``slots_per_worker`` copies each (built at start, in parallel).

    Calls to one worker are serialised (it is one process); different workers run at the same time, each call
    in a thread so the event loop keeps serving other sessions."""

    def __init__(self, recipe: EnvRecipe, num_workers: int, slots_per_worker: int, timeout: float) -> None:
        super().__init__()
        if num_workers < 1 or slots_per_worker < 1:
            raise ValueError("a worker pool needs num_workers >= 1 and slots_per_worker >= 1")
        self.recipe, self.k = recipe, int(slots_per_worker)
        self.capacity = int(num_workers) * self.k
        self._execs: list[ProcessExecutor] = []
        try:
            for _ in range(num_workers):
                self._execs.append(ProcessExecutor(recipe, self.k, 1, timeout=timeout))
        except BaseException:
            self.close()
            raise
        self._locks = [asyncio.Lock() for _ in self._execs]
        self._generations = [0] * len(self._execs)
        self._next = 0

    def _new_slot(self) -> int:
        # Spread sessions over the workers: slot w + n*W lives on worker w.
        slot = self._next
        self._next += 1
        return slot

    def _where(self, slot: int) -> tuple[int, int]:
        return slot % len(self._execs), slot // len(self._execs)

    def generation(self, slot: int) -> int:
        return self._generations[self._where(slot)[0]]

    async def _call(self, slot: int, op: str, arg: Any) -> Any:
        w, local = self._where(slot)
        async with self._locks[w]:
            try:
                return (await asyncio.to_thread(self._execs[w].call, op, [local], [arg]))[0]
            except EnvWorkerError as e:
                if "raised during" in str(e):  # the env itself raised: its copy is intact
                    raise
                self._generations[w] += 1  # the worker died or timed out and was rebuilt
                lost = EnvLostError(str(e))
                lost.abort_cause = e.cause  # worker_death or step_timeout (docs/failures.md)
                raise lost from None

    async def reset(self, slot, seed, options):
        return await self._call(slot, "reset", (seed, options))

    async def step(self, slot, action):
        return await self._call(slot, "step", action)

    def close(self) -> None:
        for ex in self._execs:
            with contextlib.suppress(Exception):  # best effort: close every worker
                ex.close()
        self._execs.clear()


def make_pool(
    recipe: EnvRecipe, *, capacity: int, workers: int, slots_per_worker: int, timeout: float
) -> EnvPool:
    """In-process copies (``workers == 0``) or a worker pool."""
    if workers <= 0:
        return InProcessPool(recipe, capacity)
    return WorkerPool(recipe, workers, slots_per_worker, timeout)
