"""``stepgym serve`` (stepgym.serve) with real clients on 127.0.0.1: the ``websockets`` client speaking OpenEnv's
messages, ``httpx`` on the HTTP endpoints, and the ``stepgym serve`` command in a subprocess that is killed and
restarted mid-episode. OpenEnv's own client (and TRL through it) is tested in tests/test_serve_openenv.py, run by
scripts/test_openenv.sh in a virtualenv of its own.

What is checked: the served env answers what the env in-process answers (observations, per-step rewards, every
annotation) on held-out seeds; seeds reproduce across servers; every bad input gets its own error code while the
session and the other sessions keep working; capacity, resume, reaping, tokens and request bounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import pytest
from websockets.sync.client import connect

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.errors import StepGymError
from stepgym.serve.protocol import ServeLimits, to_json
from stepgym.serve.server import ServeConfig, ServerThread

REPO = Path(__file__).resolve().parents[1]
TOY = "StepGym/CreditToy-v0"
TOY_KW = {"split": "valid", "n_tasks": 6}
HELD_OUT = (1001, 1002, 1003)  # seeds used nowhere else in the tests


def _ws_url(url: str, sid: str | None = None) -> str:
    return url.replace("http://", "ws://") + "/ws" + (f"?session_id={sid}" if sid else "")


def _ask(ws: Any, kind: str, data: dict | None = None) -> dict[str, Any]:
    msg = {"type": kind} if data is None else {"type": kind, "data": data}
    ws.send(json.dumps(msg))
    return json.loads(ws.recv(timeout=60))


def _code(answer: dict[str, Any]) -> str | None:
    return answer["data"].get("code") if answer["type"] == "error" else None


def _expert_episode(env_id: str, kwargs: dict, seed: int, max_steps: int = 60) -> list[tuple]:
    """The env in-process played by its expert: [(obs, None, info), (obs, reward, term, trunc, info), ...]."""
    env = gym.make(env_id, **kwargs)
    obs, info = env.reset(seed=seed)
    out: list[tuple] = [(obs, to_json(info))]
    for _ in range(max_steps):
        a = info.get(schema.EXPERT_ACTION) or "wait"
        obs, r, term, trunc, info = env.step(a)
        out.append((a, obs, float(r), bool(term), bool(trunc), to_json(info)))
        if term or trunc:
            break
    env.close()
    return out


def _served_episode(url: str, seed: int, actions: list[str]) -> list[tuple]:
    with connect(_ws_url(url)) as ws:
        r = _ask(ws, "reset", {"seed": seed})["data"]
        out: list[tuple] = [(r["observation"]["text"], r["observation"]["info"])]
        for a in actions:
            d = _ask(ws, "step", {"action": a})["data"]
            o = d["observation"]
            out.append((a, o["text"], d["reward"], o["terminated"], o["truncated"], o["info"]))
        _ask_close(ws)
    return out


def _ask_close(ws: Any) -> None:
    ws.send(json.dumps({"type": "close"}))


@pytest.fixture(scope="module")
def toy() -> Iterator[ServerThread]:
    limits = ServeLimits(max_sessions=4, grace_s=60.0)
    srv = ServerThread(ServeConfig(TOY, TOY_KW, port=0, limits=limits))
    with srv:
        yield srv


def test_served_toy_equals_in_process_on_held_out_seeds(toy) -> None:
    for seed in HELD_OUT:
        local = _expert_episode(TOY, TOY_KW, seed)
        served = _served_episode(toy.url, seed, [s[0] for s in local[1:]])
        assert served == local
        assert local[-1][3] and local[-1][5][schema.WON] is True  # the expert won: a whole episode compared
        assert schema.STATE_KEY in served[1][-1] and schema.ADMISSIBLE_ACTIONS in served[1][-1]


def test_observation_payload_has_openenv_shape_and_session(toy) -> None:
    with connect(_ws_url(toy.url)) as ws:
        r = _ask(ws, "reset", {"seed": 7})
        assert r["type"] == "observation"
        d = r["data"]
        assert set(d) == {"observation", "reward", "done", "metadata"}
        assert d["reward"] is None and d["done"] is False
        sid = d["metadata"]["session_id"]
        assert (
            len(sid) == 32 and d["observation"]["session_id"] == sid and d["observation"]["step_index"] == 0
        )
        st = _ask(ws, "state")
        assert st["type"] == "state" and st["data"]["step_count"] == 0 and st["data"]["seed"] == 7
        _ask_close(ws)


def test_seeds_reproduce_across_servers(toy) -> None:
    other = ServerThread(ServeConfig(TOY, TOY_KW, port=0))
    with other:
        a = _served_episode(toy.url, 1004, ["go forward", "wait"])
        b = _served_episode(other.url, 1004, ["go forward", "wait"])
    assert a == b
    c = _served_episode(toy.url, 1005, ["go forward", "wait"])
    assert c[0][0] != a[0][0] or c[0][1][schema.TASK_ID] != a[0][1][schema.TASK_ID]  # the seed matters


def test_bad_input_gets_clear_errors_and_the_session_keeps_working(toy) -> None:
    with connect(_ws_url(toy.url)) as ws, connect(_ws_url(toy.url)) as other:
        assert _ask(other, "reset", {"seed": 1})["type"] == "observation"
        assert _code(_ask(ws, "step", {"action": "wait"})) == "NOT_RESET"
        ws.send("{not json")
        assert _code(json.loads(ws.recv(timeout=30))) == "INVALID_JSON"
        ws.send("[1, 2]")
        assert _code(json.loads(ws.recv(timeout=30))) == "INVALID_JSON"
        assert _code(_ask(ws, "jump", {})) == "UNKNOWN_TYPE"
        assert _ask(ws, "reset", {"seed": 2})["type"] == "observation"
        for bad in ({"action": 3}, {"action": ["go"]}, {}, {"action": "wait", "extra": 1}):
            assert _code(_ask(ws, "step", bad)) == "VALIDATION_ERROR", bad
        huge = _ask(ws, "step", {"action": "x" * (10 * 1024 * 1024)})  # 10 MB: over the 1 MiB default
        assert _code(huge) == "MESSAGE_TOO_LARGE" and "limit" in huge["data"]["message"]
        long = _ask(ws, "step", {"action": "x" * 20_000})  # under the message limit, over the action limit
        assert _code(long) == "MESSAGE_TOO_LARGE"
        assert _code(_ask(ws, "reset", {"seed": -1})) == "VALIDATION_ERROR"
        assert _code(_ask(ws, "reset", {"seed": 1, "bogus": 1})) == "VALIDATION_ERROR"
        # still the same episode, and the other session never noticed
        ok = _ask(ws, "step", {"action": "go forward"})
        assert ok["type"] == "observation" and ok["data"]["observation"]["step_index"] == 1
        assert _ask(other, "step", {"action": "wait"})["type"] == "observation"
        while not ok["data"]["done"]:
            ok = _ask(ws, "step", {"action": "wait"})
        assert _code(_ask(ws, "step", {"action": "wait"})) == "EPISODE_OVER"
        assert _ask(ws, "reset", {"seed": 3})["type"] == "observation"  # a new episode after the end
        _ask_close(ws)
        _ask_close(other)


def test_server_full_answers_at_once_and_frees_on_close(toy) -> None:
    m = toy.manager
    before = len(m.sessions)
    stack = contextlib.ExitStack()
    held = [stack.enter_context(connect(_ws_url(toy.url))) for _ in range(4 - before)]
    with stack:
        for ws in held:
            assert _ask(ws, "reset", {"seed": 0})["type"] == "observation"
        with connect(_ws_url(toy.url)) as extra:
            answer = json.loads(extra.recv(timeout=30))  # the server speaks first: refused, no hang
            assert _code(answer) == "CAPACITY_REACHED" and "server full" in answer["data"]["message"]
        _ask_close(held[0])
        held[0].close()
        deadline = time.monotonic() + 30
        while len(m.sessions) > 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        with connect(_ws_url(toy.url)) as again:
            assert _ask(again, "reset", {"seed": 0})["type"] == "observation"
            _ask_close(again)
        for ws in held[1:]:
            _ask_close(ws)
    _wait_sessions(m, before)


def _wait_sessions(manager: Any, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(manager.sessions) != n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(manager.sessions) == n


def test_reconnect_with_session_id_resumes_the_episode(toy) -> None:
    local = _expert_episode(TOY, TOY_KW, 1006)
    actions = [s[0] for s in local[1:]]
    with connect(_ws_url(toy.url)) as ws:  # leaves without "close": the session waits
        sid = _ask(ws, "reset", {"seed": 1006})["data"]["metadata"]["session_id"]
        first = _ask(ws, "step", {"action": actions[0]})["data"]
    with connect(_ws_url(toy.url, sid)) as again:
        st = _ask(again, "state")["data"]
        assert st["step_count"] == 1 and st["last"] == first
        rest = [_ask(again, "step", {"action": a})["data"] for a in actions[1:]]
        assert [(d["observation"]["text"], d["reward"], d["observation"]["info"]) for d in rest] == [
            (s[1], s[2], s[5]) for s in local[2:]
        ]
        _ask_close(again)
    with connect(_ws_url(toy.url, sid)) as gone:  # closed: not resumable
        assert _code(json.loads(gone.recv(timeout=30))) == "SESSION_ERROR"
    with connect(_ws_url(toy.url, "../../etc/passwd")) as bad:
        assert _code(json.loads(bad.recv(timeout=30))) == "SESSION_ERROR"


def test_a_client_vanishing_mid_step_leaves_a_resumable_session(toy) -> None:
    with connect(_ws_url(toy.url)) as ws:
        sid = _ask(ws, "reset", {"seed": 1007})["data"]["metadata"]["session_id"]
        ws.send(json.dumps({"type": "step", "data": {"action": "go forward"}}))
    # gone before the answer
    with connect(_ws_url(toy.url, sid)) as again:
        st = _ask(again, "state")["data"]
        assert st["step_count"] in (0, 1)  # the step was applied or not; the state says which
        if st["step_count"] == 1:
            assert st["last"]["observation"]["step_index"] == 1
        _ask_close(again)


def test_reaper_ends_sessions_past_grace_and_idle() -> None:
    limits = ServeLimits(grace_s=30.0, idle_timeout_s=60.0)
    srv = ServerThread(ServeConfig(TOY, TOY_KW, port=0, limits=limits))
    with srv as url:
        m = srv.manager
        with connect(_ws_url(url)) as ws:
            sid = _ask(ws, "reset", {"seed": 0})["data"]["metadata"]["session_id"]
        _wait_detached(m, sid)
        assert m.reap(time.monotonic() + 10) == 0  # inside the grace period
        assert m.reap(time.monotonic() + 31) == 1 and sid not in m.sessions and m.pool.in_use == 0
        r = httpx.post(url + "/reset", json={"seed": 0}, timeout=30).json()  # an HTTP session: idle timeout
        assert m.reap(time.monotonic() + 61) == 1 and r["metadata"]["session_id"] not in m.sessions


def _wait_detached(m: Any, sid: str) -> None:
    deadline = time.monotonic() + 30
    while m.sessions[sid].attached and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not m.sessions[sid].attached


def test_idle_connection_is_closed_with_a_message() -> None:
    limits = ServeLimits(idle_timeout_s=0.3)
    srv = ServerThread(ServeConfig(TOY, TOY_KW, port=0, limits=limits))
    with srv as url, connect(_ws_url(url)) as ws:
        assert _ask(ws, "reset", {"seed": 0})["type"] == "observation"
        answer = json.loads(ws.recv(timeout=30))  # sent by the server on its own
        # the connection's idle timer or the session sweep, whichever fires first, says why, with the limit
        message = answer["data"]["message"]
        assert _code(answer) == "TIMEOUT" and (
            "no message for" in message or "idle for more than 0.3 s" in message
        )
        _wait_sessions(srv.manager, 0)


def test_token_is_required_when_set_and_exposed_addresses_need_one() -> None:
    with pytest.raises(StepGymError, match="--token"):
        ServerThread(ServeConfig(TOY, TOY_KW, host="0.0.0.0", port=0))
    srv = ServerThread(ServeConfig(TOY, TOY_KW, port=0, token="s3cret"))
    with srv as url:
        with connect(_ws_url(url)) as ws:
            assert _code(json.loads(ws.recv(timeout=30))) == "UNAUTHORIZED"
        with connect(_ws_url(url), additional_headers={"Authorization": "Bearer wrong"}) as ws:
            assert _code(json.loads(ws.recv(timeout=30))) == "UNAUTHORIZED"
        with connect(_ws_url(url), additional_headers={"Authorization": "Bearer s3cret"}) as ws:
            assert _ask(ws, "reset", {"seed": 0})["type"] == "observation"
            _ask_close(ws)
        assert httpx.post(url + "/reset", json={}, timeout=30).status_code == 401
        assert httpx.get(url + "/health", timeout=30).status_code == 200  # health needs no token


def test_a_failed_http_reset_leaves_no_session(toy) -> None:
    before = len(toy.manager.sessions)
    for bad in ({"seed": "x"}, {"seed": -1}, {"colour": "red"}, {"options": 3}):  # more than max_sessions (4)
        r = httpx.post(toy.url + "/reset", json=bad, timeout=30)
        assert r.status_code in (400, 422), r.text
    for _ in range(2):
        assert httpx.post(toy.url + "/reset", json={"seed": "x"}, timeout=30).status_code == 422
    assert len(toy.manager.sessions) == before  # nothing opened for a reset that failed
    r = httpx.post(toy.url + "/reset", json={"seed": 1}, timeout=30)
    assert r.status_code == 200  # and the server is not full of them
    httpx.post(toy.url + "/close", json={"session_id": r.json()["metadata"]["session_id"]}, timeout=30)


def test_http_endpoints(toy) -> None:
    u = toy.url
    assert httpx.get(u + "/health", timeout=30).json() == {"status": "healthy"}
    assert httpx.get(u + "/metadata", timeout=30).json()["name"] == TOY
    assert set(httpx.get(u + "/schema", timeout=30).json()) == {"action", "observation", "state"}
    r = httpx.post(u + "/reset", json={"seed": 1008}, timeout=30).json()
    sid = r["metadata"]["session_id"]
    local = _expert_episode(TOY, TOY_KW, 1008)
    assert (r["observation"]["text"], r["observation"]["info"]) == local[0]
    s = httpx.post(
        u + "/step", json={"action": {"action": local[1][0]}, "session_id": sid}, timeout=30
    ).json()
    assert (s["observation"]["text"], s["reward"], s["observation"]["info"]) == (
        local[1][1],
        local[1][2],
        local[1][5],
    )
    assert httpx.get(u + "/state", params={"session_id": sid}, timeout=30).json()["step_count"] == 1
    bad = httpx.post(u + "/step", content=b"{nope", timeout=30)
    assert bad.status_code == 400 and bad.json()["detail"]["code"] == "INVALID_JSON"
    big = httpx.post(u + "/step", content=b"x" * (2 << 20), timeout=30)
    assert big.status_code == 413
    wrong = httpx.post(u + "/step", json={"action": {"action": 1}, "session_id": sid}, timeout=30)
    assert wrong.status_code == 422
    assert (
        httpx.post(
            u + "/step", json={"action": {"action": "wait"}, "session_id": "f" * 32}, timeout=30
        ).status_code
        == 404
    )
    assert httpx.post(u + "/close", json={"session_id": sid}, timeout=30).status_code == 200
    assert httpx.get(u + "/state", params={"session_id": sid}, timeout=30).status_code == 404


# ---------------------------------------------------------------------------------------------------------------
# The command: killed and restarted mid-episode
# ---------------------------------------------------------------------------------------------------------------
def _start_cli(state_dir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    kwargs = [f"--env-kwarg={k}={json.dumps(v)}" for k, v in TOY_KW.items()]
    cmd = [
        sys.executable,
        "-m",
        "stepgym.cli",
        "serve",
        TOY,
        *kwargs,
        "--port",
        "0",
        "--state-dir",
        str(state_dir),
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()  # "stepgym serve: ... at http://127.0.0.1:PORT (...)"
    if " at http://" not in line:
        proc.kill()
        raise AssertionError(f"server did not start: {line!r} {proc.stderr.read()}")
    url = line.split(" at ", 1)[1].split(" ", 1)[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("server never became healthy")


def test_killed_and_restarted_server_resumes_from_its_journal(tmp_path: Path) -> None:
    local = _expert_episode(TOY, TOY_KW, 1009)
    actions = [s[0] for s in local[1:]]
    assert len(actions) >= 3
    proc, url = _start_cli(tmp_path)
    try:
        with connect(_ws_url(url)) as ws:
            sid = _ask(ws, "reset", {"seed": 1009})["data"]["metadata"]["session_id"]
            for a in actions[:2]:
                _ask(ws, "step", {"action": a})
            proc.send_signal(signal.SIGKILL)  # no shutdown at all
            proc.wait(30)
    finally:
        proc.kill()
    assert [p.name for p in tmp_path.iterdir()] == [f"{sid}.json"]
    proc2, url2 = _start_cli(tmp_path)
    try:
        with connect(_ws_url(url2, sid)) as ws:
            assert _ask(ws, "state")["data"]["step_count"] == 2
            rest = [_ask(ws, "step", {"action": a})["data"] for a in actions[2:]]
            got = [(d["observation"]["text"], d["reward"], d["observation"]["info"]) for d in rest]
            assert got == [(s[1], s[2], s[5]) for s in local[3:]]
            _ask_close(ws)
        deadline = time.monotonic() + 30
        while any(tmp_path.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(tmp_path.iterdir())  # closed: its journal is gone, no temporary file left
    finally:
        proc2.send_signal(signal.SIGINT)
        proc2.wait(30)


def test_journal_of_another_env_is_refused(tmp_path: Path) -> None:
    proc, url = _start_cli(tmp_path)
    try:
        with connect(_ws_url(url)) as ws:
            sid = _ask(ws, "reset", {"seed": 1})["data"]["metadata"]["session_id"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    proc2, url2 = _start_cli(tmp_path, "--env-kwarg", "n_rooms=3")  # another env configuration
    try:
        with connect(_ws_url(url2, sid)) as ws:
            answer = json.loads(ws.recv(timeout=30))
            assert _code(answer) == "SESSION_ERROR" and "another env" in answer["data"]["message"]
    finally:
        proc2.send_signal(signal.SIGINT)
        proc2.wait(30)


class HangOn(gym.Wrapper):
    """An env whose step never ends on the action ``hang`` (a stuck engine), importable by worker processes; the
    action ``retriever down`` fails as a dead retrieval server does."""

    def step(self, action):
        if action == "hang":
            time.sleep(3600)
        if action == "retriever down":
            from stepgym.errors import RetrieverUnavailableError

            raise RetrieverUnavailableError("retrieval server http://127.0.0.1:9 did not answer")
        return self.env.step(action)


def test_an_env_failure_is_an_aborted_episode_with_its_cause_never_a_reward() -> None:
    cfg = ServeConfig(TOY, TOY_KW, wrappers=(HangOn,), port=0)
    with ServerThread(cfg) as url:
        with connect(_ws_url(url)) as ws:
            assert _ask(ws, "reset", {"seed": 1011})["type"] == "observation"
            answer = _ask(ws, "step", {"action": "retriever down"})
            assert answer["type"] == "error" and _code(answer) == "EPISODE_ABORTED"
            assert answer["data"]["abort_cause"] == "retriever_unavailable"
            assert _code(_ask(ws, "step", {"action": "wait"})) == "NOT_RESET"
            _ask_close(ws)
        sid = httpx.post(url + "/reset", json={"seed": 1011}, timeout=30).json()["metadata"]["session_id"]
        r = httpx.post(
            url + "/step", json={"action": {"action": "retriever down"}, "session_id": sid}, timeout=30
        )
        assert r.status_code == 500 and r.json()["detail"]["code"] == "EPISODE_ABORTED"
        assert r.json()["detail"]["abort_cause"] == "retriever_unavailable" and "reward" not in r.json()


def test_a_hung_step_in_a_worker_hits_the_deadline_and_the_server_keeps_serving() -> None:
    limits = ServeLimits(step_timeout_s=2.0)
    cfg = ServeConfig(TOY, TOY_KW, wrappers=(HangOn,), port=0, workers=1, slots_per_worker=2, limits=limits)
    srv = ServerThread(cfg)
    with srv as url, connect(_ws_url(url)) as ws:
        assert _ask(ws, "reset", {"seed": 1010})["type"] == "observation"
        answer = _ask(ws, "step", {"action": "hang"})
        assert _code(answer) == "EPISODE_ABORTED" and "reset to continue" in answer["data"]["message"]
        assert answer["data"]["abort_cause"] == "step_timeout"  # never a reward (docs/failures.md)
        assert _code(_ask(ws, "step", {"action": "wait"})) == "NOT_RESET"  # never continued on a fresh copy
        local = _expert_episode(TOY, TOY_KW, 1010)
        again = _ask(ws, "reset", {"seed": 1010})["data"]  # the restarted worker serves again
        assert (again["observation"]["text"], again["observation"]["info"]) == local[0]
        _ask_close(ws)
