# Over 400 lines: the text interface: prompt rendering, reply parsing and the wrapper that joins them.
"""The LLM text interface: prompts from (task, last K steps, observation, admissible actions) and action parsing.

An LLM policy does not emit env actions, it emits text. This module is the bridge, written once so that the
bundled trainer, other trainers and evaluation scripts render the same prompts and apply the same validity rule:

* :func:`render_prompt` builds the prompt of one turn from a :class:`TextFormat` (plain ``str.format``
  templates, no Jinja), the task, the last ``K`` steps of history, the current observation and the admissible
  actions. The history window follows the verl-agent / GiGPO recipe the papers train with (ALFWorld and WebShop:
  the last 2 steps), and :func:`prompt_for_step` rebuilds the prompt an agent saw at step ``t`` of a recorded
  :class:`~stepgym.schema.Trajectory` (what a teacher-rescoring pass needs).
* :func:`parse_action` turns a model reply into an action, strictly:

  - ``"alfworld"`` / ``"webshop"`` (ReAct style): exactly one ``<think>…</think>`` block followed by exactly one
    non-empty ``<action>…</action>``; the action is the tag's content. verl-agent's projection only checks that the
    tags are present and calls that "valid"; here *format-valid* means only that, and admissibility is a separate
    flag (:mod:`stepgym.wrappers.feedback`), which is the distinction users asked for.
  - ``"qa"`` (Search-R1's prompt, byte for byte; ``"qa-stepgym"`` is stepgym's own wording): exactly one complete ``<search>…</search>`` or ``<answer>…</answer>`` with non-empty
    content; ``<think>`` is optional, as in Search-R1. The action is the *whole turn* up to the closing tag
    (Search-R1 stops generation there), because the Search-QA env reads the tags itself.

* :class:`TextInterfaceWrapper` takes the model's raw text as the action, parses it and sets
  ``schema.FORMAT_VALID``, ``schema.RAW_OUTPUT`` and ``schema.PARSED_ACTION``.

Design decision — what an unparsable reply does: the wrapper **steps the inner env with a no-op**
(``noop_action``, default ``""``). Every stepgym :class:`~stepgym.envs.base.TextEnv` answers the empty action as an
invalid action without touching the world state, and counts it. So an invalid turn costs one step of the env's
budget (the papers' 50-step limit counts invalid turns, as verl-agent's loop does), truncation stays exact, the
info keeps fresh env ground truth (state key, admissible list, expert action), and a trajectory has exactly one
step per model turn, which the token ↔ step alignment of the trainer relies on. The reply text itself is never
sent: verl-agent forwards the last 30 characters of an untagged reply, so a reply without tags could still move
the world. The observation returned for an invalid turn is the format's invalid-format feedback (for ``"qa"``
Search-R1's own sentence, which StepOPSD's segmentation searches for), and the wrapper overwrites
``schema.FEEDBACK`` and ``schema.INVALID_REASON`` with it, because the env's own answer describes the no-op, not
what the model wrote.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym

from stepgym import schema
from stepgym.text_format import (
    ParseResult,
    PromptTemplate,
    TextFormat,
    parse_react,
)
from stepgym.wrappers.feedback import EnvFeedbackWrapper

_log = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "FORMAT_REFS",
    "PLAIN_FORMAT",
    "TextInterfaceWrapper",
    "action_text",
    "declared_format",
    "get_format",
    "make_text_env",
    "parse_action",
    "prompt_for_step",
    "render_prompt",
    "resolve_format",
    "text_wrappers",
    "turn_text",
]


# ---------------------------------------------------------------------------------------------------------------
# The format of an env that declares none, and the formats by name
# ---------------------------------------------------------------------------------------------------------------
# The format of an env that declares none: the task (when the env has one), the observation, the admissible
# actions (when the env lists them) and one <action> tag; no <think> block is required.
PLAIN_TEMPLATE = PromptTemplate(
    intro="Your task: {task}",
    history_header="Your last {history_count} step(s):",
    history_item="[Step {n}] Observation: {observation}\n[Step {n}] Action: {action}",
    current="Step {step_number}. Observation: {observation}",
    current_first="Observation: {observation}",
    admissible="Admissible actions: [{admissible}].",
    instruction="Reply with exactly one action inside <action> </action> tags.",
)


def _plain_feedback(reason: str) -> str:
    return f"Invalid reply: {reason}. Reply with exactly one action inside <action> </action>."


_parse_react_no_think = functools.partial(
    parse_react, require_think=False
)  # module-level: the format pickles

#: The format of any env that declares none (a user's own, registered with Gymnasium only).
PLAIN_FORMAT = TextFormat("plain", PLAIN_TEMPLATE, _parse_react_no_think, _plain_feedback, history_length=2)

#: The formats by name (``EnvConfig.text_format``, ``register(..., text_format=name)``): each family's format lives
#: in its env's folder, read on first use; ``"plain"`` is the format of an env that declares none.
FORMAT_REFS: dict[str, str] = {
    "alfworld": "stepgym.envs.alfworld.prompt:FORMAT",
    "webshop": "stepgym.envs.webshop.prompt:FORMAT",
    "qa": "stepgym.envs.searchqa.prompt:FORMAT",  # Search-R1's prompt, one action per turn (the env's declared one)
    "qa-lenient": "stepgym.envs.searchqa.prompt:LENIENT_FORMAT",  # Search-R1's own first-tag-wins rule
    "qa-stepgym": "stepgym.envs.searchqa.prompt:STEPGYM_FORMAT",  # stepgym's wording, one action per turn
    "credit": "stepgym.envs.credit.prompt:FORMAT",
}


class _Formats(Mapping[str, TextFormat]):
    """:data:`FORMAT_REFS` and ``"plain"`` as a mapping of :class:`TextFormat` objects, each loaded when read."""

    def __getitem__(self, name: str) -> TextFormat:
        if name == "plain":
            return PLAIN_FORMAT
        return _load_format(FORMAT_REFS[name])

    def __iter__(self) -> Iterator[str]:
        return iter([*FORMAT_REFS, "plain"])

    def __len__(self) -> int:
        return len(FORMAT_REFS) + 1


#: Every named format (see :data:`FORMAT_REFS`).
FORMATS: Mapping[str, TextFormat] = _Formats()


def _load_format(ref: str) -> TextFormat:
    import importlib

    module, _, attr = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"text format {ref!r} cannot be loaded: {exc}") from None
    if not isinstance(found, TextFormat):
        raise ValueError(f"text format {ref!r} is a {type(found).__name__}, not a stepgym TextFormat")
    return found


def get_format(fmt: str | TextFormat) -> TextFormat:
    """A :class:`TextFormat` by name (a key of :data:`FORMATS`: ``"alfworld"``, ``"webshop"``, ``"qa"``,
    ``"qa-lenient"``, ``"qa-stepgym"``, ``"credit"``, ``"plain"``), by reference (``"module:ATTR"``, an env's own
    format in its own module), or the object itself."""
    if isinstance(fmt, TextFormat):
        return fmt
    if isinstance(fmt, str) and ":" in fmt:
        return _load_format(fmt)
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown text format {fmt!r}; known: {sorted(FORMATS)} (or 'module:ATTR' naming a TextFormat)"
        ) from None


def declared_format(env: gym.Env | str) -> str | None:
    """The text format an env (or a registered env id) declares, else ``None``: the env class's
    ``metadata["text_format"]``, else the format its registration declared (:func:`stepgym.envs.register`)."""
    from stepgym.envs import text_format_of

    if isinstance(env, str):
        return text_format_of(env)
    core = env.unwrapped
    declared = (getattr(core, "metadata", None) or {}).get("text_format")
    if declared:
        return str(declared)
    spec = getattr(env, "spec", None) or getattr(core, "spec", None)
    return text_format_of(spec.id) if spec is not None else None


def resolve_format(env: gym.Env | str, fmt: str | TextFormat | None = None) -> TextFormat:
    """The text format to use with ``env`` (an env or an env id): ``fmt`` when given (a name, ``"module:ATTR"`` or
    a :class:`TextFormat`), else the env's declared one (:func:`declared_format`), else the ``"plain"`` format
    (logged once per env, so a run says which prompt it used)."""
    name = fmt or declared_format(env)
    if not name:
        what = (
            env if isinstance(env, str) else (getattr(env.spec, "id", None) or type(env.unwrapped).__name__)
        )
        if what not in _PLAIN_LOGGED:
            _PLAIN_LOGGED.add(what)
            _log.warning(  # a warning, so the default log shows it (stepgym train on a user's env)
                "%s declares no text format: using the 'plain' format (declare one with "
                "stepgym.envs.register(..., text_format=...) or metadata['text_format'])",
                what,
            )
        return PLAIN_FORMAT
    return get_format(name)


_PLAIN_LOGGED: set[str] = set()


def parse_action(text: Any, fmt: str | TextFormat) -> ParseResult:
    """Parse a model reply with the format's parser (see :func:`parse_react`, :func:`parse_search_r1`)."""
    return get_format(fmt).parse(text)


def action_text(step: schema.Step) -> str:
    """The action of a recorded step as the history shows it: the parsed action when a text interface recorded
    one, else the recorded action (the raw reply of an invalid turn, cut to 300 characters)."""
    parsed = step.info.get(schema.PARSED_ACTION)
    if isinstance(parsed, str):
        return parsed
    a = step.action if isinstance(step.action, str) else repr(step.action)
    return a if len(a) <= 300 else a[:300] + "…"


def turn_text(step: schema.Step) -> str:
    """The model's whole turn for a recorded step: ``RAW_OUTPUT`` when a text interface recorded it, else the
    action as sent (for Search-R1 envs driven directly, the action *is* the turn)."""
    raw = step.info.get(schema.RAW_OUTPUT)
    if isinstance(raw, str):
        return raw
    return step.action if isinstance(step.action, str) else repr(step.action)


def _fmt_admissible(actions: Sequence[str] | None) -> str:
    if not actions:
        return ""
    return ", ".join(f"'{a}'" for a in actions)


def render_prompt(
    fmt: str | TextFormat,
    *,
    task: str,
    observation: str,
    history: Sequence[schema.Step] = (),
    admissible_actions: Sequence[str] | None = None,
    history_length: int | str | None = "default",
    drop_actions: Sequence[str] = ("help",),
) -> str:
    """Render the prompt of one turn.

    ``history`` holds the steps taken so far (``schema.Step``: the observation the action was taken in, the
    action, the next observation); the last ``history_length`` of them are shown (``"default"``: the format's K,
    ``None``: all, ``0``: none). ``observation`` is the current observation (the last step's
    ``next_observation``). ``admissible_actions`` are listed when given, minus ``drop_actions`` (verl-agent drops
    ALFWorld's ``help``). Pure: the same arguments always give the same string.
    """
    f = get_format(fmt)
    t = f.template
    if f.task_text is not None:
        task = f.task_text(task)
    k = f.history_length if history_length == "default" else history_length
    if k is not None and (not isinstance(k, int) or k < 0):
        raise ValueError(f"history_length must be a non-negative int or None, got {k!r}")
    n_done = len(history)
    shown = list(history) if k is None else (list(history[n_done - k :]) if k > 0 else [])
    first = n_done - len(shown)
    items = [
        t.history_item.format(
            n=first + i + 1,
            observation=s.observation,
            action=action_text(s),
            turn=turn_text(s),
            feedback=s.next_observation,
        )
        for i, s in enumerate(shown)
    ]
    adm = _fmt_admissible([a for a in (admissible_actions or []) if a not in set(drop_actions)])
    fields = {
        "task": task,
        "observation": observation,
        "admissible": adm,
        "step_count": n_done,
        "step_number": n_done + 1,
        "history_count": len(shown),
        "history": t.history_separator.join(items),
    }
    # an env with no goal (no schema.GOAL) has no task: its intro, which states the task, is left out
    body = [t.intro.format(**fields)] if task or "{task}" not in t.intro else []
    if items:
        body += [t.history_header.format(**fields), fields["history"]]
    current = t.current if n_done else t.current_first
    if current:
        body.append(current.format(**fields))
    if adm and t.admissible:
        body.append(t.admissible.format(**fields))
    sep = t.piece_separator
    return sep.join(p for p in body if p) + sep + sep + t.instruction.format(**fields)


def _task_of(info: Mapping[str, Any]) -> str:
    """The task of an episode: its ``schema.GOAL`` ('' when the env gives none; the prompt then has no task line,
    and the first observation is shown as the current one, not repeated as a task)."""
    goal = info.get(schema.GOAL)
    return goal if isinstance(goal, str) else ""


def prompt_for_step(
    trajectory: schema.Trajectory,
    t: int,
    fmt: str | TextFormat,
    *,
    history_length: int | str | None = "default",
) -> str:
    """The prompt the agent saw before action ``t`` of a recorded trajectory (``t == len(steps)``: the next one).

    The task is ``initial_info[schema.GOAL]`` (none, and no task line, when the env gives no goal), the admissible
    actions those recorded in the info the action was chosen from.
    """
    if not 0 <= t <= len(trajectory.steps):
        raise IndexError(f"step {t} out of range for a trajectory of {len(trajectory.steps)} steps")
    infos = trajectory.infos()
    obs = trajectory.steps[t - 1].next_observation if t else trajectory.initial_observation
    return render_prompt(
        fmt,
        task=_task_of(trajectory.initial_info),
        observation=obs,
        history=trajectory.steps[:t],
        admissible_actions=infos[t].get(schema.ADMISSIBLE_ACTIONS),
        history_length=history_length,
    )


# ---------------------------------------------------------------------------------------------------------------
# The wrapper
# ---------------------------------------------------------------------------------------------------------------
class TextInterfaceWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Take the model's raw reply as the action; parse it; step the env with the parsed action (or a no-op).

    Adds to every step's info: ``schema.RAW_OUTPUT`` (the reply), ``schema.FORMAT_VALID``,
    ``schema.PARSED_ACTION`` (``None`` when invalid). An invalid reply steps the inner env with ``noop_action``
    and returns the format's invalid-format feedback as the observation (see the module docstring for why).

    :attr:`prompt` is the prompt for the current turn (task + last K steps + observation + admissible actions);
    with ``prompt_as_observation=True`` it is also what ``reset``/``step`` return as the observation, so a policy
    can be fed the observation directly. :attr:`history` is the list of steps taken in this episode.

    Args:
        env: the text env (its actions are strings).
        fmt: a format name or :class:`TextFormat`; default: the env's declared one (:func:`declared_format`).
        history_length: K, the steps shown in the prompt (default: the format's, 2 for ALFWorld/WebShop).
        noop_action: what the env receives for an unparsable reply.
        prompt_as_observation: return the rendered prompt instead of the env's observation.

    Example::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> from stepgym.wrappers import TextInterfaceWrapper
        >>> env = TextInterfaceWrapper(gym.make("StepGym/CreditToy-v0"), fmt="alfworld")
        >>> _ = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step("<think>No hurry.</think><action>Wait</action>")
        >>> info[schema.FORMAT_VALID], info[schema.PARSED_ACTION]
        (True, 'wait')
        >>> obs, reward, terminated, truncated, info = env.step("just wait")
        >>> info[schema.FORMAT_VALID], info[schema.PARSED_ACTION]
        (False, None)
    """

    def __init__(
        self,
        env: gym.Env,
        fmt: str | TextFormat | None = None,
        *,
        history_length: int | str | None = "default",
        noop_action: str = "",
        prompt_as_observation: bool = False,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self,
            fmt=fmt,
            history_length=history_length,
            noop_action=noop_action,
            prompt_as_observation=prompt_as_observation,
        )
        gym.Wrapper.__init__(self, env)
        self.fmt = resolve_format(env, fmt)
        self.history_length = history_length
        self.noop_action = noop_action
        self.prompt_as_observation = bool(prompt_as_observation)
        self.history: list[schema.Step] = []
        self._task = ""
        self._obs = ""
        self._info: dict[str, Any] = {}

    @property
    def prompt(self) -> str:
        """The prompt of the current turn."""
        return render_prompt(
            self.fmt,
            task=self._task,
            observation=self._obs,
            history=self.history,
            admissible_actions=self._info.get(schema.ADMISSIBLE_ACTIONS),
            history_length=self.history_length,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.history = []
        self._task = _task_of(info)
        self._obs, self._info = obs, info
        return (self.prompt if self.prompt_as_observation else obs), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        parsed = self.fmt.parse(action)
        raw = action if isinstance(action, str) else repr(action)
        if parsed.format_valid:
            obs, reward, terminated, truncated, info = self.env.step(parsed.action)
        else:
            obs, reward, terminated, truncated, info = self.env.step(self.noop_action)
            obs = self.fmt.invalid_feedback(parsed.error)
            info[schema.FEEDBACK] = obs
            info[schema.INVALID_REASON] = f"invalid format: {parsed.error}"
        info[schema.RAW_OUTPUT] = raw
        info[schema.FORMAT_VALID] = parsed.format_valid
        info[schema.PARSED_ACTION] = parsed.action
        self.history.append(
            schema.Step(self._obs, raw, float(reward), obs, bool(terminated), bool(truncated), info)
        )
        self._obs, self._info = obs, info
        return (self.prompt if self.prompt_as_observation else obs), reward, terminated, truncated, info


# ---------------------------------------------------------------------------------------------------------------
# The text env as every trainer and evaluator builds it
# ---------------------------------------------------------------------------------------------------------------
def text_wrappers(
    fmt: str | TextFormat | None = None,
    *,
    history: int | str | None = "default",
    prompt_as_observation: bool = False,
    inner_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
) -> list[Callable[[gym.Env], gym.Env]]:
    """The text-env stack as a list of wrappers, innermost first: ``EnvFeedbackWrapper``, then ``inner_wrappers``,
    then the :class:`TextInterfaceWrapper` (a ``functools.partial``, so the list pickles for env workers when
    ``inner_wrappers`` do). :func:`make_text_env` applies it; :class:`stepgym.GroupEnv` takes it as its wrapper recipe."""
    text = functools.partial(
        TextInterfaceWrapper,
        fmt=fmt or None,
        history_length=history,
        prompt_as_observation=prompt_as_observation,
    )
    return [EnvFeedbackWrapper, *inner_wrappers, text]


def make_text_env(
    env: str | gym.Env,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    fmt: str | TextFormat | None = None,
    history: int | str | None = "default",
    prompt_as_observation: bool = False,
    inner_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
) -> TextInterfaceWrapper:
    """The env as an LLM policy sees it: ``TextInterfaceWrapper(*inner_wrappers(EnvFeedbackWrapper(env)))``.

    The one place the text-env stack is built (the bundled trainer's collector and warm-up, ``stepgym eval`` and
    every trainer adapter use it or :func:`text_wrappers`), so all of them render the same prompts and apply the
    same validity rule.

    Args:
        env: a registered env id (made with ``gymnasium.make(env, **env_kwargs)``) or an env already made.
        env_kwargs: keyword arguments for ``gymnasium.make`` (only with an id).
        fmt: the text format (a name in :data:`FORMATS`, ``"module:ATTR"`` or a :class:`TextFormat`); ``None`` or
            ``""``: the env's declared one (:func:`declared_format`), else ``"plain"``.
        history: K, the steps the prompt shows (``"default"``: the format's).
        prompt_as_observation: return the rendered prompt as the observation.
        inner_wrappers: more wrappers between the feedback wrapper and the text interface, innermost first (named
            apart from the ``wrappers=`` of :meth:`~stepgym.steps.episode.Episode.make` and the trainer adapters,
            which go outside the text interface).

    The inner env is closed when a wrapper refuses it (an unknown ``fmt``, say), so a
    refused build leaks no engine, browser or server. Raises ``ValueError`` for ``env_kwargs`` with an env object.

    Example::

        >>> from stepgym.wrappers.text import make_text_env
        >>> env = make_text_env("StepGym/CreditToy-v0")
        >>> env.fmt.name
        'credit'
    """
    if isinstance(env, str):
        import stepgym.envs

        stepgym.envs.register_envs()
        core = gym.make(env, **dict(env_kwargs or {}))
    elif env_kwargs:
        raise ValueError("env_kwargs apply to an env id only; this env is already made")
    else:
        core = env
    try:
        wrapped: gym.Env = core
        for wrap in text_wrappers(
            fmt, history=history, prompt_as_observation=prompt_as_observation, inner_wrappers=inner_wrappers
        ):
            wrapped = wrap(wrapped)
        return wrapped  # type: ignore[return-value]
    except BaseException:
        core.close()
        raise
