"""Evaluation through an OpenAI-compatible endpoint (stepgym.llm_eval) against a real HTTP server on 127.0.0.1.

The server is real (``http.server`` on an ephemeral port, speaking the chat-completions protocol and ``/models``);
the model behind it is either a scripted policy that reads the prompt text (a stand-in for a remote LLM, which
cannot run here) or the project's HF backend with the tiny in-process model. Every endpoint evaluation is compared
with the trainer's in-process collector driven by the same policy: same replies, same trajectories, same summary.
Failure injection (429, 500, slow answers, dropped connections, garbage bodies, a server killed mid-run) must end
in bounded retries and a resumable run with every task recorded exactly once. The episodes are read back through
the recording module (the format ``stepgym view`` reads), so these checks are of what a user gets.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepgym import schema
from stepgym.data import sample_tasks
from stepgym.errors import CorruptDataError
from stepgym.llm_client import ChatClient, LLMConfigError, LLMUnavailableError, RetryPolicy
from stepgym.llm_eval import (
    EndpointEvalConfig,
    EvalRunError,
    Sampling,
    default_budgets,
    evaluate_endpoint,
)
from stepgym.recording import FILE_NAME, EpisodeWriter, episode_trajectory, read_recording, read_records
from stepgym.trainers.backends import GenerationRequest, ScriptedBackend, make_backend
from stepgym.trainers.collector import Collector
from stepgym.trainers.endpoint_backend import EndpointBackend
from stepgym.trainers.evaluate import summarise
from stepgym.trainers.samples import PromptEncoder
from stepgym.wrappers.text import resolve_format

pytestmark = pytest.mark.network

MODEL = "served-model"


# ---------------------------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------------------------
class ChatServer:
    """A real chat-completions server. ``policy(prompt) -> reply`` answers; ``faults`` holds one behaviour per
    coming request ('429', '500', 'slow', 'drop', 'garbage'); ``always`` replaces every answer by a fault;
    ``kill_after`` kills the server after that many good answers (the next request is dropped, later ones refused).
    """

    def __init__(self, policy: Callable[[str], str], port: int = 0) -> None:
        self.policy = policy
        self.faults: deque[str] = deque()
        self.always = ""
        self.kill_after = 0
        self.answered = 0
        self.posts = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.dead = False
        self.models: list[dict[str, Any]] = [{"id": MODEL, "object": "model"}]  # what GET /v1/models lists
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": outer.models})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.handle(self, body)

            def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def handle(self, h: Any, body: dict[str, Any]) -> None:
        with self.lock:
            self.posts += 1
            fault = self.always or (self.faults.popleft() if self.faults else "")
            kill = self.dead or (self.kill_after and self.answered >= self.kill_after)
            if kill and not self.dead:
                self.dead = True
                threading.Thread(target=self.stop, daemon=True).start()
        if kill or fault == "drop":
            h.close_connection = True  # no answer at all: the client sees the connection close
            return
        if body.get("model") != MODEL:
            h._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
            return
        if fault == "429":
            h._json(429, {"error": "rate limited"}, {"Retry-After": "0.01"})
            return
        if fault == "500":
            h._json(500, {"error": "internal"})
            return
        if fault == "garbage":
            h._json(200, b"<html>a proxy error page</html>")
            return
        if fault == "slow":
            self.release.wait(3.0)  # outlives the client's timeout
        prompt = body["messages"][-1]["content"]
        reply = self.policy(prompt)
        with self.lock:
            self.answered += 1
        n_in, n_out = len(prompt.split()), len(reply.split())
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        if body.get("stream"):  # server-sent events, as vLLM streams them (verifiers' chat harness asks so)
            self.stream(h, reply, usage)
            return
        h._json(
            200,
            {
                "id": "c",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                ],
                "usage": usage,
            },
        )

    @staticmethod
    def stream(h: Any, reply: str, usage: dict[str, int]) -> None:
        """The reply as one content chunk, a finishing chunk with the usage, then ``[DONE]``."""
        head = {"id": "c", "object": "chat.completion.chunk", "model": MODEL}
        chunks = [
            {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply}}]},
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
        ]
        data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def start(self) -> ChatServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., ChatServer]]:
    servers: list[ChatServer] = []

    def start(policy: Callable[[str], str], port: int = 0) -> ChatServer:
        servers.append(ChatServer(policy, port).start())
        return servers[-1]

    yield start
    for s in servers:
        if not s.dead:
            s.stop()


def client_for(server: ChatServer, **kw: Any) -> ChatClient:
    kw.setdefault("timeout", 0.5)
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    return ChatClient(server.url, MODEL, "sk-test", retry=RetryPolicy(**kw))


# ---------------------------------------------------------------------------------------------------------------
# A scripted policy that reads only the prompt (the same function answers over HTTP and in process)
# ---------------------------------------------------------------------------------------------------------------
def _admissible(prompt: str) -> list[str]:
    m = re.search(r"(?:admissible actions[^\[]*\[|\nActions: )(.*?)(?:\]\.|\.\n|\.$)", prompt, re.DOTALL)
    return re.findall(r"'([^']*)'", m.group(1)) if m else []


def scripted_reply(prompt: str) -> str:
    """Credit toy: take the key, open the door, else walk on (wins). QA: search the question once, then answer.
    ALFWorld / WebShop: a deterministic admissible choice, and a tagless reply on the 3rd step (format-invalid)."""
    if "Question:" in prompt and "<search>" in prompt:
        if "</information>" in prompt.split("Question:", 1)[1]:  # a later turn: Search-R1's context goes on
            return "<think>I have read enough.</think><answer>unknown</answer>"
        question = prompt.split("Question:", 1)[1].split("\n", 1)[0].strip()
        return f"<think>I need to look this up.</think><search>{question}</search>"
    acts = _admissible(prompt)
    if prompt.startswith("Task:"):  # the credit toy's compact format: no <think>
        for want in ("take key", "open door"):
            if want in acts:
                return f"<action>{want}</action>"
        return "<action>go forward</action>"
    if "You are now at step 3." in prompt or "now at step 3." in prompt:
        return "I am not sure what to do."
    search = [a for a in acts if a.startswith("search[")]
    if search:
        task = prompt.split("instruction: ", 1)[-1].split("\n", 1)[0]
        return f"<think>Search for it.</think><action>search[{' '.join(task.split()[:6])}]</action>"
    choice = acts[len(prompt) % len(acts)] if acts else "look"
    return f"<think>Try this.</think><action>{choice}</action>"


class ByteTokenizer:
    """A fake tokenizer (UTF-8 bytes): the in-process scripted comparison needs token ids but no real model."""

    chat_template = None
    bos_token_id = None
    eos_token_id = None
    pad_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": list(text.encode())}


def in_process(
    env_id: str,
    kwargs: dict[str, Any],
    ids: list[str],
    seed: int = 0,
    policy: Callable[[str], str] = scripted_reply,
) -> list[schema.Trajectory]:
    """The trainer's collector on the same env, with the scripted policy answering in process."""
    tok = ByteTokenizer()
    backend = ScriptedBackend(tok, policy=lambda req, rng: policy(req.prompt))
    fmt = resolve_format(env_id)
    col = Collector(
        env_id,
        kwargs,
        fmt,
        history=fmt.history_length,
        group_size=1,
        encoder=PromptEncoder(tok, max_prompt_tokens=10**9),
        backend=backend,
    )
    try:
        ro = col.collect([(t, seed) for t in ids], seed_rng=np.random.default_rng(0), greedy=True)
    finally:
        col.close()
    return ro.trajectories


def episodes(out: Path) -> list[dict[str, Any]]:
    """The recorded episodes of an evaluation folder, each once, in the split's order."""
    return sorted(read_recording(out / FILE_NAME).episodes, key=lambda e: e["group"])


FLAGS = (schema.FORMAT_VALID, schema.ADMISSIBLE, schema.EFFECTIVE, schema.PARSED_ACTION, schema.RAW_OUTPUT)


def assert_same_episodes(records: list[dict[str, Any]], trajs: list[schema.Trajectory]) -> None:
    assert [r["task_id"] for r in records] == [t.task_id for t in trajs]
    for rec, t in zip(records, trajs, strict=True):
        mine = episode_trajectory(rec)
        assert mine.initial_observation == t.initial_observation
        assert [s.action for s in mine.steps] == [s.action for s in t.steps]
        assert [s.next_observation for s in mine.steps] == [s.next_observation for s in t.steps]
        assert [s.reward for s in mine.steps] == [s.reward for s in t.steps]
        for f in FLAGS:
            assert [s.info.get(f) for s in mine.steps] == [s.info.get(f) for s in t.steps], f


SUMMARY_KEYS = ("n_tasks", "success", "per_type", "within", "valid_action_ratio", "mean_steps")


# ---------------------------------------------------------------------------------------------------------------
# Full evaluations per env, identical to the in-process collector
# ---------------------------------------------------------------------------------------------------------------
ENVS = {
    "credit": ("StepGym/CreditToy-v0", {"split": "valid"}, 6),
    "alfworld": ("StepGym/ALFWorld-v0", {"split": "valid_seen", "max_steps": 6}, 3),
    "webshop": ("StepGym/WebShop-v0", {"split": "test", "max_steps": 5}, 3),
    "searchqa": ("StepGym/SearchQA-v0", {"dataset": "nq", "split": "test"}, 3),
}


@pytest.mark.parametrize("name", list(ENVS))
def test_endpoint_matches_in_process(name: str, serve, tmp_path: Path, request) -> None:
    env_id, kwargs, n = ENVS[name]
    if name != "credit":
        request.getfixturevalue("data_dir")
    server = serve(scripted_reply)
    with client_for(server, timeout=30.0) as client:
        summary = evaluate_endpoint(
            client, EndpointEvalConfig(env_id, out_dir=tmp_path, env_kwargs=kwargs, limit=n, concurrency=2)
        )
    records = episodes(tmp_path)
    trajs = in_process(env_id, kwargs, [r["task_id"] for r in records])
    assert len(records) == n and summary["complete"] and summary["episodes_resumed"] == 0
    assert_same_episodes(records, trajs)
    # the budgets default to five spread up to the env's own step limit (credit toy: 10 steps)
    limit = kwargs.get("max_steps") or {"credit": 10, "alfworld": 50, "webshop": 15, "searchqa": 5}[name]
    assert list(summary["within"]) == [str(b) for b in default_budgets(limit)]
    reference = summarise(trajs, default_budgets(limit))
    assert {k: summary[k] for k in SUMMARY_KEYS} == {k: reference[k] for k in SUMMARY_KEYS}
    steps = sum(len(t.steps) for t in trajs)
    assert summary["usage"]["requests"] == steps == server.answered
    assert summary["usage"]["prompt_tokens"] > 0 and summary["usage"]["completion_tokens"] > 0
    assert json.loads((tmp_path / "summary.json").read_text())["success"] == summary["success"]
    if name == "credit":
        assert summary["success"] == 1.0 and summary["format_valid_ratio"] == 1.0
    if name == "alfworld":  # the tagless 3rd reply is recorded as format-invalid, and costs its step
        assert 0 < summary["format_valid_ratio"] < 1.0
        assert all(r["steps"][2]["format_valid"] is False for r in records)
    if name == "searchqa":
        assert (
            all(len(r["steps"]) == r["n_steps"] == 2 for r in records)
            and summary["format_valid_ratio"] == 1.0
        )


def tiny_hf_trainer(output_dir: Path) -> tuple[Any, Callable[[str], str]]:
    """The project's HF backend with the tiny in-process model (a trainer on CreditToy) and a thread-safe greedy
    reply function over it, as the HTTP server calls it. The caller closes the trainer."""
    from stepgym.trainers.config import (
        EnvConfig,
        ModelConfig,
        RolloutConfig,
        RunConfig,
        TrainConfig,
        WarmupConfig,
    )
    from stepgym.trainers.grpo import GRPOTrainer

    cfg = TrainConfig(
        run=RunConfig(output_dir=str(output_dir), progress=False, tensorboard=False, report=False, threads=1),
        env=EnvConfig(id="StepGym/CreditToy-v0", history=1),
        model=ModelConfig(name="tiny", tokenizer_corpus_episodes=16),
        rollout=RolloutConfig(max_prompt_tokens=256, max_response_tokens=8, generate_batch_size=1),
        warmup=WarmupConfig(steps=0),
    )
    trainer = GRPOTrainer(cfg)
    lock = threading.Lock()

    def reply(prompt: str) -> str:
        ids, _ = trainer.encoder.encode(prompt)
        with lock:
            return trainer.backend.generate([GenerationRequest(ids, prompt)], seed=0, greedy=True)[0].text

    return trainer, reply


def test_endpoint_matches_hf_backend_greedy(serve, tmp_path: Path) -> None:
    """The tiny HF model served over HTTP gives the same replies, step for step, as the same model generating in
    the trainer's collector (greedy, one sequence per generate call on both sides)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    trainer, hf_reply = tiny_hf_trainer(tmp_path / "run")
    cfg = trainer.cfg
    try:
        kwargs = cfg.env.make_kwargs("valid")
        col = Collector(
            cfg.env.id,
            kwargs,
            trainer.fmt,
            history=1,
            group_size=1,
            encoder=trainer.encoder,
            backend=trainer.backend,
        )
        ids = sample_tasks(col.task_ids(), 3, seed=0)  # what limit=3 plays: a seeded sample
        trajs = col.collect(
            [(t, 0) for t in ids], seed_rng=np.random.default_rng(0), greedy=True
        ).trajectories
        col.close()
        server = serve(hf_reply)
        with client_for(server, timeout=30.0) as client:
            summary = evaluate_endpoint(
                client,
                EndpointEvalConfig(
                    cfg.env.id,
                    out_dir=tmp_path / "eval",
                    env_kwargs=kwargs,
                    history=1,
                    sampling=Sampling(max_tokens=8),
                    limit=3,
                    concurrency=2,
                    budgets=(10, 20, 30, 40, 50),
                ),
            )
    finally:
        trainer.close()
    records = episodes(tmp_path / "eval")
    by_id = {t.task_id: t for t in trajs}
    assert_same_episodes(records, [by_id[r["task_id"]] for r in records if r["task_id"] in by_id])
    reference = summarise(trajs, (10, 20, 30, 40, 50))
    assert {k: summary[k] for k in SUMMARY_KEYS} == {k: reference[k] for k in SUMMARY_KEYS}


def test_endpoint_backend_in_the_collector(serve) -> None:
    """``make_backend('openai')`` drives the trainer's own collector and evaluation through the endpoint."""
    server = serve(scripted_reply)
    env_id, kwargs = "StepGym/CreditToy-v0", {"split": "valid"}
    fmt = resolve_format(env_id)
    with client_for(server, timeout=30.0) as client:
        backend = make_backend("openai", client=client, concurrency=4)
        assert isinstance(backend, EndpointBackend)
        tok = ByteTokenizer()
        col = Collector(
            env_id,
            kwargs,
            fmt,
            history=2,
            group_size=1,
            encoder=PromptEncoder(tok, max_prompt_tokens=10**9),
            backend=backend,
        )
        ids = col.task_ids()[:4]
        got = col.collect([(t, 0) for t in ids], seed_rng=np.random.default_rng(0), greedy=True).trajectories
        col.close()
    want = in_process(env_id, kwargs, ids)
    assert [[s.action for s in t.steps] for t in got] == [[s.action for s in t.steps] for t in want]
    assert all(t.success for t in got)


# ---------------------------------------------------------------------------------------------------------------
# Failure injection
# ---------------------------------------------------------------------------------------------------------------
CREDIT = ("StepGym/CreditToy-v0", {"split": "valid"})


def credit_eval(client: ChatClient, out: Path, **kw: Any) -> dict[str, Any]:
    kw.setdefault("limit", 6)
    kw.setdefault("concurrency", 3)
    return evaluate_endpoint(client, EndpointEvalConfig(CREDIT[0], out_dir=out, env_kwargs=CREDIT[1], **kw))


def written(out: Path) -> list[int]:
    """The task index of every ``episode`` record in the file, duplicates included (none may be)."""
    path = out / FILE_NAME
    return [r["group"] for r in read_records(path) if r["kind"] == "episode"] if path.exists() else []


def assert_each_task_once(out: Path, n: int) -> list[dict[str, Any]]:
    assert sorted(written(out)) == list(range(n))  # every task, none twice
    return read_recording(out / FILE_NAME).episodes


def test_transient_faults_are_retried_and_change_nothing(serve, tmp_path: Path) -> None:
    server = serve(scripted_reply)
    with client_for(server) as client:
        clean = credit_eval(client, tmp_path / "clean")
    faulty = serve(scripted_reply)
    faulty.faults.extend(["429", "500", "drop", "slow", "garbage", "429", "500", "drop"])
    with client_for(faulty, max_retries=3) as client:
        got = credit_eval(client, tmp_path / "faulty")
        assert client.stats["retries"] == 8  # one retry per injected fault, no more
    assert {k: got[k] for k in SUMMARY_KEYS} == {k: clean[k] for k in SUMMARY_KEYS}
    assert got["usage"]["requests"] == clean["usage"]["requests"]  # usage counts answered requests only
    assert_each_task_once(tmp_path / "faulty", 6)


def test_persistent_errors_give_bounded_retries_and_no_partial_episodes(serve, tmp_path: Path) -> None:
    server = serve(scripted_reply)
    server.always = "500"
    with client_for(server, max_retries=2) as client, pytest.raises(LLMUnavailableError) as err:
        credit_eval(client, tmp_path, concurrency=2)
    assert "after 3 attempt(s)" in str(err.value) and "HTTP 500" in str(err.value)
    assert "run the same evaluation again" in str(err.value)
    # at most the episodes in flight each made their 3 attempts; nothing later was started
    assert 3 <= server.posts <= 2 * 3
    assert written(tmp_path) == []
    server.always = ""
    with client_for(server) as client:
        s = credit_eval(client, tmp_path, concurrency=2)
    assert s["complete"] and s["success"] == 1.0
    assert_each_task_once(tmp_path, 6)


def test_server_killed_mid_run_then_resumed(serve, tmp_path: Path) -> None:
    clean_server = serve(scripted_reply)
    with client_for(clean_server) as client:
        clean = credit_eval(client, tmp_path / "clean", limit=8)
    server = serve(scripted_reply)
    server.kill_after = 20  # a few episodes finish (each takes ~4 turns), then the server dies
    out = tmp_path / "run"
    with (
        client_for(server, max_retries=2) as client,
        pytest.raises(LLMUnavailableError, match="cannot connect"),
    ):
        credit_eval(client, out, limit=8, concurrency=2)
    first = assert_each_task_once_partial(out)
    assert 0 < len(first) < 8
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["n_tasks"] == len(first)
    # the server comes back (elsewhere): the same evaluation continues where it stopped
    back = serve(scripted_reply)
    with client_for(back) as client:
        resumed = credit_eval(client, out, limit=8, concurrency=2)
    assert resumed["episodes_resumed"] == len(first) and resumed["complete"]
    lines = assert_each_task_once(out, 8)
    assert lines[: len(first)] == first  # finished episodes were kept as they were
    assert {k: resumed[k] for k in SUMMARY_KEYS} == {k: clean[k] for k in SUMMARY_KEYS}
    assert back.answered == clean["usage"]["requests"] - sum(r["usage"]["requests"] for r in first)


def assert_each_task_once_partial(out: Path) -> list[dict[str, Any]]:
    groups = written(out)
    assert len(set(groups)) == len(groups)
    return read_recording(out / FILE_NAME).episodes


def test_torn_last_record_is_dropped_and_the_run_continues(serve, tmp_path: Path) -> None:
    server = serve(scripted_reply)
    path = tmp_path / FILE_NAME
    with client_for(server) as client:
        credit_eval(client, tmp_path, limit=3, concurrency=1)
        # the third episode was being written when the process died: its gzip member is cut short
        path.write_bytes(path.read_bytes()[:-25])
        assert [e["group"] for e in read_recording(path).episodes] == [0, 1]
        s = credit_eval(client, tmp_path, limit=5)
    assert s["episodes_resumed"] == 2 and s["n_tasks"] == 5
    assert_each_task_once(tmp_path, 5)  # the torn member is gone from the file, not just skipped


def test_resume_refuses_other_settings(serve, tmp_path: Path) -> None:
    server = serve(scripted_reply)
    with client_for(server) as client:
        credit_eval(client, tmp_path, limit=2)
        with pytest.raises(EvalRunError, match="sampling"):
            credit_eval(client, tmp_path, limit=2, sampling=Sampling(temperature=0.7))
        # a folder holding another kind of recording (a training run's) is not mistaken for finished episodes
        train = tmp_path / "train"
        EpisodeWriter(train / FILE_NAME, {"source": "train"}).close()
        with pytest.raises(EvalRunError, match="another kind"):
            credit_eval(client, train, limit=2)
        assert not (train / "run.json").exists() and written(train) == []


def test_unreachable_endpoint_and_unknown_model(serve, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with (
        ChatClient(f"http://127.0.0.1:{port}/v1", MODEL, retry=RetryPolicy(timeout=1.0)) as client,
        pytest.raises(
            LLMUnavailableError, match=rf"cannot reach the LLM server at http://127\.0\.0\.1:{port}"
        ),
    ):
        credit_eval(client, tmp_path)
    server = serve(scripted_reply)
    with ChatClient(server.url, "no-such-model", retry=RetryPolicy(timeout=5.0)) as client:
        with pytest.raises(LLMConfigError, match=rf"does not serve model 'no-such-model'.*{MODEL}"):
            credit_eval(client, tmp_path)
        # a server without /models: the chat request's 404 is a configuration error, not retried
        with pytest.raises(LLMConfigError, match=r"HTTP 404.*does not exist"):
            credit_eval(client, tmp_path, check_model=False)
    assert 1 <= server.posts <= 3  # the episodes already started, one request each, never retried
    assert written(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------------------
def test_cli_eval_and_rollout(serve, tmp_path: Path, capsys, monkeypatch) -> None:
    from stepgym.cli import main

    server = serve(scripted_reply)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    common = ["--env", CREDIT[0], "--split", "valid", "--limit", "3", "--no-progress", "--concurrency", "2"]
    assert main(["eval", "--model", MODEL, *common, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert f"{MODEL} on {CREDIT[0]} (valid): success 1.000 over 3 of 3 tasks" in out
    assert "within budget:" in out and "tokens:" in out and "valid-action ratio 1.000" in out
    assert main(["rollout", "--agent", "llm", "--model", MODEL, *common, "--out", str(tmp_path / "b")]) == 0
    assert "success 1.000 over 3 of 3 tasks" in capsys.readouterr().out
    a = [e["steps"] for e in episodes(tmp_path / "a")]
    b = [e["steps"] for e in episodes(tmp_path / "b")]
    assert a == b and len(a) == 3
    # unknown model: a clear message and exit code 1, nothing written
    assert main(["eval", "--model", "nope", *common, "--out", str(tmp_path / "c")]) == 1
    assert "does not serve model 'nope'" in capsys.readouterr().err


def test_cli_uses_the_only_served_model(serve, tmp_path: Path, capsys, monkeypatch) -> None:
    """No --model: the server's only model is used; several: a one-line error listing them. No --split: the
    env's evaluation split (the credit toy's ``valid``)."""
    from stepgym.cli import main

    server = serve(scripted_reply)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("STEPGYM_LLM_MODEL", raising=False)
    common = ["--env", CREDIT[0], "--limit", "2", "--no-progress", "--concurrency", "2"]
    assert main(["eval", "--base-url", server.url, *common, "--out", str(tmp_path / "a")]) == 0
    assert f"{MODEL} on {CREDIT[0]} (valid): success 1.000 over 2 of 2 tasks" in capsys.readouterr().out
    server.models = [{"id": MODEL}, {"id": "other-model"}]
    assert main(["eval", "--base-url", server.url, *common, "--out", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert f"serves 2: {MODEL}, other-model" in err and "--model NAME" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_default_output_is_keyed_by_served_weights_and_settings(
    serve, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Re-serving another checkpoint under the same name, or changing the sampling or the seed, never resumes the
    old episodes: the default folder is keyed by all of them, and an explicit --out refuses to mix."""
    from stepgym.cli import main

    server = serve(scripted_reply)
    server.models = [{"id": MODEL, "object": "model", "root": "/ckpt/step-100"}]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    args = ["eval", "--model", MODEL, "--env", CREDIT[0], "--limit", "2", "--no-progress"]

    def folders() -> set[Path]:
        return {p.parent for p in (tmp_path / "runs" / "eval").glob("*/*/summary.json")}

    assert main(args) == 0 and len(folders()) == 1
    assert main(args) == 0 and len(folders()) == 1  # the same command resumes
    assert "(2 episodes resumed)" in capsys.readouterr().out
    server.models[0]["root"] = "/ckpt/step-200"
    assert main(args) == 0 and len(folders()) == 2
    assert "(0 episodes resumed)" in capsys.readouterr().out
    assert main([*args, "--temperature", "0.7", "--sampling-seed", "1"]) == 0 and len(folders()) == 3
    assert main([*args, "--seed", "1"]) == 0 and len(folders()) == 4
    run = json.loads((sorted(folders())[0] / "run.json").read_text())
    assert run["served"]["root"].startswith("/ckpt/step-")
    explicit = ["eval", "--model", MODEL, "--env", CREDIT[0], "--limit", "2", "--no-progress", "--out", "x"]
    assert main(explicit) == 0
    capsys.readouterr()
    server.models[0]["root"] = "/ckpt/step-300"
    assert main(explicit) == 1
    err = capsys.readouterr().err
    assert "other weights under this model name" in err and "step-200" in err and "step-300" in err


def test_eval_help_describes_evaluation(capsys) -> None:
    from stepgym.cli import main

    assert main(["eval", "--help"]) == 0  # one screen, as train's (--help-all: every field)
    text = " ".join(capsys.readouterr().out.split())
    assert "Evaluate a policy on the fixed evaluation splits" in text and "--checkpoint DIR" in text
    assert "--model NAME" in text and "GRPO with step-level shapers" not in text
    with pytest.raises(SystemExit):
        main(["eval", "--model", "x", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "OpenAI-compatible" in text and "--concurrency" in text and "continues where it stopped" in text


def test_evaluator_process_killed_then_resumed(serve, tmp_path: Path) -> None:
    """``stepgym eval`` is SIGKILLed while episodes are in flight and lines are being appended; the same
    evaluation resumed in process completes with every task recorded exactly once."""

    def slow_reply(prompt: str) -> str:
        time.sleep(0.05)
        return scripted_reply(prompt)

    server = serve(slow_reply)
    out = tmp_path / "run"
    env = {**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-test"}
    cmd = [
        sys.executable,
        "-m",
        "stepgym.cli",
        "eval",
        "--model",
        MODEL,
        "--env",
        CREDIT[0],
        "--split",
        "valid",
    ]
    cmd += ["--limit", "10", "--concurrency", "2", "--no-progress", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def recorded() -> int:
        try:
            return len(written(out))
        except CorruptDataError:  # the header member is still being written
            return 0

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if recorded() >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    first = assert_each_task_once_partial(out)
    assert 2 <= len(first) < 10
    with client_for(server, timeout=30.0) as client:
        s = evaluate_endpoint(
            client, EndpointEvalConfig(CREDIT[0], out_dir=out, split="valid", limit=10, concurrency=2)
        )
    assert s["episodes_resumed"] == len(first) and s["complete"] and s["success"] == 1.0
    assert_each_task_once(out, 10)


def test_endpoint_modules_import_light() -> None:
    """Neither the endpoint evaluation nor the hints module pulls torch; httpx loads only when a client is built."""
    code = (
        "import sys, stepgym.llm_eval, stepgym.wrappers.hints, stepgym.rollout; "
        "print([m for m in ('torch', 'transformers', 'httpx') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_evaluate_endpoint_stays_readable() -> None:
    """Issue 28: the function had grown to 108 lines; its parts are helpers now (the project's rule: under 80)."""
    import ast
    import inspect

    import stepgym.llm_eval as mod

    tree = ast.parse(inspect.getsource(mod))
    long = [
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > 80  # type: ignore[operator]
    ]
    assert long == []


def test_summary_leaves_unknown_effective_flags_out_of_the_ratio() -> None:
    """EnvFeedbackWrapper says EFFECTIVE=None (unknown) without a state key: the ratio counts known steps only."""
    from stepgym import schema as sch
    from stepgym.llm_eval import episode_records, summarise_records

    flags = [True, None, False, None]
    steps = [
        sch.Step("o", "a", 0.0, "o", i == len(flags) - 1, False, {sch.EFFECTIVE: f, sch.FORMAT_VALID: True})
        for i, f in enumerate(flags)
    ]
    traj = sch.Trajectory(task_id="t", initial_observation="o", initial_info={}, steps=steps)
    records = episode_records(0, traj, {}, 0.0)
    episode = next(r for r in records if r["kind"] == "episode")
    episode = {**episode, "steps": [r for r in records if r["kind"] == "step"]}  # as read_recording gives it
    summary = summarise_records([episode], budgets=[4])
    assert (
        summary["effective_ratio"] == 0.5
    )  # one of the two known steps; unknown ones are not "not effective"
