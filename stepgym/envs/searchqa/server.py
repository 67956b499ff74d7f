"""A retrieval server with Search-R1's ``/retrieve`` request shape, on the standard library.

Search-R1 serves its index over HTTP so that every rollout worker shares one copy (FastAPI + uvicorn in
``search_r1/search/retrieval_server.py``). This server speaks the same protocol with ``http.server``'s
``ThreadingHTTPServer`` (one thread per connection, HTTP/1.1 keep-alive), so it needs no web framework:

* ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int (optional, default the server's), "return_scores":
  bool (optional, default false)}`` answers ``{"result": [[hit, ...], ...]}``, one list per query, best first,
  where a hit is ``{"document": {"id", "contents"}, "score": float}`` with ``return_scores`` and the bare
  ``{"id", "contents"}`` document without — Search-R1's exact response shape.
* ``GET /health`` answers ``{"status": "ok", "backend", "corpus_sha256", "num_passages", ...}``; clients poll it
  (with a deadline) instead of sleeping.
* Bad requests get a 4xx with ``{"error": "<what is wrong and what is expected>"}``: 400 malformed JSON or fields,
  404 unknown path, 405 wrong method, 411 missing length, 413 body too large, 415 not JSON. A retriever failure is a
  500 with the message.

:func:`start_server` runs one in a background thread (tests, the benchmark, notebooks); ``stepgym retriever serve``
runs one in the foreground.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stepgym.envs.searchqa.retrievers import MAX_QUERIES, Retriever, check_request

__all__ = ["MAX_BODY_BYTES", "RetrievalServer", "start_server"]

MAX_BODY_BYTES = 8 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle on, the body waits for the client's delayed ACK
    # (~40 ms a request on a keep-alive connection).
    disable_nagle_algorithm = True
    server: RetrievalServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": message})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(200, {"status": "ok", **self.server.info})
        elif path == "/retrieve":
            self._error(405, 'use POST /retrieve with a JSON body {"queries": [...], "topk": k}')
        else:
            self._error(404, f"unknown path {path!r}; endpoints: POST /retrieve, GET /health")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/retrieve":
            self._drain()
            self._error(
                404 if path != "/health" else 405, f"unknown endpoint POST {path!r}; use POST /retrieve"
            )
            return
        request = self._read_json()
        if request is None:
            return
        try:
            queries, topk, scores = _parse_request(request, self.server.default_topk)
        except ValueError as exc:
            self._error(400, str(exc))
            return
        try:
            results = self.server.retriever.search(queries, topk)
        except ValueError as exc:
            self._error(400, str(exc))
            return
        except Exception as exc:  # the retriever broke: say so instead of dropping the connection
            self._error(500, f"retrieval failed: {type(exc).__name__}: {exc}")
            return
        self._send(200, {"result": [[_hit_json(h, scores) for h in row] for row in results]})

    def do_PUT(self) -> None:
        self._drain()
        self._error(405, "use POST /retrieve or GET /health")

    do_DELETE = do_PATCH = do_PUT

    def _drain(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        elif length:
            self.close_connection = True

    def _read_json(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            self._error(411, "a Content-Length header is required")
            return None
        if not length.isdigit():
            self.close_connection = True
            self._error(400, f"bad Content-Length {length!r}")
            return None
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(413, f"request body of {length} bytes exceeds the limit of {MAX_BODY_BYTES}")
            return None
        body = self.rfile.read(int(length))
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if ctype not in ("application/json", "text/json", "application/x-www-form-urlencoded", ""):
            self._error(415, f"Content-Type {ctype!r} is not JSON; send application/json")
            return None
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._error(400, f"the body is not valid JSON: {exc}")
            return None


def _parse_request(request: Any, default_topk: int) -> tuple[list[str], int, bool]:
    if not isinstance(request, dict):
        raise ValueError(
            'the body must be a JSON object {"queries": [...], "topk": k, "return_scores": bool}'
        )
    unknown = set(request) - {"queries", "topk", "return_scores"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; expected queries, topk, return_scores")
    if "queries" not in request:
        raise ValueError('missing "queries" (a list of strings)')
    topk = request.get("topk")
    if topk is None or topk == 0:  # Search-R1 falls back to the server's default on a missing/zero topk
        topk = default_topk
    scores = request.get("return_scores", False)
    if not isinstance(scores, bool):
        raise ValueError(f"return_scores must be true or false, got {scores!r}")
    queries, topk = check_request(request["queries"], topk, max_queries=MAX_QUERIES)
    return queries, topk, scores


def _hit_json(hit: Any, with_score: bool) -> dict[str, Any]:
    doc = {"id": hit.id, "contents": hit.contents}
    return {"document": doc, "score": hit.score} if with_score else doc


class RetrievalServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` bound to a :class:`Retriever`. Port 0 picks a free port (see :attr:`url`)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        retriever: Retriever,
        host: str = "127.0.0.1",
        port: int = 8000,
        *,
        default_topk: int = 3,
        verbose: bool = False,
    ):
        self.retriever = retriever
        self.default_topk = int(default_topk)
        self.verbose = verbose
        self.info = dict(retriever.describe())
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def retrieve_url(self) -> str:
        return f"{self.url}/retrieve"

    def stop(self) -> None:
        """Stop serving (if a thread serves) and close the socket."""
        thread = getattr(self, "thread", None)
        if thread is not None:
            self.shutdown()
            thread.join(timeout=10)
        self.server_close()

    def __exit__(self, *args: Any) -> None:
        self.stop()


def start_server(
    retriever: Retriever, host: str = "127.0.0.1", port: int = 0, **kwargs: Any
) -> RetrievalServer:
    """Serve ``retriever`` from a daemon thread; the socket is listening when this returns.

    Stop it with ``server.stop()`` (or use it as a context manager).
    """
    server = RetrievalServer(retriever, host, port, **kwargs)
    thread = threading.Thread(
        target=server.serve_forever, name=f"stepgym-retriever-{server.server_address[1]}", daemon=True
    )
    thread.start()
    server.thread = thread  # type: ignore[attr-defined]
    return server
