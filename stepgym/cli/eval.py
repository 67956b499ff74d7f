"""``stepgym eval``: a policy on the fixed evaluation splits, success per task type and per interaction budget.

``stepgym eval --preset NAME --checkpoint DIR`` evaluates a checkpoint (or the preset's initial model; the config is
parsed as ``stepgym train``'s, :mod:`stepgym.cli.train`) and writes ``<run.output_dir>-eval/eval.json``;
``stepgym eval --model NAME [--base-url URL]`` evaluates a model served behind an OpenAI-compatible endpoint
(:mod:`stepgym.cli.endpoint`, :mod:`stepgym.llm_eval`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace

from stepgym.atomic import atomic_write_text
from stepgym.cli._options import on_interrupt
from stepgym.cli.train import _list_presets, _short_help, _split_preset, parse_config

__all__ = ["main"]


def _endpoint_requested(argv: Sequence[str]) -> bool:
    """``--model`` / ``--base-url`` select the endpoint evaluation (tyro's own flags are ``--model.name`` ...)."""
    return any(a.split("=", 1)[0] in ("--model", "--base-url") for a in argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``stepgym eval``: ``--checkpoint DIR`` (a checkpoint folder or a run's output dir), or an
    OpenAI-compatible endpoint with ``--model NAME`` (:mod:`stepgym.llm_eval`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if _endpoint_requested(argv):
        from stepgym.cli.endpoint import main as endpoint_main

        return endpoint_main(argv, prog="stepgym eval")
    _, _, ns = _split_preset(argv, "stepgym eval")
    if ns.list_presets:
        return _list_presets()
    if "--help-all" in argv:
        argv = ["--help" if a == "--help-all" else a for a in argv]
    elif "-h" in argv or "--help" in argv:
        print(_short_help(argv, "stepgym eval"))
        return 0
    cfg = parse_config(argv, "stepgym eval")
    from stepgym.trainers.grpo import GRPOTrainer

    if ns.checkpoint:
        cfg = replace(
            cfg,
            run=replace(
                cfg.run, resume=ns.checkpoint, output_dir=cfg.run.output_dir + "-eval", tensorboard=False
            ),
            warmup=replace(cfg.warmup, steps=0),
        )
    else:
        cfg = replace(cfg, run=replace(cfg.run, output_dir=cfg.run.output_dir + "-eval", tensorboard=False))
    on_interrupt(lambda: "nothing was written (eval.json is written at the end); run the command again")
    trainer = GRPOTrainer(cfg)
    try:
        results = trainer.evaluate() if trainer.dist.is_main else []  # torchrun: rank 0 evaluates
        trainer.dist.barrier()  # the other ranks wait for it before the process group goes (see train_main)
    finally:
        trainer.close()
    if not trainer.dist.is_main:
        return 0
    from stepgym.trainers.evaluate import format_summary

    for ev in results:
        print("\n" + format_summary(ev, ev["split"]))
    out = trainer.out / "eval.json"
    atomic_write_text(out, json.dumps(results, indent=1))
    print(f"\nwritten: {out}")
    return 0
