"""What StepGRPOTrainer's step credit costs a TRL step, on 1 and on N CPU processes.

For each process count it launches itself under torch's launcher (``torch.distributed.run``; accelerate joins the
processes with gloo) and trains a few GRPO steps of a tiny cloned chat model (the one of tests/_trl_tiny.py) on
the credit toy with ``GroupRollout`` (TRL's model generating, real env steps). It times, per optimizer step, the
whole ``training_step`` (generation, env, TRL's scoring, loss, backward) and StepGRPOTrainer's own part: gathering
every process's step records, building the global batch, shaping it and taking this process's rows back. The
processes are first brought together by a barrier that is not counted (TRL's own reward gather right after waits
the same). The first step is a warm-up and is dropped. Prints one line per process count and, last, the overhead
as a share of a step; the worst rank counts.

    python benchmarks/trl_scale_bench.py                      # 1 and 2 processes, GiGPO
    python benchmarks/trl_scale_bench.py --preset proas-gigpo --steps 6
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _worker(out: Path, preset: str, steps: int, batch: int) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    import numpy as np
    from _trl_tiny import (
        ENV_ID,
        ENV_KWARGS,
        SYSTEM,
        clone,
        cpu_grpo_config,
        react_conversations,
        tiny_chat_model,
    )
    from trl import GRPOTrainer as Base

    from stepgym.integrations.trl import GroupRollout, StepGRPOTrainer, episode_return
    from stepgym.steps.tasks import task_dataset

    world = int(os.environ.get("WORLD_SIZE", "1"))
    convs = react_conversations(48, seed=1)
    tok, model = tiny_chat_model(convs, seed=0)
    clone(tok, model, convs, steps=40)
    timings: dict[str, list[float]] = {"step": [], "credit": []}

    class Timed(StepGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            base = Base._generate_and_score_completions(self, inputs)
            t_base = time.perf_counter() - t0
            self.accelerator.wait_for_everyone()  # not counted: TRL's reward gather waits the same
            t1 = time.perf_counter()
            orig = Base._generate_and_score_completions
            Base._generate_and_score_completions = lambda _self, _inputs: base  # reuse: time only the credit
            try:
                out = super()._generate_and_score_completions(inputs)
            finally:
                Base._generate_and_score_completions = orig
            timings["credit"].append(time.perf_counter() - t1)
            timings.setdefault("generate_score", []).append(t_base)
            return out

        def training_step(self, *args, **kwargs):
            t0 = time.perf_counter()
            loss = super().training_step(*args, **kwargs)
            timings["step"].append(time.perf_counter() - t0)
            return loss

    args = cpu_grpo_config(
        str(out.parent / "run"),
        per_device_train_batch_size=batch // world,
        max_steps=steps,
        learning_rate=1e-3,
        max_completion_length=320,
        logging_steps=10**6,
    )
    trainer = Timed(
        model=model,
        reward_funcs=[episode_return],
        args=args,
        train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
        processing_class=tok,
        rollout_func=GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24, seed=0),
        shape_config=preset,
    )
    trainer.train()
    step = np.asarray(timings["step"][1:])
    credit = np.asarray(timings["credit"][1:])
    rank = trainer.accelerator.process_index
    row = {"rank": rank, "step_s": float(step.mean()), "credit_s": float(credit.mean())}
    (out.parent / f"rank{rank}.json").write_text(json.dumps(row))


def _launch(n: int, preset: str, steps: int, batch: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={n}",
            f"--master_port={port}",
        ]
        cmd += ["--master_addr=127.0.0.1", __file__, "--worker", str(Path(tmp) / "out")]
        cmd += ["--preset", preset, "--steps", str(steps), "--batch", str(batch)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{n} process(es) failed:\n{done.stderr[-3000:]}")
        return [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank*.json"))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", default="1,2", help="comma-separated process counts (default: 1,2)")
    ap.add_argument(
        "--preset", default="gigpo-alfworld", help="shape_config preset (default: gigpo-alfworld)"
    )
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps per run, the first one dropped")
    ap.add_argument("--batch", type=int, default=16, help="global batch (rows; groups of 4)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker(Path(a.worker), a.preset, a.steps, a.batch)
        return
    if a.steps < 2:
        ap.error(f"--steps must be >= 2 (the first is a warm-up), got {a.steps}")
    print(f"trl_scale_bench: preset {a.preset}, global batch {a.batch}, {a.steps - 1} timed steps")
    for n in (int(x) for x in a.processes.split(",")):
        rows = _launch(n, a.preset, a.steps, a.batch)
        step = max(r["step_s"] for r in rows)
        credit = max(r["credit_s"] for r in rows)
        print(
            f"processes={n}  step {step:.3f} s  step credit {1e3 * credit:.1f} ms  "
            f"overhead {100 * credit / step:.2f}% of a step"
        )


if __name__ == "__main__":
    main()
