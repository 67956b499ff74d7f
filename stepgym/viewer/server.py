"""Serving the viewer on loopback, and exporting it as one self-contained HTML file.

Everything shown comes from envs and models, i.e. it is untrusted text. Three layers keep it inert:

* the page builds its DOM with ``textContent`` / ``createElement`` only (never ``innerHTML`` with data);
* data reaches the page as JSON (``/api/*`` responses, or, in an export, a ``<script type="application/json">``
  block in which ``<``, ``>`` and ``&`` are written as ``\\u003c`` … so no markup can close the block);
* a Content-Security-Policy allows only the page's own script (by nonce) and, in an export, no network at all.

The server is the standard library's ``ThreadingHTTPServer`` bound to 127.0.0.1, and it answers only requests
whose ``Host`` is that loopback address (a web page elsewhere cannot reach it through DNS rebinding).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import secrets
import threading
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stepgym.viewer.data import RunData

__all__ = ["ViewerServer", "content_policy", "export_html", "pack_bundle", "render_page", "unpack_bundle"]

HOST = "127.0.0.1"


def _template() -> str:
    return resources.files("stepgym.viewer").joinpath("page.html").read_text(encoding="utf-8")


#: How an export embeds the run: gzip, then base64 (a ``<script>`` element holds text). Run recordings are
#: repetitive JSON, so the file is several times smaller than the plain JSON (a 20 MB export was reported).
EMBED_ENCODING = "gzip-base64"


def pack_bundle(obj: Any) -> str:
    """The run bundle as the export embeds it (:data:`EMBED_ENCODING`; ``mtime=0`` keeps exports reproducible).
    base64 has no ``<``, ``>`` or ``&``, so no recorded text can close the element or become markup."""
    raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def unpack_bundle(text: str) -> Any:
    """The inverse of :func:`pack_bundle` (what the page does in the browser with ``DecompressionStream``)."""
    return json.loads(gzip.decompress(base64.b64decode(text.strip())).decode("utf-8"))


def content_policy(nonce: str, *, offline: bool) -> str:
    """The page's Content-Security-Policy: its own nonce'd script and style only; no network when offline."""
    connect = "'none'" if offline else "'self'"
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src data:; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'"
    )


def render_page(nonce: str, *, data: Any = None) -> str:
    """The page; with ``data`` (a bundle) it is the offline export, else it reads ``/api/*``."""
    csp = content_policy(nonce, offline=data is not None)
    block = ""
    if data is not None:
        block = (
            f'<script type="application/octet-stream" id="stepgym-data" data-encoding="{EMBED_ENCODING}">'
            f"{pack_bundle(data)}</script>"
        )
    page = _template().replace("{{NONCE}}", nonce).replace("{{CSP}}", csp)
    return page.replace("<!--{{DATA}}-->", block)


def export_html(run: RunData, out: str | os.PathLike[str]) -> Path:
    """Write the viewer with the whole run embedded: one file that opens from disk without a server or network."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_page(secrets.token_hex(16), data=run.as_bundle()), encoding="utf-8")
    tmp.replace(path)
    return path


class _Handler(BaseHTTPRequestHandler):
    server_version = "stepgym-view"

    def __init__(self, run: RunData, *args: Any, **kwargs: Any) -> None:
        self.run = run
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the URL, that is enough
        pass

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any, status: int = 200) -> None:
        self._send(
            status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8"
        )

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.headers.get("Host", "") not in (f"{HOST}:{port}", f"localhost:{port}"):
            self._json({"error": "forbidden host"}, 403)
            return
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            nonce = secrets.token_hex(16)
            page = render_page(nonce).encode("utf-8")
            csp = {"Content-Security-Policy": content_policy(nonce, offline=False)}
            self._send(200, page, "text/html; charset=utf-8", csp)
        elif url.path == "/api/meta":
            self._json(self.run.meta)
        elif url.path == "/api/index":
            self._json(self.run.index)
        elif url.path == "/api/group":
            gid = parse_qs(url.query).get("id", [""])[0]
            grp = self.run.groups.get(gid)
            if grp is None:
                self._json({"error": f"no group {gid!r}"}, 404)
            else:
                self._json(grp)
        else:
            self._json({"error": "not found"}, 404)


class ViewerServer:
    """The viewer over HTTP on 127.0.0.1 (``port=0``: a free port). Use as a context manager or start/stop."""

    def __init__(self, run: RunData, port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer((HOST, port), partial(_Handler, run))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.httpd.server_address[1]}/"

    def start(self) -> ViewerServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="stepgym-view", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> ViewerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
