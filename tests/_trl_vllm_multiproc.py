"""GroupRollout's vLLM server turn on N processes, run as ``python tests/_trl_vllm_multiproc.py OUT [die]`` or under
``torch.distributed.run --nproc_per_node N``.

The processes are joined by a real ``accelerate.Accelerator`` (gloo); the main process holds a stand-in for TRL's
``VLLMClient`` (it answers ``generate`` as the client does: completion ids and per-token top-1 log-probs; its reply
is chosen from the row's admissible actions by a hash of the row, and its log-prob is a function of the token), the
others hold none, as in TRL. Each process writes its rollout output to ``OUT/rank<r>.pt``; with ``die`` the stand-in
fails on its third request, as a server that goes away mid-generation, and each process writes the error it got.
"""

from __future__ import annotations

import ast
import re
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _trl_tiny import ENV_ID, ENV_KWARGS, SYSTEM, react_conversations, tiny_chat_model, vllm_server_trainer
from accelerate import Accelerator

from stepgym.integrations.trl import GroupRollout
from stepgym.steps.tasks import task_dataset

_ADMISSIBLE = re.compile(r"admissible actions in this situation are: (\[.*?\])")


class FakeClient:
    base_url = "http://127.0.0.1:9"

    def __init__(self, tok, die: bool) -> None:
        self.tok, self.die, self.calls = tok, die, 0

    def generate(self, prompts, n=1, logprobs=0, **_):
        self.calls += 1
        if self.die and self.calls == 3:
            raise ConnectionError("Connection refused")
        ids = []
        for row in prompts:
            actions = ast.literal_eval(_ADMISSIBLE.findall(self.tok.decode(row))[-1])
            pick = zlib.crc32(bytes(str(row), "ascii")) % len(actions)
            reply = f"<think>go</think><action>{actions[pick]}</action>"
            ids.append([*self.tok(reply, add_special_tokens=False)["input_ids"], self.tok.eos_token_id])
        return {"completion_ids": ids, "logprobs": [[[-0.001 * t] for t in c] for c in ids]}


def main() -> None:
    out, die = Path(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "die"
    out.mkdir(parents=True, exist_ok=True)
    acc = Accelerator(cpu=True)
    tok, _ = tiny_chat_model(react_conversations(24, seed=1), vocab=600)
    client = FakeClient(tok, die) if acc.is_main_process else None
    trainer = vllm_server_trainer(tok, client, acc)
    rows = task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM)
    prompts = [rows[i]["prompt"] for i in range(3) for _ in range(4)]
    n = len(prompts) // acc.num_processes
    mine = prompts[acc.process_index * n : (acc.process_index + 1) * n]
    rollout = GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24, seed=0)
    try:
        result = rollout(mine, trainer)
        result = {k: result[k] for k in ("completion_ids", "env_mask", "logprobs")}
    except Exception as e:  # the test reads which error each process got
        result = {"error": f"{type(e).__name__}: {e}"}
    torch.save(result, out / f"rank{acc.process_index}.pt")
    # Leave together and close the gloo group before the interpreter exits: a process tearing down its group while
    # a peer is still inside a collective aborts that peer, and the launcher then reports a failure.
    acc.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
