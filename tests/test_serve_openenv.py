"""``stepgym serve`` through OpenEnv 0.10's own client, and TRL's OpenEnv path on top of it.

openenv 0.10.0 pulls gradio and fastmcp (with an older ``mcp`` than the main environment keeps), so these tests run
in a virtualenv of their own (``scripts/test_openenv.sh``, which sets ``STEPGYM_OPENENV_TESTS=1``). In the main
environment only the missing-dependency check runs; the rest is not defined there (not skipped), and the
virtualenv run fails loudly if openenv is missing.

* ALFWorld (in worker processes), WebShop, Search-QA and CreditToy served, played by OpenEnv's
  ``GenericEnvClient`` with the in-process env's expert actions on held-out seeds: every observation, reward,
  done flag and annotation equals the in-process env's.
* :class:`stepgym.serve.client.RemoteEnv` (a Gymnasium env over OpenEnv's client) survives a dropped connection.
* TRL 1.16's ``GRPOTrainer(environment_factory=...)`` trains a tiny model for real GRPO steps on CPU, every tool
  call stepping the served env through OpenEnv's client.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from stepgym.errors import DependencyNotInstalled

sys.path.insert(0, str(Path(__file__).parent))
from _integration_venv import installed_or_fail

HAVE_OPENENV = installed_or_fail("openenv", "STEPGYM_OPENENV_TESTS", "scripts/test_openenv.sh")


def test_missing_openenv_names_the_extra(monkeypatch) -> None:
    for name in ("openenv", "openenv.core"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "stepgym.serve.client", raising=False)
    with pytest.raises(DependencyNotInstalled, match=r"pip install 'stepgym\[openenv\]'"):
        importlib.import_module("stepgym.serve.client")


if HAVE_OPENENV:
    from openenv.core import GenericEnvClient

    import stepgym  # noqa: F401
    from stepgym import schema
    from stepgym.serve.protocol import ServeLimits
    from stepgym.serve.server import ServeConfig, ServerThread

    sys.path.insert(0, str(Path(__file__).parent))
    from _serve_reference import local_episode

    def _local_episode(env_id: str, kwargs: dict, seed: int, max_steps: int) -> list[tuple]:
        """The in-process episode as (action, observation, reward, done, info) tuples, OpenEnv's view of a step."""
        return [
            (s["action"], s["observation"], s["reward"], s["terminated"] or s["truncated"], s["info"])
            for s in local_episode(env_id, kwargs, seed, max_steps)
        ]

    def _openenv_episode(url: str, seed: int, actions: list[str]) -> list[tuple]:
        with GenericEnvClient(base_url=url).sync() as client:
            r = client.reset(seed=seed)
            out: list[tuple] = [(None, r.observation["text"], r.reward, r.done, r.observation["info"])]
            for a in actions:
                s = client.step({"action": a})
                out.append((a, s.observation["text"], s.reward, s.done, s.observation["info"]))
        return out

    ENVS = {
        "alfworld": ("StepGym/ALFWorld-v0", {"split": "valid_unseen"}, 1, 12),
        "webshop": ("StepGym/WebShop-v0", {}, 0, 12),
        "searchqa": ("StepGym/SearchQA-v0", {"dataset": "bamboogle"}, 0, 4),
        "credittoy": ("StepGym/CreditToy-v0", {"split": "valid"}, 0, 12),
    }

    @pytest.mark.parametrize("name", list(ENVS))
    def test_openenv_client_sees_what_the_env_in_process_does(name: str, data_dir: Path) -> None:
        env_id, kwargs, workers, max_steps = ENVS[name]
        cfg = ServeConfig(env_id, kwargs, port=0, workers=workers, slots_per_worker=2)
        with ServerThread(cfg) as url:
            for seed in (2001, 2002):  # held out: used nowhere else
                local = _local_episode(env_id, kwargs, seed, max_steps)
                served = _openenv_episode(url, seed, [s[0] for s in local[1:]])
                assert served == local, f"{name} seed {seed}"
                assert len(served) > 1 and all(schema.TASK_ID in s[4] for s in served)

    def test_remote_env_resumes_after_a_dropped_connection() -> None:
        from stepgym.serve.client import RemoteEnv

        kwargs = {"split": "valid"}
        local = _local_episode("StepGym/CreditToy-v0", kwargs, 2003, 12)
        srv = ServerThread(
            ServeConfig("StepGym/CreditToy-v0", kwargs, port=0, limits=ServeLimits(grace_s=60))
        )
        with srv as url:
            env = RemoteEnv(url)
            try:
                obs, info = env.reset(seed=2003)
                got = [(None, obs, None, False, info)]
                for k, step in enumerate(local[1:]):
                    if k == 1:  # drop the socket under the client, as a flaky network would
                        env._client._run(env._async._ws.close())  # no "close" message: the session waits
                    o, r, term, trunc, i = env.step(step[0])
                    got.append((step[0], o, r, term or trunc, i))
                assert got == local
                assert srv.manager.counters["resumed"] == 1 and len(srv.manager.sessions) == 1  # same session
            finally:
                env.close()

    # -- TRL's OpenEnv path -------------------------------------------------------------------------------
    pytest.importorskip("trl")
    sys.path.insert(0, str(Path(__file__).parent))
    import torch
    from _trl_tiny import (
        ENV_ID,
        ENV_KWARGS,
        SYSTEM,
        clone,
        cpu_grpo_config,
        tiny_chat_model,
        tool_conversations,
    )
    from trl import GRPOTrainer

    from stepgym.integrations.trl import environment_factory
    from stepgym.steps.tasks import task_dataset

    @pytest.mark.slow
    def test_trl_grpo_trains_through_openenv_against_stepgym_serve(tmp_path: Path) -> None:
        from stepgym.serve.client import RemoteEnv

        srv = ServerThread(ServeConfig(ENV_ID, ENV_KWARGS, port=0))
        with srv as url:
            tool = {"tool_description": "Act in the room.", "action_description": "One admissible action."}
            Env = environment_factory(functools.partial(RemoteEnv, url), **tool)
            convs = tool_conversations(Env, 48)
            tok, model = tiny_chat_model(convs)
            clone(tok, model, convs, steps=100)
            steps_before = srv.manager.counters["steps"]
            seen: list[Any] = []

            def annotated(completions, environments, **_):
                eps = [e.annotations for e in environments]
                seen.extend(eps)
                return [
                    ep["n_steps"] + sum(bool(s["admissible"]) for s in ep["steps"]) + 10.0 * ep["return"]
                    for ep in eps
                ]

            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            args = cpu_grpo_config(
                str(tmp_path),
                gradient_checkpointing=True,
                max_completion_length=160,
                max_tool_calling_iterations=3,
            )
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=[annotated],
                args=args,
                processing_class=tok,
                train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
                environment_factory=Env,
            )
            trainer.train()
            assert len(seen) == 16
            assert sum(ep["n_steps"] for ep in seen) > 0
            assert srv.manager.counters["steps"] - steps_before == sum(
                ep["n_steps"] for ep in seen
            )  # all served
            assert sum(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters()) > 0
