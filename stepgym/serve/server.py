"""Build and run a server: the recipe of the served env, the pool, the sessions, uvicorn.

Security rules (checked here, before anything listens): the default address is the loopback one; binding any
other address needs a token, which every client must then send (``Authorization: Bearer <token>``). Requests are
bounded by :class:`~stepgym.serve.protocol.ServeLimits` (message size and nesting depth, action length, sessions,
open connections, deadlines). Client text only ever reaches ``env.step`` as the action string: never a shell, a
file path or an import.

uvicorn runs with: ``timeout_keep_alive`` (an idle kept-alive connection closes), ``h11_max_incomplete_event_size``
(a request head over 16 KiB is refused), ``ws_max_size`` (a hard cap over the app's own message limit) and
WebSocket pings (a half-open WebSocket ends within two ping intervals). What uvicorn lacks is added by
:mod:`stepgym.serve.guard` (a deadline on every request head, a cap on open connections) and by the app (a
deadline on every request body, the JSON depth limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from stepgym.errors import StepGymError
from stepgym.serve.protocol import ServeLimits, accept_backlog
from stepgym.workers import EnvRecipe

__all__ = ["ServeConfig", "ServerThread", "build", "import_object", "is_loopback", "serve", "url_of"]


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``stepgym serve`` needs."""

    #: A registered env id (``StepGym/ALFWorld-v0``) or an importable factory (``package.module:make_env``).
    env: str
    #: Keyword arguments for the env.
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: Importable wrappers, applied in order (first = innermost): classes or ``functools.partial`` of them.
    wrappers: tuple[Callable[[gym.Env], gym.Env], ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    #: Required when ``host`` is not a loopback address; clients send it as a bearer token.
    token: str | None = None
    #: 0: envs in the server process; N: N worker processes (``stepgym.workers``) for CPU-heavy envs.
    workers: int = 0
    #: Env copies per worker process (the most sessions a worker pool holds is ``workers * slots_per_worker``).
    slots_per_worker: int = 16
    #: A folder for session journals, so sessions survive a server restart (None: they do not).
    state_dir: str | None = None
    limits: ServeLimits = field(default_factory=ServeLimits)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int, scheme: str = "http") -> str:
    """``scheme://host:port``, an IPv6 address in brackets (``http://[::1]:8000``), as URLs write it."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def _cwd_on_path() -> None:
    """The current folder on the import path, as with ``python -m``: the operator's modules are found from there."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def import_object(spec: str) -> Any:
    """``package.module:attribute`` (the operator's command line, never a client's text).

    The current folder is on the import path for this import, as with ``python -m`` (so ``mypkg.envs:make_env``
    finds ``./mypkg`` without PYTHONPATH). A module that cannot be imported, or a missing attribute, is a
    :class:`~stepgym.errors.StepGymError` of one line naming what failed."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise StepGymError(f"{spec!r} is not of the form package.module:name")
    _cwd_on_path()
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:  # ModuleNotFoundError included: the module or one of its own imports
        raise StepGymError(
            f"cannot import {module!r} for {spec!r} ({type(exc).__name__}: {exc}); run from the folder that holds "
            f"the package, or add it to PYTHONPATH"
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise StepGymError(f"{module!r} has no {attr!r} (from {spec!r}); check the name after the ':'")
        obj = getattr(obj, part)
    return obj


def recipe_of(config: ServeConfig) -> EnvRecipe:
    """How to build the served env: a registered id, Gymnasium's ``module:Env-v0`` (the module registers it), or
    ``package.module:factory``."""
    env: Any = config.env
    if ":" in env and env not in gym.registry:
        from stepgym.envs import resolve_env_id

        _cwd_on_path()  # both forms name a module of the operator's (Gymnasium's module:Env-v0, a factory)
        if resolve_env_id(env) not in gym.registry:  # (importing the module registered nothing by that name)
            env = import_object(env)  # package.module:factory (a name it lacks: one line, import_object's)
    elif env not in gym.registry:
        import stepgym  # noqa: F401 - registers the StepGym envs

        if env not in gym.registry:
            raise gym.error.UnregisteredEnv(
                f"no env registered as {env!r} (and it is not package.module:factory)"
            )
    return EnvRecipe(env, dict(config.env_kwargs), tuple(config.wrappers))


def _fingerprint(config: ServeConfig) -> str:
    """What a journal must have been written under to be replayed: the env, its kwargs, wrappers, stepgym."""
    from stepgym import __version__

    wrappers = [getattr(w, "__qualname__", repr(w)) for w in config.wrappers]
    return repr((config.env, sorted(dict(config.env_kwargs).items()), wrappers, __version__))


def build(config: ServeConfig) -> tuple[Any, Any]:
    """``(app, manager)`` for ``config`` (refuses an exposed address without a token)."""
    if not is_loopback(config.host) and not config.token:
        raise StepGymError(
            f"binding {config.host} exposes the envs beyond this machine: pass --token (clients then send "
            "'Authorization: Bearer <token>'), or serve on 127.0.0.1"
        )
    from stepgym.serve.app import build_app
    from stepgym.serve.pool import make_pool
    from stepgym.serve.sessions import SessionManager

    recipe = recipe_of(config)
    if config.workers > 0:
        recipe.check_picklable()
    lim = config.limits
    pool = make_pool(
        recipe,
        capacity=lim.max_sessions,
        workers=config.workers,
        slots_per_worker=config.slots_per_worker,
        timeout=lim.step_timeout_s,
    )
    manager = SessionManager(pool, lim, state_dir=config.state_dir, fingerprint=_fingerprint(config))
    name = config.env if isinstance(config.env, str) else "stepgym"
    return build_app(manager, token=config.token, name=name), manager


def _uvicorn_server(app: Any, config: ServeConfig) -> Any:
    import uvicorn

    from stepgym.serve.guard import guarded_protocol
    from stepgym.serve.sessions import _PING_S

    cfg = uvicorn.Config(
        app,
        http=guarded_protocol(config.limits),  # h11 with a head deadline and the connection cap
        log_level="warning",
        ws_max_size=16
        * config.limits.max_message_bytes,  # the hard cap; the app answers MESSAGE_TOO_LARGE below it
        ws_ping_interval=_PING_S,
        ws_ping_timeout=_PING_S,
        timeout_keep_alive=30,
        h11_max_incomplete_event_size=16 * 1024,
        lifespan="on",
        backlog=accept_backlog(),  # also the accept burst: kept within the open-file limit's headroom
    )
    return uvicorn.Server(cfg)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket; an address in use (or not this machine's) is one line naming it and the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(accept_backlog())
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        raise StepGymError(
            f"cannot listen on {url_of(host, port).split('//', 1)[1]} ({why}); another program may use that port: pick another with "
            "--port N (--port 0 takes any free one)"
        ) from exc
    return sock


def serve(config: ServeConfig, *, ready: Callable[[str], None] | None = None) -> None:
    """Run the server until interrupted; ``ready(url)`` is called once it listens (port 0 picks a free port)."""
    app, manager = build(config)
    try:
        sock = _bind(config.host, config.port)
    except BaseException:
        manager.pool.close()
        raise
    server = _uvicorn_server(app, config)
    try:
        if ready is not None:
            host, port = sock.getsockname()[:2]
            ready(url_of(host, port))
        server.run(sockets=[sock])
    finally:
        sock.close()
        manager.pool.close()


class ServerThread:
    """A server on a background thread of this process (tests, notebooks): ``with ServerThread(cfg) as url: ...``."""

    def __init__(self, config: ServeConfig) -> None:
        self.app, self.manager = build(config)
        try:
            self._sock = _bind(config.host, config.port)
        except BaseException:
            self.manager.pool.close()
            raise
        host, port = self._sock.getsockname()[:2]
        self.url = url_of(host, port)
        self._server = _uvicorn_server(self.app, config)
        self._server.install_signal_handlers = lambda: None  # not the main thread
        self._thread = threading.Thread(target=self._run, name="stepgym-serve", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def __enter__(self) -> str:
        self._thread.start()
        deadline = 30.0
        waited = 0.0
        while not self._server.started and waited < deadline and self._thread.is_alive():
            threading.Event().wait(0.02)
            waited += 0.02
        if not self._server.started:
            self.close()
            raise StepGymError(f"the server did not start within {deadline:.0f} s")
        return self.url

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        with contextlib.suppress(OSError):
            self._sock.close()
        self.manager.pool.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
