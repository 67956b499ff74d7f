"""StepGRPOTrainer on one global batch, run as ``python tests/_trl_multiproc.py OUT PRESETS`` (one process) or
``accelerate launch --cpu --num_processes N tests/_trl_multiproc.py OUT PRESETS`` (N processes, gloo).

For every preset (comma-separated ``PRESETS``) it trains 2 optimizer steps on a global batch of 12 rows (3 groups
of 4; on 2 processes the middle group straddles them) and writes, per process, ``OUT/<preset>.rank<r>.pt``: the
advantages TRL's loss receives for this process's rows of each step (in TRL's row order, before its shuffle), the
completion masks and ids, and the model's weights before and after the 2 steps. Generation is scripted (a reply chosen from the
admissible actions by the row's global index and turn, longer on later rows), so 1 and N processes play the very same episodes and
anything that differs comes from gathering and shaping. The model is a seeded random tiny Qwen2
(tests/_trl_tiny.py): the teacher rescoring of AHEAD and StepOPSD really runs on it.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _trl_tiny import ENV_ID, ENV_KWARGS, SYSTEM, cpu_grpo_config, react_conversations, tiny_chat_model

from stepgym.integrations.trl import GroupRollout, StepGRPOTrainer, episode_return
from stepgym.steps.tasks import task_dataset
from stepgym.wrappers.arg import ARGWrapper

GLOBAL_BATCH, GROUP = 12, 4
_ADMISSIBLE = re.compile(r"admissible actions in this situation are: (\[.*?\])")


class ScriptedRollout(GroupRollout):
    """GroupRollout whose replies are chosen by (global row, turn): the same on any number of processes."""

    def _replies(self, trainer, live):
        tok = trainer.processing_class
        out = []
        for r in live:
            text = tok.decode(r.prompt_ids + r.completion)
            actions = ast.literal_eval(_ADMISSIBLE.findall(text)[-1])
            pick = zlib.crc32(f"{r.row}:{len(r.spans)}".encode()) % len(actions)
            think = " ".join(["go"] * (1 + r.row // 3))  # later rows reply longer: widths differ per process
            reply = f"<think>{think}</think><action>{actions[pick]}</action>"
            out.append(([*tok(reply, add_special_tokens=False)["input_ids"], tok.eos_token_id], None))
        return out


def _arg() -> list:
    import gymnasium as gym

    from stepgym.graph_seeding import seed_graph_from_expert
    from stepgym.reference_graph import AgenticReferenceGraph
    from stepgym.steps.tasks import task_ids

    graph = AgenticReferenceGraph()
    seed_graph_from_expert(graph, gym.make(ENV_ID, **ENV_KWARGS), task_ids(ENV_ID, ENV_KWARGS))
    return [lambda env: ARGWrapper(env, graph=graph)]


class Recording(StepGRPOTrainer):
    """Keeps what the loss receives for this process's rows, per generation (= per optimizer step here)."""

    seen: list[dict[str, torch.Tensor]]

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.seen.append(
            {k: out[k].detach().clone() for k in ("advantages", "completion_mask", "completion_ids")}
        )
        return out


def run(out_dir: Path, preset: str, world: int) -> None:
    tok, model = tiny_chat_model(react_conversations(24, seed=1), seed=0)  # the same weights on every process
    rollout = ScriptedRollout(
        ENV_ID,
        ENV_KWARGS,
        fmt="alfworld",
        max_turn_tokens=24,
        seed=0,
        wrappers=_arg() if "proas" in preset else (),
    )
    args = cpu_grpo_config(
        str(out_dir / f"run-{preset}"),
        per_device_train_batch_size=GLOBAL_BATCH // world,
        num_generations=GROUP,
        max_completion_length=320,
    )
    trainer = Recording(
        model=model,
        reward_funcs=[episode_return],
        args=args,
        train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
        processing_class=tok,
        rollout_func=rollout,
        shape_config=preset,
    )
    trainer.seen = []
    initial = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    rank = trainer.accelerator.process_index
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    torch.save(
        {"steps": trainer.seen, "weights": weights, "initial": initial}, out_dir / f"{preset}.rank{rank}.pt"
    )


def main() -> None:
    out_dir, presets = Path(sys.argv[1]), sys.argv[2].split(",")
    out_dir.mkdir(parents=True, exist_ok=True)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    for preset in presets:
        run(out_dir, preset, world)
    if torch.distributed.is_initialized():  # leave together (see _trl_vllm_multiproc.py)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
