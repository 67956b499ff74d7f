"""The ``stepgym`` command line: one module per subcommand in this package, each with its own parser.

This module only dispatches, importing the subcommand's module when it is called (so ``stepgym download`` never
imports torch). ``python -m stepgym.cli`` is the same as the ``stepgym`` console script.

An expected failure (:data:`EXPECTED_ERRORS`: stepgym's own errors, whose messages name the fix, a missing extra,
an unknown env id, a file or a server that is not there) prints one line to stderr and exits with status 1;
its traceback is for developers, shown with ``stepgym --debug ...`` or ``STEPGYM_DEBUG=1``. Anything else is a
bug and keeps its traceback. Ctrl-C prints what the subcommand saved and how to resume it (exit status 130).

The current folder: ``python -m stepgym.cli`` has it on ``sys.path`` (Python puts it there), the ``stepgym``
console script does not. So that ``stepgym train --env.id mymod:My-v0`` (and ``rollout``, ``eval``, ``serve``,
``arg``: every command that takes an env id or a ``module:attr``) finds ``mymod.py`` in the folder it is run from
with no ``PYTHONPATH``, :func:`main` appends the current folder to ``sys.path`` (last: it never shadows an
installed package).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
import urllib.error

from gymnasium.error import DependencyNotInstalled, UnregisteredEnv

from stepgym.errors import StepGymError

#: What a user can cause and fix without reading stepgym's code.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    StepGymError,
    DependencyNotInstalled,
    UnregisteredEnv,
    urllib.error.URLError,
    ConnectionError,
    TimeoutError,
    FileNotFoundError,
    PermissionError,
)
DEBUG_ENV_VAR = "STEPGYM_DEBUG"

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
        "GRPO training with a step-level shaper ({methods})",
    ),
    "eval": (
        "stepgym.cli.eval:main",
        "evaluate a model on fixed splits (success per task type and per budget)",
    ),
    "retriever": (
        "stepgym.cli.retriever:main",
        "Search-QA retrieval: build indexes, serve over HTTP, evaluate recall",
    ),
    "webshop": (
        "stepgym.cli.webshop:main",
        "WebShop: build search indexes, compare backends, serve the site",
    ),
    "view": ("stepgym.cli.view:main", "browse recorded episodes and their advantages in the browser"),
    "serve": (
        "stepgym.cli.serve:main",
        "serve an env over the network (OpenEnv protocol; per-step annotations)",
    ),
    "docs": ("stepgym.cli.docs:main", "build this documentation site from a clone and serve it on 127.0.0.1"),
}


def shaper_methods() -> str:
    """The methods ``stepgym train`` offers, read from the shaper registry (the base advantages, ProAS, the token
    reweightings), for the help line: a method registered later is listed without editing this module."""
    from stepgym.shapers.registry import available
    from stepgym.trainers.config import METHOD_NAMES

    bases = [METHOD_NAMES.get(n, n) for n in available("base")]
    tokens = [{"ahead": "AHEAD", "stepopsd": "StepOPSD"}.get(n, n) for n in available("token")]
    return f"{', '.join(bases)}; ProAS on a base; {', '.join(tokens)} token reweighting"


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    rows = "\n".join(
        f"  {name.ljust(width)}  {help_.format(methods=shaper_methods()) if '{methods}' in help_ else help_}"
        for name, (_, help_) in SUBCOMMANDS.items()
    )
    return (
        f"usage: stepgym [--debug] <command> [options]\n\ncommands:\n{rows}\n\n"
        "`stepgym <command> --help` for a command's options; --debug (or STEPGYM_DEBUG=1) shows tracebacks."
    )


def _pop_debug(argv: list[str]) -> tuple[list[str], bool]:
    """Remove ``--debug`` (anywhere before a ``--``) from ``argv``; whether it or ``$STEPGYM_DEBUG`` asks for it."""
    end = argv.index("--") if "--" in argv else len(argv)
    rest = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    env = os.environ.get(DEBUG_ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")
    return rest, env or len(rest) != len(argv)


def _report(prog: str, exc: BaseException) -> None:
    """One line on stderr: the message (its own line breaks folded) and how to see the traceback."""
    message = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, StepGymError) and exc.filename:
        message = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    message = " ".join(message.split())
    print(
        f"{prog}: error: {message} (traceback: `stepgym --debug ...` or {DEBUG_ENV_VAR}=1)", file=sys.stderr
    )


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail again on the closed pipe."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def add_cwd_to_path() -> None:
    """Append the current folder to ``sys.path`` unless it is there already (as ``''`` or by name), so a user's
    ``module:Env-v0`` in it imports (see the module docstring)."""
    cwd = os.getcwd()
    if not any(p in ("", ".", cwd) or os.path.abspath(p or ".") == cwd for p in sys.path):
        sys.path.append(cwd)


def main(argv: list[str] | None = None) -> int:
    argv, debug = _pop_debug(list(sys.argv[1:] if argv is None else argv))
    add_cwd_to_path()
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
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(rest)
    except BrokenPipeError:  # `stepgym train --help | head`: the reader left; nothing to report
        _silence_stdout()
        return 0
    except EXPECTED_ERRORS as exc:
        if debug:
            traceback.print_exc()
        _report(f"stepgym {name}", exc)
        return 1
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        from stepgym.cli._options import interrupt_note

        print(f"stepgym {name}: interrupted; {interrupt_note()}", file=sys.stderr)
        return 130
    return int(result or 0)
