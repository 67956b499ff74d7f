"""``learning_study.py --learner llm``: the same study cells with the bundled trainer's LLM policy
(:class:`stepgym.trainers.grpo.GRPOTrainer`) instead of the linear learner, for a GPU.

Per method the trainer runs the env's trainer preset (``alfworld-<method>``; ALFWorld's when the env has none,
``credit_fidelity``'s rule, as :func:`learning_study.shaper_config` picks the shaper) with the study's budget:
``--iterations``, ``--n-tasks`` × ``--group-size``, the env row's step limit (``--max-steps``), the held-out splits
evaluated (``--eval-tasks`` tasks each, sampled as the linear learner is) before the first and after the last
update. The ``-obs`` methods set ``env.anchor="observation"``; the ceiling sets ``env.value_labels`` (ValueWrapper's
true gains). Here AHEAD and StepOPSD use the trainer's real teacher (the model reading the privileged context),
not the linear learner's modelled one. On a CPU, ``--model tiny`` (a random in-process Qwen2-style model) runs one
iteration in seconds (tests/test_learning_study.py); the learning numbers need a real model on a GPU
(``--model smollm2-135m-instruct`` or a local folder).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import learning_study as ls

from stepgym.trainers.presets import TRAINER_PRESETS, get_preset


def llm_config(args: argparse.Namespace, env: ls.EnvRow, method: str, seed: int, out: Path) -> Any:
    """The trainer config of one cell: the preset, the study's budget, the held-out splits."""
    base = method.removesuffix("-obs")
    name = f"{env.preset}-{'grpo' if base in ('drgrpo', ls.CEILING) else base}"
    cfg = get_preset(name if name in TRAINER_PRESETS else f"alfworld-{name.split('-', 1)[1]}")
    shaper, _, _ = ls.shaper_config(env, method)
    tiny = args.model == "tiny" or args.model.startswith("tiny:")
    return replace(
        cfg,
        run=replace(
            cfg.run,
            output_dir=str(out),
            iterations=args.iterations,
            seed=seed,
            save_every=0,
            progress=False,
            tensorboard=False,
            report=False,
            threads=1 if tiny else cfg.run.threads,
        ),
        env=replace(
            cfg.env,
            id=env.env_id,
            train_split=env.train_split,
            eval_splits=env.held_out,
            max_steps=args.max_steps or env.max_steps,
            anchor="observation" if method.endswith("-obs") else "state_key",
            value_labels=method == ls.CEILING,
        ),
        model=replace(cfg.model, name=args.model, **({"tokenizer_corpus_episodes": 8} if tiny else {})),
        rollout=replace(
            cfg.rollout,
            n_tasks=args.n_tasks,
            group_size=args.group_size,
            **({"max_prompt_tokens": 512, "max_response_tokens": 12} if tiny else {}),
        ),
        shaper=shaper,
        eval=replace(cfg.eval, limit=args.eval_tasks, greedy=False, parallel=max(1, args.eval_tasks)),
    )


def run_llm(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One record per (env, method, seed): held-out success before and after training, the last step's metrics."""
    from stepgym.trainers.grpo import GRPOTrainer

    out = Path(args.out) / "llm"
    records = []
    for cell in ls.plan(args):
        env, method, seed = ls.ENVS[cell["env"]], cell["method"], cell["seed"]
        t0 = time.perf_counter()
        tr = GRPOTrainer(llm_config(args, env, method, seed, out / f"{env.name}_{method}_{seed}"))
        try:
            before = {r["split"]: float(r["success"]) for r in tr.evaluate()}
            metrics = [tr.step() for _ in range(args.iterations)]
            after = {r["split"]: float(r["success"]) for r in tr.evaluate()}
        finally:
            tr.close()
        records.append(
            {
                "env": env.name,
                "method": method,
                "seed": seed,
                "learner": "llm",
                "model": args.model,
                "eval_its": [0, args.iterations],
                "held": [before, after],
                "last_step": {k: v for k, v in metrics[-1].items() if isinstance(v, int | float)},
                "seconds": time.perf_counter() - t0,
            }
        )
    return records
