# Over 400 lines: every OpenEnv endpoint, its guards and its error mapping in one place.
"""The ASGI app of ``stepgym serve`` (Starlette; uvicorn runs it): OpenEnv 0.10's endpoints over stepgym sessions.

Endpoints (the paths and payloads of OpenEnv's ``HTTPEnvServer``):

* ``/ws`` — one session per WebSocket: ``reset`` / ``step`` / ``state`` / ``close`` messages (see
  :mod:`stepgym.serve.protocol`). ``/ws?session_id=<id>`` resumes a session whose connection dropped.
* ``POST /reset``, ``POST /step``, ``GET /state``, ``POST /close`` — the same over HTTP. OpenEnv's HTTP reset and
  step build a throw-away env per request; here ``/reset`` opens a session (or resets the one named by
  ``session_id``) and answers its id in ``metadata.session_id``, and ``/step`` / ``/state`` / ``/close`` name it.
  An HTTP session is reaped after the idle timeout.
* ``GET /health``, ``GET /metadata``, ``GET /schema``.

Every error is one JSON answer with a message and a code (WebSocket: OpenEnv's ``{"type": "error", "data":
{"message", "code"}}``; HTTP: a 4xx/5xx status with ``{"detail": {"message", "code"}}``); the session that sent
a bad message keeps working, and no other session notices. When the server has a token, every request must send
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from stepgym.errors import abort_cause_of
from stepgym.serve.pool import CapacityError
from stepgym.serve.protocol import (
    AUTH_HEADER,
    SECRET_FIELD,
    SESSION_FIELD,
    SESSION_QUERY,
    ErrorCode,
    ProtocolError,
    error_message,
    parse_json,
    parse_message,
    parse_reset,
    parse_step_request,
)
from stepgym.serve.sessions import Session, SessionManager

__all__ = ["build_app"]

log = logging.getLogger("stepgym.serve")

_HTTP_STATUS = {
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.UNKNOWN_TYPE: 400,
    ErrorCode.VALIDATION_ERROR: 422,
    ErrorCode.NOT_RESET: 409,
    ErrorCode.EPISODE_OVER: 409,
    ErrorCode.SESSION_ERROR: 404,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.CAPACITY_REACHED: 503,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.EXECUTION_ERROR: 500,
    ErrorCode.EPISODE_ABORTED: 500,
}


def _authorized(headers: Any, token: str | None) -> bool:
    """``Authorization: Bearer <token>``; the scheme's name is case-insensitive (RFC 9110), the token is not."""
    if token is None:
        return True
    scheme, _, sent = headers.get(AUTH_HEADER, "").strip().partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(sent.strip().encode(), token.encode())


def _client(conn: Any) -> str:
    c = conn.client
    if c is None:
        return "a client"
    return f"[{c.host}]:{c.port}" if ":" in str(c.host) else f"{c.host}:{c.port}"


#: What an env's ``reset`` raises to refuse an argument (an unknown task id): the client's error, not the env's.
_ARGUMENT_ERRORS = (ValueError, KeyError, IndexError, TypeError)
_ARGUMENT_ERROR_NAMES = tuple(f"{t.__name__}:" for t in (*_ARGUMENT_ERRORS, LookupError))


def _refuses_argument(exc: BaseException) -> bool:
    """Whether ``exc``, raised by ``reset`` on options the client chose, is the env refusing one of them (in a
    worker, the env's exception arrives as the last line of the worker error's traceback)."""
    if isinstance(exc, _ARGUMENT_ERRORS) and not hasattr(exc, "abort_cause"):
        return True
    last = (str(exc).strip().splitlines() or [""])[-1]
    return "raised during 'reset'" in str(exc) and last.startswith(_ARGUMENT_ERROR_NAMES)


def _with_secret(payload: dict[str, Any], s: Session) -> dict[str, Any]:
    """An answer with the session's secret in its ``metadata``: the connection holding the session learns it (to
    take the session over from a connection of its own that hangs). Never journaled: a restored session gets a
    new one."""
    return {**payload, "metadata": {**payload.get("metadata", {}), SECRET_FIELD: s.secret}}


def _one_line(exc: BaseException) -> str:
    """An error as one log line (a worker's traceback reduced to its last line)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0][:300] if lines else type(exc).__name__
    return f"{lines[0][:200]} ... {lines[-1][:200]}"


def _schema() -> dict[str, Any]:
    """OpenEnv's ``/schema`` answer: JSON schemas of the action, observation and state objects."""
    action = {
        "type": "object",
        "properties": {"action": {"type": "string"}, "metadata": {"type": "object"}},
        "required": ["action"],
        "additionalProperties": False,
    }
    observation = {
        "type": "object",
        "properties": {
            "text": {"description": "the env's observation"},
            "info": {"type": "object", "description": "the step's info dict: stepgym.schema keys, as JSON"},
            "terminated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
            "session_id": {"type": "string"},
            "step_index": {"type": "integer"},
        },
    }
    state = {
        "type": "object",
        "properties": {
            "episode_id": {"type": ["string", "null"]},
            "step_count": {"type": "integer"},
            "session_id": {"type": "string"},
            "seed": {"type": ["integer", "null"]},
            "done": {"type": "boolean"},
            "last": {"description": "the last observation payload (reset's or the last step's)"},
        },
    }
    return {"action": action, "observation": observation, "state": state}


class _Handlers:
    """The endpoints, over one :class:`SessionManager`."""

    def __init__(self, manager: SessionManager, *, token: str | None, name: str, version: str) -> None:
        self.m, self.token, self.name, self.version = manager, token, name, version

    # -- one message, whatever the transport ---------------------------------------------------------------
    async def dispatch(self, s: Session, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        if kind == "state":
            state = s.state()
            if state["last"] is not None:
                state["last"] = _with_secret(state["last"], s)
            return {"type": "state", "data": state}
        async with s.lock:
            if kind == "reset":
                seed, options, episode = parse_reset(data)
                try:
                    payload = await self.m.reset(s, seed, options, episode)
                except Exception as e:
                    if options and _refuses_argument(e):
                        s.was_reset = False
                        last = (str(e).strip().splitlines() or [""])[-1]
                        raise ProtocolError(
                            f"reset refused the options {sorted(options)} ({last if ':' in last else e}); "
                            "check the task id",
                            ErrorCode.VALIDATION_ERROR,
                        ) from None
                    raise
            else:
                payload = await self.m.step(s, parse_step_request(data, self.m.limits))
        return {"type": "observation", "data": _with_secret(payload, s)}

    async def guarded(self, s: Session, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """:meth:`dispatch`, with every failure turned into an error message (the session survives)."""
        try:
            return await self.dispatch(s, kind, data)
        except ProtocolError as e:
            log.warning(f"session {s.id[:8]}: {kind} refused ({e.code}): {_one_line(e)}")
            return error_message(str(e), e.code, **e.extra)
        except (
            Exception
        ) as e:  # the episode is aborted (docs/failures.md): an error with its cause, never a reward
            s.was_reset = False
            log.warning(
                f"session {s.id[:8]}: the env raised during {kind} ({type(e).__name__}): {_one_line(e)}"
            )
            return error_message(
                f"the env raised {type(e).__name__}: {e}; the episode is aborted, reset to continue",
                ErrorCode.EPISODE_ABORTED,
                abort_cause=abort_cause_of(e),
            )

    # -- WebSocket ------------------------------------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        await ws.accept()
        if not _authorized(ws.headers, self.token):
            await self._refuse(
                ws, "missing or wrong token (send Authorization: Bearer <token>)", ErrorCode.UNAUTHORIZED
            )
            return
        try:
            s = await self.m.open(ws.query_params.get(SESSION_QUERY), ws.query_params.get(SECRET_FIELD))
        except CapacityError as e:
            await self._refuse(ws, str(e), ErrorCode.CAPACITY_REACHED)
            return
        except ProtocolError as e:
            await self._refuse(ws, str(e), e.code)
            return
        except Exception as e:
            await self._refuse(
                ws, f"could not open a session: {type(e).__name__}: {e}", ErrorCode.FACTORY_ERROR
            )
            return
        s.on_reap = lambda why: asyncio.ensure_future(
            self._refuse(ws, f"session closed: {why}", ErrorCode.TIMEOUT)
        )
        mine, closed = s.connection, False
        try:
            closed = await self._serve(ws, s)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client vanished (possibly mid-step): the session waits for a reconnect
        finally:
            if closed:
                self.m.close(s)
            elif s.connection == mine:  # not taken over by a newer connection
                s.on_reap = None
                self.m.detach(s)
            if ws.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await ws.close()

    async def _serve(self, ws: WebSocket, s: Session) -> bool:
        """Answer messages until ``close`` (True) or a disconnect (False)."""
        idle = self.m.limits.idle_timeout_s
        while True:
            try:
                msg = await asyncio.wait_for(ws.receive(), idle)
            except TimeoutError:
                await self._refuse(ws, f"session closed: no message for {idle:g} s", ErrorCode.TIMEOUT)
                return True
            if msg["type"] == "websocket.disconnect":
                return False
            raw = msg.get("text") if msg.get("text") is not None else msg.get("bytes") or b""
            try:
                kind, data = parse_message(raw, self.m.limits)
            except ProtocolError as e:
                log.warning(f"session {s.id[:8]} ({_client(ws)}): message refused ({e.code}): {_one_line(e)}")
                await ws.send_text(json.dumps(error_message(str(e), e.code)))
                continue
            if kind == "close":
                return True
            await ws.send_text(json.dumps(await self.guarded(s, kind, data)))

    @staticmethod
    async def _refuse(ws: WebSocket, message: str, code: str) -> None:
        log.warning(f"WebSocket of {_client(ws)}: {code}: {message}")
        with contextlib.suppress(Exception):
            await ws.send_text(json.dumps(error_message(message, code)))
            await ws.close(code=1008 if code == ErrorCode.UNAUTHORIZED else 1000)

    # -- HTTP -----------------------------------------------------------------------------------------------
    def _error(self, message: str, code: str, **extra: Any) -> JSONResponse:
        return JSONResponse(
            {"detail": {"message": message, "code": code, **extra}}, status_code=_HTTP_STATUS.get(code, 400)
        )

    async def _body(self, request: Request) -> dict[str, Any]:
        limit = self.m.limits.max_message_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProtocolError(
                f"body of {declared} bytes is over the limit of {limit}", ErrorCode.MESSAGE_TOO_LARGE
            )
        chunks, size = [], 0
        deadline = self.m.limits.read_timeout_s
        try:
            async with asyncio.timeout(deadline):  # a half-sent body does not hold the connection for ever
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ProtocolError(
                            f"body is over the limit of {limit} bytes", ErrorCode.MESSAGE_TOO_LARGE
                        )
                    chunks.append(chunk)
        except TimeoutError:
            raise ProtocolError(
                f"the request body did not arrive within {deadline:g} s ({size} bytes received)",
                ErrorCode.REQUEST_TIMEOUT,
            ) from None
        raw = b"".join(chunks)
        if not raw.strip():
            return {}
        body = parse_json(raw, self.m.limits)
        if not isinstance(body, dict):
            raise ProtocolError("the body must be a JSON object", ErrorCode.INVALID_JSON)
        return body

    def _http_session(self, sid: Any) -> Session:
        if not isinstance(sid, str) or sid not in self.m.sessions:
            raise ProtocolError(
                f"unknown or expired session {sid!r}: POST /reset opens one", ErrorCode.SESSION_ERROR
            )
        s = self.m.sessions[sid]
        if s.attached:
            raise ProtocolError(f"session {sid} is held by a WebSocket connection", ErrorCode.SESSION_ERROR)
        return s

    async def http(self, request: Request) -> JSONResponse:
        if not _authorized(request.headers, self.token):
            log.warning(
                f"{request.method} {request.url.path} from {_client(request)}: missing or wrong token"
            )
            return self._error(
                "missing or wrong token (send Authorization: Bearer <token>)", ErrorCode.UNAUTHORIZED
            )
        op = request.url.path.strip("/")
        try:
            return await self._http_op(op, request)
        except CapacityError as e:
            log.warning(f"{request.method} /{op} from {_client(request)}: {_one_line(e)}")
            return self._error(str(e), ErrorCode.CAPACITY_REACHED)
        except ProtocolError as e:
            log.warning(f"{request.method} /{op} from {_client(request)}: {e.code}: {_one_line(e)}")
            answer = self._error(str(e), e.code)
            if e.code == ErrorCode.REQUEST_TIMEOUT:
                answer.headers["connection"] = "close"  # the rest of the body is not waited for
            return answer
        except ClientDisconnect:
            log.warning(
                f"{request.method} /{op} from {_client(request)}: the client left before its body ended"
            )
            return self._error("the client disconnected", ErrorCode.VALIDATION_ERROR)

    async def _http_op(self, op: str, request: Request) -> JSONResponse:
        if op == "state":
            return JSONResponse(self._http_session(request.query_params.get(SESSION_QUERY)).state())
        body = await self._body(request)
        sid = body.pop(SESSION_FIELD, None)
        if op == "close":
            self.m.close(self._http_session(sid))
            return JSONResponse({"closed": sid})
        if op == "reset":
            if sid is None:
                s = await self.m.open()
                s.attached = False  # an HTTP session holds no socket; the idle timeout reaps it
            else:
                s = self._http_session(sid)
            answer = await self.guarded(s, "reset", body)
            if sid is None and answer["type"] == "error":
                self.m.close(s)  # its id was never answered: nobody could use or close it
        else:
            s = self._http_session(sid)
            extra = set(body) - {"action", "timeout_s", "request_id"}
            if extra:
                raise ProtocolError(f"unexpected fields {sorted(extra)} in a step request")
            if not isinstance(body.get("action"), dict):
                raise ProtocolError('a step request is {"action": {"action": "<text>"}, "session_id": ...}')
            answer = await self.guarded(s, "step", body["action"])
        if answer["type"] == "error":
            return self._error(**answer["data"])
        return JSONResponse(answer["data"])

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "healthy"})

    async def metadata(self, request: Request) -> JSONResponse:
        desc = "A stepgym env: per-step rewards and ground-truth step annotations (stepgym.schema) in every observation."
        return JSONResponse({"name": self.name, "description": desc, "version": self.version})

    async def schema(self, request: Request) -> JSONResponse:
        return JSONResponse(_schema())

    async def stats(self, request: Request) -> JSONResponse:
        if not _authorized(request.headers, self.token):
            return self._error("missing or wrong token", ErrorCode.UNAUTHORIZED)
        m = self.m
        return JSONResponse({"sessions": len(m.sessions), "envs_in_use": m.pool.in_use, **m.counters})


def build_app(manager: SessionManager, *, token: str | None = None, name: str = "stepgym") -> Starlette:
    """The app over ``manager``; its lifespan runs the reaper and, on shutdown, releases every env."""
    from stepgym import __version__

    h = _Handlers(manager, token=token, name=name, version=__version__)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        task = asyncio.create_task(manager.reaper())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            manager.close_all()

    routes = [
        WebSocketRoute("/ws", h.websocket),
        Route("/reset", h.http, methods=["POST"]),
        Route("/step", h.http, methods=["POST"]),
        Route("/close", h.http, methods=["POST"]),
        Route("/state", h.http, methods=["GET"]),
        Route("/health", h.health, methods=["GET"]),
        Route("/metadata", h.metadata, methods=["GET"]),
        Route("/schema", h.schema, methods=["GET"]),
        Route("/stats", h.stats, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
