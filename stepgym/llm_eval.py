# Over 400 lines: scoring an endpoint resumably: requests, retries, budgets and the report.
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
is a fixed (seeded) order of the split, so no episode is lost or counted twice. ``run.json`` records what was evaluated;
resuming with different settings is refused.

Pieces usable from Python: :class:`LLMAgent` (a :class:`stepgym.agents.Agent` that asks the endpoint),
:class:`~stepgym.trainers.endpoint_backend.EndpointBackend` (a trainer rollout backend,
``make_backend("openai", ...)``, in :mod:`stepgym.trainers.endpoint_backend`, with :class:`Sampling`, which is
re-exported here), :func:`evaluate_endpoint` (with an :class:`EndpointEvalConfig`).
The command line (``stepgym eval --model``, ``stepgym rollout --agent llm``) is :mod:`stepgym.cli.endpoint`.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from stepgym.atomic import atomic_write_json
from stepgym.errors import StepGymError
from stepgym.llm_client import ChatClient, ChatReply, LLMConfigError, LLMUnavailableError
from stepgym.recording import (
    FILE_NAME,
    EpisodeWriter,
    RecordExtras,
    RecordingLockedError,
    episode_trajectory,
    read_recording,
    trajectory_records,
)
from stepgym.trainers.endpoint_backend import Sampling, chat_messages
from stepgym.wrappers.text import make_text_env

__all__ = [
    "EndpointEvalConfig",
    "EvalRunError",
    "LLMAgent",
    "Sampling",
    "default_budgets",
    "evaluate_endpoint",
    "served_identity",
]

RUN = "run.json"
SUMMARY = "summary.json"


class EvalRunError(StepGymError, ValueError):
    """The output folder belongs to another evaluation (different env, split, model or settings) or is in use."""


# ---------------------------------------------------------------------------------------------------------------
# The agent and the backend
# ---------------------------------------------------------------------------------------------------------------
class LLMAgent:
    """An :class:`~stepgym.agents.Agent` whose ``act(prompt, info)`` returns the endpoint's reply text.

    Feed it the prompt: wrap the env with :func:`stepgym.wrappers.text.make_text_env` (or ``TextInterfaceWrapper(prompt_as_observation=
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


def episode_records(
    index: int, traj: schema.Trajectory, usage: Mapping[str, int], seconds: float
) -> list[dict[str, Any]]:
    """The recording of one evaluated episode: task ``index`` (its position in the seeded
    :func:`stepgym.data.stratified_order`) is its ``group``; every text is kept whole so :func:`~stepgym.recording.episode_trajectory` gives it back exactly."""
    extra = {"usage": dict(usage), "seconds": seconds}
    return trajectory_records(
        traj, iteration=0, group=index, rollout=0, extras=RecordExtras(episode_extra=extra), max_text_chars=0
    )


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
        # None is "unknown" (EnvFeedbackWrapper without a state key or admissible list): left out, not False.
        vals = [bool(i[key]) for i in steps if i.get(key) is not None]
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
    """What identifies an evaluation (``run.json``): resuming with anything else here different is refused.

    ``served`` is what the server says about the model behind the name (``root``: the weights' path or hub id,
    ``revision``, where its ``/models`` route reports them), so a new checkpoint served under the old name is not
    mixed with the old one's episodes."""

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
    served: dict[str, Any] | None = None

    def key(self) -> str:
        """A short hash of every setting: the subfolder of a run keyed by what changes its result."""
        text = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


#: Fields of a ``/models`` entry that tell two models served under one name apart (vLLM and SGLang: ``root``).
_IDENTITY_FIELDS = ("root", "revision", "parent")


def served_identity(entries: Sequence[Mapping[str, Any]], model: str) -> dict[str, Any] | None:
    """The identifying fields (:data:`_IDENTITY_FIELDS`) of ``model``'s entry in the server's ``/models`` list;
    ``None`` when the server reports none of them."""
    for entry in entries:
        if str(entry.get("id")) == model:
            found = {k: entry[k] for k in _IDENTITY_FIELDS if entry.get(k) not in (None, "")}
            return found or None
    return None


def _check_run(folder: Path, settings: _Settings) -> None:
    path = folder / RUN
    want = json.loads(json.dumps(asdict(settings)))
    if path.exists():
        have = json.loads(path.read_text(encoding="utf-8"))
        diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        if diff:
            why = " (the server now serves other weights under this model name)" if "served" in diff else ""
            raise EvalRunError(
                f"{folder} holds an evaluation with different settings{why} ({', '.join(diff)}: "
                f"{ {k: have.get(k) for k in diff} } there, { {k: want.get(k) for k in diff} } now); "
                "resume it with the same settings or choose another --out"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, want, indent=1)


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


def default_budgets(max_steps: int) -> tuple[int, ...]:
    """Five interaction budgets evenly spread up to an env's step limit (ALFWorld's 50 steps: 10, 20, ..., 50;
    WebShop's 15: 3, 6, ..., 15), so every env is scored within budgets that fit its own episodes."""
    n = max(1, int(max_steps))
    return tuple(sorted({max(1, round(n * k / 5)) for k in range(1, 6)}))


def _step_limit(env: Any) -> int:
    spec = getattr(env.unwrapped, "spec", None)
    return int(getattr(env.unwrapped, "max_steps", 0) or getattr(spec, "max_episode_steps", 0) or 50)


@dataclass(frozen=True)
class EndpointEvalConfig:
    """What :func:`evaluate_endpoint` evaluates, and how (frozen; every field but ``env_id`` and ``out_dir`` has a
    default).

    Args:
        env_id: the registered env (with ``env_factory``, only the run's name).
        out_dir: where ``episodes.jsonl.gz``, ``run.json`` and ``summary.json`` go (see ``key_by_settings``).
        split: the split to play (``env_kwargs["split"]``); ``""`` keeps the env's default.
        env_kwargs: more keyword arguments for the env.
        fmt: the text format by name (``""``: the env's own).
        history: how many past steps the prompt shows (``"default"``: the format's).
        sampling: the endpoint's sampling settings (:class:`Sampling`).
        system: an optional system message.
        concurrency: episodes in flight at once (one env copy and one request each).
        limit: play a fixed stratified sample of this many tasks (0: the whole split).
        seed: every episode's reset seed, and the seed of the task order.
        budgets: the interaction budgets of the summary (default: :func:`default_budgets` of the step limit).
        check_model: ask the server (``GET /models``) that the model is served, and what it serves under the name.
        progress: show a progress bar.
        env_factory: replaces :func:`make_text_env` for an env that needs building by hand; it must return the
            text-interface env.
        key_by_settings: write to ``out_dir/<hash of the settings>``, so a run with other settings (or another
            checkpoint served under the same name) never shares a folder.
    """

    env_id: str
    out_dir: str | os.PathLike[str]
    split: str = ""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    fmt: str = ""
    history: int | str | None = "default"
    sampling: Sampling = field(default_factory=Sampling)
    system: str = ""
    concurrency: int = 8
    limit: int = 0
    seed: int = 0
    budgets: tuple[int, ...] | None = None
    check_model: bool = True
    progress: bool = False
    env_factory: Callable[[], Any] | None = None
    key_by_settings: bool = False

    def __post_init__(self) -> None:
        for name, minimum in (("concurrency", 1), ("limit", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"EndpointEvalConfig.{name} must be an int >= {minimum}, got {value!r}")
        if self.budgets is not None:
            budgets = tuple(self.budgets)
            if not all(isinstance(b, int) and b > 0 for b in budgets):
                raise ValueError(
                    f"EndpointEvalConfig.budgets must be positive step counts, got {self.budgets!r}"
                )
            object.__setattr__(self, "budgets", budgets or None)
        if not isinstance(self.sampling, Sampling):
            raise TypeError(
                f"EndpointEvalConfig.sampling must be a Sampling, got {type(self.sampling).__name__}"
            )

    def env_arguments(self) -> dict[str, Any]:
        """The env's keyword arguments: ``env_kwargs`` with ``split`` when one is set."""
        kwargs = dict(self.env_kwargs)
        if self.split:
            kwargs["split"] = self.split
        return kwargs


def evaluate_endpoint(client: ChatClient, config: EndpointEvalConfig) -> dict[str, Any]:
    """Evaluate the endpoint's model on every task of ``config.env_id``'s split (a sample of ``limit`` if set).

    Every task of the split is played, each reset with ``seed`` (as the trainer's evaluation does),
    ``concurrency`` at a time, in :func:`stepgym.data.stratified_order` (seeded with ``seed``), so ``limit > 0``
    plays a fixed sample stratified by task type (the same tasks as :func:`stepgym.data.sample_tasks`). Episodes
    are recorded in ``out_dir/episodes.jsonl.gz`` as they finish (``stepgym view out_dir`` shows them); the
    summary of the recorded episodes (see :func:`summarise_records`, plus ``wall_seconds`` of this call,
    ``episodes_resumed``, ``complete`` and ``out_dir``) goes to ``out_dir/summary.json`` and is returned. Running
    it again on the same folder resumes (see the module docstring). When the endpoint fails for good, the finished
    episodes stay recorded and the error (:class:`~stepgym.llm_client.LLMUnavailableError` or
    :class:`~stepgym.llm_client.LLMConfigError`) is raised with a note on how to resume. The settings are
    :class:`EndpointEvalConfig`'s.
    """
    if not isinstance(config, EndpointEvalConfig):
        raise TypeError(
            f"evaluate_endpoint takes an EndpointEvalConfig, got {type(config).__name__}: "
            "evaluate_endpoint(client, EndpointEvalConfig(env_id, out_dir=..., ...))"
        )
    t_start = time.perf_counter()
    cfg, kwargs = config, config.env_arguments()
    settings = _settings(client, cfg, kwargs)
    folder = Path(cfg.out_dir) / settings.key() if cfg.key_by_settings else Path(cfg.out_dir)
    writer = _open_writer(
        folder, {"source": "eval", "method": client.model, "env_id": cfg.env_id, "split": cfg.split}
    )
    make = _env_maker(
        cfg.env_factory or (lambda: make_text_env(cfg.env_id, kwargs, fmt=cfg.fmt, history=cfg.history))
    )
    created: list[Any] = []
    pool: queue.SimpleQueue[Any] = queue.SimpleQueue()
    try:
        done = _recorded_tasks(writer, folder, settings)
        first = make()
        created.append(first)
        pool.put(first)
        ids = _plan(list(first.unwrapped.task_ids), cfg.limit, cfg.seed)
        budgets = cfg.budgets or default_budgets(_step_limit(first))
        todo = [(i, tid) for i, tid in enumerate(ids) if tid not in done]
        error = _run_tasks(client, cfg, todo, writer, make, pool, created)
    finally:
        writer.close()
        for env in created:
            with contextlib.suppress(Exception):
                env.close()
    summary = _write_summary(folder, writer.path, ids, budgets, settings)
    summary.update(episodes_resumed=len(ids) - len(todo), wall_seconds=time.perf_counter() - t_start)
    atomic_write_json(folder / SUMMARY, summary, indent=1)
    if error is not None:
        _raise_with_resume_note(error, summary["n_tasks"], len(ids), writer.path)
    return summary


def _settings(client: ChatClient, cfg: EndpointEvalConfig, kwargs: dict[str, Any]) -> _Settings:
    """What identifies this evaluation, the served weights included (one ``GET /models``, which also checks that
    the model is served, when ``check_model``)."""
    entries = client.served_models() if cfg.check_model else []
    if cfg.check_model:
        client.check_model(entries)
    served = served_identity(entries, client.model)
    return _Settings(
        cfg.env_id,
        cfg.split,
        kwargs,
        cfg.fmt,
        cfg.history,
        client.model,
        cfg.system,
        asdict(cfg.sampling),
        int(cfg.seed),
        served=served,
    )


def _env_maker(build: Callable[[], Any]) -> Callable[[], _Serialised]:
    """Builds env copies one at a time, each serialised by the lock all copies share (see :class:`_Serialised`)."""
    lock = threading.Lock()

    def make() -> _Serialised:
        with lock:
            return _Serialised(build(), lock)

    return make


def _plan(ids: list[str], limit: int, seed: int) -> list[str]:
    """The tasks to play, in :func:`stepgym.data.stratified_order` (``limit > 0``: its first ``limit``). A task's
    position there is its ``group`` in the recording and its sampling-seed offset: the same task has the same
    index whatever ``limit`` is, so a run resumed with another ``limit`` never confuses two tasks."""
    from stepgym.data import stratified_order

    order = stratified_order(ids, seed=seed)
    return order[:limit] if limit > 0 else order


def _open_writer(folder: Path, header: Mapping[str, Any]) -> EpisodeWriter:
    try:
        return EpisodeWriter(folder / FILE_NAME, dict(header), exclusive=True)
    except RecordingLockedError:
        raise EvalRunError(
            f"another evaluation is writing to {folder}; wait for it or use another --out"
        ) from None


def _recorded_tasks(writer: EpisodeWriter, folder: Path, settings: _Settings) -> set[str]:
    """The task ids already recorded in ``folder``, after checking it holds this evaluation (not another one)."""
    recorded = read_recording(writer.path)
    if recorded.header.get("source") != "eval":
        raise EvalRunError(
            f"{writer.path} holds a recording of another kind ({recorded.header.get('source')!r}, not an "
            "evaluation); choose another --out"
        )
    _check_run(folder, settings)
    return {e["task_id"] for e in recorded.episodes}


def _write_summary(
    folder: Path, path: Path, ids: Sequence[str], budgets: Sequence[int], settings: _Settings
) -> dict[str, Any]:
    """The summary of what is on disk for ``ids`` (what ``stepgym view`` shows), not only of this call's work."""
    wanted = set(ids)
    episodes = [e for e in read_recording(path).episodes if e["task_id"] in wanted]
    episodes.sort(key=lambda e: e["group"])
    summary = summarise_records(episodes, budgets)
    summary.update(
        env=settings.env,
        split=settings.split,
        model=settings.model,
        n_planned=len(ids),
        complete=len(episodes) == len(ids),
        out_dir=str(folder),
    )
    return summary


def _raise_with_resume_note(error: Exception, n_done: int, n_planned: int, path: Path) -> None:
    note = (
        f" {n_done} of {n_planned} episodes are recorded in {path}; run the same evaluation "
        "again to continue where it stopped."
    )
    if isinstance(error, LLMUnavailableError):
        raise LLMUnavailableError(
            str(error) + "." + note, attempts=error.attempts, last_error=error.last_error
        ) from error
    raise type(error)(str(error) + note) from error


def _run_tasks(
    client: ChatClient,
    cfg: EndpointEvalConfig,
    todo: Sequence[tuple[int, str]],
    writer: EpisodeWriter,
    make: Callable[[], Any],
    pool: queue.SimpleQueue[Any],
    created: list[Any],
) -> Exception | None:
    """Play ``todo`` with ``concurrency`` workers, recording each finished episode; returns the endpoint error
    that stopped the run, if any. On an error or Ctrl-C no task starts any more and running episodes are dropped
    at their next turn (they are played again on resume)."""
    sampling, system, seed = cfg.sampling, cfg.system, cfg.seed
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
    if cfg.progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="episodes", unit="ep", file=sys.stderr)
    error: Exception | None = None
    with ThreadPoolExecutor(max_workers=cfg.concurrency) as ex:
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
