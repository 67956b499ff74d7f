"""GPU check of the bundled trainer: throughput, memory and teacher cost at a realistic model size, plus correctness
of the CUDA path against the CPU path. Needs one CUDA GPU; exits with a message otherwise (never run by CI).

What it does (one process, no downloads):
1. correctness: a tiny model scores the same rows on CPU (fp32) and on the GPU (fp32, then bf16 autocast); the
   log-probs must agree to 1e-4 (fp32) and 0.1 (bf16), and one trainer iteration on the GPU must change every
   parameter with a finite loss;
2. throughput: a randomly initialised model of a published shape (``--shape qwen2.5-0.5b`` or ``qwen2.5-1.5b``;
   real vocabulary size) trains for ``--iterations`` iterations on the credit-assignment toy with AHEAD (teacher
   rescoring every step) or any ``--method``, bf16 autocast, and reports per iteration: rollout tokens/s (generated
   tokens / generation time), training tokens/s (context + response tokens / update time), the share of the
   iteration spent in teacher rescoring, and peak GPU memory.

A random model writes garbage, so every reply is invalid and runs to ``--response-tokens``: the throughput numbers
are for full-length responses (an upper bound on the work per turn), and the advantages are mostly zero.

    python benchmarks/gpu_check.py                     # 0.5B shape, 3 iterations, 16 tasks × 8
    python benchmarks/gpu_check.py --shape qwen2.5-1.5b --method stepopsd-alfworld --json gpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _config(out: Path, args: argparse.Namespace, *, model: str, iterations: int, device: str, precision: str):
    from stepgym.trainers.config import (
        EnvConfig,
        EvalConfig,
        ModelConfig,
        OptimConfig,
        RolloutConfig,
        RunConfig,
        TeacherConfig,
        TrainConfig,
        WarmupConfig,
    )
    from stepgym.trainers.shapers import ShapeConfig

    return TrainConfig(
        run=RunConfig(
            output_dir=str(out),
            iterations=iterations,
            save_every=0,
            progress=False,
            tensorboard=False,
            report=False,
        ),
        env=EnvConfig(id="StepGym/CreditToy-v0", history=2, eval_splits=("valid",)),
        model=ModelConfig(name=model, device=device, precision=precision, tokenizer_corpus_episodes=32),
        rollout=RolloutConfig(
            n_tasks=args.n_tasks,
            group_size=args.group_size,
            max_prompt_tokens=512,
            max_response_tokens=args.response_tokens,
            generate_batch_size=args.generate_batch,
        ),
        shaper=ShapeConfig.from_preset(args.method),
        teacher=TeacherConfig(microbatch_tokens=args.micro_tokens),
        optim=OptimConfig(lr=1e-6, micro_batch_tokens=args.micro_tokens),
        warmup=WarmupConfig(steps=0),
        eval=EvalConfig(limit=4),
    )


def correctness(work: Path, args: argparse.Namespace) -> dict:
    import torch

    from stepgym.trainers.grpo import GRPOTrainer
    from stepgym.trainers.samples import pack, response_logprobs

    cfg = _config(work / "tiny", args, model="tiny", iterations=1, device="cuda", precision="fp32")
    cfg = replace(
        cfg,
        rollout=replace(
            cfg.rollout,
            n_tasks=4,
            group_size=4,
            max_response_tokens=16,
            backend="scripted",
            scripted_policy="noisy-expert:0.5",
        ),
    )
    tr = GRPOTrainer(cfg)
    rows = tr.collect().rows[:32]
    batch_args = ([r.prompt_ids for r in rows], [r.response_ids for r in rows])
    model = tr.model.eval()
    with torch.no_grad():
        gpu32, _ = response_logprobs(model, pack(*batch_args, pad_id=tr.pad_id, device="cuda"))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gpu16, _ = response_logprobs(model, pack(*batch_args, pad_id=tr.pad_id, device="cuda"))
        cpu_model = model.to("cpu")
        cpu32, _ = response_logprobs(cpu_model, pack(*batch_args, pad_id=tr.pad_id, device="cpu"))
        model.to("cuda")
    d32 = float((gpu32.cpu() - cpu32).abs().max())
    d16 = float((gpu16.float().cpu() - cpu32).abs().max())
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    m = tr.step()
    changed = all(not torch.equal(before[n], p) for n, p in tr.model.named_parameters())
    tr.close()
    ok = d32 < 1e-4 and d16 < 0.1 and changed and m["actor/pg_loss"] == m["actor/pg_loss"]
    return {"max_abs_diff_fp32": d32, "max_abs_diff_bf16": d16, "all_params_changed": changed, "ok": ok}


def throughput(work: Path, args: argparse.Namespace) -> list[dict]:
    import torch

    from stepgym.trainers.grpo import GRPOTrainer

    cfg = _config(
        work / "big",
        args,
        model=f"tiny:{args.shape}",
        iterations=args.iterations,
        device="cuda",
        precision="auto",
    )
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    tr = GRPOTrainer(cfg)
    print(
        f"model built in {time.perf_counter() - t0:.1f} s: "
        f"{sum(p.numel() for p in tr.model.parameters()) / 1e6:.0f}M parameters",
        flush=True,
    )
    out = []
    for it in range(1, args.iterations + 1):
        torch.cuda.reset_peak_memory_stats()
        m = tr.step()
        torch.cuda.synchronize()
        rec = {
            "iteration": it,
            "seconds": m["time/iteration_s"],
            "rollout_s": m["time/rollout_s"],
            "teacher_s": m.get("time/teacher_s", 0.0),
            "update_s": m["time/update_s"],
            "rollout_tokens_per_s": m["perf/rollout_tokens_per_s"],
            "train_tokens_per_s": m["perf/train_tokens_per_s"],
            "teacher_share": m["perf/teacher_share"],
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
            "rows": m["rollout/rows"],
            "response_tokens": m["rollout/response_tokens"],
        }
        out.append(rec)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rec.items()}), flush=True)
    tr.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2.5-0.5b", choices=["qwen2.5-0.5b", "qwen2.5-1.5b"])
    p.add_argument(
        "--method",
        default="ahead",
        help="a ShapeConfig preset (ahead, stepopsd-alfworld, gigpo-alfworld, ...)",
    )
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--n-tasks", type=int, default=16)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--response-tokens", type=int, default=64)
    p.add_argument("--generate-batch", type=int, default=128)
    p.add_argument("--micro-tokens", type=int, default=16384)
    p.add_argument("--skip-correctness", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here; nothing to measure (run it on a machine with one).")
        return 0
    info = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "args": vars(args),
    }
    print(json.dumps(info), flush=True)
    work = Path(tempfile.mkdtemp(prefix="stepgym-gpu-"))
    result: dict = {"info": info}
    try:
        if not args.skip_correctness:
            result["correctness"] = correctness(work, args)
            print("correctness:", json.dumps(result["correctness"]), flush=True)
        result["throughput"] = throughput(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    steady = result["throughput"][1:] or result["throughput"]
    avg = {k: sum(r[k] for r in steady) / len(steady) for k in steady[0] if k != "iteration"}
    result["steady_state"] = avg
    print("\nsteady state (iterations after the first):")
    for k in ("rollout_tokens_per_s", "train_tokens_per_s", "teacher_share", "peak_memory_gib", "seconds"):
        print(f"  {k}: {avg[k]:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    ok = result.get("correctness", {}).get("ok", True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
