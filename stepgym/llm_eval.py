"""Score a model served behind an OpenAI-compatible endpoint on any stepgym env, resumably.

Most users first want to score a model they already serve (vLLM, SGLang, llama.cpp, a hosted API). This module
drives such an endpoint through :class:`stepgym.llm_client.ChatClient` with the *training* text interface, so a
score obtained here and one obtained in the trainer (``stepgym eval --preset ...``) measure the same thing:

* the env is wrapped exactly as the trainer's collector wraps it: ``EnvFeedbackWrapper`` (format-valid /
  admissible / effective flags) inside ``TextInterfaceWrapper`` (prompt with the last K steps and the admissible
  actions, strict action parsing; an unparsable reply costs a step as a no-op);
* the prompt is sent as one user message (after an optional system message), which is what the trainer's
  ``PromptEncoder`` feeds its model through the chat template; the reply text is the turn;
* the same summary as the trainer's evaluation (:func:`stepgym.trainers.evaluate.summarise`: success overall, per
  task type and within interaction budgets, valid-action ratio), plus each validity flag's ratio, token usage and
  wall time.

Many episodes are in flight at once (``concurrency`` threads, each with its own env copy; the server batches the
requests), bounded so a small server is not flooded. Every finished episode is recorded in ``episodes.jsonl.gz``,
the :mod:`stepgym.recording` format that ``stepgym view`` reads, with every step's text and annotations, uncut;
the recording module's writer is also what makes the run resumable (one fsynced member per episode, an OS lock per
file, a torn last member dropped, each episode read back once). An interrupted run (Ctrl-C, the server dying, a
crash) is resumed by running the same command again: finished tasks are read back and skipped, and the task list
is the env's fixed order, so no episode is lost or counted twice. ``run.json`` records what was evaluated;
resuming with different settings is refused.

Pieces usable from Python: :class:`LLMAgent` (a :class:`stepgym.agents.Agent` that asks the endpoint),
:class:`EndpointBackend` (a trainer rollout backend, ``make_backend("openai", ...)``), :func:`make_text_env`,
:func:`evaluate_endpoint`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stepgym import schema
from stepgym.errors import StepGymError
from stepgym.llm_client import ChatClient, ChatReply, LLMConfigError, LLMUnavailableError
from stepgym.recording import (
    FILE_NAME,
    EpisodeWriter,
    RecordingLockedError,
    episode_trajectory,
    read_recording,
    trajectory_records,
)

__all__ = [
    "EndpointBackend",
    "EvalRunError",
    "LLMAgent",
    "Sampling",
    "evaluate_endpoint",
    "main",
    "make_text_env",
]

RUN = "run.json"
SUMMARY = "summary.json"


class EvalRunError(StepGymError, ValueError):
    """The output folder belongs to another evaluation (different env, split, model or settings) or is in use."""


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of every request. ``temperature=0`` is greedy (the default, as in the trainer's
    evaluation). ``seed`` (when set) is sent per request as ``seed + 1000 * task index + turn``, so a sampled
    evaluation is reproducible on servers that honour it (vLLM, SGLang)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def params(self, request_seed: int | None = None) -> dict[str, Any]:
        p: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.top_p != 1.0:
            p["top_p"] = self.top_p
        if self.stop:
            p["stop"] = list(self.stop)
        if request_seed is not None:
            p["seed"] = int(request_seed)
        return p


def chat_messages(prompt: str, system: str = "") -> list[dict[str, str]]:
    """The messages for one turn: the system text (if any) and the prompt as the user message (what the
    trainer's ``PromptEncoder`` renders through the chat template)."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


# ---------------------------------------------------------------------------------------------------------------
# The agent and the backend
# ---------------------------------------------------------------------------------------------------------------
class LLMAgent:
    """An :class:`~stepgym.agents.Agent` whose ``act(prompt, info)`` returns the endpoint's reply text.

    Feed it the prompt: wrap the env with ``make_text_env`` (or ``TextInterfaceWrapper(prompt_as_observation=
    True)``) so the observation *is* the prompt. ``usage`` counts this episode's requests and tokens.
    """

    def __init__(
        self,
        client: ChatClient,
        sampling: Sampling | None = None,
        *,
        system: str = "",
        seed: int | None = None,
    ) -> None:
        self.client = client
        self.sampling = sampling or Sampling()
        self.system = system
        self.seed = seed if seed is not None else self.sampling.seed
        self.reset()

    def reset(self) -> None:
        self.turn = 0
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "truncated_replies": 0}

    def act(self, observation: str, info: dict[str, Any]) -> str:
        seed = None if self.seed is None else self.seed + self.turn
        reply: ChatReply = self.client.chat(
            chat_messages(observation, self.system), **self.sampling.params(seed)
        )
        self.turn += 1
        self.usage["requests"] += 1
        self.usage["prompt_tokens"] += reply.prompt_tokens
        self.usage["completion_tokens"] += reply.completion_tokens
        self.usage["truncated_replies"] += int(reply.finish_reason == "length")
        return reply.content


class _PromptFromEnv:
    """Adapts an agent that reads prompts to an env that returns its own observations: the agent is given the
    text interface's current prompt, while the recorded trajectory keeps the env's observations (as the trainer's
    collector records them)."""

    def __init__(self, env: Any, agent: LLMAgent, stop: threading.Event | None = None) -> None:
        self.env, self.agent, self.stop = env, agent, stop

    def reset(self) -> None:
        self.agent.reset()

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.stop is not None and self.stop.is_set():
            raise _Cancelled
        return self.agent.act(self.env.get_wrapper_attr("prompt"), info)


class _Cancelled(Exception):
    """The run is stopping (an endpoint error or Ctrl-C elsewhere): this unfinished episode is dropped."""


class EndpointBackend:
    """A trainer rollout backend (:class:`stepgym.trainers.backends.RolloutBackend`) that asks an endpoint.

    Each request's ``prompt`` text goes out as :func:`chat_messages`; up to ``concurrency`` requests are in flight.
    An endpoint returns text, not the trainer's token ids, so ``response_ids`` are empty: the backend serves
    evaluation (``trainers.evaluate.evaluate`` with a collector), not training updates.
    """

    def __init__(
        self,
        client: ChatClient,
        sampling: Sampling | None = None,
        *,
        system: str = "",
        concurrency: int = 8,
    ) -> None:
        self.client = client
        self.sampling = sampling or Sampling()
        self.system = system
        self.concurrency = max(1, int(concurrency))

    def sync_weights(self, model: Any) -> None:
        return None  # the served weights are the server's business

    def generate(self, requests: Sequence[Any], *, seed: int, greedy: bool = False) -> list[Any]:
        from stepgym.trainers.backends import Generation

        temp = 0.0 if greedy else self.sampling.temperature
        sampling = Sampling(temp, self.sampling.top_p, self.sampling.max_tokens, None, self.sampling.stop)

        def one(i: int) -> Generation:
            params = sampling.params(None if greedy else seed + i)
            r = self.client.chat(chat_messages(requests[i].prompt, self.system), **params)
            return Generation([], r.content, r.finish_reason != "length")

        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(requests)))) as pool:
            return list(pool.map(one, range(len(requests))))


def make_text_env(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    fmt: str = "",
    history: int | str | None = "default",
    prompt_as_observation: bool = False,
) -> Any:
    """The env as the trainer's collector sees it: ``TextInterfaceWrapper(EnvFeedbackWrapper(gym.make(...)))``.

    ``fmt`` names the text format ('' looks it up from the env id, CreditToy included); ``history`` is K.
    """
    import gymnasium as gym

    import stepgym  # noqa: F401 - registers the envs
    from stepgym.trainers.formats import resolve_format
    from stepgym.wrappers.feedback import EnvFeedbackWrapper
    from stepgym.wrappers.text import TextInterfaceWrapper

    env = EnvFeedbackWrapper(gym.make(env_id, **dict(env_kwargs or {})))
    return TextInterfaceWrapper(
        env,
        fmt=resolve_format(env_id, fmt),
        history_length=history,
        prompt_as_observation=prompt_as_observation,
    )


def episode_records(
    index: int, traj: schema.Trajectory, usage: Mapping[str, int], seconds: float
) -> list[dict[str, Any]]:
    """The recording of one evaluated episode: task ``index`` (the position in the split's fixed order) is its
    ``group``; every text is kept whole so :func:`~stepgym.recording.episode_trajectory` gives it back exactly."""
    extra = {"usage": dict(usage), "seconds": seconds}
    return trajectory_records(
        traj, iteration=0, group=index, rollout=0, episode_extra=extra, max_text_chars=0
    )


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------
def summarise_records(episodes: Sequence[Mapping[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    """The trainer's summary (:func:`stepgym.trainers.evaluate.summarise`) of recorded episodes
    (:func:`stepgym.recording.read_recording`) plus each validity flag's ratio over all steps, token usage and the
    summed episode time."""
    from stepgym.trainers.evaluate import summarise

    trajs = [episode_trajectory(e) for e in episodes]
    out = summarise(trajs, budgets)
    steps = [s.info for t in trajs for s in t.steps]
    for key, name in (
        (schema.FORMAT_VALID, "format_valid_ratio"),
        (schema.ADMISSIBLE, "admissible_ratio"),
        (schema.EFFECTIVE, "effective_ratio"),
    ):
        vals = [bool(i[key]) for i in steps if key in i]
        out[name] = sum(vals) / len(vals) if vals else 0.0
    usage: dict[str, int] = {}
    for e in episodes:
        for k, v in (e.get("usage") or {}).items():
            usage[k] = usage.get(k, 0) + int(v)
    out["usage"] = usage
    out["episode_seconds"] = float(sum(e.get("seconds") or 0.0 for e in episodes))
    return out


@dataclass
class _Settings:
    """What identifies an evaluation (``run.json``): resuming with anything else here different is refused."""

    env: str
    split: str
    env_kwargs: dict[str, Any]
    format: str
    history: int | str | None
    model: str
    system: str
    sampling: dict[str, Any]
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)


def _check_run(folder: Path, settings: _Settings) -> None:
    path = folder / RUN
    want = json.loads(json.dumps(asdict(settings)))
    if path.exists():
        have = json.loads(path.read_text(encoding="utf-8"))
        diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        if diff:
            raise EvalRunError(
                f"{folder} holds an evaluation with different settings ({', '.join(diff)}: "
                f"{ {k: have.get(k) for k in diff} } there, { {k: want.get(k) for k in diff} } now); "
                "resume it with the same settings or choose another --out"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, json.dumps(want, indent=1).encode())


class _Serialised:
    """Runs an env's ``reset``/``step`` under a lock shared by all env copies of a run.

    Not every engine is thread-safe (TextWorld's PDDL parser keeps global state), and env steps are CPU work that
    the GIL serialises anyway; what overlaps is the waiting for the endpoint, which happens outside the lock.
    """

    def __init__(self, env: Any, lock: threading.Lock) -> None:
        self.env, self.lock = env, lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, **kwargs: Any) -> Any:
        with self.lock:
            return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        with self.lock:
            return self.env.step(action)


def _play(
    env: Any, agent: LLMAgent, *, seed: int, task_id: str, stop: threading.Event | None = None
) -> schema.Trajectory:
    from stepgym.rollout import play_episode

    return play_episode(env, _PromptFromEnv(env, agent, stop), seed=seed, options={"task_id": task_id})


def evaluate_endpoint(
    client: ChatClient,
    env_id: str,
    *,
    out_dir: str | os.PathLike[str],
    split: str = "",
    env_kwargs: Mapping[str, Any] | None = None,
    fmt: str = "",
    history: int | str | None = "default",
    sampling: Sampling | None = None,
    system: str = "",
    concurrency: int = 8,
    limit: int = 0,
    seed: int = 0,
    budgets: Sequence[int] = (10, 20, 30, 40, 50),
    check_model: bool = True,
    progress: bool = False,
    env_factory: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Evaluate the endpoint's model on every task of ``env_id``'s ``split`` (its first ``limit`` if set).

    Tasks are played in the env's fixed ``task_ids`` order, each reset with ``seed`` (as the trainer's evaluation
    does), ``concurrency`` at a time. Episodes are recorded in ``out_dir/episodes.jsonl.gz`` as they finish
    (``stepgym view out_dir`` shows them); the summary of the recorded episodes (see :func:`summarise_records`,
    plus ``wall_seconds`` of this call, ``episodes_resumed`` and ``complete``) goes to ``out_dir/summary.json``
    and is returned. Running it again on the same folder resumes (see the module
    docstring). When the endpoint fails for good, the finished episodes stay recorded and the error
    (:class:`~stepgym.llm_client.LLMUnavailableError` or :class:`~stepgym.llm_client.LLMConfigError`) is raised
    with a note on how to resume. ``env_factory`` replaces :func:`make_text_env` for an env that needs building by
    hand; it must return the text-interface env (``env_id`` then only names the run).
    """
    t_start = time.perf_counter()
    sampling = sampling or Sampling()
    kwargs = dict(env_kwargs or {})
    if split:
        kwargs["split"] = split
    folder = Path(out_dir)
    settings = _Settings(
        env_id, split, kwargs, fmt, history, client.model, system, asdict(sampling), int(seed)
    )
    if check_model:
        client.check_model()
    header = {"source": "eval", "method": client.model, "env_id": env_id, "split": split}
    try:
        writer = EpisodeWriter(folder / FILE_NAME, header, exclusive=True)
    except RecordingLockedError:
        raise EvalRunError(
            f"another evaluation is writing to {folder}; wait for it or use another --out"
        ) from None
    created: list[Any] = []
    try:
        recorded = read_recording(writer.path)
        if recorded.header.get("source") != "eval":
            raise EvalRunError(
                f"{writer.path} holds a recording of another kind ({recorded.header.get('source')!r}, not an "
                "evaluation); choose another --out"
            )
        _check_run(folder, settings)
        done = {e["task_id"] for e in recorded.episodes}
        env_lock = threading.Lock()
        build = env_factory or (lambda: make_text_env(env_id, kwargs, fmt=fmt, history=history))

        def make() -> _Serialised:
            with env_lock:
                return _Serialised(build(), env_lock)

        pool: queue.SimpleQueue[Any] = queue.SimpleQueue()
        first = make()
        created.append(first)
        pool.put(first)
        ids = list(first.unwrapped.task_ids)
        if limit > 0:
            ids = ids[:limit]
        todo = [(i, tid) for i, tid in enumerate(ids) if tid not in done]
        resumed = len(ids) - len(todo)
        error = _run_tasks(
            client, todo, writer, make, pool, created, sampling, system, seed, concurrency, progress
        )
    finally:
        writer.close()
        for env in created:
            with contextlib.suppress(Exception):
                env.close()
    wanted = set(ids)  # the summary is of what is on disk, i.e. what `stepgym view` shows
    episodes = [e for e in read_recording(writer.path).episodes if e["task_id"] in wanted]
    episodes.sort(key=lambda e: e["group"])
    summary = summarise_records(episodes, budgets)
    summary.update(
        env=env_id,
        split=split,
        model=client.model,
        n_planned=len(ids),
        complete=len(episodes) == len(ids),
        episodes_resumed=resumed,
        wall_seconds=time.perf_counter() - t_start,
    )
    _atomic_write(folder / SUMMARY, json.dumps(summary, indent=1).encode())
    if error is not None:
        note = (
            f" {len(episodes)} of {len(ids)} episodes are recorded in {writer.path}; run the same evaluation "
            "again to continue where it stopped."
        )
        if isinstance(error, LLMUnavailableError):
            raise LLMUnavailableError(
                str(error) + "." + note, attempts=error.attempts, last_error=error.last_error
            ) from error
        raise type(error)(str(error) + note) from error
    return summary


def _run_tasks(
    client: ChatClient,
    todo: Sequence[tuple[int, str]],
    writer: EpisodeWriter,
    make: Callable[[], Any],
    pool: queue.SimpleQueue[Any],
    created: list[Any],
    sampling: Sampling,
    system: str,
    seed: int,
    concurrency: int,
    progress: bool,
) -> Exception | None:
    """Play ``todo`` with ``concurrency`` workers, recording each finished episode; returns the endpoint error
    that stopped the run, if any. On an error or Ctrl-C no task starts any more and running episodes are dropped
    at their next turn (they are played again on resume)."""
    stop = threading.Event()
    lock = threading.Lock()

    def one(index: int, tid: str) -> list[dict[str, Any]] | None:
        if stop.is_set():
            return None
        try:
            env = pool.get_nowait()
        except queue.Empty:
            env = make()
            with lock:
                created.append(env)
        try:
            base = None if sampling.seed is None else sampling.seed + 1000 * index
            agent = LLMAgent(client, sampling, system=system, seed=base)
            t0 = time.perf_counter()
            traj = _play(env, agent, seed=seed, task_id=tid, stop=stop)
            return episode_records(index, traj, agent.usage, time.perf_counter() - t0)
        except _Cancelled:
            return None
        except BaseException:
            stop.set()  # here, not in the collecting loop: no worker may start another task meanwhile
            raise
        finally:
            pool.put(env)

    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="episodes", unit="ep", file=sys.stderr)
    error: Exception | None = None
    with ThreadPoolExecutor(max_workers=max(1, int(concurrency))) as ex:
        futures = [ex.submit(one, i, tid) for i, tid in todo]
        try:
            for fut in as_completed(futures):
                try:
                    rec = fut.result()
                except (LLMUnavailableError, LLMConfigError) as exc:
                    stop.set()
                    error = error or exc
                    continue
                if rec is not None:
                    writer.write(rec)
                    if bar is not None:
                        bar.update(1)
        except BaseException:
            stop.set()
            for f in futures:
                f.cancel()
            raise
        finally:
            if bar is not None:
                bar.close()
    return error


# ---------------------------------------------------------------------------------------------------------------
# Command line: `stepgym eval --model NAME ...` and `stepgym rollout --agent llm ...`
# ---------------------------------------------------------------------------------------------------------------
def _history(value: str) -> int | str | None:
    if value == "default":
        return value
    k = int(value)
    return None if k < 0 else k


def build_parser(prog: str = "stepgym eval") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Evaluate a model served behind an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, "
            "llama.cpp, a hosted API) on every task of an env split, with the training text interface (same "
            "prompts, history window, action parsing and validity flags as `stepgym train`). Prints success per "
            "task type and within interaction budgets, the valid-action ratios, token usage and wall time; writes "
            "every episode to OUT/episodes.jsonl.gz (`stepgym view OUT` shows them) and the summary to "
            "OUT/summary.json. Interrupted? Run the same "
            "command again: it continues where it stopped. Settings not given as flags come from OPENAI_BASE_URL "
            "(or STEPGYM_LLM_BASE_URL), OPENAI_API_KEY (or STEPGYM_LLM_API_KEY) and STEPGYM_LLM_MODEL."
        ),
    )
    ap.add_argument(
        "--base-url", default=None, help="API root, e.g. http://localhost:8000/v1 ($OPENAI_BASE_URL)"
    )
    ap.add_argument("--model", default=None, help="the served model name ($STEPGYM_LLM_MODEL)")
    ap.add_argument(
        "--api-key", default=None, help="bearer token; prefer $OPENAI_API_KEY (not in shell history)"
    )
    ap.add_argument("--env", default="StepGym/ALFWorld-v0", help="a registered env id")
    ap.add_argument("--split", default="valid_seen", help="the split (whole split, fixed order; '' for none)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tasks of the split (0: all)")
    ap.add_argument("--max-steps", type=int, default=0, help="step limit per episode (0: the env's default)")
    ap.add_argument("--data-root", default=None, help="data folder (default: $STEPGYM_DATA / user cache)")
    ap.add_argument(
        "--env-kwarg", action="append", default=[], metavar="KEY=VALUE", help="extra env kwargs (JSON)"
    )
    ap.add_argument(
        "--format",
        default="",
        help="text format: alfworld, webshop, qa, qa-lenient, credit ('': from the env id)",
    )
    ap.add_argument(
        "--history",
        type=_history,
        default="default",
        help="K, steps shown in the prompt (default: the format's; -1: all)",
    )
    ap.add_argument("--system", default="", help="a system message sent before every prompt")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=512, help="reply budget per turn")
    ap.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    ap.add_argument(
        "--sampling-seed", type=int, default=None, help="send per-request seeds derived from this"
    )
    ap.add_argument("--seed", type=int, default=0, help="env reset seed of every episode")
    ap.add_argument("--concurrency", type=int, default=8, help="episodes in flight at once")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    ap.add_argument(
        "--max-retries", type=int, default=5, help="retries per request (429, 5xx, timeouts, drops)"
    )
    ap.add_argument("--budgets", default="10,20,30,40,50", help="interaction budgets for success-within-B")
    ap.add_argument("--out", default=None, help="output folder (default: runs/eval/<model>-<env>-<split>)")
    ap.add_argument("--no-check", action="store_true", help="skip the GET /models check of the model name")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--agent", default="llm", choices=["llm"], help=argparse.SUPPRESS)
    return ap


def _print_summary(s: Mapping[str, Any], out: Path) -> None:
    from stepgym.trainers.evaluate import format_summary

    print(format_summary(s, f"{s['model']} on {s['env']} ({s['split'] or 'no split'})"))
    print(f"written: {out / FILE_NAME} (`stepgym view {out}` shows the episodes), {out / SUMMARY}")


def main(argv: Sequence[str] | None = None, prog: str = "stepgym eval") -> int:
    """Entry point of ``stepgym eval --model ...`` and ``stepgym rollout --agent llm``."""
    from stepgym.cli.rollout import _parse_kv

    args = build_parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
    kwargs = _parse_kv(args.env_kwarg)
    if args.max_steps > 0:
        kwargs["max_steps"] = args.max_steps
    if args.data_root is not None:
        kwargs["data_root"] = args.data_root
    budgets = tuple(int(b) for b in args.budgets.split(",") if b.strip())
    sampling = Sampling(args.temperature, args.top_p, args.max_tokens, args.sampling_seed, tuple(args.stop))
    try:
        client = ChatClient(
            args.base_url,
            args.model,
            args.api_key,
            timeout=args.timeout,
            max_retries=args.max_retries,
            max_connections=args.concurrency,
        )
    except LLMConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    slug = "-".join(x.replace("/", "_") for x in (client.model, args.env, args.split) if x)
    out = Path(args.out or f"runs/eval/{slug}")
    try:
        with client:
            summary = evaluate_endpoint(
                client,
                args.env,
                out_dir=out,
                split=args.split,
                env_kwargs=kwargs,
                fmt=args.format,
                history=args.history,
                sampling=sampling,
                system=args.system,
                concurrency=args.concurrency,
                limit=args.limit,
                seed=args.seed,
                budgets=budgets,
                check_model=not args.no_check,
                progress=not args.no_progress,
            )
    except (LLMConfigError, LLMUnavailableError, EvalRunError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    _print_summary(summary, out)
    return 0
