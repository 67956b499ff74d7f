"""``stepgym eval``: a policy on the fixed evaluation splits, success per task type and per interaction budget.

``stepgym eval --checkpoint RUN`` evaluates what was trained: the config stored with the checkpoint (env id and
options, eval splits, step limits, response length, model) is the starting point, the results go to
``RUN/eval/eval.json``, and a flag that names another env, env options or model than the run's is refused with one
line (other flags, e.g. ``--eval.limit`` or ``--env.eval-splits``, override the stored values).
``stepgym eval --preset NAME`` evaluates the preset's initial model (the config is parsed as ``stepgym train``'s,
:mod:`stepgym.cli.train`) and writes ``<run.output_dir>-eval/eval.json``;
``stepgym eval --model NAME [--base-url URL]`` evaluates a model served behind an OpenAI-compatible endpoint
(:mod:`stepgym.cli.endpoint`, :mod:`stepgym.llm_eval`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from stepgym.atomic import atomic_write_text
from stepgym.cli._options import on_interrupt
from stepgym.cli.train import (
    check_run,
    flag_given,
    parse_config,
    presets_and_help,
    progress_alias,
    show_phases,
)
from stepgym.errors import InvalidArgumentError

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
    argv = progress_alias(argv)
    ns, argv, done = presets_and_help(argv, "stepgym eval")
    if done is not None:
        return done
    if ns.checkpoint:
        checkpoint, stored = stored_config(ns.checkpoint)
        cfg = parse_config(argv, "stepgym eval", base=stored)
        _refuse_mismatch(cfg, stored, checkpoint)
        run_dir = checkpoint.parent.parent  # RUN/checkpoints/step_N
        out = cfg.run.output_dir + "-eval" if flag_given(argv, "run.output_dir") else str(run_dir / "eval")
        cfg = replace(
            cfg,
            run=replace(cfg.run, resume=str(checkpoint), output_dir=out, tensorboard=False, world_size=0),
            warmup=replace(cfg.warmup, steps=0),
        )
    else:
        cfg = parse_config(argv, "stepgym eval")
    check_run(cfg, preset=ns.preset, argv=argv)
    show_phases("stepgym eval", cfg)
    from stepgym.trainers.grpo import GRPOTrainer

    if not ns.checkpoint:
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


#: What a checkpoint's weights were trained for: a flag that changes one of these is refused (see the docstring).
_MUST_MATCH = (("env", "id"), ("env", "kwargs"), ("env", "text_format"), ("model", "name"))


def stored_config(checkpoint: str) -> tuple[Any, Any]:
    """``(checkpoint folder, TrainConfig)``: the checkpoint ``--checkpoint`` names (a checkpoint folder, or a run's
    output dir: its newest readable checkpoint) and the config stored in it at training time."""
    from pathlib import Path

    from stepgym.trainers.checkpoint import CheckpointError, read_state, resume_path

    try:
        path = resume_path(checkpoint, Path(checkpoint) / "checkpoints")
        state = read_state(path) if path is not None else None
    except CheckpointError as exc:
        raise InvalidArgumentError(f"--checkpoint {checkpoint}: {exc}") from None
    if path is None or state is None:
        raise InvalidArgumentError(f"--checkpoint {checkpoint}: no checkpoint there")
    return path, config_from_dict(state.get("config") or {})


def config_from_dict(data: dict[str, Any]) -> Any:
    """A :class:`~stepgym.trainers.config.TrainConfig` from its ``to_dict()`` (a checkpoint's ``config``): fields
    this version does not know are left out, lists become the tuples the config holds."""
    import dataclasses
    import typing

    from stepgym.trainers.config import TrainConfig

    def build(cls: Any, values: Any) -> Any:
        if not isinstance(values, dict):
            return cls()
        hints = typing.get_type_hints(cls)
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in values:
                continue
            value, hint = values[f.name], hints.get(f.name)
            if dataclasses.is_dataclass(hint):
                value = build(hint, value)
            elif isinstance(value, list) and typing.get_origin(hint) is tuple:
                value = tuple(value)
            kw[f.name] = value
        try:
            return cls(**kw)
        except (TypeError, ValueError):  # a section this version cannot rebuild keeps its defaults
            return cls()

    return build(TrainConfig, data)


def _refuse_mismatch(cfg: Any, stored: Any, checkpoint: Any) -> None:
    for section, name in _MUST_MATCH:
        given, trained = getattr(getattr(cfg, section), name), getattr(getattr(stored, section), name)
        if given != trained:
            flag = f"--{section}.{name.replace('_', '-')}"
            raise InvalidArgumentError(
                f"--checkpoint {checkpoint} was trained with {flag} {trained!r}, not {given!r}: drop {flag} "
                "(the run's stored config is used)"
            )
