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
* Bad requests get a 4xx with ``{"error": "<what is wrong and what is expected>"}``: 400 malformed JSON or fields
  (whatever the body holds: JSON nested past the parser's depth, a number with thousands of digits, wrong types),
  404 unknown path, 405 wrong method, 411 missing length, 413 body too large or a request asking for more than
  ``max_results`` passages in all (``len(queries) * topk``; the bound on one request's work and memory), 415 not
  JSON. A retriever failure is a 500 with the message; no request drops the connection or kills the thread.
  A client that resets its connection gets no answer and leaves no traceback on stderr.

:func:`start_server` runs one in a background thread (tests, the benchmark, notebooks); ``stepgym retriever serve``
runs one in the foreground.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stepgym.envs.searchqa.retrievers import MAX_QUERIES, Retriever, check_request

__all__ = ["MAX_BODY_BYTES", "MAX_RESULTS", "RetrievalServer", "start_server"]

MAX_BODY_BYTES = 8 * 1024 * 1024
#: Default bound on ``len(queries) * topk`` per request: Search-R1's largest batch (512 prompts x 5 samples x
#: topk 3 = 7,680) fits four times over, while 512 queries x topk 1000 (~1.4 GB of hits) is refused.
MAX_RESULTS = 32_768
# After the 413 for a body over the size limit, this much of it (at most, for at most this long) is read and
# thrown away before the connection closes, so that the client reads the 413 instead of a reset connection.
_DISCARD_LIMIT = 64 * 1024 * 1024
_DISCARD_SECONDS = 5.0


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
        try:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from a request's escapes): send it escaped
            body = json.dumps(payload).encode("ascii")
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
        try:
            self._post()
        except ConnectionError:  # the client went away mid-request: nobody to answer
            self.close_connection = True
        except Exception as exc:  # a bug must not drop the connection: answer it
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._error(500, _short(f"internal error: {type(exc).__name__}: {exc}"))

    def _post(self) -> None:
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
            self._error(400, _short(str(exc)))
            return
        asked = len(queries) * topk
        if asked > self.server.max_results:
            self._error(
                413,
                f"the request asks for {len(queries)} queries x topk {topk} = {asked} passages; the limit is "
                f"{self.server.max_results} per request (the server's max_results): split the queries into "
                "smaller requests",
            )
            return
        try:
            results = self.server.retriever.search(queries, topk)
        except ValueError as exc:
            self._error(400, _short(str(exc)))
            return
        except Exception as exc:  # the retriever broke: say so instead of dropping the connection
            self._error(500, _short(f"retrieval failed: {type(exc).__name__}: {exc}"))
            return
        self._send(200, {"result": [[_hit_json(h, scores) for h in row] for row in results]})

    def do_PUT(self) -> None:
        self._drain()
        self._error(405, "use POST /retrieve or GET /health")

    do_DELETE = do_PATCH = do_PUT

    def _drain(self) -> None:
        """Read a small body and throw it away, so the connection stays usable; close on a large one."""
        length = self.headers.get("Content-Length")
        if length and _is_length(length) and int(length) <= self.server.max_body_bytes:
            self.rfile.read(int(length))
        elif length:
            self.close_connection = True

    def _discard_after_answer(self, length: int) -> None:
        """After answering an oversized request, read what the client still sends (up to a bound, briefly).

        A client that sends the whole body before reading the answer (``http.client``, ``requests``) would
        otherwise see its connection reset and lose the 413 that explains why.
        """
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.settimeout(_DISCARD_SECONDS)
            left = min(length, _DISCARD_LIMIT)
            while left > 0:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)

    def _read_json(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            self._error(411, "a Content-Length header is required")
            return None
        if not _is_length(length):
            self.close_connection = True
            self._error(400, f"bad Content-Length {_short(length)!r}")
            return None
        limit = self.server.max_body_bytes
        if int(length) > limit:
            self._error(
                413,
                f"request body of {length} bytes exceeds the limit of {limit} (the server's max_body_bytes)",
            )
            self._discard_after_answer(int(length))
            return None
        body = self.rfile.read(int(length))
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if ctype not in ("application/json", "text/json", "application/x-www-form-urlencoded", ""):
            self._error(415, f"Content-Type {ctype!r} is not JSON; send application/json")
            return None
        try:
            return json.loads(body.decode("utf-8"))
        except RecursionError:
            self._error(400, "the body is not valid JSON for this server: it is nested too deeply")
        except ValueError as exc:  # bad UTF-8, bad JSON, an integer with more digits than Python converts
            self._error(400, f"the body is not valid JSON for this server: {_short(str(exc))}")
        return None


def _is_length(value: str) -> bool:
    """A Content-Length as HTTP writes it: 1-20 ASCII digits (``"²".isdigit()`` is true, ``int("²")`` fails)."""
    return value.isascii() and value.isdigit() and len(value) <= 20


def _short(text: str, limit: int = 300) -> str:
    """An error message cut to ``limit`` characters (a message may quote a huge value from the request)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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
    """``ThreadingHTTPServer`` bound to a :class:`Retriever`. Port 0 picks a free port (see :attr:`url`).

    ``max_results`` bounds ``len(queries) * topk`` of one request and ``max_body_bytes`` its body; a request over
    either gets a 413 naming the limit.
    """

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
        max_results: int = MAX_RESULTS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ):
        if max_results < 1 or max_body_bytes < 1:
            raise ValueError(
                f"max_results and max_body_bytes must be >= 1, got {max_results}, {max_body_bytes}"
            )
        self.retriever = retriever
        self.default_topk = int(default_topk)
        self.max_results, self.max_body_bytes = int(max_results), int(max_body_bytes)
        self.verbose = verbose
        self.info = dict(retriever.describe())
        super().__init__((host, port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (reset or closed its connection while the server read or answered) is nobody to
        answer and no fault of the server: one line when ``verbose``, no traceback. Anything else is a bug and
        keeps ``socketserver``'s traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            if self.verbose:
                print(
                    f"client {client_address[0]}:{client_address[1]} went away ({type(exc).__name__})",
                    file=sys.stderr,
                )
            return
        super().handle_error(request, client_address)

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
