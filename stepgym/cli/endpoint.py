"""``stepgym eval --model NAME`` and ``stepgym rollout --agent llm``: score a served model (:mod:`stepgym.llm_eval`).

The library does the work; this module only turns flags into its arguments and checks them first, so that a bad
value is one line naming the fix (exit status 1), never a traceback from deep inside a run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stepgym.cli._options import add_task_args, check_count, check_task_args, on_interrupt, parse_kv
from stepgym.errors import InvalidArgumentError

__all__ = ["build_parser", "main"]

DESCRIPTION = (
    "Evaluate a model served behind an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp, a "
    "hosted API) on every task of an env split, with the training text interface (same prompts, history window, "
    "action parsing and validity flags as `stepgym train`). Prints success per task type and within interaction "
    "budgets, the valid-action ratios, token usage and wall time; writes every episode to OUT/episodes.jsonl.gz "
    "(`stepgym view OUT` shows them) and the summary to OUT/summary.json. Interrupted? Run the same command "
    "again: it continues where it stopped. Settings not given as flags come from OPENAI_BASE_URL (or "
    "STEPGYM_LLM_BASE_URL), OPENAI_API_KEY (or STEPGYM_LLM_API_KEY) and STEPGYM_LLM_MODEL; without a model name "
    "the server's only model is used."
)


def _history(value: str) -> int | str | None:
    if value == "default":
        return value
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'default', got {value!r}") from None
    return None if k < 0 else k


def _add_server_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("server")
    g.add_argument(
        "--base-url", default=None, help="API root, e.g. http://localhost:8000/v1 ($OPENAI_BASE_URL)"
    )
    g.add_argument(
        "--model",
        default=None,
        help="the served model name ($STEPGYM_LLM_MODEL; default: the server's only one)",
    )
    g.add_argument(
        "--api-key", default=None, help="bearer token; prefer $OPENAI_API_KEY (not in shell history)"
    )
    g.add_argument("--concurrency", type=int, default=8, help="episodes in flight at once")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    g.add_argument(
        "--max-retries", type=int, default=5, help="retries per request (429, 5xx, timeouts, drops)"
    )
    g.add_argument("--no-check", action="store_true", help="skip the GET /models check of the model name")


def _add_task_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("tasks")
    add_task_args(g)
    g.add_argument(
        "--seed", type=int, default=0, help="env reset seed of every episode (and of the --limit sample)"
    )
    g.add_argument(
        "--budgets",
        default="",
        help="interaction budgets for success-within-B, e.g. 10,20,30 (default: five up "
        "to the env's step limit)",
    )


def _add_prompt_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("prompt and sampling")
    g.add_argument(
        "--format",
        default="",
        help=f"text format: {_format_names()}, or 'module:ATTR' naming a TextFormat ('': the env's own)",
    )
    g.add_argument(
        "--history",
        type=_history,
        default="default",
        help="K, steps shown in the prompt (default: the format's; -1: all)",
    )
    g.add_argument("--system", default="", help="a system message sent before every prompt")
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--max-tokens", type=int, default=512, help="reply budget per turn")
    g.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    g.add_argument("--sampling-seed", type=int, default=None, help="send per-request seeds derived from this")


def build_parser(prog: str = "stepgym eval") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    _add_server_args(ap)
    _add_task_args(ap)
    _add_prompt_args(ap)
    g = ap.add_argument_group("output")
    g.add_argument(
        "--out",
        default=None,
        help="output folder (default: runs/eval/<model>-<env>-<split>/<hash of the settings and served weights>)",
    )
    g.add_argument("--no-progress", action="store_true")
    ap.add_argument("--agent", default="llm", choices=["llm"], help=argparse.SUPPRESS)
    return ap


def _budgets(text: str) -> tuple[int, ...] | None:
    try:
        budgets = tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"--budgets takes whole numbers separated by commas, got {text!r}"
        ) from None
    if any(b < 1 for b in budgets):
        raise InvalidArgumentError(f"--budgets must be 1 or more steps each, got {text!r}")
    return budgets or None


def _checked(args: argparse.Namespace) -> dict[str, Any]:
    """The library's keyword arguments from the parsed flags, each value checked (one-line errors)."""
    from stepgym.envs import check_split

    check_task_args(args)
    check_count("--concurrency", args.concurrency, minimum=1)
    check_count("--max-tokens", args.max_tokens, minimum=1)
    check_count("--max-retries", args.max_retries)
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise InvalidArgumentError(
            f"--temperature must be >= 0 and --top-p in (0, 1], got {args.temperature:g} and {args.top_p:g}"
        )
    kwargs = parse_kv(args.env_kwarg)
    if args.max_steps > 0:
        kwargs["max_steps"] = args.max_steps
    if args.data_root is not None:
        kwargs["data_root"] = args.data_root
    from stepgym.envs import check_env_kwargs

    kwargs = check_env_kwargs(args.env, kwargs)
    return {
        "split": check_split(args.env, args.split),
        "env_kwargs": kwargs,
        "budgets": _budgets(args.budgets),
        "fmt": args.format,
        "history": args.history,
        "system": args.system,
        "concurrency": args.concurrency,
        "limit": args.limit,
        "seed": args.seed,
        "check_model": not args.no_check,
        "progress": not args.no_progress,
    }


def _print_summary(s: Mapping[str, Any]) -> None:
    from stepgym.recording import FILE_NAME
    from stepgym.trainers.evaluate import format_summary

    out = Path(s["out_dir"])
    print(format_summary(s, f"{s['model']} on {s['env']} ({s['split'] or 'no split'})"))
    print(f"written: {out / FILE_NAME} (`stepgym view {out}` shows the episodes), {out / 'summary.json'}")


def main(argv: Sequence[str] | None = None, prog: str = "stepgym eval") -> int:
    """Entry point of ``stepgym eval --model ...`` and ``stepgym rollout --agent llm``."""
    from stepgym.llm_client import ChatClient, RetryPolicy
    from stepgym.llm_eval import EndpointEvalConfig, Sampling, evaluate_endpoint

    args = build_parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
    options = _checked(args)
    sampling = Sampling(args.temperature, args.top_p, args.max_tokens, args.sampling_seed, tuple(args.stop))
    client = ChatClient(
        args.base_url,
        args.model,
        args.api_key,
        retry=RetryPolicy(
            timeout=args.timeout, max_retries=args.max_retries, max_connections=args.concurrency
        ),
        discover_model=True,
    )
    out_dir = Path(args.out or "runs/eval")
    on_interrupt(
        lambda: (
            f"the finished episodes are recorded under {out_dir}; run the same command again to continue "
            "where it stopped"
        )
    )
    with client:
        if not client.model:
            client.use_only_served_model()
        slug = "-".join(x.replace("/", "_") for x in (client.model, args.env, options["split"]) if x)
        config = EndpointEvalConfig(
            args.env,
            out_dir=Path(args.out or f"runs/eval/{slug}"),
            sampling=sampling,
            key_by_settings=args.out is None,
            **options,
        )
        summary = evaluate_endpoint(client, config)
    _print_summary(summary)
    return 0


def _format_names() -> str:
    """The text formats there are: the named ones and each registered env's own (read from the registries)."""
    from stepgym.envs import registered_envs
    from stepgym.wrappers.text import FORMATS

    names = list(FORMATS)
    names += [
        e.text_format for e in registered_envs().values() if e.text_format and e.text_format not in names
    ]
    return ", ".join(dict.fromkeys(names))
