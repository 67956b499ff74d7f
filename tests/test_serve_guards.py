"""``stepgym serve`` against clients that misbehave, on 127.0.0.1 (issue 52, item 5): silent and half-sent
connections are closed at their deadline, a connection flood past the cap is refused with a reason and the server
keeps answering, deeply nested JSON is an error answer, a live WebSocket session is not taken over without its
secret, a client leaving mid-body is one log line, a bad ``task_id`` is the client's error, ``bearer`` in lower case
is accepted, and an IPv6 address prints in brackets.

Every client here is bounded: a few sockets, short deadlines (``read_timeout_s`` under a second), and every wait
has a timeout that fails the test instead of hanging it. No test asserts how long anything took.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

import stepgym  # noqa: F401 - registers the envs
from stepgym.serve.protocol import ServeLimits, accept_backlog, connection_cap
from stepgym.serve.server import ServeConfig, ServerThread, url_of

TOY = "StepGym/CreditToy-v0"
TOY_KW = {"split": "valid", "n_tasks": 6}
WAIT_S = 30.0  # the most any single wait may take before the test fails


def _ws_url(url: str, query: str = "") -> str:
    return url.replace("http://", "ws://") + "/ws" + (f"?{query}" if query else "")


def _ask(ws: Any, kind: str, data: dict | None = None) -> dict[str, Any]:
    ws.send(json.dumps({"type": kind} if data is None else {"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=WAIT_S))


def _code(answer: dict[str, Any]) -> str | None:
    return answer["data"].get("code") if answer["type"] == "error" else None


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _raw(url: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", _port(url)), timeout=WAIT_S)
    return s


def _read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout fails the test)."""
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


@contextlib.contextmanager
def _server(**limits: Any) -> Iterator[ServerThread]:
    srv = ServerThread(ServeConfig(TOY, TOY_KW, port=0, limits=ServeLimits(**limits)))
    with srv:
        yield srv


def _serve_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "stepgym.serve"]


def _wait_for_line(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = [line for line in _serve_lines(caplog) if needle in line]
        if lines:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"no log line with {needle!r}: {_serve_lines(caplog)}")


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for r in caplog.records:
        assert r.exc_info is None and "Traceback" not in r.getMessage(), (r.name, r.getMessage())


# ---------------------------------------------------------------------------------------------------------------
# Read deadlines (slowloris)
# ---------------------------------------------------------------------------------------------------------------
def test_a_silent_connection_is_closed_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stepgym.serve")
    with _server(read_timeout_s=0.3) as srv, _raw(srv.url) as s:
        answer = _read_until_closed(s)  # nothing sent: the server closes it by itself
        assert answer.startswith(b"HTTP/1.1 408 ") and b"REQUEST_TIMEOUT" in answer, answer
        assert _wait_for_line(caplog, "no complete request head within 0.3 s")
    _no_traceback(caplog)


def test_a_trickled_request_head_does_not_extend_its_deadline() -> None:
    with _server(read_timeout_s=0.5) as srv, _raw(srv.url) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        closed = False
        for _ in range(600):  # one header byte every 50 ms: at most 30 s, long after the deadline
            try:
                s.sendall(b"X")
            except OSError:
                closed = True
                break
            s.settimeout(0.05)
            try:
                data = s.recv(65536)
            except TimeoutError:
                continue
            assert data == b"" or data.startswith(b"HTTP/1.1 408 "), data
            closed = True
            break
        assert closed, "the server kept a trickling connection open"
        assert httpx.get(srv.url + "/health", timeout=WAIT_S).status_code == 200


def test_a_half_sent_body_gets_408_and_is_closed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stepgym.serve")
    with _server(read_timeout_s=0.3) as srv, _raw(srv.url) as s:
        s.sendall(
            b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        s.sendall(b'{"seed": 1')
        answer = _read_until_closed(s)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer
        assert json.loads(body)["detail"]["code"] == "REQUEST_TIMEOUT"
        assert len(_wait_for_line(caplog, "did not arrive within 0.3 s")) == 1
        assert srv.manager.sessions == {}  # nothing was opened for it
    _no_traceback(caplog)


def test_a_client_leaving_mid_body_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with _server(read_timeout_s=20.0) as srv:
        with _raw(srv.url) as s:
            s.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            time.sleep(0.2)  # let the handler start reading the body (the line is logged either way)
        (line,) = _wait_for_line(caplog, "left before its body ended")
        assert "POST /reset" in line
        assert httpx.get(srv.url + "/health", timeout=WAIT_S).status_code == 200
    _no_traceback(caplog)


# ---------------------------------------------------------------------------------------------------------------
# Connection cap
# ---------------------------------------------------------------------------------------------------------------
def test_a_connection_flood_is_refused_past_the_cap_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stepgym.serve")
    cap = 6
    with _server(max_connections=cap, read_timeout_s=20.0) as srv:
        with contextlib.ExitStack() as stack:
            held = [stack.enter_context(_raw(srv.url)) for _ in range(cap)]  # silent: each holds its place
            for s in held:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # half a head: still in the server's hands
            deadline = time.monotonic() + WAIT_S
            refused = b""
            while time.monotonic() < deadline:  # the cap counts connections the server has accepted
                with _raw(srv.url) as extra:
                    refused = _read_until_closed(extra)
                if refused.startswith(b"HTTP/1.1 503 "):
                    break
                time.sleep(0.05)
            assert refused.startswith(b"HTTP/1.1 503 ") and b"CAPACITY_REACHED" in refused, refused
            assert f"{cap} connections are open".encode() in refused
        # the flood gone, the server answers again
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if httpx.get(srv.url + "/health", timeout=WAIT_S).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not recover after the flood"
            time.sleep(0.05)
    assert any("refused a connection" in line for line in _serve_lines(caplog))


def test_silent_connections_cannot_exhaust_the_server() -> None:
    """As many silent connections as the cap: each is closed at its deadline, so the server answers again."""
    cap = 6
    with _server(max_connections=cap, read_timeout_s=0.3) as srv, contextlib.ExitStack() as stack:
        held = [stack.enter_context(_raw(srv.url)) for _ in range(cap)]
        for s in held:
            assert _read_until_closed(s).startswith(b"HTTP/1.1 408 ")
        assert httpx.get(srv.url + "/health", timeout=WAIT_S).status_code == 200


def test_the_default_cap_leaves_file_descriptors_free() -> None:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    cap = connection_cap(ServeLimits())
    assert 8 <= cap <= 4096
    if soft != resource.RLIM_INFINITY and soft > 256:  # room for the cap, two accept bursts and the reserve
        assert cap + 2 * accept_backlog() + 64 <= soft
    assert connection_cap(ServeLimits(max_connections=7)) == 7
    with pytest.raises(ValueError, match="max_connections"):
        ServeLimits(max_connections=0)


# ---------------------------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------------------------
def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deep_json_is_an_error_frame_and_a_4xx(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stepgym.serve")
    with _server() as srv:
        with connect(_ws_url(srv.url)) as ws:
            for depth in (40, 200_000):  # over the limit of 32; far over Python's recursion limit
                ws.send('{"type": "step", "data": {"action": ' + _nested(depth) + "}}")
                answer = json.loads(ws.recv(timeout=WAIT_S))
                assert _code(answer) == "INVALID_JSON" and "deeper than" in answer["data"]["message"], answer
            ok = _ask(ws, "reset", {"seed": 1})  # the socket is still open and the session works
            assert ok["type"] == "observation"
            assert _code(_ask(ws, "step", {"action": [[["x"]]]})) == "VALIDATION_ERROR"  # shallow: parsed
            ws.send(json.dumps({"type": "close"}))
        for depth in (40, 200_000):
            r = httpx.post(
                srv.url + "/reset",
                content=('{"seed": ' + _nested(depth) + "}").encode(),
                headers={"content-type": "application/json"},
                timeout=WAIT_S,
            )
            assert r.status_code == 400 and r.json()["detail"]["code"] == "INVALID_JSON", r.text
    lines = [line for line in _serve_lines(caplog) if "deeper than" in line]
    assert len(lines) == 4  # one line per client error
    _no_traceback(caplog)


def test_a_bad_task_id_is_the_clients_error_not_an_env_crash(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stepgym.serve")
    with _server() as srv:
        with connect(_ws_url(srv.url)) as ws:
            answer = _ask(ws, "reset", {"seed": 0, "task_id": "no-such-task"})
            assert _code(answer) == "VALIDATION_ERROR" and "no-such-task" in answer["data"]["message"], answer
            assert "abort_cause" not in answer["data"]
            assert _code(_ask(ws, "step", {"action": "wait"})) == "NOT_RESET"
            assert _ask(ws, "reset", {"seed": 0})["type"] == "observation"
            ws.send(json.dumps({"type": "close"}))
        r = httpx.post(srv.url + "/reset", json={"seed": 0, "options": {"task_id": "nope"}}, timeout=WAIT_S)
        assert r.status_code == 422 and r.json()["detail"]["code"] == "VALIDATION_ERROR", r.text
        assert srv.manager.sessions == {}
    assert sum("VALIDATION_ERROR" in line for line in _serve_lines(caplog)) >= 2
    _no_traceback(caplog)


# ---------------------------------------------------------------------------------------------------------------
# Sessions and tokens
# ---------------------------------------------------------------------------------------------------------------
def test_a_live_session_is_not_taken_over_without_its_secret() -> None:
    with _server() as srv, connect(_ws_url(srv.url)) as owner:
        first = _ask(owner, "reset", {"seed": 5})["data"]
        sid, secret = first["metadata"]["session_id"], first["metadata"]["session_secret"]
        with connect(_ws_url(srv.url, f"session_id={sid}")) as intruder:
            answer = json.loads(intruder.recv(timeout=WAIT_S))
            assert (
                _code(answer) == "SESSION_ERROR" and "held by a live connection" in answer["data"]["message"]
            )
        with connect(_ws_url(srv.url, f"session_id={sid}&session_secret={'0' * 32}")) as wrong:
            assert _code(json.loads(wrong.recv(timeout=WAIT_S))) == "SESSION_ERROR"
        # the owner never noticed
        step = _ask(owner, "step", {"action": "go forward"})
        assert step["type"] == "observation" and step["data"]["observation"]["step_index"] == 1
        # with the secret (its own client, reconnecting while the old socket hangs) it is taken over
        with connect(_ws_url(srv.url, f"session_id={sid}&session_secret={secret}")) as again:
            st = _ask(again, "state")["data"]
            assert st["step_count"] == 1 and st["session_id"] == sid
            replaced = json.loads(owner.recv(timeout=WAIT_S))
            assert (
                _code(replaced) == "TIMEOUT" and "replaced by a new connection" in replaced["data"]["message"]
            )
            again.send(json.dumps({"type": "close"}))


def test_bearer_is_matched_case_insensitively() -> None:
    srv = ServerThread(ServeConfig(TOY, TOY_KW, port=0, token="s3cret"))
    with srv as url:
        for scheme in ("Bearer", "bearer", "BEARER"):
            r = httpx.get(url + "/stats", headers={"Authorization": f"{scheme} s3cret"}, timeout=WAIT_S)
            assert r.status_code == 200, (scheme, r.text)
        assert (
            httpx.get(url + "/stats", headers={"Authorization": "bearer S3CRET"}, timeout=WAIT_S).status_code
            == 401
        )
        assert (
            httpx.get(url + "/stats", headers={"Authorization": "Basic s3cret"}, timeout=WAIT_S).status_code
            == 401
        )
        with connect(_ws_url(url), additional_headers={"Authorization": "bearer s3cret"}) as ws:
            assert _ask(ws, "reset", {"seed": 0})["type"] == "observation"
            ws.send(json.dumps({"type": "close"}))


# ---------------------------------------------------------------------------------------------------------------
# IPv6
# ---------------------------------------------------------------------------------------------------------------
def test_urls_bracket_ipv6_addresses() -> None:
    assert url_of("::1", 8000) == "http://[::1]:8000"
    assert url_of("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert url_of("[::1]", 80, "ws") == "ws://[::1]:80"


def _ipv6_loopback() -> str:
    """'' when ::1 can be bound here, else why not."""
    if not socket.has_ipv6:
        return "this Python was built without IPv6"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"::1 cannot be bound here ({exc.strerror or exc})"
    return ""


def test_a_server_on_ipv6_loopback_prints_a_bracketed_url() -> None:
    why = _ipv6_loopback()
    if why:
        pytest.skip(why)
    srv = ServerThread(ServeConfig(TOY, TOY_KW, host="::1", port=0))
    with srv as url:
        assert url.startswith("http://[::1]:"), url
        assert httpx.get(url + "/health", timeout=WAIT_S).json() == {"status": "healthy"}
