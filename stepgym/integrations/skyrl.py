"""stepgym envs as SkyRL-gym 0.4 text envs (``skyrl_gym.make``), with the step annotations in each step's metadata.

SkyRL's trainer (skyrl-train) makes one ``BaseTextEnv`` per prompt row: ``make(env_class, env_config=...,
extras=row)``, then ``init(prompt)`` and ``step(model_text)`` until ``done``, taking each step's ``reward`` as the
per-turn reward. :class:`StepGymTextEnv` plays a stepgym env through the same text interface the bundled trainer
uses (:class:`~stepgym.wrappers.text.TextInterfaceWrapper`: prompt rendering, strict action parsing, an unparsable
reply is an invalid step), starts the row's ``task_id``, and returns per step the env's reward and, in
``metadata``, the step record of :func:`stepgym.steps.record.step_annotations` (the whole episode
record on the last step). :func:`register` registers a stepgym env id under a SkyRL id.

Step-level credit: :class:`StepAdvantageMixin`, mixed in before SkyRL's trainer class (``RayPPOTrainer`` of
``skyrl.train.trainer``, SkyRL 0.4), replaces its ``compute_advantages_and_returns`` with stepgym's
:func:`~stepgym.shapers.shape_advantages`. SkyRL's registered advantage estimators receive only the token
rewards, the response mask and the group uids, so GiGPO's state keys and ProAS's labels cannot reach one; they
reach the trainer instead: :meth:`StepGymTextEnv.get_metrics` returns the episode's step records
(``stepgym_steps``; SkyRL's metric aggregation drops non-numbers), SkyRL's generator hands them over per row in
``generator_output["env_metrics"]``, and the mixin's ``convert_to_training_input`` keeps them in the batch's
metadata.

Only env-level use runs here: skyrl-train (and SkyRL 0.4, which contains it) requires Python 3.12 and GPUs (vLLM /
SGLang generation, FSDP); the mixin's advantage step is tested on a stand-in for SkyRL's ``TrainingInputBatch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stepgym import _deps, schema
from stepgym.errors import StepRecordError
from stepgym.steps.advantages import (
    RowSettings,
    check_group_sizes,
    masked_rows,
    refuse_missing,
    shape_rows,
)
from stepgym.steps.batch import REWARD_SCALE, StepBatchOptions
from stepgym.steps.episode import Episode
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE

skyrl_gym = _deps.require("skyrl_gym", "skyrl", what="the SkyRL-gym integration")
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

__all__ = ["StepAdvantageMixin", "StepGymTextEnv", "register", "step_advantages"]


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
        # the given format, else the env's declared one, else a clear error (the inner env closed)
        self._episode = Episode.make(
            env_id, kwargs, fmt=cfg.get("fmt", fmt), history=cfg.get("history_length", history_length)
        )
        self._env = self._episode.env
        row = dict(extras or {})
        self.task_id = row.get("task_id")
        self.seed = row.get("seed")
        self.max_turns = int(getattr(self._env.unwrapped, "max_steps", 50))

    @property
    def abort_cause(self) -> str | None:
        """Set when an infrastructure failure aborted the episode (docs/failures.md)."""
        return self._episode.abort_cause

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset on the row's task; the first prompt keeps the row's system messages and adds the rendered turn."""
        text = self._episode.reset(self.task_id, self.seed)  # "seed:N": a task drawn by seed
        self.turns = 0
        system = [
            {"role": "system", "content": m["content"]} for m in prompt or [] if m.get("role") == "system"
        ]
        info = self._episode.info
        meta = {"task_id": info.get(schema.TASK_ID), "state_key": info.get(schema.STATE_KEY)}
        return [*system, {"role": "user", "content": text}], meta

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn: parse it, step the env, return the env's reward and the step record as metadata."""
        ep = self._episode
        turn = ep.step(action)
        if turn is None:  # an infrastructure failure: the episode ends aborted (docs/failures.md)
            assert ep.abort_cause is not None
            meta = {**schema.abort_info(ep.abort_cause, ep.abort_detail), "task_id": None}
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata=meta, postprocessed_action=None
            )
        self.turns += 1
        meta = {**turn.record, "task_id": turn.info.get(schema.TASK_ID)}
        if turn.done:
            meta["episode"] = ep.annotations()
        observations = [] if turn.done else [{"role": "user", "content": ep.prompt}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=turn.reward,
            done=turn.done,
            metadata=meta,
            postprocessed_action=None,
        )

    @property
    def info(self) -> dict[str, Any]:
        """The stepgym info dict of the current state (every ``stepgym.schema`` annotation, the expert action too)."""
        return self._episode.info

    def get_metrics(self) -> dict[str, Any]:
        """Episode metrics (numbers, which SkyRL averages) and the episode's step records (``stepgym_steps``, which
        SkyRL's aggregation drops and :class:`StepAdvantageMixin` reads)."""
        records = self._episode.records
        return {
            "stepgym_steps": list(records),
            "stepgym_abort_cause": self.abort_cause,  # None unless aborted (StepAdvantageMixin reads it)
            "aborted": float(self.abort_cause is not None),
            "won": float(bool(self.info.get(schema.WON, False))),
            "steps": float(len(records)),
            "format_valid_rate": (
                sum(bool(r["format_valid"]) for r in records) / len(records) if records else 0.0
            ),
        }

    def close(self) -> None:
        self._episode.close()


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


# ---------------------------------------------------------------------------------------------------------------
# Step-level advantages in SkyRL's trainer
# ---------------------------------------------------------------------------------------------------------------
def step_advantages(
    loss_mask: Any,
    steps: Sequence[Sequence[Mapping[str, Any]] | None],
    uids: Sequence[Any],
    group_size: int,
    shape_config: Any = "gigpo-alfworld",
    *,
    reward_scale: float = REWARD_SCALE,
    invalid_rule: str = FORMAT_OR_INADMISSIBLE,
    aborted: Sequence[bool] | None = None,
) -> np.ndarray:
    """stepgym's (B, L) advantages for SkyRL's layout: row b's model turns are the runs of 1s in ``loss_mask[b]``
    (SkyRL masks the env's turns out), matched in order with ``steps[b]`` (the env's step records); groups are the
    ``uids``, each of which must hold ``group_size`` rows. ``aborted[b]``: row b's episode was aborted
    (docs/failures.md): advantage 0 and out of every statistic (mask it out of the loss too)."""
    from stepgym.shapers import ShapeConfig

    cfg = ShapeConfig.from_preset(shape_config) if isinstance(shape_config, str) else shape_config
    refuse_missing(cfg, teacher="the SkyRL integration runs no teacher")
    mask = np.asarray(loss_mask.detach().cpu() if hasattr(loss_mask, "detach") else loss_mask)
    check_group_sizes([str(u) for u in uids], group_size, "n_samples_per_prompt")
    cut = [False] * len(steps) if aborted is None else [bool(a) for a in aborted]
    for b, row in enumerate(steps):
        if row is None:
            raise StepRecordError(
                f"row {b} has no stepgym_steps in its env metrics: was it played by StepGymTextEnv?"
            )
    rows = masked_rows(mask, steps, uids, cut, zero_outside=True)  # type: ignore[arg-type]
    return shape_rows(rows, RowSettings(cfg, StepBatchOptions(reward_scale, invalid_rule))).token_advantages


class StepAdvantageMixin:
    """Mix in before SkyRL's trainer class: ``class Trainer(StepAdvantageMixin, RayPPOTrainer)``.

    ``stepgym_shape_config`` (a preset name or ``ShapeConfig``), ``stepgym_reward_scale`` and
    ``stepgym_invalid_rule`` are class attributes to override. Step-wise trajectories
    (``generator.step_wise_trajectories``) are refused: there each turn is its own row.
    """

    stepgym_shape_config: Any = "gigpo-alfworld"
    stepgym_reward_scale: float = REWARD_SCALE
    stepgym_invalid_rule: str = FORMAT_OR_INADMISSIBLE
    cfg: Any

    def convert_to_training_input(self, generator_output: Mapping[str, Any], uids: list[str]) -> Any:
        data = super().convert_to_training_input(generator_output, uids)  # type: ignore[misc]
        metrics = generator_output.get("env_metrics") or [None] * len(uids)
        data.metadata["stepgym_steps"] = [m.get("stepgym_steps") if m else None for m in metrics]
        data.metadata["stepgym_aborted"] = [bool(m and m.get("stepgym_abort_cause")) for m in metrics]
        return data

    def compute_advantages_and_returns(self, data: Any) -> Any:
        if self.cfg.generator.step_wise_trajectories:
            raise StepRecordError(
                "stepgym's advantages need whole-episode rows: set step_wise_trajectories=false"
            )
        steps = data.metadata.get("stepgym_steps")
        if steps is None:
            raise StepRecordError(
                "the batch has no stepgym_steps: use StepAdvantageMixin's convert_to_training_input"
            )
        torch = _deps.require("torch", "skyrl")
        aborted = data.metadata.get("stepgym_aborted") or [False] * len(steps)
        adv = step_advantages(
            data["loss_mask"],
            steps,
            data.metadata["uids"],
            int(self.cfg.generator.n_samples_per_prompt),
            self.stepgym_shape_config,
            reward_scale=self.stepgym_reward_scale,
            invalid_rule=self.stepgym_invalid_rule,
            aborted=aborted,
        )
        if any(aborted):  # an aborted episode's rows leave the loss (docs/failures.md)
            keep = torch.as_tensor([not a for a in aborted], dtype=data["loss_mask"].dtype)
            data["loss_mask"] = data["loss_mask"] * keep.to(data["loss_mask"].device)[:, None]
        data["advantages"] = torch.as_tensor(adv, dtype=torch.float32)
        data["returns"] = data["advantages"].clone()
        return data
