"""stepgym envs as SkyRL-gym 0.4 text envs (``skyrl_gym.make``), with the step annotations in each step's metadata.

SkyRL's trainer (skyrl-train) makes one ``BaseTextEnv`` per prompt row: ``make(env_class, env_config=...,
extras=row)``, then ``init(prompt)`` and ``step(model_text)`` until ``done``, taking each step's ``reward`` as the
per-turn reward. :class:`StepGymTextEnv` plays a stepgym env through the same text interface the bundled trainer
uses (:class:`~stepgym.wrappers.text.TextInterfaceWrapper`: prompt rendering, strict action parsing, an unparsable
reply is an invalid step), starts the row's ``task_id``, and returns per step the env's reward and, in
``metadata``, the step record of :func:`stepgym.integrations.annotations.step_annotations` (the whole episode
record on the last step). :func:`register` registers a stepgym env id under a SkyRL id.

Only env-level use is tested here: skyrl-train needs GPUs (vLLM / SGLang generation, FSDP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from stepgym import _deps, schema
from stepgym.integrations.annotations import episode_annotations, step_annotations
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import TextInterfaceWrapper

skyrl_gym = _deps.require("skyrl_gym", "skyrl", what="the SkyRL-gym integration")
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

__all__ = ["StepGymTextEnv", "register"]


def _plain(cfg: Any) -> dict[str, Any]:
    """An env_config (dict or OmegaConf DictConfig) as a plain dict."""
    if cfg is None:
        return {}
    if isinstance(cfg, Mapping):
        return dict(cfg)
    try:  # OmegaConf, without importing it when it is not in use
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    except Exception as exc:  # pragma: no cover
        raise TypeError(f"env_config must be a mapping, got {type(cfg).__name__}") from exc


class StepGymTextEnv(BaseTextEnv):
    """A stepgym env as a SkyRL-gym ``BaseTextEnv``.

    Args:
        env_config: SkyRL's per-env-class config; may hold ``env_kwargs``, ``fmt``, ``history_length``.
        extras: the dataset row; ``task_id`` (and optionally ``seed``) choose the task.
        stepgym_env: the stepgym env id (set by :func:`register`).
        env_kwargs / fmt / history_length: defaults that ``env_config`` overrides.
    """

    def __init__(
        self,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        *,
        stepgym_env: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        fmt: str | None = None,
        history_length: int | None = 2,
    ) -> None:
        super().__init__()
        cfg = _plain(env_config)
        env_id = cfg.get("stepgym_env", stepgym_env)
        if not env_id:
            raise ValueError("no stepgym env id: register() the env or set env_config.stepgym_env")
        kwargs = {**dict(env_kwargs or {}), **dict(cfg.get("env_kwargs") or {})}
        inner = gym.make(env_id, **kwargs)
        try:  # the wrapper's own rule: the given format, else the env's registered one, else a clear error
            self._env = TextInterfaceWrapper(
                EnvFeedbackWrapper(inner),
                fmt=cfg.get("fmt", fmt) or None,
                history_length=cfg.get("history_length", history_length),
            )
        except ValueError:
            inner.close()
            raise
        row = dict(extras or {})
        self.task_id = row.get("task_id")
        self.seed = row.get("seed")
        self.max_turns = int(getattr(inner.unwrapped, "max_steps", 50))
        self._info: dict[str, Any] = {}
        self._first: tuple[str, dict[str, Any]] = ("", {})

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset on the row's task; the first prompt keeps the row's system messages and adds the rendered turn."""
        options = {"task_id": self.task_id} if self.task_id is not None else None
        obs, self._info = self._env.reset(seed=self.seed, options=options)
        self._first = (str(obs), self._info)
        self.turns = 0
        system = [
            {"role": "system", "content": m["content"]} for m in prompt or [] if m.get("role") == "system"
        ]
        meta = {"task_id": self._info.get(schema.TASK_ID), "state_key": self._info.get(schema.STATE_KEY)}
        return [*system, {"role": "user", "content": self._env.prompt}], meta

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn: parse it, step the env, return the env's reward and the step record as metadata."""
        before = self._info
        _, reward, terminated, truncated, info = self._env.step(action)
        self._info = info
        self.turns += 1
        done = bool(terminated or truncated)
        meta = step_annotations(before, action, float(reward), info)
        meta["task_id"] = info.get(schema.TASK_ID)
        if done:
            first_obs, first_info = self._first
            traj = schema.Trajectory(str(meta["task_id"]), first_obs, first_info, list(self._env.history))
            meta["episode"] = episode_annotations(traj)
        observations = [] if done else [{"role": "user", "content": self._env.prompt}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=float(reward),
            done=done,
            metadata=meta,
            postprocessed_action=None,
        )

    @property
    def info(self) -> dict[str, Any]:
        """The stepgym info dict of the current state (every ``stepgym.schema`` annotation, the expert action too)."""
        return self._info

    def get_metrics(self) -> dict[str, Any]:
        steps = self._env.history
        return {
            "won": float(bool(self._info.get(schema.WON, False))),
            "steps": float(len(steps)),
            "format_valid_rate": (
                sum(bool(s.info.get(schema.FORMAT_VALID)) for s in steps) / len(steps) if steps else 0.0
            ),
        }

    def close(self) -> None:
        self._env.close()


def register(
    env_id: str,
    skyrl_id: str | None = None,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    fmt: str | None = None,
    history_length: int | None = 2,
) -> str:
    """Register stepgym ``env_id`` with SkyRL-gym (default id: ``"stepgym-<name>"``, e.g.
    ``"stepgym-alfworld-v0"``); returns the SkyRL id. Re-registering the same id replaces it."""
    sid = skyrl_id or "stepgym-" + env_id.split("/")[-1].lower()
    skyrl_gym.registry.pop(sid, None)
    skyrl_gym.register(
        id=sid,
        entry_point="stepgym.integrations.skyrl:StepGymTextEnv",
        kwargs={
            "stepgym_env": env_id,
            "env_kwargs": dict(env_kwargs or {}),
            "fmt": fmt,
            "history_length": history_length,
        },
    )
    return sid
