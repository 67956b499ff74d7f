"""FaultInjectionWrapper: make an env fail the way infrastructure fails, to test and measure failure semantics.

Each ``step`` draws, from a generator keyed by (``seed``, the copy's build number in its process, the reset seed
(after an unseeded reset, the copy's episode count too), the step index, the action text), whether
to raise :class:`InjectedFault` (an env exception: probability ``exception``) or to kill the worker process that
holds the env (probability ``kill``; only inside a ``ProcessExecutor`` worker, where a dead process is what a
crashed env server looks like). The draw depends on nothing else, so a run with the same seeds and actions fails
at the same steps. What an aborted episode then does to the credit is docs/failures.md's subject; the fault
injection benchmark (``benchmarks/fault_injection.py``) and the trainer's ``rollout.faults`` use this wrapper.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
import zlib
from typing import Any

import gymnasium as gym
import numpy as np

from stepgym.errors import StepGymError

__all__ = ["FaultInjectionWrapper", "InjectedFault", "in_env_worker", "parse_faults"]

#: Build numbers of the wrappers made in this process (deterministic: copies are built in slot order), so the G
#: copies of a group, reset with one seed, do not all fail at the same steps.
_BUILT = itertools.count()

#: Set in an env worker's environment (``stepgym._env_worker``, and a ``RayExecutor`` actor's shard).
WORKER_FLAG = "STEPGYM_ENV_WORKER"
#: How long a hanging step sleeps.
HANG_SECONDS = 600.0


class InjectedFault(StepGymError, RuntimeError):
    """The env exception a :class:`FaultInjectionWrapper` raises (an episode it cuts off ends aborted)."""


def in_env_worker() -> bool:
    """Whether this process is an env worker (a ``ProcessExecutor`` process or a ``RayExecutor`` actor)."""
    return os.environ.get(WORKER_FLAG) == "1"


def parse_faults(spec: str) -> dict[str, float]:
    """``"exception=0.05,kill=0.01,seed=3"`` → keyword arguments of :class:`FaultInjectionWrapper` ('' → {})."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in ("exception", "kill", "hang", "seed"):
            raise ValueError(
                f"fault spec {spec!r}: expected 'exception=P,kill=P,hang=P,seed=N' parts, got {part!r}"
            )
        out[key] = float(value)
    return out


class FaultInjectionWrapper(gym.Wrapper):
    """Raise an env exception (probability ``exception``) or kill the worker process (``kill``) at a step.

    Args:
        env: the env to wrap (innermost is best: the failure then looks like the engine's).
        exception: probability that a step raises :class:`InjectedFault`.
        kill: probability that a step kills the process (refused outside an env worker: a ``ProcessExecutor``
            process or a ``RayExecutor`` actor).
        seed: mixes into every draw (two seeds fail at different steps).
        hang: probability that a step never returns (it sleeps :data:`HANG_SECONDS`; meant for an executor with a
            timeout, which restarts the worker: a ``step_timeout``).
        log: a file each fault is logged to (one line, appended) just before it happens; '' logs nothing.
    """

    def __init__(
        self,
        env: gym.Env,
        exception: float = 0.0,
        kill: float = 0.0,
        seed: float = 0,
        *,
        hang: float = 0.0,
        log: str = "",
    ) -> None:
        super().__init__(env)
        for name, p in (("exception", exception), ("kill", kill), ("hang", hang)):
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"FaultInjectionWrapper {name} must be a probability in [0, 1], got {p}")
        if kill > 0 and not in_env_worker():
            raise ValueError(
                "FaultInjectionWrapper(kill>0) kills the process holding the env: use it only with "
                "executor='process' (rollout.env_executor=process), never in the driver"
            )
        self.p_exception, self.p_kill, self.fault_seed = float(exception), float(kill), int(seed)
        self.p_hang, self.log = float(hang), str(log)
        self._copy = next(_BUILT)
        self._reset_seed = 0
        self._episodes = 0
        self._unseeded: list[int] = []
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # an unseeded reset also keys the draws by the copy's episode count, so replaying a split's tasks unseeded
        # does not fail every episode of a task type at the same step
        self._episodes += 1
        self._reset_seed = 0 if seed is None else int(seed)
        self._unseeded = [self._episodes] if seed is None else []
        self._t = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        key = [
            self.fault_seed,
            self._copy,
            self._reset_seed,
            self._t,
            zlib.crc32(str(action).encode("utf-8")),
            *self._unseeded,
        ]
        u = float(np.random.default_rng(key).random())
        self._t += 1
        if u < self.p_kill:
            self._note("kill")
            os.kill(os.getpid(), signal.SIGKILL)
        if u < self.p_kill + self.p_exception:
            self._note("exception")
            raise InjectedFault(f"injected env exception at step {self._t - 1}")
        if u < self.p_kill + self.p_exception + self.p_hang:
            self._note("hang")
            time.sleep(HANG_SECONDS)  # the executor's timeout restarts the worker long before
        return self.env.step(action)

    def _note(self, how: str) -> None:
        """Log the fault about to happen (``log``: one line ``how copy reset_seed step pid``, appended)."""
        if self.log:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(f"{how} {self._copy} {self._reset_seed} {self._t - 1} {os.getpid()}\n")
