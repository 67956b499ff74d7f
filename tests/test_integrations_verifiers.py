"""verifiers 0.4 (``stepgym.integrations.verifiers``): evaluations through verifiers' own ``vf-eval`` against a real
OpenAI-compatible server on 127.0.0.1.

verifiers 0.4.0 pins ``openai<3`` and ``mcp==2.0.0``, which the main environment has newer, so these tests run in a
virtualenv of their own (``scripts/test_verifiers.sh``, which sets ``STEPGYM_VERIFIERS_TESTS=1``). In the main
environment only the missing-dependency check runs; the evaluations are not defined there (not skipped), and the
virtualenv run fails loudly if verifiers is missing.

The server is the one of ``tests/test_eval_endpoint.py``; the model behind it is the project's HF backend with the
tiny in-process model (CreditToy and ALFWorld), or the scripted policy that wins CreditToy, whose episodes are
compared step for step with the bundled trainer's collector. Each evaluation is a real ``vf-eval`` process:
verifiers' interception server, its ``null`` chat harness (a PEP 723 script that ``uv`` provisions from PyPI on
first use) and its trace files.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stepgym import schema
from stepgym.errors import DependencyNotInstalled

sys.path.insert(0, str(Path(__file__).parent))
from _integration_venv import installed_or_fail

HAVE_VERIFIERS = installed_or_fail("verifiers", "STEPGYM_VERIFIERS_TESTS", "scripts/test_verifiers.sh")


def test_missing_verifiers_names_the_extra(monkeypatch) -> None:
    for name in ("verifiers", "verifiers.v1"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if it were not installed
    monkeypatch.delitem(sys.modules, "stepgym.integrations.verifiers", raising=False)
    monkeypatch.delitem(sys.modules, "stepgym_verifiers", raising=False)
    with pytest.raises(DependencyNotInstalled, match=r"pip install 'stepgym\[verifiers\]'"):
        importlib.import_module("stepgym.integrations.verifiers")
    with pytest.raises(DependencyNotInstalled, match="the verifiers integration"):
        importlib.import_module("stepgym_verifiers")


if HAVE_VERIFIERS:
    import test_eval_endpoint as endpoint
    from test_eval_endpoint import MODEL, in_process, scripted_reply

    serve = endpoint.serve  # the fixture that starts the chat-completions server

    CREDIT = ("StepGym/CreditToy-v0", {"split": "valid"})
    ALFWORLD = ("StepGym/ALFWorld-v0", {"split": "valid_seen", "max_steps": 2})

    def vf_eval(url: str, env_id: str, kwargs: dict[str, Any], out: Path, n: int, *extra: str):
        """One ``vf-eval`` run (verifiers' own CLI, in a process of its own); returns (process, episodes)."""
        bindir = str(Path(sys.executable).parent)  # vf-eval and uv live beside this interpreter
        env = {
            **os.environ,
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "STEPGYM_TEST_KEY": "sk-test",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")) if p
            ),
        }
        cmd = [os.path.join(bindir, "vf-eval"), "stepgym-verifiers", "--env.taskset.env", env_id]
        cmd += ["--env.taskset.env-kwargs", json.dumps(kwargs), "-m", MODEL, "--client.base-url", url]
        cmd += ["--client.api-key-var", "STEPGYM_TEST_KEY", "-n", str(n), "-c", "2", "--no-push", "--no-rich"]
        cmd += ["-o", str(out), "--run.name", "run", *extra]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        path = out / "run" / "traces.jsonl"
        episodes = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return proc, sorted(episodes, key=lambda e: e["task"]["data"]["idx"])

    def check_episode(ep: dict[str, Any], env_id: str) -> dict[str, Any]:
        """One finished episode: its trace carries the reward, the metrics and a consistent annotation record."""
        assert ep["ok"] and not ep["errors"], ep["errors"]
        (trace,) = ep["traces"]
        data = ep["task"]["data"]
        assert data["env_id"] == env_id and data["task_id"] == data["id"]
        assert ep["task"]["key"] == f"{env_id}:{data['task_id']}"
        rec = trace["info"]["stepgym"]
        assert rec["task_id"] == data["task_id"] and rec["n_steps"] == len(rec["steps"]) >= 1
        assert rec["return"] == pytest.approx(sum(s["reward"] for s in rec["steps"]))
        assert trace["rewards"]["env_return"]["score"] == pytest.approx(rec["return"])
        assert trace["metrics"]["won"] == float(rec["won"]) and trace["metrics"]["n_steps"] == rec["n_steps"]
        for s in rec["steps"]:
            assert isinstance(s["format_valid"], bool) and s["state_key"] and s["next_state_key"]
            assert s["admissible"] is None or isinstance(s["admissible"], bool)
        # one model turn per env step: the chat is user (the env's prompt), assistant (the reply), ...
        roles = [n["message"]["role"] for n in trace["nodes"]]
        assert roles == ["user", "assistant"] * rec["n_steps"]
        return rec

    def test_vf_eval_scripted_credit_matches_the_collector(serve, tmp_path: Path) -> None:
        """A policy that wins CreditToy: every episode won, reward 1, and each step (action, reward, flags) the
        same as the bundled trainer's collector plays with the same policy."""
        server = serve(scripted_reply)
        proc, eps = vf_eval(server.url, *CREDIT, tmp_path, 2)
        assert proc.returncode == 0, proc.stderr[-3000:]
        recs = [check_episode(e, CREDIT[0]) for e in eps]
        assert len(recs) == 2 and all(r["won"] and r["return"] == 1.0 for r in recs)
        trajs = in_process(*CREDIT, [r["task_id"] for r in recs])
        for rec, traj in zip(recs, trajs, strict=True):
            assert [s["action"] for s in rec["steps"]] == [s.info[schema.PARSED_ACTION] for s in traj.steps]
            assert [s["reward"] for s in rec["steps"]] == [s.reward for s in traj.steps]
            for name, key in (("format_valid", schema.FORMAT_VALID), ("admissible", schema.ADMISSIBLE)):
                assert [s[name] for s in rec["steps"]] == [s.info[key] for s in traj.steps]
            assert [s["state_key"] for s in rec["steps"]] == [i[schema.STATE_KEY] for i in traj.infos()[:-1]]
        assert server.answered == sum(r["n_steps"] for r in recs)

    @pytest.fixture
    def hf_reply(tmp_path_factory):
        """The project's HF backend with the tiny model (as tests/test_eval_endpoint.py serves it), greedy."""
        pytest.importorskip("torch")
        trainer, reply = endpoint.tiny_hf_trainer(tmp_path_factory.mktemp("tiny"))
        yield reply
        trainer.close()

    def test_vf_eval_hf_backend_on_credit_and_alfworld(serve, hf_reply, tmp_path: Path, data_dir) -> None:
        """The tiny HF model served over HTTP, evaluated by vf-eval on CreditToy and on ALFWorld games: episodes
        ran to their end (won or out of steps), each step annotated, the env's return recorded as the reward."""
        server = serve(hf_reply)
        for env_id, kwargs in ((CREDIT[0], {**CREDIT[1], "max_steps": 2}), ALFWORLD):
            out = tmp_path / env_id.split("/")[1]
            proc, eps = vf_eval(server.url, env_id, kwargs, out, 2)
            assert proc.returncode == 0, proc.stderr[-3000:]
            recs = [check_episode(e, env_id) for e in eps]
            assert len(recs) == 2
            for r in recs:
                assert r["won"] or (r["truncated"] and r["n_steps"] == 2)
        assert server.answered >= 4

    def test_dead_server_is_a_clear_error_on_every_trace(tmp_path: Path) -> None:
        """Nothing listens at the URL: every episode fails with verifiers' provider error naming the connection
        failure; no reward is recorded for them, and the annotation record shows no step was taken."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nothing listens there
        proc, eps = vf_eval(f"http://127.0.0.1:{port}/v1", *CREDIT, tmp_path, 2)
        assert proc.returncode == 0, proc.stderr[-3000:]  # vf-eval records failures on the traces
        assert len(eps) == 2
        for ep in eps:
            (trace,) = ep["traces"]
            assert not ep["ok"] and trace["stop_condition"] == "provider_error"
            assert any(
                e["type"] == "ProviderError" and "connect" in e["message"].lower() for e in trace["errors"]
            )
            assert "env_return" not in trace["rewards"] and trace["info"]["stepgym"]["n_steps"] == 0

    def test_unknown_env_id_fails_the_run(tmp_path: Path) -> None:
        proc, eps = vf_eval("http://127.0.0.1:9/v1", "StepGym/NoSuchEnv-v0", {}, tmp_path, 1)
        assert proc.returncode != 0 and eps == []
        assert "NoSuchEnv" in proc.stderr
