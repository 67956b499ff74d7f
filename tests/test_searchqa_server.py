"""The retrieval server (Search-R1's /retrieve): concurrent clients, bad requests, a killed or hung server."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.searchqa.client import HTTPRetriever, wait_until_healthy
from stepgym.envs.searchqa.evaluation import load_search_log
from stepgym.envs.searchqa.factory import make_retriever
from stepgym.envs.searchqa.retrievers import MAX_QUERIES, Hit, Retriever
from stepgym.envs.searchqa.server import MAX_BODY_BYTES, MAX_RESULTS, start_server
from stepgym.errors import ServiceUnavailableError

pytest.importorskip("bm25s")
pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def bm25(data_dir: Path) -> Retriever:
    return make_retriever("bm25")


@pytest.fixture(scope="module")
def server(bm25: Retriever) -> Iterator[Any]:
    srv = start_server(bm25)
    yield srv
    srv.stop()


def test_health(server: Any, bm25: Any) -> None:
    info = wait_until_healthy(server.url, deadline=10)
    assert info["status"] == "ok" and info["backend"] == "bm25"
    assert info["corpus_sha256"] == bm25.corpus.sha256 and info["num_passages"] == len(bm25.corpus)


def test_concurrent_clients_match_in_process(server: Any, bm25: Retriever, data_dir: Path) -> None:
    queries = [r["query"] for r in load_search_log()[:800]]
    expected = bm25.search(queries, 3)
    client = HTTPRetriever(server.retrieve_url, deadline=60)
    got: dict[int, list[Hit]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(t * 100, (t + 1) * 100):
                got[i] = client.search([queries[i]], 3)[0]
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not errors, errors[:3]
    assert len(got) == 800
    for i in range(800):
        assert got[i] == expected[i], f"query {i} ({queries[i]!r}) differs over HTTP"
    assert client.search(queries[:50], 5) == bm25.search(queries[:50], 5)  # a batch in one request


def _raw(
    server: Any, method: str, path: str, body: bytes | None = None, headers: dict | None = None
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.server_address[0], server.server_address[1], timeout=10)
    try:
        conn.putrequest(method, path)
        for k, v in (
            headers
            if headers is not None
            else {"Content-Type": "application/json", "Content-Length": str(len(body or b""))}
        ).items():
            conn.putheader(k, v)
        conn.endheaders()
        if body:
            conn.send(body)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data)
    finally:
        conn.close()


def _post(server: Any, payload: Any) -> tuple[int, Any]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return _raw(server, "POST", "/retrieve", body)


def test_search_r1_response_shape(server: Any) -> None:
    status, out = _post(
        server, {"queries": ["nobel prize physics", "citibank founded"], "topk": 2, "return_scores": True}
    )
    assert status == 200 and len(out["result"]) == 2 and len(out["result"][0]) == 2
    hit = out["result"][0][0]
    assert set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"}
    status, out = _post(server, {"queries": ["nobel prize physics"]})  # defaults: topk 3, bare documents
    assert status == 200 and len(out["result"][0]) == 3 and set(out["result"][0][0]) == {"id", "contents"}


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"\xff\xfe", 400, "not valid JSON"),
        ([1, 2], 400, "JSON object"),
        ({"topk": 3}, 400, 'missing "queries"'),
        ({"queries": "just one string"}, 400, "list of strings"),
        ({"queries": ["ok", 7]}, 400, "queries[1] must be a string"),
        ({"queries": ["q"], "topk": -1}, 400, "topk must be between"),
        ({"queries": ["q"], "topk": "3"}, 400, "topk must be an integer"),
        ({"queries": ["q"], "topk": 100000}, 400, "topk must be between"),
        ({"queries": ["q"], "return_scores": "yes"}, 400, "return_scores"),
        ({"queries": ["q"], "top_k": 3}, 400, "unknown fields"),
        ({"queries": ["q"] * (MAX_QUERIES + 1)}, 400, "too many queries"),
        ({"queries": ["x" * 5000]}, 400, "characters long"),
    ],
)
def test_bad_requests_get_4xx(server: Any, payload: Any, status: int, message: str) -> None:
    got, out = _post(server, payload)
    assert got == status and message in out["error"]


def test_bad_methods_paths_and_headers(server: Any) -> None:
    assert _raw(server, "GET", "/retrieve")[0] == 405
    assert _raw(server, "GET", "/nope")[0] == 404
    assert _raw(server, "POST", "/nope", b"{}")[0] == 404
    assert _raw(server, "PUT", "/retrieve", b"{}")[0] == 405
    assert _raw(server, "POST", "/retrieve", headers={"Content-Type": "application/json"})[0] == 411
    assert _raw(server, "POST", "/retrieve", headers={"Content-Length": str(MAX_BODY_BYTES + 1)})[0] == 413
    assert (
        _raw(
            server,
            "POST",
            "/retrieve",
            b'{"queries": ["q"]}',
            {"Content-Type": "text/plain", "Content-Length": "18"},
        )[0]
        == 415
    )
    with pytest.raises(ValueError, match=r"rejected the request \(400\)"):
        HTTPRetriever(server.url)._request("POST", "/retrieve", {"queries": 3})
    assert _raw(server, "GET", "/health")[0] == 200  # still serving after all that


def _deep(n: int) -> bytes:
    return b'{"queries": ' + b"[" * n + b"]" * n + b"}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(_deep(100_000), "nested too deeply", id="nested-100k"),
        pytest.param(
            b'{"queries": ["q"], "topk": ' + b"9" * 5000 + b"}", "not valid JSON", id="topk-5000-digits"
        ),
        pytest.param(
            b'{"queries": ["q"], "topk": ' + b"9" * 4000 + b"}", "topk must be between", id="topk-4000-digits"
        ),
        pytest.param(b'{"queries": ["q"], "topk": 1e999}', "topk must be an integer", id="topk-inf"),
        pytest.param(b'{"queries": ["q"], "topk": NaN}', "topk must be an integer", id="topk-nan"),
        pytest.param(b'{"queries": ["q"], "topk": [3]}', "topk must be an integer", id="topk-list"),
        pytest.param(b'{"queries": ["q"], "topk": true}', "topk must be an integer", id="topk-bool"),
        pytest.param(b'{"queries": [["q"]]}', "queries[0] must be a string", id="query-list"),
        pytest.param(b'{"queries": {"q": 1}}', "list of strings", id="queries-object"),
        pytest.param(b'{"queries": null}', "list of strings", id="queries-null"),
        pytest.param(
            b'{"queries": ["q"], "return_scores": ' + b"[" * 500 + b"]" * 500 + b"}",
            "return_scores",
            id="scores-deep",
        ),
        pytest.param(b'"just a string"', "JSON object", id="string-body"),
        pytest.param(b"", "not valid JSON", id="empty-body"),
        pytest.param(
            b'{"queries": ["\\ud800"], "' + b"x" * 5000 + b'": 1}',
            "unknown fields",
            id="long-field-surrogate",
        ),
    ],
)
def test_malformed_bodies_get_a_400_with_a_json_error(server: Any, body: bytes, message: str) -> None:
    status, out = _post(server, body)
    assert status == 400 and message in out["error"] and len(out["error"]) < 1000
    assert _raw(server, "GET", "/health")[0] == 200


def test_bad_content_length_gets_a_400(server: Any) -> None:
    for length in ("\u00b2", "-1", "1" * 40, "3 "):
        status, out = _raw(server, "POST", "/retrieve", b"{}", {"Content-Length": length})
        assert status == 400 and "Content-Length" in out["error"], length


def test_work_per_request_is_bounded(bm25: Retriever) -> None:
    srv = start_server(bm25, max_results=100)
    try:
        assert _post(srv, {"queries": ["q"] * 25, "topk": 4})[0] == 200
        status, out = _post(srv, {"queries": ["q"] * 26, "topk": 4})
        assert (
            status == 413 and "26 queries x topk 4 = 104" in out["error"] and "limit is 100" in out["error"]
        )
        client = HTTPRetriever(srv.url, deadline=60)
        with pytest.raises(ValueError, match=r"\(413\).*limit is 100 per request"):
            client.search(["q"] * 26, 4)
        assert [len(r) for r in client.search(["nobel prize"] * 10, 10)] == [10] * 10  # still usable
    finally:
        srv.stop()
    assert MAX_RESULTS < 512 * 1000  # the default refuses the request that took 1.4 GB


def test_client_reads_the_413_for_a_body_over_the_limit(bm25: Retriever) -> None:
    """The server answers an oversized body without reading it; the client must see that answer, not a reset."""
    srv = start_server(bm25, max_body_bytes=50_000)
    try:
        client = HTTPRetriever(srv.url, deadline=60)
        with pytest.raises(ValueError, match=r"\(413\).*max_body_bytes"):
            client.search(["word " * 800] * 1000, 1)  # ~4 MB of JSON
        assert len(client.search(["nobel prize"], 1)[0]) == 1
    finally:
        srv.stop()


def test_client_retries_busy_answers_but_never_a_refusal() -> None:
    """429/503 mean "later": retried until the deadline. Any other 4xx is final: one request, a ValueError."""
    script = {"/busy": [429, 503, 200], "/refuse": [400, 200]}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            status = script[self.path.removesuffix("/retrieve")].pop(0)
            body = json.dumps({"result": [[]]} if status == 200 else {"error": f"status {status}"}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        assert HTTPRetriever(f"{base}/busy", deadline=60).search(["q"]) == [[]]
        with pytest.raises(ValueError, match=r"rejected the request \(400\): status 400"):
            HTTPRetriever(f"{base}/refuse", deadline=60).search(["q"])
        assert seen == ["/busy/retrieve"] * 3 + ["/refuse/retrieve"]
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Broken(Retriever):
    backend = "broken"

    def search(self, queries: Any, topk: int = 3) -> list[list[Hit]]:
        raise RuntimeError("index file vanished")


def test_retriever_failure_is_a_500_and_a_clear_client_error() -> None:
    srv = start_server(_Broken())
    try:
        with pytest.raises(ServiceUnavailableError, match=r"failed \(500\).*index file vanished"):
            HTTPRetriever(srv.url, deadline=5).search(["q"])
    finally:
        srv.stop()


def test_env_over_http_equals_in_process(server: Any, data_dir: Path) -> None:
    actions = ["<search>{q}</search>", "<search>{q} year</search>", "<answer>x</answer>"]

    def rollout(retriever: Any) -> list:
        env = gym.make("StepGym/SearchQA-v0", dataset="bamboogle", retriever=retriever).unwrapped
        trace = []
        for i in range(3):
            obs, info = env.reset(options={"task_index": i})
            trace.append((obs, info))
            for a in actions:
                obs, r, term, trunc, info = env.step(a.format(q=info[schema.GOAL]))
                trace.append((obs, r, term, trunc, info))
        env.close()
        return trace

    assert rollout(server.url) == rollout("bm25")


def _with_guard(fn: Callable[[], Any], limit: float) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it has not returned after ``limit`` s."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"the call hung for more than {limit} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _spawn_server(port: int = 0) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "stepgym.cli", "retriever", "serve", "--backend", "bm25"),
            *("--port", str(port), "--max-results", "600"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def _read_url(proc: subprocess.Popen, deadline: float = 120.0) -> str:
    end = time.monotonic() + deadline
    assert proc.stdout is not None
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
        if ready:
            line = proc.stdout.readline()
            if line.startswith("serving"):
                return line.split(" on ", 1)[1].split("/retrieve", 1)[0]
            if not line and proc.poll() is not None:
                break
    proc.kill()
    raise AssertionError(f"server did not start: {proc.stderr.read() if proc.stderr else ''}")


def test_killed_server_fails_clearly_then_recovers(data_dir: Path) -> None:
    proc = _spawn_server()
    procs = [proc]
    try:
        url = _read_url(proc)
        wait_until_healthy(url, deadline=60)
        env = gym.make(
            "StepGym/SearchQA-v0", dataset="nq", retriever=url, deadline=2.0, timeout=1.0
        ).unwrapped
        _, info = env.reset(options={"task_index": 1})
        obs, *_ = env.step(f"<search>{info[schema.GOAL]}</search>")
        assert obs.startswith("\n\n<information>Doc 1")
        with pytest.raises(
            ValueError, match=r"\(413\).*201 queries x topk 3 = 603 passages; the limit is 600"
        ):
            HTTPRetriever(url).search(["q"] * 201, 3)  # `--max-results`, refused at once (no retries)
        proc.kill()
        proc.wait(timeout=30)
        t0 = time.monotonic()
        with pytest.raises(
            ServiceUnavailableError, match=r"did not answer within 2 s.*stepgym retriever serve"
        ):
            _with_guard(lambda: env.step("<search>tombstone</search>"), limit=60)
        assert time.monotonic() - t0 >= 2.0  # it retried until the deadline, not less

        # Recovery: a server restarted on the same port within the deadline is picked up by the retries.
        port = int(url.rsplit(":", 1)[1])
        procs.append(_spawn_server(port))  # not waited for: the client's retries must find it
        patient = gym.make("StepGym/SearchQA-v0", dataset="nq", retriever=url, deadline=120.0).unwrapped
        _with_guard(
            lambda: patient.reset(options={"task_index": 1}), limit=180
        )  # the oracle searches already
        obs, *_ = _with_guard(lambda: patient.step("<search>tombstone bat masterson</search>"), limit=180)
        assert obs.startswith("\n\n<information>Doc 1")
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


def test_hung_server_hits_the_deadline() -> None:
    sock = socket.create_server(("127.0.0.1", 0))  # accepts TCP connections (backlog) but never answers
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        client = HTTPRetriever(url, timeout=0.3, deadline=1.0)
        with pytest.raises(ServiceUnavailableError, match="did not answer within 1 s"):
            _with_guard(lambda: client.search(["q"]), limit=30)
    finally:
        sock.close()


def test_unreachable_url_is_a_clear_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = HTTPRetriever(f"http://127.0.0.1:{port}/retrieve", timeout=0.2, deadline=0.5)
    with pytest.raises(ServiceUnavailableError, match=f"127.0.0.1:{port}/retrieve did not answer"):
        client.search(["q"])
    with pytest.raises(ValueError, match="http://host:port"):
        HTTPRetriever("ftp://x")


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN (what a killed client or a dropped network link leaves)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _read_answer(sock: socket.socket) -> bytes:
    """One whole HTTP answer (headers, then Content-Length bytes of body) from a keep-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")).split(b":")[1]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_client_resetting_the_connection_is_no_traceback_and_the_server_serves_on(
    bm25: Retriever, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client that resets its connection (between requests, before reading an answer, mid-body) is nobody to
    answer: nothing on stderr, and the next client is served."""
    srv = start_server(bm25)
    try:
        host, port = srv.server_address[:2]
        started = set(threading.enumerate())
        health = f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        for _ in range(3):
            idle = socket.create_connection((host, port), timeout=10)  # reset while the server waits for more
            idle.sendall(health)
            assert _read_answer(idle).startswith(b"HTTP/1.1 200")
            _reset(idle)
            eager = socket.create_connection((host, port), timeout=10)  # reset before the answer is read
            eager.sendall(health * 20)
            _reset(eager)
            cut = socket.create_connection((host, port), timeout=10)  # reset halfway through a body
            cut.sendall(b"POST /retrieve HTTP/1.1\r\nContent-Length: 1000\r\n\r\n" + b"{" * 10)
            _reset(cut)
        client = HTTPRetriever(srv.retrieve_url, deadline=30)
        assert len(client.search(["nobel prize"], 2)[0]) == 2  # accepted after every reset connection
        client.close()
        for thread in set(threading.enumerate()) - started:  # each reset connection's handler has finished
            thread.join(timeout=30)
            assert not thread.is_alive(), thread
    finally:
        srv.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err and "ConnectionReset" not in err, err
