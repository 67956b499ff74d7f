"""stepgym envs as a verifiers 0.4 taskset and env (``verifiers.v1``), with the step annotations on every trace.

verifiers 0.4 splits an environment in two: a :class:`Taskset` yields the tasks (data), an :class:`Env` turns one
task into one episode by driving its agents. A stepgym env is a multi-turn game whose *env* speaks after each
model reply, so :class:`StepGymEnv` plays the user side of the agent's interaction: it resets the stepgym env on
the task's id, sends the rendered prompt as a user turn (``interaction.turn(text)``), steps the env with the
reply, and repeats until the episode ends. The text interface is the bundled trainer's
(:class:`~stepgym.wrappers.text.TextInterfaceWrapper`: strict parsing, an unparsable reply is an invalid step
answered with feedback), so an episode here is the same game as anywhere else in stepgym.

What the trace carries (verifiers keeps one scalar per named reward, floats as metrics, and free metadata in
``trace.info``):

* reward ``env_return``: the episode return (sum of the env's step rewards);
* metrics ``won``, ``n_steps``, ``format_valid_rate``, ``admissible_rate``, ``effective_rate``;
* ``trace.info["stepgym"]``: the record of :func:`stepgym.steps.record.episode_annotations` (task id,
  won, return, ARG labels, and per step: reward, parsed action, format-valid / admissible / effective,
  ``state_key``...), the same record every stepgym adapter hands its trainer.

The tasks are the env's fixed split, through :func:`stepgym.steps.tasks.task_ids`, so they are the same
tasks as in the other trainers; each :class:`StepGymTaskData` carries the stepgym ``task_id`` and ``env_id``.

verifiers finds plugins by id: ``vf-eval stepgym-verifiers`` imports the top-level ``stepgym_verifiers`` package,
which re-exports the two classes here. Only evaluation runs here (verifiers' ``vf-eval`` against an
OpenAI-compatible endpoint); training goes through prime-rl on GPUs.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from stepgym import _deps
from stepgym.steps.episode import Episode
from stepgym.steps.tasks import task_ids

vf = _deps.require("verifiers.v1", "verifiers", what="the verifiers integration")
from pydantic import Field  # noqa: E402 - a verifiers dependency

__all__ = [
    "StepGymEnv",
    "StepGymEnvConfig",
    "StepGymTask",
    "StepGymTaskData",
    "StepGymTaskset",
    "StepGymTasksetConfig",
]


class StepGymTaskData(vf.TaskData):
    """One stepgym task: ``task_id`` is handed to ``env.reset(options={"task_id": ...})`` of ``env_id``."""

    env_id: str
    task_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None


class StepGymTask(vf.Task[StepGymTaskData, vf.State, vf.TaskConfig]):
    """A stepgym task; its key is the env id and task id (stable across runs, unlike the content hash, which
    includes the task's position)."""

    @property
    def key(self) -> str:
        return f"{self.data.env_id}:{self.data.task_id}"


class StepGymTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which stepgym env (and constructor arguments: ``split``, ``max_steps``...)."""

    env: str = "StepGym/CreditToy-v0"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    instructions: str | None = None
    """The system prompt of every task (None: none; the rendered turns say what to do)."""


class StepGymTaskset(vf.Taskset[StepGymTask, StepGymTasksetConfig]):
    """The env's fixed task split (``env.unwrapped.task_ids``, in order), one task per id.

    The tasks carry no prompt: the env opens each conversation with its first rendered observation, which exists
    only once the env is reset. ``--select.*`` / ``-n`` pick among them as for any verifiers taskset.
    """

    def load(self):
        cfg = self.config
        for tid in task_ids(cfg.env, cfg.env_kwargs):
            data = StepGymTaskData(
                id=tid,
                name=tid,
                system_prompt=cfg.instructions,
                env_id=cfg.env,
                task_id=tid,
                env_kwargs=dict(cfg.env_kwargs),
            )
            yield StepGymTask(data, cfg.task)


class StepGymEnvConfig(vf.EnvConfig):
    """``--env.*``: the ``player`` seat (the policy; verifiers' tool-less ``null`` chat harness, run as a local
    subprocess) and the text interface's settings."""

    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    fmt: str | None = None
    """The text format (``alfworld``, ``webshop``, ``qa``, ``credit``); None: the env's own."""
    history_length: int | None = 0
    """Past steps rendered into each turn's prompt. 0 by default: the chat itself keeps the earlier turns."""


def _metrics(record: dict[str, Any]) -> dict[str, float]:
    steps = record["steps"]

    def rate(name: str) -> float:  # over the steps where the flag is known (EFFECTIVE may be None: unknown)
        known = [bool(s[name]) for s in steps if s[name] is not None]
        return sum(known) / len(known) if known else 0.0

    return {
        "won": float(record["won"]),
        "n_steps": float(record["n_steps"]),
        "format_valid_rate": rate("format_valid"),
        "admissible_rate": rate("admissible"),
        "effective_rate": rate("effective"),
    }


class StepGymEnv(vf.Env[StepGymEnvConfig]):
    """One episode of a stepgym env per task: the env is the user of the ``player`` agent's interaction."""

    def __init__(self, config: StepGymEnvConfig) -> None:
        super().__init__(config)
        self._lock = threading.Lock()

    async def _env_call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` off the event loop, one env call at a time across the run's episodes: not every engine is
        thread-safe (TextWorld's PDDL parser keeps global state), as in :mod:`stepgym.llm_eval`; the waiting for
        the model still overlaps."""

        def locked() -> Any:
            with self._lock:
                return fn(*args, **kwargs)

        return await asyncio.to_thread(locked)

    async def run(self, task: StepGymTask, agents: vf.Agents) -> None:
        data = task.data
        cfg = self.config
        # a failing env raises into verifiers, which records the error on the trace and does not score it
        episode = await self._env_call(
            Episode.make,
            data.env_id,
            data.env_kwargs,
            fmt=cfg.fmt,
            history=cfg.history_length,
            on_failure="raise",
        )
        try:
            await self._env_call(episode.reset, data.task_id, data.seed)
            async with agents.player.interaction(task) as interaction:
                while not episode.done:
                    segment = await interaction.turn(episode.prompt)
                    if segment.terminated:  # verifiers ended the run (a turn or token limit, a @stop)
                        break
                    await self._env_call(episode.step, segment.last_reply)
                self._record(interaction.trace, episode)
        finally:
            await self._env_call(episode.close)

    @staticmethod
    def _record(trace: Any, episode: Episode) -> None:
        """The episode's annotation record, reward and metrics on the verifiers trace."""
        record = episode.annotations()
        trace.info["stepgym"] = record  # also for a failed run: the steps it took
        if not trace.errors:  # a failed run (the model server down, say) is not scored, as verifiers does
            trace.record_reward("env_return", record["return"])
            trace.record_metrics(_metrics(record))
