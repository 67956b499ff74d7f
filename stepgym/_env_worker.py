"""Entry point of a :class:`stepgym.workers.ProcessExecutor` worker: ``python -m stepgym._env_worker FD``.

``FD`` is this process's end of a socket pair the executor created. The first message is ``(recipe, slots)``;
then the worker answers batches until the executor sends ``None`` or closes the socket.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Connection

from stepgym.workers import _worker_main
from stepgym.wrappers.faults import WORKER_FLAG


def main(argv: list[str]) -> None:
    os.environ[WORKER_FLAG] = "1"  # this process holds env copies (FaultInjectionWrapper may kill it)
    conn = Connection(int(argv[0]))
    try:
        recipe, slots = conn.recv()
    except Exception:  # the recipe names something this interpreter cannot import: tell the executor why
        conn.send(("error", traceback.format_exc()))
        return
    _worker_main(conn, recipe, slots)


if __name__ == "__main__":
    main(sys.argv[1:])
