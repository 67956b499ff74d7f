"""Corrective hints: OracleAnalyzer (toy env, Search-QA-like records, 100 noisy-expert ALFWorld episodes),
HintWrapper, the offline functions, and LLMAnalyzer against a real HTTP server on 127.0.0.1.

The HTTP server is real (``http.server`` on an ephemeral port, health-checked with a deadline); the *model* behind
it is a scripted stand-in for a remote LLM API, which cannot run here: it answers from the trajectory in the request
(it marks the steps whose feedback is "Nothing happens.") or plays a scripted failure (malformed JSON, 500s, 429,
timeouts, 401).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from _toy_env import TASKS, ToyRoomEnv, expert_actions

from stepgym import schema
from stepgym.agents import NoisyExpertAgent
from stepgym.llm_client import RetryPolicy
from stepgym.rollout import play_episode
from stepgym.wrappers.hints import (
    Analysis,
    Analyzer,
    AnalyzerConfigError,
    AnalyzerError,
    HintWrapper,
    LLMAnalyzer,
    OracleAnalyzer,
    ahead_privileged_text,
    analyze_many,
    analyze_trajectory,
    annotate_trajectory,
    parse_analysis_reply,
)
from stepgym.wrappers.text import TextInterfaceWrapper


def toy_traj(
    actions: list[str], task: str = TASKS[0], max_steps: int = 10, env: gym.Env | None = None
) -> schema.Trajectory:
    env = env or ToyRoomEnv(max_steps=max_steps)
    obs, info = env.reset(options={"task_id": task})
    tr = schema.Trajectory(task, obs, info)
    for a in actions:
        o, r, te, tru, inf = env.step(a)
        tr.steps.append(schema.Step(obs, a, r, o, te, tru, inf))
        obs = o
        if te or tru:
            break
    return tr


# ---------------------------------------------------------------------------------------------------------------
# OracleAnalyzer rules
# ---------------------------------------------------------------------------------------------------------------
def test_oracle_on_toy() -> None:
    win = expert_actions(TASKS[0])  # go to kitchen, take key, go to hall, open door, go to garden
    tr = toy_traj([win[0], "go to cellar", "dance", "go to kitchen", "take key", "look"], max_steps=6)
    a = OracleAnalyzer().analyze(tr)
    assert isinstance(OracleAnalyzer(), Analyzer)
    assert a.error_steps == (1, 2, 5) and a.source == "oracle"
    assert a.hints[1] == "'go to cellar' is not what the task needs now; do 'take key' first."
    assert "'dance' is not a valid action here" in a.hints[2] and "Nothing happens." in a.hints[2]
    assert "do 'go to kitchen' instead" in a.hints[2]  # in the cellar now: the expert heads back to the key
    assert a.to_info() == {
        schema.ERROR_STEPS: [1, 2, 5],
        schema.HINTS: {str(k): a.hints[k] for k in (1, 2, 5)},
    }
    assert OracleAnalyzer(max_error_steps=1).analyze(tr).error_steps == (1,)
    assert OracleAnalyzer().analyze(toy_traj(win)).error_steps == ()


def test_oracle_prefers_arg_labels_and_reads_qa_keys() -> None:
    tr = toy_traj(["look", "go to kitchen", "go to cellar"])
    for s, rea in zip(tr.steps, (True, True, False), strict=True):
        s.info[schema.ARG_REASONABLE] = (
            rea  # "look" reasonable per a (hypothetical) graph: ARG wins over expert
        )
    a = OracleAnalyzer().analyze(tr)
    assert a.error_steps == (2,) and "does not advance the task" in a.hints[2]

    def step(action: str, info: dict[str, Any]) -> schema.Step:
        return schema.Step(
            "o",
            action,
            0.0,
            "<information>…</information>",
            False,
            False,
            {schema.INVALID_REASON: "", **info},
        )

    qa = schema.Trajectory(
        "nq/1",
        "Question: q",
        {schema.GOAL: "q"},
        [
            step("<search>good</search>", {schema.SEARCH_PRODUCTIVE: True}),
            step("<search>bad</search>", {schema.SEARCH_PRODUCTIVE: False}),
            step(
                "no tags",
                {
                    schema.FORMAT_VALID: False,
                    schema.INVALID_REASON: "no tag",
                    schema.SEARCH_PRODUCTIVE: False,
                },
            ),
            step("<answer>x</answer>", {schema.EXACT_MATCH: 0.0, schema.SEARCH_PRODUCTIVE: False}),
        ],
    )
    a = OracleAnalyzer().analyze(qa)
    assert a.error_steps == (1, 2, 3)
    assert "retrieved no passage" in a.hints[1] and "wrong" in a.hints[3]
    qa.steps[3].info[schema.EXACT_MATCH] = 1.0  # a right answer is no error, whatever SEARCH_PRODUCTIVE says
    assert OracleAnalyzer().analyze(qa).error_steps == (1, 2)


def test_oracle_and_text_interface_on_searchqa(data_dir) -> None:
    """The real Search-QA env (BM25 over the wiki-18 subset): an unproductive search and a wrong answer are the
    error steps, and the hints carry the env's oracle turn."""
    env = HintWrapper(TextInterfaceWrapper(gym.make("StepGym/SearchQA-v0", dataset="nq", split="test")))
    assert env.env.fmt.name == "qa"
    obs, info = env.reset(seed=0)
    q = info[schema.GOAL]
    turns = [
        "<think>hm</think> I will just guess",
        "<think>x</think><search>zebra migration patterns</search>",
        f"<think>y</think><search>{q}</search>",
        "<think>z</think><answer>certainly not this</answer>",
    ]
    for t in turns:
        obs, r, term, trunc, info = env.step(t)
    assert term and r == 0.0 and info[schema.FORMAT_VALID]
    steps = info[schema.ERROR_STEPS]
    assert steps[0] == 0 and 3 in steps and 1 in steps
    assert "<answer>" in info[schema.HINTS]["3"] and "wrong" in info[schema.HINTS]["3"]
    assert "<search>zebra migration patterns</search>" in env.get_wrapper_attr("prompt")
    assert env.trajectory.steps[1].info[schema.RAW_OUTPUT] == turns[1]
    env.close()


def test_oracle_without_expert_names_admissible_commands() -> None:
    env = ToyRoomEnv(expose={"admissible_actions", "admissible", "won", "invalid_reason"}, max_steps=3)
    a = OracleAnalyzer().analyze(toy_traj(["dance", "look", "look"], env=env))
    assert a.error_steps == (0,)  # without an expert nothing says "look" was wrong
    assert "such as 'go to cellar', 'go to kitchen', 'inventory'" in a.hints[0]


# ---------------------------------------------------------------------------------------------------------------
# HintWrapper and the offline functions
# ---------------------------------------------------------------------------------------------------------------
def test_hint_wrapper_failure_only() -> None:
    env = HintWrapper(ToyRoomEnv(max_steps=5))
    env.reset(options={"task_id": TASKS[0]})
    for a in ["look", "go to kitchen", "take key", "go to hall"]:
        _, _, _, _, info = env.step(a)
        assert schema.ERROR_STEPS not in info  # only at the end
    _, _, term, trunc, info = env.step("inventory")
    assert trunc and info[schema.ERROR_STEPS] == [0, 4] and set(info[schema.HINTS]) == {"0", "4"}
    assert analyze_trajectory(env.trajectory).to_info() == {
        k: info[k] for k in (schema.ERROR_STEPS, schema.HINTS)
    }

    env = HintWrapper(ToyRoomEnv(max_steps=8))
    env.reset(options={"task_id": TASKS[0]})
    for a in ["look", *expert_actions(TASKS[0])]:
        _, _, term, _, info = env.step(a)
    assert term and info[schema.ERROR_STEPS] == [] and info[schema.HINTS] == {}
    assert env.analysis.source == "skipped:success"

    env = HintWrapper(ToyRoomEnv(max_steps=8), failure_only=False)
    env.reset(options={"task_id": TASKS[0]})
    for a in ["look", *expert_actions(TASKS[0])]:
        _, _, term, _, info = env.step(a)
    assert info[schema.ERROR_STEPS] == [0]


def test_offline_annotate_and_privileged_text() -> None:
    tr = toy_traj(["look", "go to kitchen"], max_steps=2)
    a = analyze_trajectory(tr)
    annotate_trajectory(tr, a)
    assert tr.steps[-1].info[schema.ERROR_STEPS] == [0]
    pi = ahead_privileged_text(tr, 0)
    assert (
        pi.startswith("Environment feedback to this action: You are in the hall.")
        and "Corrective hint: " in pi
    )
    assert "Corrective hint" not in ahead_privileged_text(tr, 1)
    assert ahead_privileged_text(tr, 1, hints={1: "h"}).endswith("Corrective hint: h")
    assert [x.error_steps for x in analyze_many([tr, toy_traj(expert_actions(TASKS[0]))])] == [(0,), ()]


# ---------------------------------------------------------------------------------------------------------------
# OracleAnalyzer on 100 noisy-expert ALFWorld episodes
# ---------------------------------------------------------------------------------------------------------------
N_GAMES, SEEDS_PER_GAME = (
    20,
    5,
)  # 100 episodes; consecutive episodes share a game, so resets hit the game cache


@pytest.fixture(scope="module")
def noisy_episodes(data_dir) -> list[tuple[schema.Trajectory, list[bool]]]:
    env = gym.make("StepGym/ALFWorld-v0", split="valid_seen", max_steps=25)
    ids = env.unwrapped.task_ids
    games = [ids[(i * len(ids)) // N_GAMES] for i in range(N_GAMES)]  # evenly spaced: every task type
    out = []
    for g, task in enumerate(games):
        for s in range(SEEDS_PER_GAME):
            agent = NoisyExpertAgent(error_rate=0.2, seed=1000 * g + s)
            traj = play_episode(env, agent, options={"task_id": task})
            out.append((traj, list(agent.injected)))
    env.close()
    return out


def test_oracle_marks_injected_errors(noisy_episodes) -> None:
    oracle = OracleAnalyzer()
    tp = fp = fn = 0
    failed = [0, 0, 0]
    for traj, injected in noisy_episodes:
        pred = set(oracle.analyze(traj).error_steps)
        true = {t for t, x in enumerate(injected) if x}
        tp, fp, fn = tp + len(pred & true), fp + len(pred - true), fn + len(true - pred)
        if not traj.success:
            failed = [
                failed[0] + len(pred & true),
                failed[1] + len(pred - true),
                failed[2] + len(true - pred),
            ]
    precision, recall = tp / max(1, tp + fp), tp / max(1, tp + fn)
    n_fail = sum(not t.success for t, _ in noisy_episodes)
    report = {
        "episodes": len(noisy_episodes),
        "failed_episodes": n_fail,
        "steps": sum(len(t.steps) for t, _ in noisy_episodes),
        "injected": tp + fn,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "failed_only": {"tp": failed[0], "fp": failed[1], "fn": failed[2]},
    }
    print(
        f"\nOracleAnalyzer on {len(noisy_episodes)} noisy-expert (20%) ALFWorld valid_seen episodes: "
        f"precision {precision:.3f}, recall {recall:.3f} ({tp} of {tp + fn} injected errors marked, {fp} false)"
    )
    out = Path(os.environ["STEPGYM_CACHE"]) / "reports" / "oracle_analyzer_alfworld.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    assert len(noisy_episodes) == 100 and tp + fn > 100
    # Floors measured here (precision 1.000, recall ~0.89: the misses are states where the handcoded expert has
    # no command, so no rule applies).
    assert precision >= 0.97
    assert recall >= 0.80


def test_oracle_hints_name_an_admissible_command(noisy_episodes) -> None:
    checked = 0
    for traj, _ in noisy_episodes:
        if traj.success:
            continue  # failure-only
        a = analyze_trajectory(traj)
        infos = traj.infos()
        for t, hint in a.hints.items():
            named = set(re.findall(r"'([^']+)'", hint))
            assert named & set(infos[t][schema.ADMISSIBLE_ACTIONS]), (
                hint,
                infos[t][schema.ADMISSIBLE_ACTIONS][:5],
            )
            checked += 1
    assert checked >= 10


def test_hint_wrapper_matches_offline_on_alfworld(data_dir) -> None:
    env = HintWrapper(
        TextInterfaceWrapper(gym.make("StepGym/ALFWorld-v0", split="valid_unseen", max_steps=4))
    )
    obs, info = env.reset(seed=3)
    walk = env.unwrapped.walkthrough
    replies = [
        "no tags",
        "<think>x</think><action>fly</action>",
        *(f"<think>x</think><action>{a}</action>" for a in walk),
    ]
    for r in replies:
        obs, rew, term, trunc, info = env.step(r)
        if term or trunc:
            break
    assert trunc and not info[schema.WON]
    assert info[schema.ERROR_STEPS][:2] == [0, 1]
    assert analyze_trajectory(env.trajectory).to_info()[schema.HINTS] == info[schema.HINTS]
    env.close()


# ---------------------------------------------------------------------------------------------------------------
# LLMAnalyzer against a real local HTTP server
# ---------------------------------------------------------------------------------------------------------------
class ScriptedLLM:
    """A real HTTP server (127.0.0.1, ephemeral port) speaking the chat-completions protocol. Each request pops a
    behaviour from ``script``; when it is empty the server answers "smart" (a well-formed analysis computed from the
    trajectory text in the request)."""

    def __init__(self) -> None:
        self.script: deque[str] = deque()
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200 if self.path == "/health" else 404, b"ok")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                mode = outer.script.popleft() if outer.script else "smart"
                outer.respond(self, mode, body)

            def _send(self, code: int, data: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @staticmethod
    def smart_reply(body: dict[str, Any]) -> str:
        user = body["messages"][1]["content"]
        errors = []
        for m in re.finditer(r"Step (\d+)\nAction: (.*)\nFeedback: Nothing happens\.", user):
            errors.append({"step": int(m.group(1)), "hint": f"do not try '{m.group(2).split(' (')[0]}' here"})
        return json.dumps({"errors": errors})

    def respond(self, h: Any, mode: str, body: dict[str, Any]) -> None:
        def completion(content: str) -> bytes:
            return json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                }
            ).encode()

        smart = self.smart_reply(body)
        if mode == "smart":
            h._send(200, completion(smart))
        elif mode == "fenced":
            h._send(200, completion(f"```json\n{smart}\n```"))
        elif mode == "prose":
            h._send(200, completion("Sure! The agent went wrong at step 1 when it tried to fly."))
        elif mode == "truncated_json":
            h._send(200, completion('{"errors": [{"step": 1, "hint": "go'))
        elif mode == "bad_schema":
            h._send(200, completion('{"errors": [{"step": "1", "hint": "x"}]}'))
        elif mode == "out_of_range":
            h._send(200, completion('{"errors": [{"step": 999, "hint": "x"}]}'))
        elif mode == "not_completion":
            h._send(200, b"<html>gateway says hi</html>")
        elif mode == "500":
            h._send(500, b'{"error": "internal"}')
        elif mode == "429":
            h._send(429, b'{"error": "slow down"}', {"Retry-After": "0.25"})
        elif mode == "401":
            h._send(401, b'{"error": "bad key"}')
        elif mode == "slow":
            self.release.wait(5.0)  # outlives the client's timeout; released at teardown
            h._send(200, completion(smart))
        else:  # pragma: no cover
            raise AssertionError(mode)

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        deadline = time.monotonic() + 10.0
        while True:  # health check with a deadline
            try:
                with urllib.request.urlopen(self.url.rsplit("/v1", 1)[0] + "/health", timeout=1.0) as r:
                    if r.status == 200:
                        return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                threading.Event().wait(0.02)

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def failed_traj() -> schema.Trajectory:
    return toy_traj(["go to kitchen", "fly away", "take key", "dance", "look"], max_steps=5)


def make(llm: ScriptedLLM, **kw: Any) -> tuple[LLMAnalyzer, list[float]]:
    waits: list[float] = []
    retry = RetryPolicy(
        timeout=kw.pop("timeout", 2.0), max_retries=kw.pop("max_retries", 3), backoff=0.5, sleep=waits.append
    )
    return LLMAnalyzer(llm.url, "test-model", api_key="sk-test", retry=retry, **kw), waits


@pytest.mark.network
def test_llm_well_formed_reply_and_request_shape(llm, failed_traj) -> None:
    an, waits = make(llm)
    a = an.analyze(failed_traj)
    assert a.error_steps == (1, 3) and a.source == "llm" and a.hints[1] == "do not try 'fly away' here"
    req = llm.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "test-model" and req["body"]["temperature"] == 0.0
    user = req["body"]["messages"][1]["content"]
    assert "Task: go out into the garden." in user and "Step 3\nAction: dance (not admissible)" in user
    assert '{"errors": [{"step":' in req["body"]["messages"][0]["content"]
    assert waits == []


@pytest.mark.network
def test_llm_fenced_json_is_accepted(llm, failed_traj) -> None:
    llm.script.append("fenced")
    assert make(llm)[0].analyze(failed_traj).error_steps == (1, 3)


@pytest.mark.network
@pytest.mark.parametrize(
    "bad", ["prose", "truncated_json", "bad_schema", "out_of_range", "not_completion", "500"]
)
def test_llm_retries_garbage_and_5xx(llm, failed_traj, bad) -> None:
    llm.script.extend([bad, bad])
    an, waits = make(llm, max_retries=3)
    a = an.analyze(failed_traj)
    assert a.error_steps == (1, 3) and len(llm.requests) == 3
    assert waits == [0.5, 1.0]  # exponential backoff
    assert an.stats["retries"] == 2


@pytest.mark.network
def test_llm_429_honours_retry_after(llm, failed_traj) -> None:
    llm.script.append("429")
    an, waits = make(llm)
    assert an.analyze(failed_traj).error_steps == (1, 3) and waits == [0.25]


@pytest.mark.network
def test_llm_timeout_is_retried(llm, failed_traj) -> None:
    llm.script.append("slow")
    an, waits = make(llm, timeout=0.3)
    assert an.analyze(failed_traj).error_steps == (1, 3) and len(waits) == 1


@pytest.mark.network
def test_llm_persistent_garbage_raises_or_falls_back(llm, failed_traj) -> None:
    llm.script.extend(["prose"] * 3)
    an, waits = make(llm, max_retries=2)
    with pytest.raises(
        AnalyzerError, match=r"gave no usable answer after 3 attempt\(s\).*malformed analysis"
    ):
        an.analyze(failed_traj)
    llm.script.extend(["500"] * 3)
    an, _ = make(llm, max_retries=2, fallback=OracleAnalyzer())
    with pytest.warns(RuntimeWarning, match="Using the fallback analyzer"):
        a = an.analyze(failed_traj)
    assert (
        a.source == "fallback:oracle" and a.error_steps == OracleAnalyzer().analyze(failed_traj).error_steps
    )
    assert an.stats["fallbacks"] == 1
    assert an.analyze(failed_traj).source == "llm"  # the fallback result was not cached; the server is back


@pytest.mark.network
def test_llm_config_errors_are_not_retried(llm, failed_traj) -> None:
    llm.script.append("401")
    an, waits = make(llm, fallback=OracleAnalyzer())
    with pytest.raises(AnalyzerConfigError, match=r"HTTP 401.*API key"):
        an.analyze(failed_traj)
    assert len(llm.requests) == 1 and waits == []


def test_llm_connection_refused(failed_traj) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    waits: list[float] = []
    an = LLMAnalyzer(
        f"http://127.0.0.1:{port}/v1", "m", retry=RetryPolicy(timeout=1.0, max_retries=2, sleep=waits.append)
    )
    with pytest.raises(AnalyzerError, match=rf"127\.0\.0\.1:{port}.*cannot connect"):
        an.analyze(failed_traj)
    assert len(waits) == 2
    an.fallback = OracleAnalyzer()
    with pytest.warns(RuntimeWarning):
        assert an.analyze(failed_traj).source == "fallback:oracle"


@pytest.mark.network
def test_llm_cache_memory_and_disk(llm, failed_traj, tmp_path) -> None:
    an, _ = make(llm, cache_dir=tmp_path)
    first = an.analyze(failed_traj)
    again = an.analyze(failed_traj)
    assert len(llm.requests) == 1 and again.source == "llm-cache" and again.error_steps == first.error_steps
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    other = toy_traj(["fly away", "look"], max_steps=2)  # different content, different key
    an.analyze(other)
    assert len(llm.requests) == 2
    an2, _ = make(llm, cache_dir=tmp_path)  # a new process would see the disk cache
    assert an2.analyze(failed_traj).source == "llm-cache" and len(llm.requests) == 2
    files[0].write_text("{not json")  # a corrupt entry is a miss, then rewritten
    an3, _ = make(llm, cache_dir=tmp_path)
    assert an3.analyze(failed_traj).source == "llm" and len(llm.requests) == 3
    assert json.loads(files[0].read_text())["error_steps"] == [1, 3]
    an4, _ = make(llm, cache=False)
    an4.analyze(failed_traj)
    an4.analyze(failed_traj)
    assert len(llm.requests) == 5


@pytest.mark.network
def test_llm_concurrent_and_settings_from_env(llm, monkeypatch) -> None:
    monkeypatch.setenv("STEPGYM_LLM_BASE_URL", llm.url)
    monkeypatch.setenv("STEPGYM_LLM_MODEL", "env-model")
    monkeypatch.setenv("STEPGYM_LLM_API_KEY", "sk-env")
    an = LLMAnalyzer()
    trajs = [toy_traj(["look"] * k + ["fly"], max_steps=k + 1) for k in range(8)]
    out = analyze_many(trajs, an, max_workers=4)
    assert [a.error_steps for a in out] == [(k,) for k in range(8)]
    assert {r["auth"] for r in llm.requests} == {"Bearer sk-env"}
    assert {r["body"]["model"] for r in llm.requests} == {"env-model"}


def test_llm_needs_url_and_model(monkeypatch) -> None:
    for var in ("STEPGYM_LLM_BASE_URL", "OPENAI_BASE_URL", "STEPGYM_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(AnalyzerConfigError, match="STEPGYM_LLM_BASE_URL"):
        LLMAnalyzer()
    with pytest.raises(AnalyzerConfigError, match="STEPGYM_LLM_MODEL"):
        LLMAnalyzer("http://127.0.0.1:1/v1")


def test_parse_analysis_reply_is_strict() -> None:
    assert parse_analysis_reply('{"errors": [{"step": 2, "hint": " go  there "}], "note": 1}', 3) == Analysis(
        (2,), {2: "go there"}, "llm"
    )
    assert parse_analysis_reply('```json\n{"errors": []}\n```', 3).error_steps == ()
    for bad in (
        '[{"step": 1, "hint": "x"}]',
        '{"errors": [{"step": true, "hint": "x"}]}',
        '{"errors": [{"step": 1, "hint": ""}]}',
        '{"errors": [{"step": 1, "hint": "a"}, {"step": 1, "hint": "b"}]}',
        'Here: {"errors": []}',
        None,
    ):
        with pytest.raises(ValueError):
            parse_analysis_reply(bad, 3)
    assert parse_analysis_reply(
        '{"errors": [{"step": 2, "hint": "b"}, {"step": 0, "hint": "a"}]}', 3, max_errors=1
    ).error_steps == (0,)
