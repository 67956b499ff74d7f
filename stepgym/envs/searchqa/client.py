"""A client of a Search-R1-style retrieval server (:mod:`stepgym.envs.searchqa.server` or Search-R1's own).

Retry policy (never hang, fail clearly): every request has a *deadline* (``deadline`` seconds from the call). A
connection that is refused, reset or times out, and a 408/429/502/503/504 (the server is busy or restarting),
are retried with exponential back-off (50 ms doubling to 1 s) until the deadline; each attempt's socket timeout is the smaller of ``timeout`` and the time left.
When the deadline passes the call raises :class:`~stepgym.errors.ServiceUnavailableError` naming the URL, the last
error and the fix. Any other 4xx is the caller's fault (a malformed request, or one over a server limit such as
``max_results``) and raises ``ValueError`` at once, without retrying, with the server's message; a 500
(the server's retriever failed) raises ``ServiceUnavailableError`` at once. So a killed server costs at most
``deadline`` seconds, and a server restarted within it is picked up transparently.

Connections are kept alive per thread (``http.client``), so a worker pays the TCP handshake once.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from stepgym.envs.searchqa.retrievers import Hit, Retriever, check_request
from stepgym.errors import RetrieverUnavailableError

__all__ = ["HTTPRetriever", "wait_until_healthy"]

_RETRYABLE_STATUS = (408, 429, 502, 503, 504)


class HTTPRetriever(Retriever):
    """``search`` over HTTP. ``url`` is the server's base URL or its ``/retrieve`` URL.

    Args:
        timeout: socket timeout of one attempt (seconds).
        deadline: the whole call's budget, retries included (seconds).
    """

    backend = "http"

    def __init__(self, url: str, *, timeout: float = 10.0, deadline: float = 30.0):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"retriever URL must look like http://host:port[/retrieve], got {url!r}")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path.rstrip("/")
        self.base_path = path[: -len("/retrieve")] if path.endswith("/retrieve") else path
        self.url = f"{self.scheme}://{self.host}:{self.port}{self.base_path}"
        self.timeout, self.deadline = float(timeout), float(deadline)
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"HTTPRetriever({self.url!r}, timeout={self.timeout}, deadline={self.deadline})"

    # -- transport ------------------------------------------------------------------------------------------------
    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = cls(self.host, self.port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is None:
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small requests: no Nagle delay
        conn.sock.settimeout(timeout)
        return conn

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def _request(self, method: str, path: str, payload: Any = None, deadline: float | None = None) -> Any:
        budget = self.deadline if deadline is None else deadline
        end = time.monotonic() + budget
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json"} if body is not None else {}
        delay, last = 0.05, "no attempt made"
        url = f"{self.url}{path}"
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise RetrieverUnavailableError(
                    f"retrieval server {url} did not answer within {budget:g} s (last error: {last}). Fix: start it "
                    "with `stepgym retriever serve`, check the URL, or use an in-process retriever (retriever='bm25')."
                )
            try:
                conn = self._conn(min(self.timeout, left))
                conn.request(method, f"{self.base_path}{path}", body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
                if resp.will_close:
                    self._drop_conn()
            except (
                OSError,
                http.client.HTTPException,
            ) as exc:  # refused, reset, timed out, closed mid-answer
                self._drop_conn()
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if status < 400:
                    return _decode(data, url)
                message = _error_message(data)
                if 400 <= status < 500 and status not in _RETRYABLE_STATUS:
                    raise ValueError(f"retrieval server {url} rejected the request ({status}): {message}")
                if status not in _RETRYABLE_STATUS:
                    raise RetrieverUnavailableError(f"retrieval server {url} failed ({status}): {message}")
                last = f"HTTP {status}: {message}"
            time.sleep(max(0.0, min(delay, end - time.monotonic())))
            delay = min(delay * 2, 1.0)

    # -- Retriever API --------------------------------------------------------------------------------------------
    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        qs, k = check_request(list(queries), topk)
        if not qs:
            return []
        answer = self._request("POST", "/retrieve", {"queries": qs, "topk": k, "return_scores": True})
        result = answer.get("result") if isinstance(answer, dict) else None
        if not isinstance(result, list) or len(result) != len(qs):
            raise RetrieverUnavailableError(
                f"retrieval server {self.url} answered an unexpected payload (expected {{'result': [...]}} with one "
                f"list per query): {str(answer)[:200]}"
            )
        try:
            return [[_hit(h) for h in row] for row in result]
        except (KeyError, TypeError, ValueError) as exc:
            raise RetrieverUnavailableError(
                f"retrieval server {self.url} answered malformed hits: {exc}"
            ) from exc

    def describe(self, deadline: float | None = None) -> dict[str, Any]:
        """The server's ``/health`` answer (with ``backend`` the server's backend)."""
        info = self._request("GET", "/health", deadline=deadline)
        return info if isinstance(info, dict) else {"backend": "http"}

    def close(self) -> None:
        self._drop_conn()


def _decode(data: bytes, url: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RetrieverUnavailableError(f"retrieval server {url} answered non-JSON: {data[:200]!r}") from exc


def _error_message(data: bytes) -> str:
    try:
        obj = json.loads(data.decode("utf-8"))
        if isinstance(obj, dict):
            return str(obj.get("error") or obj.get("detail") or obj)
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    return data[:300].decode("utf-8", "replace")


def _hit(h: Any) -> Hit:
    if isinstance(h, dict) and "document" in h:
        doc, score = h["document"], float(h.get("score", 0.0))
    else:  # a server answering without scores sends the bare document
        doc, score = h, 0.0
    return Hit(str(doc["id"]), str(doc["contents"]), score)


def wait_until_healthy(url: str, deadline: float = 60.0) -> dict[str, Any]:
    """Poll ``/health`` until the server answers (or raise :class:`ServiceUnavailableError` after ``deadline`` s)."""
    client = HTTPRetriever(url, timeout=min(5.0, deadline), deadline=deadline)
    try:
        return client.describe()
    finally:
        client.close()
