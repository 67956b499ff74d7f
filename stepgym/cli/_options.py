"""Helpers every subcommand shares: ``KEY=VALUE`` lists and checks of numbers, raising stepgym's own errors.

The checks run after ``argparse`` has parsed (not as ``type=`` converters, whose errors print the whole usage and
exit with status 2): a bad value is an :class:`~stepgym.errors.InvalidArgumentError`, which the dispatcher in
:mod:`stepgym.cli` prints as one line and exit status 1. One rule for counts everywhere: a negative count is an
error, and ``--limit 0`` means "no limit" (the whole split) in every command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from stepgym.errors import InvalidArgumentError

__all__ = [
    "add_task_args",
    "check_count",
    "check_probability",
    "check_task_args",
    "interrupt_note",
    "on_interrupt",
    "parse_kv",
    "serve_until_interrupted",
]


def parse_kv(items: Sequence[str], flag: str = "--env-kwarg") -> dict[str, Any]:
    """``["k=v", ...]`` as a dict, each value read as JSON when it parses (``3``, ``true``, ``["a"]``), else text."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise InvalidArgumentError(f"{flag} expects KEY=VALUE, got {item!r} (e.g. {flag} max_steps=30)")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def add_task_args(parser: Any, *, overrides: bool = True) -> None:
    """The options that name the tasks of a command playing an env (``parser``: a parser or an argument group):
    ``--env``, ``--split``, ``--limit``, ``--data-root`` and, with ``overrides``, ``--max-steps`` and
    ``--env-kwarg``; :func:`check_task_args` checks them."""
    parser.add_argument("--env", default="StepGym/ALFWorld-v0", help="a registered env id")
    parser.add_argument("--split", default=None, help="the split (default: the env's evaluation split)")
    parser.add_argument(
        "--limit",
        type=int,
        default=0,
        help="a fixed sample of N tasks, stratified by task type and seeded with --seed (0: the whole split)",
    )
    parser.add_argument("--data-root", default=None, help="data folder (default: $STEPGYM_DATA / user cache)")
    if overrides:
        parser.add_argument(
            "--max-steps", type=int, default=0, help="step limit per episode (0: the env's default)"
        )
        parser.add_argument(
            "--env-kwarg",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="extra env kwargs (JSON values)",
        )


def check_task_args(args: Any) -> None:
    """One line (:class:`~stepgym.errors.InvalidArgumentError`) for a negative ``--limit`` or ``--max-steps``."""
    check_count("--limit", args.limit, meaning_of_zero="the whole split")
    if hasattr(args, "max_steps"):
        check_count("--max-steps", args.max_steps, meaning_of_zero="the env's default")


def check_count(flag: str, value: int | None, *, meaning_of_zero: str = "", minimum: int = 0) -> int | None:
    """``value`` unchanged when it is at least ``minimum`` (or ``None``); otherwise an error naming ``flag``,
    what is accepted, and (``meaning_of_zero``) what 0 means for it."""
    if value is None or value >= minimum:
        return value
    zero = f"; 0 means {meaning_of_zero}" if meaning_of_zero and minimum <= 0 else ""
    raise InvalidArgumentError(f"{flag} must be {minimum} or more, got {value}{zero}")


def check_probability(flag: str, value: float) -> float:
    """``value`` when it lies in [0, 1], else an error naming ``flag``."""
    if not 0.0 <= value <= 1.0:
        raise InvalidArgumentError(
            f"{flag} is a probability between 0 and 1, got {value:g} (e.g. {flag} 0.2)"
        )
    return value


_interrupt_note: list[Callable[[], str]] = []


def on_interrupt(note: Callable[[], str]) -> None:
    """Tell the dispatcher what to print after Ctrl-C: ``note()`` says what was saved and how to resume (called
    only then, so it can count what is on disk at that moment)."""
    _interrupt_note[:] = [note]


def interrupt_note() -> str:
    """The note the running subcommand registered (:func:`on_interrupt`), or a generic one."""
    if not _interrupt_note:
        return "nothing this command wrote can be resumed; run it again"
    try:
        return _interrupt_note[0]()
    except Exception as exc:  # the note must never hide the interrupt itself
        return f"(could not tell what was saved: {type(exc).__name__}: {exc})"


def serve_until_interrupted(serve: Callable[[], None], close: Callable[[], None]) -> int:
    """Run ``serve`` (a server's ``serve_forever``) until Ctrl-C, then ``close``, whatever happened; exit status 0."""
    try:
        serve()
    except KeyboardInterrupt:
        pass
    finally:
        close()
    return 0
