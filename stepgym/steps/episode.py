"""The adapter skeleton, env side: one episode of a stepgym env as every trainer adapter plays it.

A trainer adapter (TRL, verl, OpenRLHF, SkyRL, verifiers) does the same four things around its trainer's own
loop: build the text env, reset it on a dataset row's task, step it with each model reply while recording the
episode, and hand its trainer the step records (:func:`stepgym.steps.record.step_annotations`) and the
episode record. :class:`Episode` does them once:

* :meth:`Episode.make` builds the stack with :func:`stepgym.wrappers.text.make_text_env` (the bundled trainer's
  prompts and strict parsing: an unparsable reply is an invalid step, never an exception);
* :meth:`Episode.reset` starts a task (:func:`stepgym.steps.tasks.reset_args`: a task id, or ``"seed:N"``)
  and returns the first prompt text;
* :meth:`Episode.step` steps the env with a reply, records the step (:class:`stepgym.episodes.EpisodeRecorder`) and
  returns it with its step record; an exception ends the episode **aborted** with its cause
  (:func:`stepgym.errors.abort_cause_of`, docs/failures.md) and returns ``None`` (``on_failure="raise"``: the
  exception propagates, for a trainer that handles failures itself);
* :attr:`Episode.trajectory` / :meth:`Episode.annotations` / :attr:`Episode.records`: what the trainer carries.

:func:`span_records` attaches each reply's token span to the step records, for the adapters that keep one token row
per episode (TRL's ``GroupRollout``, verl's agent loop). The other half of the skeleton, from those rows to
stepgym's token advantages, is :mod:`stepgym.steps.advantages`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import gymnasium as gym

from stepgym import schema
from stepgym.episodes import EpisodeRecorder
from stepgym.errors import abort_cause_of
from stepgym.steps.record import ABORTED_STEP, episode_annotations, step_annotations
from stepgym.steps.tasks import reset_args
from stepgym.wrappers.text import make_text_env

__all__ = ["Episode", "EpisodeHolder", "Turn", "span_records"]


class Turn(NamedTuple):
    """One step of an :class:`Episode`: the env's answer to a reply and the step's record."""

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    record: dict[str, Any]  #: :func:`~stepgym.steps.record.step_annotations` of the step

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class Episode:
    """One episode of an env (a text env: :meth:`make`), recorded as it is played.

    Args:
        env: the env the adapter plays, already built (``make_text_env``'s stack, or any Gymnasium env).
        on_failure: ``"abort"`` (default): an exception from ``env.step`` ends the episode aborted with its cause
            (:attr:`abort_cause`; the trajectory says so) and :meth:`step` returns ``None``. ``"raise"``: it
            propagates.
    """

    def __init__(self, env: gym.Env, *, on_failure: Literal["abort", "raise"] = "abort") -> None:
        if on_failure not in ("abort", "raise"):
            raise ValueError(f"on_failure must be 'abort' or 'raise', got {on_failure!r}")
        self.env = env
        self.on_failure = on_failure
        self._recorder = EpisodeRecorder()
        self.info: dict[str, Any] = {}  #: the info of the current state
        self.records: list[dict[str, Any]] = []  #: one step record per step taken
        self.abort_cause: str | None = None  #: set when a failure aborted the episode
        self.abort_detail = ""  #: the failure's type and message

    @classmethod
    def make(
        cls,
        env: str | gym.Env,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        fmt: str | None = None,
        history: int | str | None = "default",
        wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
        on_failure: Literal["abort", "raise"] = "abort",
    ) -> Episode:
        """An episode of the text env :func:`~stepgym.wrappers.text.make_text_env` builds (``fmt`` ``None``: the
        env's declared format; ``history``: K, the steps each prompt shows); ``wrappers`` go outside the text
        interface (first = innermost), e.g. ``ARGWrapper`` for ProAS labels."""
        built: gym.Env = make_text_env(env, env_kwargs, fmt=fmt or None, history=history)
        for w in wrappers:
            built = w(built)
        return cls(built, on_failure=on_failure)

    # -- playing ---------------------------------------------------------------------------------------------------
    def reset(self, task_id: str | None = None, seed: int | None = None) -> str:
        """Start the task (a task id, ``"seed:N"``, or ``None``: the env's draw by ``seed``); returns the first
        prompt the model reads (the text interface's rendered prompt, else the observation)."""
        env_seed, options = reset_args(task_id, seed)
        obs, self.info = self.env.reset(seed=env_seed, options=options)
        self._recorder.start(obs, self.info)
        self.records = []
        self.abort_cause, self.abort_detail = None, ""
        return self.prompt if self._has_prompt() else str(obs)

    def step(self, action: Any) -> Turn | None:
        """Step the env with ``action`` (a model reply) and record the step; ``None`` when a failure aborted the
        episode (``on_failure="abort"``)."""
        traj = self.trajectory
        before = self.info
        try:
            obs, reward, term, trunc, info = self.env.step(action)
        except Exception as exc:  # an infrastructure failure: the episode ends aborted (docs/failures.md)
            if self.on_failure == "raise":
                raise
            self.abort_cause = abort_cause_of(exc)
            self.abort_detail = f"{type(exc).__name__}: {exc}"
            traj.abort(self.abort_cause)
            return None
        self._recorder.add(action, obs, reward, term, trunc, info)
        self.info = info
        record = step_annotations(before, action, float(reward), info, terminated=bool(term))
        self.records.append(record)
        return Turn(obs, float(reward), bool(term), bool(trunc), info, record)

    def close(self) -> None:
        self.env.close()

    # -- what the trainer carries ---------------------------------------------------------------------------------
    @property
    def prompt(self) -> str:
        """The text interface's prompt for the current state (what the model reads next)."""
        return str(self.env.get_wrapper_attr("prompt"))

    def _has_prompt(self) -> bool:
        try:
            self.env.get_wrapper_attr("prompt")
        except AttributeError:
            return False
        return True

    @property
    def trajectory(self) -> schema.Trajectory:
        """The episode so far (a :class:`~stepgym.schema.Trajectory`; ``aborted`` after a failure)."""
        if self._recorder.trajectory is None:
            raise RuntimeError("no episode yet: reset() first")
        return self._recorder.trajectory

    @property
    def aborted(self) -> bool:
        return self.abort_cause is not None

    @property
    def done(self) -> bool:
        """The episode ended: terminated, truncated or aborted."""
        steps = self.trajectory.steps
        return self.aborted or bool(steps and (steps[-1].terminated or steps[-1].truncated))

    def annotations(self) -> dict[str, Any]:
        """The episode's :func:`~stepgym.steps.record.episode_annotations` record (the steps taken)."""
        return episode_annotations(self.trajectory, self.records)  # each step's record, read once in step()


def span_records(
    trajectory: schema.Trajectory, spans: Sequence[tuple[int, int]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The episode record (without ``steps``) and its step records, each with its reply's token span
    ``start``/``stop``, for a token row per episode.

    An aborted episode's last reply was never answered: it gets a stand-in record
    (:data:`~stepgym.steps.record.ABORTED_STEP`) and every record says ``aborted``. Otherwise there is
    one span per step (a mismatch raises)."""
    episode = episode_annotations(trajectory)
    steps = episode.pop("steps")
    if trajectory.aborted:
        steps = [*steps, *[dict(ABORTED_STEP) for _ in spans[len(steps) :]]]
        for rec in steps:
            rec["aborted"] = True
    for rec, (s, e) in zip(steps, spans, strict=True):
        rec.update(start=s, stop=e)
    return episode, steps


class EpisodeHolder:
    """Mixin of an adapter's object that plays one :class:`Episode` at a time (:attr:`episode`, ``None`` before
    the first): the env and the current info of that episode."""

    episode: Episode | None = None

    @property
    def env(self) -> gym.Env | None:
        """The text env of the episode being played, inside its wrappers (``None`` before the first)."""
        return None if self.episode is None else self.episode.env

    @property
    def info(self) -> dict[str, Any]:
        """The info of the episode's current state (``{}`` before the first)."""
        return {} if self.episode is None else self.episode.info
