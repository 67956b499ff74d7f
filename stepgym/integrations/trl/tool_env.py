"""``environment_factory``: a stepgym env as the tool class TRL's ``GRPOTrainer(environment_factory=...)``
instantiates per rollout (``reset``, one action tool, ``get_reward``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from stepgym import _deps, schema
from stepgym.group import EnvFactory, WrapperFn
from stepgym.steps.episode import Episode
from stepgym.wrappers.feedback import EnvFeedbackWrapper

_deps.require("trl", "trl", what="the TRL integration")


from stepgym.integrations.tool_use import agent_tools, call_action, tool_methods  # noqa: E402
from stepgym.integrations.trl._common import env_maker  # noqa: E402


def _observation_text(obs: Any, info: Mapping[str, Any], *, goal: bool) -> str:
    """What the model reads after reset (with the goal) or after an action: the observation and the actions."""
    parts = []
    task = info.get(schema.GOAL)
    if goal and isinstance(task, str) and task and task not in str(obs):
        parts.append(f"Your task is to: {task}")
    parts.append(str(obs))
    actions = [a for a in info.get(schema.ADMISSIBLE_ACTIONS) or [] if a != "help"]
    if actions:
        parts.append("Admissible actions: " + ", ".join(f"'{a}'" for a in actions) + ".")
    return "\n".join(parts)


class StepGymToolEnv:
    """Base of the classes :func:`environment_factory` builds (TRL makes one instance per concurrent rollout).

    Only ``reset``, ``get_reward`` and the action tool (for a tool-use env: one method per env tool) are public
    methods (TRL exposes every public method as a tool); the recorded episode is read through the
    :attr:`trajectory` and :attr:`annotations` properties.
    """

    _make: Callable[[], gym.Env]
    _tool_use: bool = False  #: one method per env tool (a tool-use env), not the one action tool

    def __init__(self) -> None:
        # TRL's tool loop handles a tool's exception itself (it shows the error to the model): no abort here
        self._episode = Episode(self._make(), on_failure="raise")
        self._started = False

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start the episode of the dataset row's task; returns the first observation (TRL appends it to the
        prompt). ``row`` holds the row's other columns (TRL passes them all)."""
        self._episode.reset(task_id, seed)
        self._started = True
        info = self._episode.info
        system = getattr(self._episode.env.unwrapped, "system_prompt", None)
        if self._tool_use and callable(system):  # the chat template renders the tools: the goal without them
            info = {**info, schema.GOAL: system()}
        return _observation_text(self._episode.trajectory.initial_observation, info, goal=True)

    def _act(self, action: str) -> str:
        if not self._started:
            raise RuntimeError("reset() must be called before the first action")
        if self._episode.done:
            return "The episode is over; no further actions are taken."
        turn = self._episode.step(action)
        assert turn is not None  # on_failure="raise"
        text = _observation_text(turn.observation, turn.info, goal=False)
        if turn.done:
            text += "\nThe episode is over: " + (
                "you won." if turn.info.get(schema.WON) else "the task was not solved."
            )
        return text

    def get_reward(self) -> float:
        """The episode return so far (the sum of the env's rewards)."""
        return self._episode.trajectory.total_reward if self._started else 0.0

    @property
    def trajectory(self) -> schema.Trajectory | None:
        """The current episode as a :class:`stepgym.schema.Trajectory` (``None`` before the first reset)."""
        return self._episode.trajectory if self._started else None

    @property
    def annotations(self) -> dict[str, Any] | None:
        """The current episode's :func:`~stepgym.steps.record.episode_annotations` record."""
        return self._episode.annotations() if self._started else None

    @property
    def env(self) -> gym.Env:
        """The wrapped stepgym env."""
        return self._episode.env


_DEFAULT_ACTION_DOC = (
    "One command for the environment, written exactly as one of the admissible actions listed."
)


def environment_factory(
    env: str | EnvFactory,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    wrappers: Sequence[WrapperFn] = (),
    tool_name: str = "act",
    tool_description: str = "Take one action in the environment and read what happens.",
    action_description: str = _DEFAULT_ACTION_DOC,
) -> type[StepGymToolEnv]:
    """The class to pass as ``GRPOTrainer(environment_factory=...)`` for a stepgym env.

    Args:
        env: a registered env id or a factory ``f(**env_kwargs) -> gym.Env``.
        env_kwargs: keyword arguments for the env (``split=``, ``max_steps=`` ...).
        wrappers: applied after :class:`~stepgym.wrappers.feedback.EnvFeedbackWrapper` (first = innermost), e.g.
            ``[functools.partial(ARGWrapper, graph=graph)]``.
        tool_name: the tool's name as the model sees it (a Python identifier; not ``reset`` / ``get_reward``).
        tool_description / action_description: the tool's docstring, from which TRL builds its JSON schema.

    Each instance owns one env; ``reset(task_id=..., **row)`` starts the row's task and returns the first
    observation with the goal and the admissible actions; the tool steps the env with its ``action`` argument and
    returns the next observation (after the episode has ended it answers without stepping, so a model that keeps
    calling cannot move a finished env); ``get_reward()`` is the episode return.

    A tool-use env (one whose core has ``tool_schemas()``: ``StepGym/Tau2-v0``) gets its own tools instead of the
    one action tool: a method per tool, whose signature and docstring give TRL the tool's schema (read from one
    probe reset), plus ``send_message(content)`` when the env talks with a user
    (:mod:`stepgym.integrations.tool_use`); each call becomes the env's action, and TRL's own loop carries the
    assistant tool-call and tool-response messages. ``tool_name`` and the descriptions do not apply then.
    """
    if not tool_name.isidentifier() or tool_name.startswith("_") or tool_name in ("reset", "get_reward"):
        raise ValueError(
            f"tool_name must be a public identifier other than reset/get_reward, got {tool_name!r}"
        )
    make = env_maker(env, env_kwargs)
    wrap = list(wrappers)

    def build() -> gym.Env:
        e: gym.Env = EnvFeedbackWrapper(make())
        for w in wrap:
            e = w(e)
        return e

    name = env if isinstance(env, str) else getattr(env, "__name__", "Env")
    cls_name = "StepGym_" + "".join(ch if ch.isalnum() else "_" for ch in str(name))
    tools = _probe_tools(build) if _may_have_tools(env) else None
    if tools is not None:  # a tool-use env: its own tools (and the message tool), one method each
        body: dict[str, Any] = dict(tool_methods(tools, _call_tool))
        return type(cls_name, (StepGymToolEnv,), {**body, "_make": staticmethod(build), "_tool_use": True})

    def tool(self, action: str) -> str:  # no annotation on self: TRL builds the schema from the hints
        return self._act(action)

    tool.__name__ = tool.__qualname__ = tool_name
    tool.__doc__ = (
        f"{tool_description}\n\nArgs:\n    action: {action_description}\n\n"
        "Returns:\n    The environment's answer: the new observation and the admissible actions.\n"
    )
    return type(cls_name, (StepGymToolEnv,), {tool_name: tool, "_make": staticmethod(build)})


def _may_have_tools(env: str | EnvFactory) -> bool:
    """False when the env's class is known without building it and has no ``tool_schemas`` (a registered id whose
    entry point is a class, or a class given as the factory, bare or in a ``functools.partial``), so no probe env
    is built for it."""
    cls: Any = env
    if isinstance(env, str):
        import stepgym.envs

        stepgym.envs.register_envs()
        try:
            entry = gym.spec(stepgym.envs.resolve_env_id(env)).entry_point
            cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        except Exception:  # an id gym does not know: the probe (gym.make) names the error
            return True
    while isinstance(cls, functools.partial):  # a class with bound arguments (a served env's client, say)
        cls = cls.func
    return not isinstance(cls, type) or callable(getattr(cls, "tool_schemas", None))


def _probe_tools(build: Callable[[], gym.Env]) -> list[dict[str, Any]] | None:
    """The tools of a tool-use env (:func:`~stepgym.integrations.tool_use.agent_tools`, read from one env reset
    on its first task), or ``None`` for an env without tools (no probe episode is played then)."""
    probe = build()
    try:
        if not callable(getattr(probe.unwrapped, "tool_schemas", None)):
            return None
        probe.reset(seed=0)
        return agent_tools(probe)
    finally:
        probe.close()


def _call_tool(self: StepGymToolEnv, name: str, arguments: dict[str, Any]) -> str:
    """A tool method's body: the call as the env's action (:func:`~stepgym.integrations.tool_use.call_action`)."""
    return self._act(call_action(name, arguments))
