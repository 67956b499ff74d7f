"""stepgym envs through NeMo Gym 0.7: its own ``gymnasium_agent`` drives :class:`StepGymResourcesServer` over HTTP.

NeMo Gym 0.7 requires Python >= 3.13.14, stepgym's env stack runs on 3.11, so these tests run in a Python 3.13
virtualenv of their own (``scripts/test_nemo_gym.sh``, which sets ``STEPGYM_NEMO_GYM_TESTS=1`` and
``STEPGYM_MAIN_PYTHON``, the interpreter with stepgym's envs). In the main environment only the
missing-dependency check runs.

The processes, as NeMo Gym's launcher would start them (``NEMO_GYM_CONFIG_DICT`` / ``NEMO_GYM_CONFIG_PATH``, the
global config resolved by NeMo Gym's own parser):

* ``stepgym serve ENV_ID`` under the main interpreter (the real command, real envs and data);
* the resources server, ``python -m stepgym.integrations.nemo_gym``;
* NeMo Gym's ``gymnasium_agent`` (``responses_api_agents/gymnasium_agent/app.py``, unmodified);
* the policy: a **stand-in model server** in this process (``/v1/responses`` replying with scripted actions; no
  model can run here). The scripts are the in-process env's expert actions, so every answer can be compared.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stepgym.errors import DependencyNotInstalled

sys.path.insert(0, str(Path(__file__).parent))
from _integration_venv import installed_or_fail

HAVE_NEMO_GYM = installed_or_fail("nemo_gym", "STEPGYM_NEMO_GYM_TESTS", "scripts/test_nemo_gym.sh")


def test_missing_nemo_gym_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "nemo_gym", None)
    monkeypatch.delitem(sys.modules, "stepgym.integrations.nemo_gym", raising=False)
    with pytest.raises(DependencyNotInstalled, match=r"pip install 'stepgym\[nemo-gym\]'"):
        importlib.import_module("stepgym.integrations.nemo_gym")


if HAVE_NEMO_GYM:
    import httpx
    import uvicorn
    from fastapi import FastAPI, Request
    from omegaconf import OmegaConf

    from stepgym.integrations.nemo_gym import EPISODE_KEY

    REPO = Path(__file__).resolve().parents[1]
    MAIN_PY = os.environ.get("STEPGYM_MAIN_PYTHON", sys.executable)
    ENVS = {  # env id, kwargs, stepgym serve's worker processes, max steps
        "alfworld": ("StepGym/ALFWorld-v0", {"split": "valid_unseen"}, 1, 50),
        "webshop": ("StepGym/WebShop-v0", {}, 0, 12),
        "searchqa": ("StepGym/SearchQA-v0", {"dataset": "bamboogle"}, 0, 4),
        "credittoy": ("StepGym/CreditToy-v0", {"split": "valid"}, 0, 12),
    }
    SEEDS = (3101, 3102)  # held out: used nowhere else

    def _free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
        path = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
        return {**os.environ, "PYTHONPATH": path, **(extra or {})}

    def _wait_healthy(url: str, proc: subprocess.Popen, what: str) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"{what} exited with {proc.returncode}: {proc.stderr.read()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        proc.kill()
        raise AssertionError(f"{what} never became healthy at {url}")

    def _stop(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _reference(name: str, seed: int, first_action: str | None = None) -> list[dict[str, Any]]:
        env_id, kwargs, _, max_steps = ENVS[name]
        cmd = [MAIN_PY, str(REPO / "tests" / "_serve_reference.py"), env_id, json.dumps(kwargs), str(seed)]
        cmd += [str(max_steps)] + ([json.dumps(first_action)] if first_action is not None else [])
        out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)

    # -- the stand-in policy: replies scripted per episode ------------------------------------------------
    SCRIPTS: dict[str, list[str]] = {}  # the row's first user message -> the replies, turn by turn

    def _message_text(item: Any) -> str:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):
            return "".join(c.get("text", "") for c in content if isinstance(c, dict))
        return content if isinstance(content, str) else ""

    def _model_app() -> FastAPI:
        app = FastAPI()

        @app.post("/v1/responses")
        async def responses(request: Request) -> dict[str, Any]:
            body = await request.json()
            items = body["input"] if isinstance(body["input"], list) else [{"content": body["input"]}]
            turn = sum(1 for it in items if isinstance(it, dict) and it.get("role") == "assistant")
            text = SCRIPTS[_message_text(items[0])][turn]
            message = {
                "id": f"msg-{turn}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
            usage = {
                "input_tokens": 1,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 2,
            }
            return {
                "id": f"resp-{turn}",
                "object": "response",
                "created_at": 0.0,
                "model": "scripted-stand-in",
                "output": [message],
                "parallel_tool_calls": False,
                "tool_choice": "auto",
                "tools": [],
                "usage": usage,
            }

        return app

    class _ModelServer:
        def __init__(self) -> None:
            self.port = _free_port()
            config = uvicorn.Config(_model_app(), host="127.0.0.1", port=self.port, log_level="warning")
            self.server = uvicorn.Server(config)
            self.thread = threading.Thread(target=self.server.run, daemon=True)

        def __enter__(self) -> _ModelServer:
            self.thread.start()
            deadline = time.monotonic() + 30
            while not self.server.started and time.monotonic() < deadline:
                time.sleep(0.05)
            assert self.server.started, "the stand-in model server did not start"
            return self

        def __exit__(self, *exc: object) -> None:
            self.server.should_exit = True
            self.thread.join(timeout=10)

    # -- the NeMo Gym side, started as its launcher starts servers -----------------------------------------
    def _global_config(serve_url: str, ports: dict[str, int], model_port: int) -> str:
        from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig

        cfg = {
            "stepgym_env": {
                "resources_servers": {
                    "stepgym": {
                        "entrypoint": "nemo_gym.py",
                        "host": "127.0.0.1",
                        "port": ports["env"],
                        "domain": "games",
                        "stepgym_url": serve_url,
                        "request_timeout_s": 120,
                    }
                }
            },
            "stepgym_agent": {
                "responses_api_agents": {
                    "gymnasium_agent": {
                        "entrypoint": "app.py",
                        "host": "127.0.0.1",
                        "port": ports["agent"],
                        "resources_server": {"type": "resources_servers", "name": "stepgym_env"},
                        "model_server": {"type": "responses_api_models", "name": "policy_model"},
                        "max_steps": 60,  # above every env's own limit: the env ends each episode
                    }
                }
            },
            "policy_model": {
                "responses_api_models": {
                    "scripted": {"entrypoint": "app.py", "host": "127.0.0.1", "port": model_port}
                }
            },
            "stepgym_environment_server": {  # what NeMo Gym's rollout collection posts /run to
                "environment_servers": {
                    "legacy_agent": {
                        "entrypoint": "app.py",
                        "host": "127.0.0.1",
                        "port": ports["episodes"],
                        "agent_server": {"type": "responses_api_agents", "name": "stepgym_agent"},
                    }
                }
            },
            "head_server": {"host": "127.0.0.1", "port": ports["head"]},
        }
        parsed = GlobalConfigDictParser().parse(
            GlobalConfigDictParserConfig(
                initial_global_config_dict=OmegaConf.create(cfg),
                skip_load_from_cli=True,
                skip_load_from_dotenv=True,
            )
        )
        return OmegaConf.to_yaml(parsed)

    class _Stack:
        """stepgym serve + the resources server + NeMo Gym's agent for one env (and the stand-in model)."""

        def __init__(self, name: str, tmp: Path) -> None:
            self.name, self.tmp, self.procs = name, tmp, {}
            self.ports = {k: _free_port() for k in ("env", "agent", "episodes", "head")}

        def start_serve(self, port: int = 0) -> None:
            env_id, kwargs, workers, _ = ENVS[self.name]
            cmd = [
                MAIN_PY,
                "-m",
                "stepgym.cli",
                "serve",
                env_id,
                "--port",
                str(port),
                "--workers",
                str(workers),
            ]
            cmd += [f"--env-kwarg={k}={json.dumps(v)}" for k, v in kwargs.items()]
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
            )
            line = proc.stdout.readline()  # "stepgym serve: ... at http://127.0.0.1:PORT (...)"
            if " at http://" not in line:
                proc.kill()
                raise AssertionError(f"stepgym serve did not start: {line!r} {proc.stderr.read()[-3000:]}")
            self.serve_url = line.split(" at ", 1)[1].split(" ", 1)[0]
            self.procs["serve"] = proc
            _wait_healthy(self.serve_url, proc, "stepgym serve")

        def __enter__(self) -> _Stack:
            self.model = _ModelServer().__enter__()
            self.start_serve()
            config = _global_config(self.serve_url, self.ports, self.model.port)
            for key, name, module in (
                ("env", "stepgym_env", "stepgym.integrations.nemo_gym"),
                ("agent", "stepgym_agent", "responses_api_agents.gymnasium_agent.app"),
                ("episodes", "stepgym_environment_server", "environment_servers.legacy_agent.app"),
            ):
                # NeMo Gym starts a server in its own folder; stepgym's from the checkout (stepgym/integrations/ holds
                # modules named like the trainers, which must not shadow them)
                cwd = REPO if key == "env" else Path(importlib.util.find_spec(module).origin).parent
                extra = {"NEMO_GYM_CONFIG_DICT": config, "NEMO_GYM_CONFIG_PATH": name}
                self.procs[key] = subprocess.Popen(
                    [sys.executable, "-m", module],
                    cwd=cwd,
                    env=_env(extra),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            for key in ("env", "agent", "episodes"):
                _wait_healthy(self.url(key), self.procs[key], f"NeMo Gym's {key} server")
            return self

        def url(self, key: str) -> str:
            return f"http://127.0.0.1:{self.ports[key]}"

        def __exit__(self, *exc: object) -> None:
            for proc in self.procs.values():
                _stop(proc)
            self.model.__exit__()

        def run(self, seed: int, replies: list[str]) -> dict[str, Any]:
            """One NeMo Gym rollout (``POST /run`` on the environment server, which relays it to the agent) with the
            stand-in model replying ``replies``."""
            key = f"{self.name} episode seed={seed} #{len(SCRIPTS)}"
            SCRIPTS[key] = replies
            body = {"responses_create_params": {"input": [{"role": "user", "content": key}]}, "seed": seed}
            r = httpx.post(self.url("episodes") + "/run", json=body, timeout=600)
            assert r.status_code == 200, r.text[-3000:]
            return r.json()

    @pytest.fixture(scope="module", params=["alfworld", "webshop", "searchqa"])
    def stack(request, tmp_path_factory):
        with _Stack(request.param, tmp_path_factory.mktemp(request.param)) as s:
            yield s

    @pytest.fixture(scope="module")
    def toy(tmp_path_factory):
        """CreditToy's stack: the equality check, then the bad-input cases (the last one stops stepgym serve)."""
        with _Stack("credittoy", tmp_path_factory.mktemp("credittoy")) as s:
            yield s

    def _user_messages(run: dict[str, Any]) -> list[str]:
        return [_message_text(it) for it in run["response"]["output"] if it.get("role") == "user"]

    def _check_same_as_in_process(stack: _Stack) -> None:
        for seed in SEEDS:
            local = _reference(stack.name, seed)
            run = stack.run(seed, [s["action"] for s in local[1:]])
            assert run["info"][EPISODE_KEY] == local, (
                f"{stack.name} seed {seed}"
            )  # every obs, reward, annotation
            assert run["reward"] == pytest.approx(sum(s["reward"] for s in local[1:]))
            assert run["terminated"] == local[-1]["terminated"] and run["truncated"] == local[-1]["truncated"]
            # what the model was shown: the first observation (appended to the row's input), then each step's
            # while the episode went on
            assert _message_text(run["responses_create_params"]["input"][-1]) == local[0]["observation"]
            assert _user_messages(run) == [s["observation"] for s in local[1:-1]]
            assert {k: v for k, v in run["info"].items() if k != EPISODE_KEY} == local[-1]["info"]

    def test_nemo_gym_agent_sees_what_the_env_in_process_does(stack: _Stack, data_dir: Path) -> None:
        _check_same_as_in_process(stack)

    def test_nemo_gym_agent_on_credittoy(toy: _Stack) -> None:
        _check_same_as_in_process(toy)

    def test_an_invalid_action_is_an_env_answer_not_an_error(toy: _Stack) -> None:
        local = _reference(toy.name, SEEDS[0], first_action="dance on the ceiling")
        assert local[1]["info"]["stepgym/admissible"] is False
        run = toy.run(SEEDS[0], [s["action"] for s in local[1:]])
        assert run["info"][EPISODE_KEY] == local

    def test_concurrent_rollouts_stay_apart(toy: _Stack) -> None:
        from concurrent.futures import ThreadPoolExecutor

        seeds = list(range(3110, 3118))
        with ThreadPoolExecutor(len(seeds)) as pool:
            locals_ = list(pool.map(lambda s: _reference(toy.name, s), seeds))
            runs = list(
                pool.map(
                    lambda sl: toy.run(sl[0], [s["action"] for s in sl[1][1:]]),
                    zip(seeds, locals_, strict=True),
                )
            )
        for seed, local, run in zip(seeds, locals_, runs, strict=True):
            assert run["info"][EPISODE_KEY] == local, f"seed {seed}"
        stats = httpx.get(toy.serve_url + "/stats", timeout=30).json()
        assert stats["sessions"] == 0  # every finished episode closed its stepgym session

    def test_bad_requests_get_clear_errors(toy: _Stack) -> None:
        with httpx.Client(base_url=toy.url("env"), timeout=60) as c:  # keeps NeMo Gym's session cookie
            params = {"responses_create_params": {"input": []}}
            step = {**params, "response": _blank_response()}
            r = c.post("/step", json=step)
            assert r.status_code == 409 and "step before reset" in r.text
            r = c.post("/reset", json={**params, "seed": "seven"})
            assert r.status_code == 422 and "seed must be a non-negative integer" in r.text
            r = c.post("/reset", json={**params, "seed": 5, "ground_truth": "ignored"})
            assert r.status_code == 200 and r.json()["info"]["supports_explicit_close"] is True
            assert httpx.get(toy.serve_url + "/stats", timeout=30).json()["sessions"] == 1
            assert c.post("/close", json={}).status_code == 200  # NeMo Gym's explicit close
            assert httpx.get(toy.serve_url + "/stats", timeout=30).json()["sessions"] == 0
            r = c.post("/step", json=step)
            assert r.status_code == 409  # closed: a new episode needs a reset

    class _DroppingProxy:
        """A TCP proxy in front of ``stepgym serve`` that, when told, passes one ``POST /step`` on and then cuts
        the connection before its answer comes back: a network failure with the step in flight."""

        def __init__(self, upstream: str) -> None:
            host, port = upstream.removeprefix("http://").split(":")
            self.upstream, self.drop_next, self.dropped = (host, int(port)), False, 0
            self.sock = socket.create_server(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
            threading.Thread(target=self._accept, daemon=True).start()

        def _accept(self) -> None:
            while True:
                try:
                    client, _ = self.sock.accept()
                except OSError:
                    return
                threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

        def _pipe(self, client: socket.socket) -> None:
            import select

            upstream, dropping = socket.create_connection(self.upstream), False
            with client, upstream:
                while True:
                    ready, _, _ = select.select([client, upstream], [], [], 60)
                    for s in ready:
                        data = s.recv(1 << 16)
                        if not data:
                            return
                        if s is client:
                            if data.startswith(b"POST /step") and self.drop_next:
                                self.drop_next, dropping = False, True
                            upstream.sendall(data)
                        elif dropping:  # the step was applied upstream; its answer is lost on the way
                            self.dropped += 1
                            return
                        else:
                            client.sendall(data)
                    if not ready:
                        return

        def close(self) -> None:
            self.sock.close()

    def test_a_step_whose_answer_was_lost_is_applied_once(toy: _Stack) -> None:
        import asyncio
        from unittest.mock import MagicMock

        from nemo_gym.openai_utils import NeMoGymResponse
        from nemo_gym.server_utils import (
            GlobalAIOHTTPAsyncClientConfig,
            ServerClient,
            get_global_aiohttp_client,
            set_global_aiohttp_client,
        )

        from stepgym.integrations.nemo_gym import StepGymResourcesServer, StepGymResourcesServerConfig

        local = _reference(toy.name, 3122)
        proxy = _DroppingProxy(toy.serve_url)
        cfg = StepGymResourcesServerConfig(host="", port=0, entrypoint="", name="e", stepgym_url=proxy.url)
        server = StepGymResourcesServer(config=cfg, server_client=MagicMock(spec=ServerClient))

        async def play() -> tuple[tuple, int]:
            set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
            try:
                await server.reset({"seed": 3122}, "nemo-session")
                proxy.drop_next = True
                reply = NeMoGymResponse.model_validate(_blank_response(local[1]["action"]))
                out = await server.step(reply, {}, "nemo-session")
                sid = server._episodes["nemo-session"].sid
                state = httpx.get(toy.serve_url + "/state", params={"session_id": sid}, timeout=30).json()
                await server.close_session("nemo-session")
                return out, state["step_count"]
            finally:
                await get_global_aiohttp_client().close()

        try:
            (_, reward, _, _, info), step_count = asyncio.run(play())
        finally:
            proxy.close()
        assert proxy.dropped == 1  # the answer really was lost ...
        assert step_count == 1  # ... the step was not sent again ...
        assert (
            info[EPISODE_KEY] == local[:2] and reward == local[1]["reward"]
        )  # ... and its answer was recovered

    def test_a_dead_stepgym_serve_is_a_503_naming_it_and_a_restarted_one_serves_again(toy: _Stack) -> None:
        body = {"responses_create_params": {"input": []}, "seed": 1}
        url = toy.serve_url

        def restart() -> None:
            _stop(toy.procs["serve"])
            toy.start_serve(port=int(url.rsplit(":", 1)[1]))  # back on the same address, its sessions gone
            assert toy.serve_url == url

        with httpx.Client(base_url=toy.url("env"), timeout=120) as c:  # one NeMo Gym session throughout
            assert c.post("/reset", json=body).status_code == 200
            restart()
            assert c.post("/reset", json=body).status_code == 200  # the lost stepgym session is replaced
            _stop(toy.procs["serve"])
            r = c.post("/reset", json=body)
            assert r.status_code == 503 and url in r.text and "unreachable" in r.text
            assert toy.procs["env"].poll() is None  # the resources server keeps serving
            restart()
            assert c.post("/reset", json=body).status_code == 200
            assert c.post("/close", json={}).status_code == 200
        local = _reference(toy.name, 3120)
        assert toy.run(3120, [s["action"] for s in local[1:]])["info"][EPISODE_KEY] == local

    def test_every_step_carries_the_episode_so_far(toy: _Stack) -> None:
        """The agent keeps only the last step's info, whichever step is last (its own max_steps included)."""
        local = _reference(toy.name, 3121)
        with httpx.Client(base_url=toy.url("env"), timeout=60) as c:
            params = {"responses_create_params": {"input": []}}
            assert c.post("/reset", json={**params, "seed": 3121}).status_code == 200
            for k in (1, 2):
                step = {**params, "response": _blank_response(local[k]["action"])}
                info = c.post("/step", json=step).json()["info"]
                assert info[EPISODE_KEY] == local[: k + 1]
            assert c.post("/close", json={}).status_code == 200

    def test_more_than_one_worker_is_refused_at_start() -> None:
        from unittest.mock import MagicMock

        from nemo_gym.server_utils import ServerClient

        from stepgym.integrations.nemo_gym import StepGymResourcesServer, StepGymResourcesServerConfig

        cfg = StepGymResourcesServerConfig(host="", port=0, entrypoint="", name="stepgym_env", num_workers=4)
        server = StepGymResourcesServer(config=cfg, server_client=MagicMock(spec=ServerClient))
        with pytest.raises(ValueError, match=r"num_workers=4.*one worker"):
            server.setup_webserver()

    def _blank_response(text: str | None = None) -> dict[str, Any]:
        output = []
        if text is not None:
            content = [{"type": "output_text", "text": text, "annotations": []}]
            output = [
                {"id": "m", "type": "message", "role": "assistant", "status": "completed", "content": content}
            ]
        return {
            "id": "r",
            "object": "response",
            "created_at": 0.0,
            "model": "m",
            "output": output,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
        }
