"""Connection guards uvicorn lacks: a read deadline on every request head, and a cap on open connections.

uvicorn (0.55, its ``h11`` protocol) closes a kept-alive connection only while it is silent *after* a response
(``timeout_keep_alive``); a client that connects and sends nothing, or sends half a request head, or trickles a
byte now and then, holds its connection (and a file descriptor) for ever, and ``limit_concurrency`` answers 503
only once a whole request head has arrived. :func:`guarded_protocol` subclasses uvicorn's ``H11Protocol``:

* **head deadline.** From the moment a connection opens (or the first byte of its next request arrives, or a
  response goes out before the client finished sending its body) the client has ``read_timeout_s`` seconds to
  complete the request head (and that unread body); the deadline is fixed, so trickling bytes does not extend
  it. When it passes, the client gets a 408 with the reason and the connection is closed. The body a handler
  reads has its own deadline (:mod:`stepgym.serve.app`); an upgraded WebSocket has the session's idle timeout and
  the protocol's pings.
* **connection cap.** A connection beyond :func:`~stepgym.serve.protocol.connection_cap` (HTTP and WebSocket
  together) is answered 503 with the reason and closed at once, before it holds anything.

Each closure is one log line (``stepgym.serve``), no traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from stepgym.serve.protocol import ErrorCode, ServeLimits, connection_cap, error_message

__all__ = ["GuardedH11Protocol", "guarded_protocol", "refusal"]

log = logging.getLogger("stepgym.serve")


def refusal(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection: ``{"detail": {"message", "code"}}`` as the app's."""
    body = json.dumps({"detail": error_message(message, code)["data"]}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _peer(transport: Any) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return "a client"


class GuardedH11Protocol(H11Protocol):
    """uvicorn's ``H11Protocol`` with a head deadline (``deadline_s``) and a connection cap (``cap``); made with
    those set by :func:`guarded_protocol`."""

    deadline_s: float = 10.0
    cap: int = 1024
    _timer: asyncio.TimerHandle | None = None
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        over = len(self.connections) >= self.cap
        super().connection_made(transport)
        if not over:
            self._arm()
            return
        self._refused = True
        log.warning(f"refused a connection from {_peer(transport)}: {self.cap} connections are open")
        message = f"server busy: {self.cap} connections are open; retry later"
        transport.write(refusal(503, "Service Unavailable", message, ErrorCode.CAPACITY_REACHED))
        transport.close()

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = self.loop.call_later(self.deadline_s, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._waiting_for_head() or self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of a request starts its deadline (a fixed one)
        super().data_received(data)
        if self.transport.get_protocol() is not self:  # upgraded to a WebSocket
            self._disarm()
        elif not self._waiting_for_head() or self.conn.their_state in (h11.DONE, h11.MUST_CLOSE):
            self._disarm()  # the head is in: the handler (and its body deadline) takes over

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._arm()  # answered before the client sent its whole body: it has the deadline to finish

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        if not self._waiting_for_head() and self.conn.their_state is not h11.SEND_BODY:
            return  # a request in the handler's hands
        what = "request head" if self._waiting_for_head() else "request body"
        why = f"no complete {what} within {self.deadline_s:g} s"
        log.warning(f"closed the connection of {_peer(self.transport)}: {why}")
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(refusal(408, "Request Timeout", why, ErrorCode.REQUEST_TIMEOUT))
        self.transport.close()


def guarded_protocol(limits: ServeLimits) -> type[H11Protocol]:
    """:class:`GuardedH11Protocol` with the head deadline and connection cap of ``limits`` (pass it as
    ``uvicorn.Config(http=...)``)."""
    attrs = {"deadline_s": float(limits.read_timeout_s), "cap": connection_cap(limits)}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attrs)
