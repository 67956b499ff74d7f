# Over 400 lines: AHEAD's error analysis and the corrective hint rules of every env family.
"""Corrective hints (AHEAD): which steps of a failed episode were critical errors, and what to do instead.

AHEAD ("Adaptive Hindsight with Environment-Augmented Distillation for Agentic RL", Jin et al. 2026; docs/shapers.md
§4) gives its teacher two kinds of privileged information: the environment's feedback on every step,
and, on the *error steps of failed trajectories only*, a short corrective hint from an analyzer ("go to
diningtable 1 first"). Its ablation shows that applying hints to successful episodes hurts (−failure-only), and
that marking several error steps per trajectory helps (−multi-step); stepgym follows both (``shapers.md`` §8
items 16–17: failure-only means the analyzer runs only on failed episodes, env feedback still reaches every step).

The pieces:

* :class:`Analysis` — error steps (0-based indices into ``trajectory.steps``: step ``t`` is the action taken in
  the state whose info is ``trajectory.infos()[t]``) and a hint per error step.
* :class:`Analyzer` — the protocol: ``analyze(trajectory) -> Analysis``.
* :class:`OracleAnalyzer` — deterministic, offline, the default. It reads the ground truth the envs put in info.
* :class:`LLMAnalyzer` — any OpenAI-compatible ``/chat/completions`` endpoint, through the shared
  :class:`stepgym.llm_client.ChatClient` (retries with exponential backoff, timeouts): strict JSON reply parsing,
  a cache keyed by the prompt (i.e. by the trajectory's content), and a clear :class:`AnalyzerError` or an
  explicit fallback analyzer when the server is down or keeps replying garbage.
* :class:`HintWrapper` — puts ``schema.ERROR_STEPS`` and ``schema.HINTS`` into the final info of an episode.
* Pure functions over recorded trajectories (:func:`analyze_trajectory`, :func:`annotate_trajectory`,
  :func:`analyze_many`, :func:`ahead_privileged_text`), so any trainer can compute hints offline.

The oracle's rules, applied per step in this order (the first rule that applies decides):

1. **invalid** — the reply was not format-valid (``FORMAT_VALID`` False), the action was inadmissible
   (``ADMISSIBLE`` False) or the env rejected it (``INVALID_REASON`` non-empty): an error.
2. **ARG** — when ProAS's labels are attached (``ARG_REASONABLE`` in the step's info): an error iff not reasonable.
3. **answer** — the final turn of a Search-QA episode (``EXACT_MATCH`` in info): an error iff not an exact match.
4. **search** — the other Search-QA turns (``SEARCH_PRODUCTIVE`` in info; invalid turns were caught by rule 1): an
   error iff the search found no passage with a gold answer (AHEAD's "unproductive query").
5. **expert** — when the env gave an expert action for the state (``EXPERT_ACTION``, ALFWorld's handcoded expert,
   WebShop's oracle): an error iff the action differs from it (WebShop: any ``search[...]`` matches an expert
   ``search[...]``; the query's quality shows up in the steps that follow).
6. otherwise not an error (nothing is known).

Every hint names the command to use instead: the expert's action when known (it is admissible by construction),
else, for an invalid action, the first admissible actions of the state.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from stepgym import schema
from stepgym.atomic import atomic_write_json
from stepgym.episodes import EpisodeRecorder
from stepgym.llm_client import ChatClient, ChatReply, LLMConfigError, LLMUnavailableError, RetryPolicy
from stepgym.schema import is_success
from stepgym.text_utils import normalize_action
from stepgym.wrappers.text import action_text

__all__ = [
    "PROMPT_VERSION",
    "Analysis",
    "Analyzer",
    "AnalyzerConfigError",
    "AnalyzerError",
    "AnalyzerPrompt",
    "HintWrapper",
    "LLMAnalyzer",
    "OracleAnalyzer",
    "ahead_privileged_text",
    "analyze_many",
    "analyze_trajectory",
    "annotate_trajectory",
    "parse_analysis_reply",
    "render_for_analyzer",
    "same_action",
]


class AnalyzerError(LLMUnavailableError):
    """The LLM analyzer got no usable answer (server down, timeouts, 5xx, garbage) after its retries."""


class AnalyzerConfigError(LLMConfigError):
    """The LLM analyzer is misconfigured (no base URL or model, or the server refused the request: 4xx)."""


# ---------------------------------------------------------------------------------------------------------------
# Analysis and the protocol
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Analysis:
    """The critical error steps of one trajectory and a corrective hint for each.

    ``error_steps`` are sorted 0-based indices into ``trajectory.steps``; ``hints`` maps each of them to a short
    hint. ``source`` says who produced it (``"oracle"``, ``"llm"``, ``"llm-cache"``, ``"fallback:oracle"``,
    ``"skipped:success"``).
    """

    error_steps: tuple[int, ...] = ()
    hints: Mapping[int, str] = field(default_factory=dict)
    source: str = ""

    def to_info(self) -> dict[str, Any]:
        """The info values: ``{ERROR_STEPS: list[int], HINTS: {str(step): hint}}`` (plain, JSON-able)."""
        return {
            schema.ERROR_STEPS: [int(t) for t in self.error_steps],
            schema.HINTS: {str(t): self.hints[t] for t in self.error_steps if t in self.hints},
        }


@runtime_checkable
class Analyzer(Protocol):
    """Anything that marks the critical error steps of a trajectory and writes a hint for each."""

    def analyze(self, trajectory: schema.Trajectory) -> Analysis:  # pragma: no cover - protocol
        ...


# ---------------------------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------------------------
def same_action(action: str, expert: str) -> bool:
    """The oracle's action comparison: equal after collapsing whitespace and case; two WebShop searches match."""
    a, e = normalize_action(action), normalize_action(expert)
    return a == e or (a.startswith("search[") and e.startswith("search["))


def _quote_list(actions: Sequence[str], n: int = 3) -> str:
    return ", ".join(f"'{a}'" for a in actions[:n])


class OracleAnalyzer:
    """Marks error steps from the env's ground truth (see the module docstring for the rules). Deterministic.

    Args:
        max_error_steps: keep at most this many error steps (the earliest); ``None``: all of them (AHEAD's
            multi-step setting). ``1`` reproduces the "−multi-step" ablation.
        action_matches: the comparison of rule 5 (default :func:`same_action`).
    """

    def __init__(
        self,
        *,
        max_error_steps: int | None = None,
        action_matches: Callable[[str, str], bool] = same_action,
    ):
        if max_error_steps is not None and max_error_steps < 1:
            raise ValueError(f"max_error_steps must be >= 1 or None, got {max_error_steps}")
        self.max_error_steps = max_error_steps
        self.action_matches = action_matches

    def judge_step(self, trajectory: schema.Trajectory, t: int) -> str | None:
        """The hint for step ``t`` if it is an error, else ``None``."""
        step = trajectory.steps[t]
        pre = trajectory.infos()[t]
        post = step.info
        action = action_text(step)
        expert = pre.get(schema.EXPERT_ACTION)
        expert = expert if isinstance(expert, str) and expert.strip() else None
        admissible = [
            a for a in pre.get(schema.ADMISSIBLE_ACTIONS) or [] if isinstance(a, str) and a != "help"
        ]
        if expert:
            instead = f"do '{expert}' instead"
        elif admissible:
            instead = f"choose an admissible command such as {_quote_list(admissible)}"
        else:
            instead = "choose a different action"
        # 1. invalid
        if post.get(schema.FORMAT_VALID) is False:
            why = str(post.get(schema.INVALID_REASON) or "bad format").removeprefix("invalid format: ")
            return f"The reply had no valid action ({why}); {instead}."
        reason = post.get(schema.INVALID_REASON)
        if post.get(schema.ADMISSIBLE) is False or (isinstance(reason, str) and reason):
            fb = " ".join(str(post.get(schema.FEEDBACK, step.next_observation)).split())[:120]
            return f"'{action}' is not a valid action here (the env answered \"{fb}\"); {instead}."
        # 2. ARG labels
        if schema.ARG_REASONABLE in post:
            return (
                None if post[schema.ARG_REASONABLE] else f"'{action}' does not advance the task; {instead}."
            )
        # 3. and 4. Search-QA: the final turn carries EXACT_MATCH; every other valid turn was a search
        if schema.EXACT_MATCH in post:
            if float(post[schema.EXACT_MATCH]) >= 1.0:
                return None
            better = (
                f"; {instead}" if expert else "; search until a passage states the answer before answering"
            )
            return f"This answer is wrong{better}."
        if schema.SEARCH_PRODUCTIVE in post:
            if post[schema.SEARCH_PRODUCTIVE]:
                return None
            better = f"; {instead}" if expert else "; search for the entity the question asks about"
            return f"This search retrieved no passage containing the answer{better}."
        # 5. the expert
        if expert is not None:
            return (
                None
                if self.action_matches(action, expert)
                else f"'{action}' is not what the task needs now; do '{expert}' first."
            )
        return None

    def analyze(self, trajectory: schema.Trajectory) -> Analysis:
        hints: dict[int, str] = {}
        for t in range(len(trajectory.steps)):
            h = self.judge_step(trajectory, t)
            if h is not None:
                hints[t] = h
                if self.max_error_steps is not None and len(hints) >= self.max_error_steps:
                    break
        return Analysis(tuple(sorted(hints)), hints, "oracle")


# ---------------------------------------------------------------------------------------------------------------
# The LLM analyzer
# ---------------------------------------------------------------------------------------------------------------
PROMPT_VERSION = "stepgym-hints-v1"

_SYSTEM_PROMPT = """You review trajectories of an agent acting in a text environment. The trajectory you get \
failed. Find the critical error steps: steps whose action caused or locked in the failure, such as picking the \
wrong object, going to the wrong place, an invalid action, or an unproductive search query. Ignore harmless \
steps. For each error step write one short corrective hint, an imperative sentence that names the action the \
agent should have taken instead (for example "go to diningtable 1 first").

Reply with a single JSON object and nothing else, in exactly this form:
{{"errors": [{{"step": <step number>, "hint": "<corrective hint>"}}]}}
Steps are numbered as in the trajectory, starting at 0. List at most {max_errors} errors, ordered by step. \
If no step is an error, reply {{"errors": []}}."""


def _clip(text: Any, n: int) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def render_for_analyzer(trajectory: schema.Trajectory, *, max_obs_chars: int = 600) -> str:
    """The trajectory as the analyzer's user message: task, first observation, then per step the action, whether
    it was admissible when known, and the env's feedback. Observations are clipped to ``max_obs_chars``."""
    goal = trajectory.initial_info.get(schema.GOAL)
    lines = []
    if isinstance(goal, str) and goal:
        lines.append(f"Task: {goal}")
    lines.append(f"Initial observation: {_clip(trajectory.initial_observation, max_obs_chars)}")
    lines.append("")
    for t, s in enumerate(trajectory.steps):
        flag = ""
        if s.info.get(schema.FORMAT_VALID) is False:
            flag = " (not a valid action format)"
        elif s.info.get(schema.ADMISSIBLE) is False:
            flag = " (not admissible)"
        lines.append(f"Step {t}")
        lines.append(f"Action: {_clip(action_text(s), 300)}{flag}")
        lines.append(f"Feedback: {_clip(s.next_observation, max_obs_chars)}")
    lines.append("")
    lines.append(f"Outcome: failed after {len(trajectory.steps)} step(s).")
    return "\n".join(lines)


_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def parse_analysis_reply(content: Any, n_steps: int, *, max_errors: int | None = None) -> Analysis:
    """Strictly parse the model's reply into an :class:`Analysis`; raise ``ValueError`` saying what is wrong.

    Accepted: one JSON object (optionally inside a single ```json fence) with key ``"errors"``: a list of
    ``{"step": int in [0, n_steps), "hint": non-empty str}``, no step twice. Extra keys are ignored; anything else
    (prose around the JSON, a bare list, steps out of range, booleans as steps) is rejected.
    """
    if not isinstance(content, str):
        raise ValueError(f"the reply content is not text: {type(content).__name__}")
    text = content.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"the reply is not JSON ({exc.msg} at char {exc.pos}): {_clip(content, 200)!r}"
        ) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("errors"), list):
        raise ValueError(f'the reply must be an object with an "errors" list, got: {_clip(content, 200)!r}')
    hints: dict[int, str] = {}
    for item in obj["errors"]:
        if not isinstance(item, dict):
            raise ValueError(f"each error must be an object, got {item!r}")
        step, hint = item.get("step"), item.get("hint")
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"an error's step must be an integer, got {step!r}")
        if not 0 <= step < n_steps:
            raise ValueError(f"step {step} is outside the trajectory (0..{n_steps - 1})")
        if not isinstance(hint, str) or not hint.strip():
            raise ValueError(f"step {step} has no hint text")
        if step in hints:
            raise ValueError(f"step {step} is listed twice")
        hints[step] = " ".join(hint.split())[:500]
    steps = sorted(hints)
    if max_errors is not None:
        steps = steps[:max_errors]
    return Analysis(tuple(steps), {t: hints[t] for t in steps}, "llm")


@dataclass(frozen=True)
class AnalyzerPrompt:
    """What :class:`LLMAnalyzer` asks the model: the request's sampling and how much of the trajectory it shows."""

    temperature: float = 0.0
    """Sampling temperature of the request."""
    max_tokens: int = 1024
    """The reply's token budget."""
    max_errors: int | None = 5
    """The most error steps the reply may name (None: any number)."""
    json_mode: bool = False
    """Ask for ``response_format`` JSON mode."""
    max_obs_chars: int = 600
    """Each observation of the rendered trajectory is cut to this many characters."""


class LLMAnalyzer:
    """An analyzer backed by any OpenAI-compatible chat-completions server (vLLM, llama.cpp, OpenAI, …).

    The HTTP side is :class:`stepgym.llm_client.ChatClient` (extra ``stepgym[llm]``), shared with the evaluation
    backend. Settings, each from the argument, else the environment variable, else the default:

    ============== ============================================= =====================================
    argument       environment variable                          default
    ============== ============================================= =====================================
    ``base_url``   ``STEPGYM_LLM_BASE_URL``, ``OPENAI_BASE_URL``  (required) e.g. ``http://host:8000/v1``
    ``model``      ``STEPGYM_LLM_MODEL``                          (required)
    ``api_key``    ``STEPGYM_LLM_API_KEY``, ``OPENAI_API_KEY``    none (no ``Authorization`` header)
    ============== ============================================= =====================================

    ``POST {base_url}/chat/completions`` with the system prompt, the rendered trajectory
    (:func:`render_for_analyzer`), ``temperature`` and ``max_tokens`` (and ``response_format`` JSON mode when
    ``json_mode``: :class:`AnalyzerPrompt`). Each request has ``timeout`` seconds (:class:`~stepgym.llm_client.RetryPolicy`,
    ``retry=``). Connection errors, timeouts, HTTP 429/5xx, bodies that are
    not chat-completion JSON and replies that :func:`parse_analysis_reply` rejects are retried up to
    ``max_retries`` times, waiting ``backoff * 2**i`` seconds (capped at ``max_backoff``, or the server's
    ``Retry-After``). Other 4xx answers (bad key, unknown model) are configuration errors: they raise
    :class:`AnalyzerConfigError` at once, fallback or not.

    When every attempt fails: with ``fallback`` (e.g. ``OracleAnalyzer()``), a ``RuntimeWarning`` is issued and the
    fallback's analysis is returned with ``source="fallback:<its source>"``; without one, :class:`AnalyzerError`
    names the URL, the last error and the fix.

    Cache: successful analyses are kept in memory, keyed by the SHA-256 of (prompt version, model, messages) — the
    trajectory's rendered content — and, with ``cache_dir``, also as one JSON file per key (written atomically),
    so re-analysing the same trajectory costs nothing across runs. Fallback results are never cached. Thread-safe:
    :func:`analyze_many` runs several requests at once.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        prompt: AnalyzerPrompt = AnalyzerPrompt(),
        fallback: Analyzer | None = None,
        cache: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
    ):
        with _analyzer_errors():
            self.client = ChatClient(base_url, model, api_key, retry=retry or RetryPolicy())
        self.url, self.model, self.api_key = self.client.url, self.client.model, self.client.api_key
        self.temperature = float(prompt.temperature)
        self.max_tokens = int(prompt.max_tokens)
        self.max_errors = prompt.max_errors
        self.json_mode = bool(prompt.json_mode)
        self.fallback = fallback
        self.cache_enabled = bool(cache)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_obs_chars = int(prompt.max_obs_chars)
        self._cache: dict[str, Analysis] = {}
        self._lock = threading.Lock()
        self._own = {"cache_hits": 0, "fallbacks": 0}

    @property
    def stats(self) -> dict[str, int]:
        """Requests and retries (from the client), cache hits and fallbacks."""
        c = self.client.stats
        return {"requests": c["requests"], "retries": c["retries"], **self._own}

    def close(self) -> None:
        """Close the HTTP connections."""
        self.client.close()

    # -- prompt and cache ------------------------------------------------------------------------------------
    def messages(self, trajectory: schema.Trajectory) -> list[dict[str, str]]:
        """The chat messages sent for ``trajectory``."""
        limit = self.max_errors if self.max_errors is not None else len(trajectory.steps)
        return [
            {"role": "system", "content": _SYSTEM_PROMPT.format(max_errors=limit)},
            {"role": "user", "content": render_for_analyzer(trajectory, max_obs_chars=self.max_obs_chars)},
        ]

    def cache_key(self, messages: list[dict[str, str]]) -> str:
        blob = json.dumps([PROMPT_VERSION, self.model, messages], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _cache_get(self, key: str) -> Analysis | None:
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        if self.cache_dir is None:
            return None
        path = self.cache_dir / f"{key}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            hints = {int(k): str(v) for k, v in data["hints"].items()}
            a = Analysis(tuple(int(t) for t in data["error_steps"]), hints, "llm")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # an unreadable cache entry is a miss; it is rewritten on success
        with self._lock:
            self._cache[key] = a
        return a

    def _cache_put(self, key: str, a: Analysis) -> None:
        with self._lock:
            self._cache[key] = a
        if self.cache_dir is None:
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        data = {"error_steps": list(a.error_steps), "hints": {str(k): v for k, v in a.hints.items()}}
        atomic_write_json(self.cache_dir / f"{key}.json", data, ensure_ascii=False)

    # -- the request -----------------------------------------------------------------------------------------
    def _query(self, trajectory: schema.Trajectory, messages: list[dict[str, str]]) -> Analysis:
        n_steps = len(trajectory.steps)

        def parse(reply: ChatReply) -> Analysis:
            try:
                return parse_analysis_reply(reply.content, n_steps, max_errors=self.max_errors)
            except ValueError as exc:  # the reply parsed as a completion but not as an analysis: retried
                raise ValueError(f"malformed analysis: {exc}") from None

        params: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.json_mode:
            params["response_format"] = {"type": "json_object"}
        with _analyzer_errors():
            return self.client.chat(messages, parse=parse, **params)

    def analyze(self, trajectory: schema.Trajectory) -> Analysis:
        if not trajectory.steps:
            return Analysis((), {}, "llm")
        messages = self.messages(trajectory)
        key = self.cache_key(messages)
        if self.cache_enabled:
            hit = self._cache_get(key)
            if hit is not None:
                with self._lock:
                    self._own["cache_hits"] += 1
                return replace(hit, source="llm-cache")
        try:
            result = self._query(trajectory, messages)
        except AnalyzerError as exc:
            if self.fallback is None:
                raise
            with self._lock:
                self._own["fallbacks"] += 1
            warnings.warn(f"{exc} Using the fallback analyzer.", RuntimeWarning, stacklevel=2)
            fb = self.fallback.analyze(trajectory)
            return replace(fb, source=f"fallback:{fb.source or type(self.fallback).__name__}")
        if self.cache_enabled:
            self._cache_put(key, result)
        return result


@contextlib.contextmanager
def _analyzer_errors() -> Iterator[None]:
    """The client's errors as the analyzer's own classes (same message, plus the analyzer's fix)."""
    try:
        yield
    except LLMConfigError as exc:
        raise AnalyzerConfigError(f"LLMAnalyzer: {exc}") from None
    except LLMUnavailableError as exc:
        raise AnalyzerError(
            f"the LLM analyzer: {exc}. Check that the server is up and serves this model, raise "
            "retry=RetryPolicy(timeout=..., max_retries=...), or pass fallback=OracleAnalyzer().",
            attempts=exc.attempts,
            last_error=exc.last_error,
        ) from None


# ---------------------------------------------------------------------------------------------------------------
# Offline functions over recorded trajectories
# ---------------------------------------------------------------------------------------------------------------
def analyze_trajectory(
    trajectory: schema.Trajectory,
    analyzer: Analyzer | None = None,
    *,
    failure_only: bool = True,
    success_fn: Callable[[schema.Trajectory], bool] = is_success,
) -> Analysis:
    """Analyse one recorded trajectory (default analyzer: :class:`OracleAnalyzer`). With ``failure_only`` (the
    default, AHEAD's setting) a successful trajectory gets an empty analysis without calling the analyzer."""
    if failure_only and success_fn(trajectory):
        return Analysis((), {}, "skipped:success")
    return (analyzer or OracleAnalyzer()).analyze(trajectory)


def analyze_many(
    trajectories: Sequence[schema.Trajectory],
    analyzer: Analyzer | None = None,
    *,
    failure_only: bool = True,
    success_fn: Callable[[schema.Trajectory], bool] = is_success,
    max_workers: int = 1,
) -> list[Analysis]:
    """:func:`analyze_trajectory` over many trajectories, in order; ``max_workers > 1`` runs them in threads
    (worth it for :class:`LLMAnalyzer`, whose requests wait on the network)."""
    an = analyzer or OracleAnalyzer()

    def one(t: schema.Trajectory) -> Analysis:
        return analyze_trajectory(t, an, failure_only=failure_only, success_fn=success_fn)

    if max_workers <= 1 or len(trajectories) <= 1:
        return [one(t) for t in trajectories]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(one, trajectories))


def annotate_trajectory(trajectory: schema.Trajectory, analysis: Analysis) -> schema.Trajectory:
    """Write ``ERROR_STEPS`` and ``HINTS`` into the trajectory's last info (where :class:`HintWrapper` puts them).
    Returns the same trajectory."""
    target = trajectory.steps[-1].info if trajectory.steps else trajectory.initial_info
    target.update(analysis.to_info())
    return trajectory


def ahead_privileged_text(
    trajectory: schema.Trajectory, t: int, hints: Mapping[Any, str] | None = None
) -> str:
    """AHEAD's privileged information for step ``t`` (``shapers.md`` §4.2, §8 item 18): the env's feedback to the
    action (the next observation) on every step, plus the corrective hint when step ``t`` has one.

    ``hints`` is ``Analysis.hints`` or the ``HINTS`` info dict (string keys); default: the trajectory's own
    recorded ``HINTS``. The wording is a default, not the paper's (unspecified there).
    """
    step = trajectory.steps[t]
    if hints is None:
        last = trajectory.steps[-1].info
        hints = last.get(schema.HINTS) or {}
    hint = hints.get(t, hints.get(str(t))) if hints else None
    text = f"Environment feedback to this action: {' '.join(str(step.next_observation).split())}"
    if hint:
        text += f"\nCorrective hint: {hint}"
    return text


# ---------------------------------------------------------------------------------------------------------------
# The wrapper
# ---------------------------------------------------------------------------------------------------------------
class HintWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """When an episode ends, put ``ERROR_STEPS`` and ``HINTS`` into the final info.

    The episode is recorded as it is played; at the terminating or truncating step the analyzer (default
    :class:`OracleAnalyzer`) runs on it. ``failure_only`` (default): successful episodes are not analysed and get
    ``ERROR_STEPS == []`` and ``HINTS == {}``, so the keys are present at every episode end. :attr:`trajectory`
    is the episode recorded so far, :attr:`analysis` the last analysis.

    Place it outside the wrappers whose info it should read (text interface, env feedback, ARG labels).

    Example (waiting until the step limit fails the task; the oracle names the expert's move instead)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> from stepgym.wrappers import HintWrapper
        >>> env = HintWrapper(gym.make("StepGym/CreditToy-v0", max_steps=2))
        >>> _ = env.reset(seed=0)
        >>> _ = env.step("wait")
        >>> obs, reward, terminated, truncated, info = env.step("wait")
        >>> truncated, info[schema.ERROR_STEPS]
        (True, [0, 1])
        >>> info[schema.HINTS]["0"]  # keys are strings, as in JSON
        "'wait' is not what the task needs now; do 'go forward' first."
    """

    def __init__(
        self,
        env: gym.Env,
        analyzer: Analyzer | None = None,
        *,
        failure_only: bool = True,
        success_fn: Callable[[schema.Trajectory], bool] = is_success,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, analyzer=analyzer, failure_only=failure_only, success_fn=success_fn
        )
        gym.Wrapper.__init__(self, env)
        self.analyzer = analyzer if analyzer is not None else OracleAnalyzer()
        self.failure_only = bool(failure_only)
        self.success_fn = success_fn
        self._recorder = EpisodeRecorder()
        self.analysis: Analysis | None = None

    @property
    def trajectory(self) -> schema.Trajectory | None:
        return self._recorder.trajectory

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._recorder.start(obs, info)
        self.analysis = None
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._recorder.add(action, obs, reward, terminated, truncated, info)
        if terminated or truncated:
            traj = self._recorder.trajectory
            assert traj is not None
            self.analysis = analyze_trajectory(
                traj,
                self.analyzer,
                failure_only=self.failure_only,
                success_fn=self.success_fn,
            )
            info.update(self.analysis.to_info())
        return obs, reward, terminated, truncated, info
