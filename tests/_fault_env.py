"""A test env whose episodes fail as planned: the fault-injection suite's known faults (tests/test_fault_counts.py).

:class:`PlannedFaultEnv` is CreditToy whose episode fails at a planned step when it was reset on a planned key (the
task id, or ``"seed:N"`` for an episode drawn by its reset seed), in a planned way:

* ``"raise"``: an env exception (``env_exception``);
* ``"retriever"``: Search-QA's retriever did not answer (``retriever_unavailable``);
* ``"kill"``: the process holding the env dies (``worker_death``; refused in the driver process);
* ``"hang"``: the step never returns (``step_timeout`` under an executor's timeout).

Every fault is logged (one line ``key step how pid``, appended to ``log``) before it happens, so a test can compare
what was injected with what was counted. Module-level and picklable by reference: env workers build it too.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepgym.envs.credit import CreditToyEnv
from stepgym.errors import RetrieverUnavailableError

HOWS = ("raise", "retriever", "kill", "hang")


class PlannedFaultEnv(CreditToyEnv):
    def __init__(
        self,
        plan: Mapping[str, tuple[int, str]] | None = None,
        log: str = "",
        driver_pid: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.plan = {str(k): (int(t), str(h)) for k, (t, h) in dict(plan or {}).items()}
        for _, h in self.plan.values():
            if h not in HOWS:
                raise ValueError(f"unknown fault {h!r}; expected one of {HOWS}")
        self.log, self.driver_pid = log, int(driver_pid)
        self._key, self._t = "", 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        tid = (options or {}).get("task_id")
        self._key = str(tid) if tid is not None else f"seed:{seed}"
        self._t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: Any):
        t, self._t = self._t, self._t + 1
        planned = self.plan.get(self._key)
        if planned is not None and planned[0] == t:
            self._inject(planned[1], t)
        return super().step(action)

    def _inject(self, how: str, t: int) -> None:
        if how == "kill" and os.getpid() == self.driver_pid:
            raise RuntimeError("PlannedFaultEnv: 'kill' would kill the test process; use a worker executor")
        if self.log:
            with Path(self.log).open("a", encoding="utf-8") as f:
                f.write(f"{self._key} {t} {how} {os.getpid()}\n")
        if how == "raise":
            raise RuntimeError(f"planned env exception at step {t}")
        if how == "retriever":
            raise RetrieverUnavailableError(f"planned retriever outage at step {t}")
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "hang":
            time.sleep(120)


def injected(log: str | Path) -> list[tuple[str, int, str, int]]:
    """The faults a run injected: (key, step, how, pid) per line of ``log``."""
    p = Path(log)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
        key, t, how, pid = line.rsplit(" ", 3)
        out.append((key, int(t), how, int(pid)))
    return out
