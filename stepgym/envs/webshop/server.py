# Over 400 lines: the site's HTTP server and every page handler, one module so the routes read together.
"""The WebShop web site: the shared engine served as HTML by a real HTTP server on 127.0.0.1.

Why the standard library's :class:`http.server.ThreadingHTTPServer` and not Flask (upstream's choice): the site
has six routes, and owning the routing means every URL that is not one of them is a 404 by construction, there is
no static-file handler (so no path can reach a file on disk, whatever ``..`` or ``%2F`` it holds), no template
engine configuration to get escaping wrong (every string goes through :func:`html.escape` in
:mod:`pages_html`), no werkzeug version pinning (an upstream install pain), and it starts in milliseconds on an
ephemeral port in a daemon thread. :meth:`ShopSite.start` waits for ``/healthz`` to answer, with a deadline;
:meth:`ShopSite.close` shuts the server down.

Like upstream's app, the session state lives in the URL (query, page, product, options), so the browser's
history and every link are self-describing; the server only keeps which goal each session id serves and the
purchases made. Routes (``<sid>`` is a session id)::

    GET  /healthz                                     "ok"
    GET  /start?task_id=webshop/<kind>/<index>        new session for that goal -> 303 to its search page
    GET  /                                            303 to /start with the first goal (for people)
    GET  /s/<sid>/                                    search page
    POST /s/<sid>/search   (form: search_query)       303 to the results page
    GET  /s/<sid>/results?q=..&p=..                   results page
    GET  /s/<sid>/item/<ASIN>?q=..&p=..&o=..          item page (o: JSON list of [option, value] pairs)
    GET  /s/<sid>/item/<ASIN>/<Description|Features|Reviews>?q=..&p=..&o=..
    POST /s/<sid>/buy/<ASIN>?q=..&p=..&o=..           done page with the reward (and a JSON breakdown)
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from stepgym.envs.webshop.core import WebShopCore
from stepgym.envs.webshop.engine import SUB_PAGES, ShopState
from stepgym.envs.webshop.goals import Goal
from stepgym.envs.webshop.pages_html import render_html
from stepgym.errors import ServiceUnavailableError

__all__ = ["ShopSite", "state_from_url", "url_for_state"]

_log = logging.getLogger(__name__)
_ASIN = re.compile(r"^[A-Za-z0-9]{1,16}$")
_SID = re.compile(r"^[a-f0-9]{1,64}$")
MAX_PAGE = 100_000
MAX_BODY = 64 * 1024


def url_for_state(sid: str, state: ShopState) -> str:
    """Path + query of a state's page (no host)."""
    q: dict[str, str] = {}
    if state.page in ("results", "item", "item_sub", "done"):
        q["q"] = state.query
        q["p"] = str(state.page_num)
    if state.page in ("item", "item_sub", "done"):
        q["o"] = json.dumps([list(kv) for kv in state.options], separators=(",", ":"))
    base = f"/s/{sid}"
    if state.page == "search":
        return f"{base}/"
    if state.page == "results":
        return f"{base}/results?{urlencode(q)}"
    asin = quote(state.asin, safe="")
    if state.page == "item":
        return f"{base}/item/{asin}?{urlencode(q)}"
    if state.page == "item_sub":
        return f"{base}/item/{asin}/{state.sub}?{urlencode(q)}"
    return f"{base}/buy/{asin}?{urlencode(q)}"


class _BadRequest(Exception):
    pass


def _parse_options(raw: str, product: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    try:
        pairs = json.loads(raw) if raw else []
    except json.JSONDecodeError as exc:
        raise _BadRequest("bad options") from exc
    if not isinstance(pairs, list):
        raise _BadRequest("bad options")
    out: dict[str, str] = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise _BadRequest("bad options")
        name, value = pair
        if value not in product["options"].get(name, []):
            raise _BadRequest("unknown option")
        out[name] = value
    return tuple(sorted(out.items()))


def state_from_url(url: str, core: WebShopCore) -> tuple[str, ShopState]:
    """``(sid, state)`` of a site URL; raises ``ValueError`` for anything that is not a page of the site."""
    parts = urlsplit(url)
    segs = parts.path.split("/")
    if len(segs) < 4 or segs[0] != "" or segs[1] != "s" or not _SID.match(segs[2]):
        raise ValueError(f"not a session page: {parts.path!r}")
    sid, rest = segs[2], segs[3:]
    query = parse_qs(parts.query, keep_blank_values=True)

    def one(name: str, default: str = "") -> str:
        vals = query.get(name)
        return vals[0] if vals else default

    if rest == [""]:
        return sid, ShopState()
    try:
        page_num = int(one("p", "1"))
    except ValueError as exc:
        raise ValueError("bad page number") from exc
    if not 1 <= page_num <= MAX_PAGE:
        raise ValueError("bad page number")
    q = one("q")
    if rest == ["results"]:
        if not q.strip():
            raise ValueError("empty query")
        return sid, ShopState("results", q, page_num)
    if len(rest) in (2, 3) and rest[0] in ("item", "buy") and _ASIN.match(rest[1]):
        asin = rest[1]
        product = core.catalogue.by_asin.get(asin)
        if product is None:
            raise ValueError("unknown product")
        try:
            options = _parse_options(one("o"), product)
        except _BadRequest as exc:
            raise ValueError(str(exc)) from exc
        if rest[0] == "buy" and len(rest) == 2:
            return sid, ShopState("done", "", 1, asin, options)
        if rest[0] == "item" and len(rest) == 2:
            return sid, ShopState("item", q, page_num, asin, options)
        if rest[0] == "item" and rest[2] in SUB_PAGES:
            return sid, ShopState("item_sub", q, page_num, asin, options, rest[2])
    raise ValueError(f"not a page of the site: {parts.path!r}")


class _Handler(BaseHTTPRequestHandler):
    server_version = "StepGymWebShop/0"
    sys_version = ""
    site: ShopSite  # set on the subclass made per site

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the env logs nothing per request
        return

    def _send(
        self, status: int, body: str, *, ctype: str = "text/html; charset=utf-8", location: str | None = None
    ) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        if location is not None:
            self.send_header("Location", location)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _not_found(self) -> None:
        self._send(HTTPStatus.NOT_FOUND, "<!DOCTYPE html><html><body><h1>404 Not Found</h1></body></html>")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        try:
            self.site.handle(self, "GET", b"")
        except ConnectionError:
            raise  # the client went away: nobody to send a 500 to (the server logs one line)
        except Exception:  # never let a request kill the server thread; the env sees a 500
            self._send(
                HTTPStatus.INTERNAL_SERVER_ERROR, "<!DOCTYPE html><html><body><h1>500</h1></body></html>"
            )

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY or length < 0:
            self._send(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "<!DOCTYPE html><html><body>too large</body></html>"
            )
            return
        body = self.rfile.read(length) if length else b""
        try:
            self.site.handle(self, "POST", body)
        except ConnectionError:
            raise
        except Exception:
            self._send(
                HTTPStatus.INTERNAL_SERVER_ERROR, "<!DOCTYPE html><html><body><h1>500</h1></body></html>"
            )


class _SiteHTTPServer(ThreadingHTTPServer):
    """The threaded server, plus two things a site that is stopped mid-episode needs.

    It keeps the open connections, so :meth:`close_connections` can end the keep-alive connections a browser
    holds (otherwise their handler threads go on serving pages after ``shutdown``); and a client that disconnects
    mid-request or mid-response is one debug line in the log, not a traceback on stderr.
    """

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            _log.debug("WebShop site: client %s went away (%s)", client_address, type(exc).__name__)
            return
        super().handle_error(request, client_address)


class ShopSite:
    """The site for one loaded :class:`WebShopCore`; ``start()`` serves it on 127.0.0.1 (ephemeral port)."""

    def __init__(
        self, core: WebShopCore, *, host: str = "127.0.0.1", port: int = 0, default_split: str = "all"
    ) -> None:
        self.core = core
        self.host, self.port = host, port
        self.default_split = default_split
        self._sessions: dict[str, Goal] = {}
        self._purchases: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._httpd: _SiteHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url = ""

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the site is not running")
        return self._url

    @property
    def last_url(self) -> str:
        """The base URL it serves or last served ('' before the first start)."""
        return self._url

    @property
    def running(self) -> bool:
        """Started, not closed, and its serving thread alive."""
        return self._httpd is not None and self._thread is not None and self._thread.is_alive()

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self, *, timeout: float = 10.0) -> ShopSite:
        handler = type("Handler", (_Handler,), {"site": self})
        self._httpd = _SiteHTTPServer((self.host, self.port), handler)
        host, port = self._httpd.server_address[:2]
        self._url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="webshop-site", daemon=True)
        self._thread.start()
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float) -> None:
        """Poll ``/healthz`` until it answers 200, or raise :class:`ServiceUnavailableError` at the deadline."""
        url = f"{self.base_url}/healthz"
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=max(0.1, deadline - time.monotonic())) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = exc
            threading.Event().wait(0.02)  # back off between polls of the health endpoint
        raise ServiceUnavailableError(
            f"the WebShop site at {url} did not answer within {timeout:.0f} s ({last}). "
            f"Fix: check that 127.0.0.1 ports can be bound."
        )

    def close(self) -> None:
        """Stop serving: the listening socket and every open connection are closed."""
        if self._httpd is not None:
            if self._thread is not None and self._thread.is_alive():
                self._httpd.shutdown()  # (waits for serve_forever, so only while it runs)
            self._httpd.server_close()
            self._httpd.close_connections()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ShopSite:
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------------------------
    def new_session(self, goal: Goal) -> str:
        sid = secrets.token_hex(8)
        with self._lock:
            self._sessions[sid] = goal
        return sid

    def purchases(self, sid: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._purchases.get(sid, []))

    # -- routing ----------------------------------------------------------------------------------------------
    def handle(self, h: _Handler, method: str, body: bytes) -> None:
        parts = urlsplit(h.path)
        path = parts.path
        if method == "GET" and path == "/healthz":
            h._send(200, "ok", ctype="text/plain; charset=utf-8")
            return
        if method == "GET" and path == "/":
            first = self.core.split(self.default_split)[:1] or self.core.goals[:1]
            h._send(HTTPStatus.SEE_OTHER, "", location=f"/start?{urlencode({'task_id': first[0].task_id})}")
            return
        if method == "GET" and path == "/start":
            task = parse_qs(parts.query).get("task_id", [""])[0]
            try:
                goal = self.core.goal_by_task_id(task)
            except ValueError:
                h._not_found()
                return
            sid = self.new_session(goal)
            h._send(HTTPStatus.SEE_OTHER, "", location=f"/s/{sid}/")
            return
        segs = path.split("/")
        if len(segs) >= 3 and segs[1] == "s":
            with self._lock:
                goal = self._sessions.get(segs[2])
            if goal is not None:
                self._session_route(h, method, body, segs[2], goal)
                return
        h._not_found()

    def _session_route(self, h: _Handler, method: str, body: bytes, sid: str, goal: Goal) -> None:
        engine = self.core.engine
        path = urlsplit(h.path).path
        if path == f"/s/{sid}/search":
            if method != "POST":
                h._not_found()
                return
            form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            query = (form.get("search_query") or [""])[0].lower()
            new, problem = engine.transition(ShopState(), f"search[{query}]")
            target = ShopState() if problem else new
            h._send(HTTPStatus.SEE_OTHER, "", location=url_for_state(sid, target))
            return
        try:
            _, state = state_from_url(h.path, self.core)
        except ValueError:
            h._not_found()
            return
        if (state.page == "done") != (method == "POST"):
            h._not_found()  # buying needs a POST; pages are GETs
            return
        reward = None
        if state.page == "done":
            reward = engine.reward(state, goal)
            with self._lock:
                self._purchases.setdefault(sid, []).append(
                    {"asin": state.asin, "options": state.options_dict, "reward": reward[0]}
                )
        page = engine.page(state, goal, reward=reward)
        item_state = state if state.page in ("item", "item_sub") else None
        buy = (
            url_for_state(
                sid,
                ShopState("done", item_state.query, item_state.page_num, item_state.asin, item_state.options),
            )
            if item_state
            else ""
        )
        html_text = render_html(
            page, lambda s: url_for_state(sid, s), search_action=f"/s/{sid}/search", buy_action=buy
        )
        h._send(200, html_text)
