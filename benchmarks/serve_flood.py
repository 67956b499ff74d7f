"""``stepgym serve`` under a connection flood with a small open-file limit (issue 52, item 5).

The server is the real command (``python -m stepgym.cli serve StepGym/CreditToy-v0``) started with its soft and hard
open-file limit set to ``--nofile`` (200 by default: where an unguarded server stopped answering ``/health``). This
process opens ``--connections`` TCP connections to it at once and sends nothing on them (the slowloris pattern),
asks ``/health`` while they are open, then reads what the server answered on each one: a ``408`` (closed at the
head deadline, ``--read-timeout``), a ``503`` (over the connection cap), or something else (counted as such). Last,
``/health`` again, and the server's log is scanned for tracebacks. Everything is on 127.0.0.1 and bounded in time.

Two runs by default: a short head deadline (5 s: silent connections are closed about as fast as they come) and a
long one (30 s: they pile up to the cap, and the rest are refused).

Run: ``python benchmarks/serve_flood.py`` (about 2 minutes); writes ``benchmarks/results/serve_flood_<date>.json``.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def _limit(n: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


def _health(url: str) -> str:
    try:
        return str(httpx.get(url + "/health", timeout=20).status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


def run(connections: int, nofile: int, read_timeout: float) -> dict:
    with tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False) as log:
        pass
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "stepgym.cli", "serve", "StepGym/CreditToy-v0", "--port", "0"]
    cmd += ["--read-timeout", str(read_timeout), "--env-kwarg", "split=valid"]
    out = open(log.name, "w")  # noqa: SIM115 - the server's log, closed below
    server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_limit(nofile))
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.2)
            m = re.search(r"at (http://127\.0\.0\.1:\d+)", Path(log.name).read_text())
            url = m.group(1) if m else None
        if url is None:
            raise SystemExit(f"the server did not start: {Path(log.name).read_text()[-2000:]}")
        port = int(url.rsplit(":", 1)[1])
        t0 = time.monotonic()
        socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(connections)]
        connect_s = time.monotonic() - t0
        during = _health(url)
        answers: collections.Counter[str] = collections.Counter()
        for s in socks:
            s.settimeout(read_timeout * 4 + 10)
            try:
                head = s.recv(64)
                answers[head[:12].decode("ascii", "replace") or "closed without an answer"] += 1
            except OSError as exc:
                answers[type(exc).__name__] += 1
            s.close()
        after = _health(url)
    finally:
        server.terminate()
        server.wait(timeout=30)
        out.close()
    text = Path(log.name).read_text()
    os.unlink(log.name)
    return {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "nofile": nofile,
        "read_timeout_s": read_timeout,
        "connections": connections,
        "seconds_to_open_them": round(connect_s, 1),
        "answers": dict(answers),
        "health_during": during,
        "health_after": after,
        "log_lines_refused": text.count("refused a connection"),
        "log_lines_head_deadline": text.count("no complete request head"),
        "tracebacks_in_log": text.count("Traceback"),
        "too_many_open_files_in_log": text.count("Too many open files"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--nofile", type=int, default=200)
    ap.add_argument("--read-timeout", type=float, nargs="+", default=[5.0, 30.0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = []
    for rt in args.read_timeout:
        results.append(run(args.connections, args.nofile, rt))
        print(json.dumps(results[-1], indent=1), flush=True)
    out = Path(args.out or REPO / "benchmarks" / "results" / f"serve_flood_{results[0]['date']}.json")
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
