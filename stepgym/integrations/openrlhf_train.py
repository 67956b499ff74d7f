"""OpenRLHF 0.11 with stepgym's step-level advantages (GRPO, Dr.GRPO, GiGPO, ProAS) in place of its own estimators.

OpenRLHF computes advantages in ``RemoteExperienceMaker.compute_advantages_and_returns`` from one scalar reward per
sample; its policy loss then reads ``experience.advantages`` (B, A) as they are. :class:`StepExperienceMaker`
overrides that method: the stepgym agent (:func:`stepgym.integrations.openrlhf.agent_classes`) returns its step
records in the sample's label (JSON, ``{"label": ..., "stepgym_steps": [...]}``, the one text field OpenRLHF
carries from the agent to the experience), each reply is one run of ``action_mask``, the group is the prompt
(``n_samples_per_prompt`` consecutive samples), and :func:`~stepgym.shapers.shape_advantages`' per-token
advantages become ``experience.advantages`` and ``returns``.

``python -m stepgym.integrations.openrlhf_train --stepgym.preset gigpo-alfworld [OpenRLHF's train_ppo_ray flags]``
runs OpenRLHF's own ``openrlhf.cli.train_ppo_ray`` with its trainer (``PPOTrainer``) subclassed to build this
experience maker; the ``--stepgym.*`` flags travel to the Ray workers as environment variables
(``STEPGYM_PRESET``, ``STEPGYM_REWARD_SCALE``, ``STEPGYM_INVALID_RULE``). AHEAD and StepOPSD are not wired here
(they need teacher scoring through OpenRLHF's model actors) and are refused.

Importing this module needs OpenRLHF's whole training stack (DeepSpeed, vLLM, flash-attn: its GPU environment).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from stepgym import _deps
from stepgym.errors import StepRecordError
from stepgym.shapers import ShapeConfig, StepBatch
from stepgym.steps.advantages import (
    RowSettings,
    check_group_sizes,
    masked_rows,
    refuse_missing,
    rows_batch,
    shape_rows,
)
from stepgym.steps.batch import REWARD_SCALE, StepBatchOptions
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE

torch = _deps.require("torch", "openrlhf")
_deps.require("openrlhf", "openrlhf", what="the OpenRLHF trainer integration")

from openrlhf.trainer.ppo_trainer import PPOTrainer  # noqa: E402
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # noqa: E402

__all__ = ["StepExperienceMaker", "StepPPOTrainer", "decode_abort", "decode_label", "main", "step_batch"]

#: Environment variables carrying the ``--stepgym.*`` settings to OpenRLHF's Ray actors.
ENV = {
    "preset": "STEPGYM_PRESET",
    "reward_scale": "STEPGYM_REWARD_SCALE",
    "invalid_rule": "STEPGYM_INVALID_RULE",
}


def decode_label(text: Any) -> list[dict[str, Any]]:
    """The step records the stepgym agent put in the sample's label; a clear error for a sample it did not play."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("stepgym_steps"), list):
        raise StepRecordError(
            f"a sample's label carries no stepgym_steps ({str(text)[:60]!r}): every sample must be played by the "
            "agent of stepgym.integrations.openrlhf.agent_classes (--train.agent_func_path)"
        )
    return value["stepgym_steps"]


def decode_abort(text: Any) -> bool:
    """Whether the stepgym agent ended the sample's episode aborted (an infrastructure failure: docs/failures.md)."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return False
    return isinstance(value, dict) and bool(value.get("stepgym_abort_cause"))


def _settings() -> RowSettings:
    preset = os.environ.get(ENV["preset"], "gigpo-alfworld")
    cfg = ShapeConfig.from_preset(preset)
    refuse_missing(
        cfg,
        teacher=f"preset {preset!r}: the OpenRLHF integration runs the GRPO-family bases, GiGPO and ProAS only",
    )
    return RowSettings(
        cfg,
        StepBatchOptions(
            reward_scale=float(os.environ.get(ENV["reward_scale"], str(REWARD_SCALE))),
            invalid_rule=os.environ.get(ENV["invalid_rule"], FORMAT_OR_INADMISSIBLE),
        ),
    )


def step_batch(
    masks: Sequence[Any],
    records: Sequence[Sequence[dict[str, Any]]],
    groups: Sequence[Any],
    *,
    reward_scale: float,
    invalid_rule: str,
    width: int,
    aborted: Sequence[bool] | None = None,
) -> StepBatch:
    """The shapers' batch: row b's steps are the runs of ``masks[b]`` matched in order with ``records[b]`` (steps
    the context length cut off entirely have no run and take no part; more runs than records is an error, except
    in an ``aborted`` row, whose values are never read: docs/failures.md)."""
    cut = [False] * len(masks) if aborted is None else [bool(a) for a in aborted]
    rows = masked_rows(masks, records, groups, cut, width=width, what="sample")
    return rows_batch(rows, StepBatchOptions(reward_scale, invalid_rule))


class StepExperienceMaker(RemoteExperienceMaker):
    """OpenRLHF's experience maker with stepgym's advantages (see the module docstring)."""

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences: list[Any]) -> list[Any]:
        args = self.strategy.args
        if self.kl_ctl.value > 0 and not args.algo.kl.use_loss:
            raise StepRecordError(
                "a KL penalty in the reward (algo.kl.use_loss off) would be dropped: stepgym's advantages come "
                "from the env's step rewards; pass --algo.kl.use_loss (the papers' KL loss)"
            )
        settings = _settings()
        n = int(args.rollout.n_samples_per_prompt)
        where = [(e, r, int(i)) for e, exp in enumerate(experiences) for r, i in enumerate(exp.index)]
        groups = [i // n for _, _, i in where]
        check_group_sizes(groups, n, "n_samples_per_prompt")
        masks = [experiences[e].action_mask[r].cpu().numpy() for e, r, _ in where]
        records = [decode_label(experiences[e].labels[r]) for e, r, _ in where]
        aborted = [decode_abort(experiences[e].labels[r]) for e, r, _ in where]
        shaped = shape_rows(masked_rows(masks, records, groups, aborted, what="sample"), settings)
        batch, adv = shaped.batch, shaped.token_advantages
        ep_return = np.bincount(batch.traj_ids, weights=batch.rewards, minlength=len(where))
        for e, exp in enumerate(experiences):
            rows = [k for k, (ee, _, _) in enumerate(where) if ee == e]
            a = torch.as_tensor(adv[rows, : exp.action_mask.shape[1]], dtype=torch.float32)
            if any(aborted[k] for k in rows):  # an aborted episode's rows leave the loss (docs/failures.md)
                keep = torch.as_tensor([not aborted[k] for k in rows], device=exp.action_mask.device)
                exp.action_mask = exp.action_mask * keep[:, None].to(exp.action_mask.dtype)
            exp.advantages = a * exp.action_mask.to(a.dtype)
            exp.returns = exp.advantages.clone()
            exp.info["return"] = torch.as_tensor(ep_return[rows], dtype=torch.float32)
            exp.kl = None
        return experiences


_BaseTrainer = getattr(PPOTrainer, "__ray_actor_class__", PPOTrainer)  # the class under Ray's @ray.remote


class _StepPPOTrainer(_BaseTrainer):  # type: ignore[misc, valid-type]
    """OpenRLHF's ``PPOTrainer`` building :class:`StepExperienceMaker`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _settings()  # a teacher preset fails here, before any rollout
        old = self.experience_maker
        self.experience_maker = StepExperienceMaker(
            old.actor_model_group,
            old.critic_model_group,
            old.reward_model_group,
            old.initial_model_group,
            old.kl_ctl,
            old.strategy,
            old.tokenizer,
        )


def _remote() -> Any:
    import ray

    return ray.remote(_StepPPOTrainer)


StepPPOTrainer = _remote()


def _take_stepgym_flags(argv: list[str]) -> list[str]:
    rest, i = [], 0
    while i < len(argv):
        flag = argv[i]
        key = flag[len("--stepgym.") :].split("=", 1)[0] if flag.startswith("--stepgym.") else None
        if key is None:
            rest.append(flag)
            i += 1
            continue
        if key not in ENV:
            raise SystemExit(f"unknown flag {flag}; known: {', '.join('--stepgym.' + k for k in ENV)}")
        value = flag.split("=", 1)[1] if "=" in flag else argv[i + 1]
        os.environ[ENV[key]] = value
        i += 1 if "=" in flag else 2
    return rest


def main(argv: Sequence[str] | None = None) -> None:
    """OpenRLHF's ``train_ppo_ray`` entry point with :class:`StepPPOTrainer` as its trainer."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    args = _take_stepgym_flags(list(sys.argv[1:] if argv is None else argv))
    if "--train.async_enable" in args:
        raise SystemExit(
            "--train.async_enable uses OpenRLHF's async trainer, which this entry point does not wrap"
        )
    _settings()
    ppo_trainer.PPOTrainer = StepPPOTrainer  # train() imports the name when it builds the trainer
    sys.argv = ["openrlhf.cli.train_ppo_ray", *args]
    runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
