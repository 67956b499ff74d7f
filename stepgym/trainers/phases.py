"""What a run is doing now: one log line as each phase starts and one as it ends, with its wall time.

The phases of ``stepgym train``: ``model`` (loading or building the policy; for the tiny model its tokenizer corpus,
episodes of a random admissible policy), ``warm-up`` (the format SFT), then per iteration ``rollout``,
``scoring`` (old log-probs and teacher rescoring), ``shaping``, ``update``, and ``eval``. The lines go to the
``stepgym.trainers.phases`` logger at INFO; ``stepgym train`` and ``stepgym eval`` print them on stderr (not with
``--run.no-progress``), so a slow first iteration on a busy machine says where its time goes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

__all__ = ["LOGGER", "phase"]

LOGGER = "stepgym.trainers.phases"
_log = logging.getLogger(LOGGER)


@contextlib.contextmanager
def phase(name: str, where: str = "") -> Iterator[None]:
    """Log ``[where] name ...`` now and ``[where] name: N.N s`` when the block ends (also when it raises)."""
    prefix = f"{where}: " if where else ""
    _log.info("%s%s ...", prefix, name)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _log.info("%s%s: %.1f s", prefix, name, time.perf_counter() - t0)
