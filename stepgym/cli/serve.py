"""``stepgym serve ENV_ID``: serve an env (wrappers included) over OpenEnv 0.10's protocol.

stepgym serve StepGym/CreditToy-v0 --port 8000
stepgym serve StepGym/ALFWorld-v0 --env-kwarg split=valid_seen --env-kwarg engine=native --workers 2
stepgym serve mypkg.envs:make_env --wrapper stepgym.wrappers.feedback:EnvFeedbackWrapper
stepgym serve StepGym/WebShop-v0 --host 0.0.0.0 --token "$TOKEN"      # beyond loopback: a token is required

Clients connect to ``ws://HOST:PORT/ws`` (OpenEnv's ``GenericEnvClient``, :class:`stepgym.serve.client.RemoteEnv`).
See docs/serve.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["main"]

TOKEN_ENV_VAR = "STEPGYM_SERVE_TOKEN"


def _kwarg(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--env-kwarg takes key=value, got {text!r}")
    try:
        return key, json.loads(value)  # numbers, booleans, null, lists, objects
    except json.JSONDecodeError:
        return key, value  # a plain string


def _parser() -> argparse.ArgumentParser:
    from stepgym.serve.protocol import ServeLimits

    d = ServeLimits()
    p = argparse.ArgumentParser(
        prog="stepgym serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("env", help="a registered env id, or package.module:factory for your own env")
    p.add_argument(
        "--env-kwarg",
        action="append",
        type=_kwarg,
        default=[],
        metavar="KEY=VALUE",
        help="an env keyword argument (VALUE read as JSON when it parses, else as a string); repeatable",
    )
    p.add_argument(
        "--wrapper",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="an importable wrapper applied around the env (first = innermost); repeatable",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default loopback; others need --token)"
    )
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed at start)")
    p.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV_VAR),
        help=f"bearer token clients must send (default ${TOKEN_ENV_VAR})",
    )
    p.add_argument(
        "--workers", type=int, default=0, help="worker processes for the envs (0: in the server process)"
    )
    p.add_argument("--slots-per-worker", type=int, default=16, help="env copies per worker process")
    p.add_argument(
        "--state-dir", default=None, help="folder for session journals: sessions survive a restart"
    )
    p.add_argument("--max-sessions", type=int, default=d.max_sessions)
    p.add_argument("--max-message-bytes", type=int, default=d.max_message_bytes)
    p.add_argument("--max-action-chars", type=int, default=d.max_action_chars)
    p.add_argument(
        "--grace", type=float, default=d.grace_s, help="seconds a dropped session waits for a reconnect"
    )
    p.add_argument(
        "--idle-timeout", type=float, default=d.idle_timeout_s, help="seconds before an idle session ends"
    )
    p.add_argument(
        "--step-timeout", type=float, default=d.step_timeout_s, help="seconds one reset or step may take"
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=d.read_timeout_s,
        help="seconds a client may take to send a request head, and again its body (then 408 and closed)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=d.max_connections,
        help="most open connections; one more gets 503 (default: the open-file limit less 64, at most 4096)",
    )
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from stepgym.serve.protocol import ServeLimits
    from stepgym.serve.server import ServeConfig, import_object, serve

    limits = ServeLimits(
        max_message_bytes=args.max_message_bytes,
        max_action_chars=args.max_action_chars,
        max_sessions=args.max_sessions,
        grace_s=args.grace,
        idle_timeout_s=args.idle_timeout,
        step_timeout_s=args.step_timeout,
        read_timeout_s=args.read_timeout,
        max_connections=args.max_connections,
    )
    config = ServeConfig(
        env=args.env,
        env_kwargs=dict(args.env_kwarg),
        wrappers=tuple(import_object(w) for w in args.wrapper),
        host=args.host,
        port=args.port,
        token=args.token or None,
        workers=args.workers,
        slots_per_worker=args.slots_per_worker,
        state_dir=args.state_dir,
        limits=limits,
    )

    def ready(url: str) -> None:
        ws = url.replace("http://", "ws://", 1)
        print(f"stepgym serve: {args.env} at {url} (OpenEnv WebSocket sessions: {ws}/ws)", flush=True)

    try:
        serve(config, ready=ready)
    except KeyboardInterrupt:
        print("stepgym serve: stopped", file=sys.stderr)
    return 0
