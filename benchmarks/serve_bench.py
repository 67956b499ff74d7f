"""``stepgym serve`` under load on loopback: sessions held, aggregate steps/s, step latency, memory per session.

The server is the real command (``python -m stepgym.cli serve ...``) in a process of its own; the load is this
process: one asyncio event loop driving many WebSocket sessions with the ``websockets`` client, speaking OpenEnv's
messages. Both share the machine (on a 2-core machine the client takes a large share of the CPU, so the server's
own capacity is higher than what is printed).

Phases, per env:
1. *hold*: open ``--sessions`` sessions, reset each (seeded), then step each once; count errors (goal: 0 errors at
   >= 1,000 sessions). Server resident memory (its process and its workers, from /proc) before and after gives the
   memory per session.
2. *load*: ``--concurrency`` sessions each play episodes back to back (the env's expert action, or a fixed action)
   for ``--seconds``; aggregate steps/s and p50/p99 latency of a step (send to answer).
3. *soak* (``--soak-minutes M``): the load phase for M minutes, printing the server's memory once a minute; the
   first and last numbers show whether it stays flat.

Run: ``STEPGYM_DATA=../shared/data python benchmarks/serve_bench.py`` (CreditToy and ALFWorld native);
``--env toy`` or ``--env alfworld`` for one; ``--soak-minutes 30`` for the soak.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import websockets

REPO = Path(__file__).resolve().parents[1]
ENVS = {
    "toy": ("StepGym/CreditToy-v0", {"split": "valid"}, 0),
    "alfworld": ("StepGym/ALFWorld-v0", {"split": "valid_seen", "engine": "native"}, 2),
}


def _rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (worker processes), in MB."""
    total = 0
    pids = [pid]
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        pids += [int(k) for k in kids]
    except FileNotFoundError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total / 1024


def _start(env_id: str, kwargs: dict, workers: int, max_sessions: int) -> tuple[subprocess.Popen, str]:
    cmd = [
        sys.executable,
        "-m",
        "stepgym.cli",
        "serve",
        env_id,
        "--port",
        "0",
        "--max-sessions",
        str(max_sessions),
        "--workers",
        str(workers),
        "--slots-per-worker",
        str(max(1, max_sessions // max(1, workers))),
    ]
    cmd += [f"--env-kwarg={k}={json.dumps(v)}" for k, v in kwargs.items()]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, line.split(" at ", 1)[1].split(" ", 1)[0].replace("http://", "ws://") + "/ws"


async def _ask(ws, kind: str, data: dict | None = None) -> dict:
    await ws.send(json.dumps({"type": kind, "data": data or {}}))
    return json.loads(await asyncio.wait_for(ws.recv(), 120))


def _action(answer: dict) -> str:
    info = answer["data"]["observation"]["info"]
    return info.get("stepgym/expert_action") or "look"


async def _hold(url: str, n: int) -> tuple[list, int]:
    """Open ``n`` sessions (reset + one step each); the open sockets and the number of errors."""
    errors, socks = 0, []

    async def one(i: int):
        nonlocal errors
        try:
            ws = await websockets.connect(url, open_timeout=120, max_size=None)
            r = await _ask(ws, "reset", {"seed": i})
            s = await _ask(ws, "step", {"action": _action(r)}) if r["type"] == "observation" else r
            if r["type"] != "observation" or s["type"] != "observation":
                errors += 1
            socks.append(ws)
        except Exception:
            errors += 1

    for start in range(0, n, 100):  # connect in waves of 100 (the listen backlog is large, but be kind)
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 100))))
    return socks, errors


async def _load(url: str, concurrency: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def player(i: int):
        nonlocal errors
        async with websockets.connect(url, open_timeout=120) as ws:
            seed = 10_000 + i * 1000
            while time.perf_counter() < stop:
                r = await _ask(ws, "reset", {"seed": seed})
                seed += 1
                while r["type"] == "observation" and not r["data"]["done"] and time.perf_counter() < stop:
                    t0 = time.perf_counter()
                    r = await _ask(ws, "step", {"action": _action(r)})
                    latencies.append(time.perf_counter() - t0)
                if r["type"] != "observation":
                    errors += 1
            await ws.send(json.dumps({"type": "close"}))

    t0 = time.perf_counter()
    await asyncio.gather(*(player(i) for i in range(concurrency)))
    wall = time.perf_counter() - t0
    latencies.sort()

    def pick(q: float) -> float:
        return (
            latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3 if latencies else float("nan")
        )

    return {
        "steps": len(latencies),
        "steps_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(pick(0.5), 2),
        "p99_ms": round(pick(0.99), 2),
        "errors": errors,
    }


async def _bench(name: str, args: argparse.Namespace) -> None:
    env_id, kwargs, workers = ENVS[name]
    sessions = args.sessions if name == "toy" else args.alfworld_sessions
    proc, url = _start(env_id, kwargs, workers, max_sessions=sessions + args.concurrency + 8)
    try:
        async with websockets.connect(url) as ws:  # warm up: the first env copy and imports
            await _ask(ws, "reset", {"seed": 0})
        before = _rss_mb(proc.pid)
        t0 = time.perf_counter()
        socks, errors = await _hold(url, sessions)
        held_s = time.perf_counter() - t0
        after = _rss_mb(proc.pid)
        print(
            json.dumps(
                {
                    "env": name,
                    "phase": "hold",
                    "sessions": sessions,
                    "errors": errors,
                    "seconds": round(held_s, 1),
                    "server_rss_mb_before": round(before, 1),
                    "server_rss_mb_after": round(after, 1),
                    "kb_per_session": round((after - before) * 1024 / max(1, sessions), 1),
                }
            ),
            flush=True,
        )
        for ws in socks:
            await ws.close()
        conc = args.concurrency if name == "toy" else args.alfworld_concurrency
        res = await _load(url, conc, args.seconds)
        print(json.dumps({"env": name, "phase": "load", "concurrency": conc, **res}), flush=True)
        if args.soak_minutes and name == args.soak_env:
            for minute in range(int(args.soak_minutes)):
                res = await _load(url, conc, 60.0)
                print(
                    json.dumps(
                        {
                            "env": name,
                            "phase": "soak",
                            "minute": minute + 1,
                            "server_rss_mb": round(_rss_mb(proc.pid), 1),
                            **res,
                        }
                    ),
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=["all", *ENVS], default="all")
    p.add_argument("--sessions", type=int, default=1000, help="sessions to hold at once (CreditToy)")
    p.add_argument("--alfworld-sessions", type=int, default=64, help="sessions to hold at once (ALFWorld)")
    p.add_argument("--concurrency", type=int, default=32, help="sessions stepping at once in the load phase")
    p.add_argument("--alfworld-concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0, help="length of the load phase")
    p.add_argument("--soak-minutes", type=float, default=0.0)
    p.add_argument("--soak-env", choices=list(ENVS), default="toy")
    args = p.parse_args()
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            }
        ),
        flush=True,
    )
    for name in ENVS if args.env == "all" else [args.env]:
        asyncio.run(_bench(name, args))


if __name__ == "__main__":
    main()
