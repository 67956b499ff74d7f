"""The ``stepgym`` command line: one module per subcommand in this package, each with its own parser.

This module only dispatches, importing the subcommand's module when it is called (so ``stepgym download`` never
imports torch). ``python -m stepgym.cli`` is the same as the ``stepgym`` console script.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module:function taking argv, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "rollout": (
        "stepgym.cli.rollout:main",
        "run an agent (expert, random, noisy expert, llm) on an env and split; success per task type",
    ),
    "download": ("stepgym.cli.download:main", "fetch a benchmark's official data into the user cache"),
    "arg": ("stepgym.cli.arg:main", "build, inspect and label with ProAS Agentic Reference Graphs"),
    "train": (
        "stepgym.cli.train:train_main",
        "GRPO training with a step-level shaper (GRPO, GiGPO, ProAS, AHEAD, StepOPSD)",
    ),
    "eval": (
        "stepgym.cli.train:eval_main",
        "evaluate a model on fixed splits (success per task type and per budget)",
    ),
    "retriever": (
        "stepgym.cli.searchqa:main",
        "Search-QA retrieval: build indexes, serve over HTTP, evaluate recall",
    ),
    "webshop": (
        "stepgym.cli.webshop:main",
        "WebShop: build search indexes, compare backends, serve the site",
    ),
}


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    rows = "\n".join(f"  {name.ljust(width)}  {help_}" for name, (_, help_) in SUBCOMMANDS.items())
    return f"usage: stepgym <command> [options]\n\ncommands:\n{rows}\n\n`stepgym <command> --help` for a command's options."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from stepgym import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"stepgym: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name = SUBCOMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    result = func(rest)
    return int(result or 0)
