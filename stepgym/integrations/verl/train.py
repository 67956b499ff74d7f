# Over 400 lines: verl's trainer with stepgym's advantage step, teachers and ARG, one class over verl's loop.
"""verl 0.9's v1 PPO trainer with stepgym's step-level advantages: every shaper, AHEAD and StepOPSD included.

``python -m stepgym.integrations.verl.train --config-name alfworld stepgym.preset=alfworld-proas ...`` runs verl's
own v1 training loop (``verl.trainer.main_ppo``'s ``run_ppo`` and ``TaskRunnerV1``: Ray workers, FSDP, vLLM or
SGLang servers, TransferQueue) with one step replaced: :meth:`StepGymTrainerMixin._compute_advantage`. verl's
estimators see only token rewards and the group uid; this step reads the agent loop's ``extra_fields``
(``stepgym_steps``, ``stepgym_trajectory``) from TransferQueue and writes
:func:`~stepgym.shapers.shape_advantages`' per-token advantages back, the way verl's own step writes
its advantages. For AHEAD and StepOPSD the teacher log-probs come from verl's own workers on the rebuilt contexts
(:mod:`stepgym.steps.teacher_context`): AHEAD's teacher is θ_old, the actor before this step's update
(``actor_rollout_wg.compute_log_prob``); StepOPSD's stale teacher is verl's reference policy
(``compute_ref_log_prob``, the initial weights, which verl never refreshes: the paper refreshes its snapshot every
10 updates, so from update 11 on this teacher is staler than the paper's; ``stepgym.teacher.opsd_teacher=actor``
uses θ_old instead, a live teacher).

The trainer classes register under ``trainer.v1.trainer_mode`` = ``stepgym_sync`` / ``stepgym_colocate_async``
when this module is imported; the entry point puts it in ``VERL_USE_EXTERNAL_MODULES`` so verl's Ray workers
import it too. The Hydra configs in ``config/`` compose verl's ``ppo_trainer`` with the papers' settings (the
bundled trainer's presets, :mod:`stepgym.trainers.presets`), one per benchmark.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np

from stepgym import _deps, schema
from stepgym.atomic import atomic_path, atomic_write_text
from stepgym.errors import StepRecordError
from stepgym.integrations import verl as _verl
from stepgym.shapers import ShapeConfig
from stepgym.steps.batch import REWARD_SCALE
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE
from stepgym.steps.teacher_context import (
    ContextBudget,
    TeacherContexts,
    TeacherStats,
    ahead_gaps,
    opsd_gaps,
    span_rule,
)

torch = _deps.require("torch", "verl")
tq = _deps.require("transfer_queue", "verl", what="verl's v1 trainer (TransferQueue)")

from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, PPOTrainerSync, register_trainer  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402
from verl.workers.utils.padding import response_from_nested, response_to_nested  # noqa: E402

__all__ = [
    "StepGymPPOTrainerColocateAsync",
    "StepGymPPOTrainerSync",
    "StepGymTrainerMixin",
    "check_groups",
    "main",
    "record_rewards",
]

#: The TransferQueue partition the teacher contexts pass through (never the rollout partitions the replay buffer
#: samples from).
TEACHER_PARTITION = "stepgym_teacher"


def record_rewards(steps: list[list[dict[str, Any]]], width: int, scale: float) -> np.ndarray:
    """(B, L) token rewards: each step's env reward × ``scale`` on its reply's last token (what the bundled trainer
    credits: the env's per-step rewards on the 10·won scale, not verl's episode score)."""
    out = np.zeros((len(steps), width), dtype=np.float64)
    for b, recs in enumerate(steps):
        for rec in recs:
            stop = min(int(rec["stop"]), width)
            if stop > int(rec["start"]):
                out[b, stop - 1] += float(rec["reward"]) * scale
    return out


def check_groups(uids: list[str], group_size: int) -> None:
    """Every group uid must hold exactly ``group_size`` rows: a group split across batches, or rows lost on the way
    (failed rollouts, a filter that dropped single rows), would change every baseline in it silently."""
    counts = Counter(uids)
    bad = {u: c for u, c in counts.items() if c != group_size}
    if bad:
        shown = ", ".join(f"{u!r}: {c}" for u, c in list(bad.items())[:5])
        raise StepRecordError(
            f"{len(bad)} group(s) do not have rollout.n={group_size} rows ({shown}): a group was split or lost "
            "rows before the advantage step; step-level credit compares the members of whole groups"
        )


class StepGymTrainerMixin:
    """Replaces verl's v1 ``_compute_advantage`` with stepgym's shapers; mix in before a verl v1 trainer class.

    Settings come from the config's ``stepgym`` section: ``preset`` (a :class:`ShapeConfig` preset name, e.g.
    ``gigpo-alfworld``, ``proas-gigpo``, ``ahead``, ``stepopsd-alfworld``), ``reward_scale``, ``invalid_rule``,
    ``fmt`` (StepOPSD's span mode) and ``teacher`` (``max_context_tokens``, ``min_pi_tokens``, ``opsd_teacher``).
    """

    config: Any
    global_steps: int

    # -- settings ------------------------------------------------------------------------------------------------
    def stepgym_config(self) -> ShapeConfig:
        return ShapeConfig.from_preset(str(self.config.stepgym.preset))

    def _stepgym(self, key: str, default: Any = None) -> Any:
        section = self.config.get("stepgym") or {}
        return section.get(key, default)

    # -- the overridden step -------------------------------------------------------------------------------------
    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        """verl's step 7, on stepgym's shapers: read the batch and its records from TransferQueue, shape, write the
        advantages and returns back as nested tensors (what ``_update_actor`` reads)."""
        if self.config.algorithm.use_kl_in_reward:
            raise StepRecordError(
                "algorithm.use_kl_in_reward=True: stepgym's advantages come from the env's step rewards, so a KL "
                "penalty in the reward would be dropped; use actor_rollout_ref.actor.use_kl_loss=True (the papers')"
            )
        fields = ["uid", "prompts", "responses", "response_mask", "extra_fields"]
        if self.stepgym_config().token_reweight is not None:
            fields.append("old_log_probs")
        td = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = td["response_mask"]
        data = _to_dataproto(td)
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        adv = self.stepgym_advantages(data, padding, metrics)
        out = {
            "advantages": response_to_nested(adv, nested_mask),
            "returns": response_to_nested(adv, nested_mask),
        }
        from tensordict import TensorDict

        return tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(out, batch_size=len(batch))
        )

    def stepgym_advantages(self, data: DataProto, padding: list[bool], metrics: dict) -> Any:
        """(B, L) advantages for a padded verl batch; verl's padding rows (``is_padding``) get 0 and join no group."""
        cfg = self.stepgym_config()
        real = [i for i, p in enumerate(padding) if not p]
        sub = data.select_idxs(real) if len(real) < len(data) else data
        steps = _field(sub, "stepgym_steps")
        uids = [str(u) for u in sub.non_tensor_batch["uid"]]
        check_groups(uids, int(self.config.actor_rollout_ref.rollout.n))
        width = int(sub.batch["response_mask"].shape[1])
        rewards = record_rewards(steps, width, float(self._stepgym("reward_scale", REWARD_SCALE)))
        sub.batch["token_level_rewards"] = torch.as_tensor(rewards, dtype=torch.float32)
        sub.non_tensor_batch["stepgym_steps"] = _object_array(steps)
        gaps = self._teacher_gaps(cfg, sub, steps, uids, metrics) if cfg.token_reweight else {}
        _verl.compute_step_advantage(
            sub,
            cfg,
            update_index=max(0, self.global_steps - 1),
            invalid_rule=str(self._stepgym("invalid_rule", FORMAT_OR_INADMISSIBLE)),
            **gaps,
        )
        adv = torch.zeros(data.batch["response_mask"].shape, dtype=torch.float32)
        adv[real] = sub.batch["advantages"].to(adv.dtype)
        valid = adv[data.batch["response_mask"] > 0]
        metrics.update({"stepgym/adv_mean": float(valid.mean()) if valid.numel() else 0.0})
        return adv

    # -- teachers ------------------------------------------------------------------------------------------------
    def _teacher_gaps(
        self, cfg: ShapeConfig, data: DataProto, steps: list, uids: list[str], metrics: dict
    ) -> dict[str, Any]:
        lam = cfg.mixing_lambda(max(0, self.global_steps - 1))
        width = int(data.batch["response_mask"].shape[1])
        if cfg.token_reweight == "ahead" and lam <= 0:
            return {"delta": np.zeros((len(data), width))}  # λ = 0: Ã = A, nothing to score
        ctx = self._teacher_contexts(data, steps, uids)
        stats = TeacherStats()
        tok = self.tokenizer  # type: ignore[attr-defined]
        if cfg.token_reweight == "ahead":
            delta = ahead_gaps(ctx, tok, lambda c, t: self.stepgym_score(c, t, "actor"), stats)
            out: dict[str, Any] = {"delta": delta}
        elif cfg.token_reweight == "stepopsd":
            role = str((self._stepgym("teacher") or {}).get("opsd_teacher", "ref"))
            rule = span_rule(self._stepgym("fmt"))
            score = (lambda c, t: self.stepgym_score(c, t, role)) if lam > 0 else None
            delta, dmask, target = opsd_gaps(ctx, tok, score, stats, span=rule)
            out = {"delta": np.zeros((len(data), width)) if delta is None else delta, "target": target}
            if dmask is not None:
                out["delta_mask"] = dmask
        else:
            raise StepRecordError(f"no teacher for token_reweight={cfg.token_reweight!r} in the verl trainer")
        metrics.update({**stats.as_metrics(), "teacher/lambda": lam})
        return out

    def _teacher_contexts(self, data: DataProto, steps: list, uids: list[str]) -> TeacherContexts:
        prompts = [_unpad(p, m) for p, m in _prompt_rows(data)]
        mask = data.batch["response_mask"]
        responses = [data.batch["responses"][i][: _resp_len(mask[i])].tolist() for i in range(len(data))]
        teacher_cfg = self._stepgym("teacher") or {}
        budget = teacher_cfg.get("max_context_tokens") or (
            int(self.config.data.max_prompt_length) + int(self.config.data.max_response_length)
        )
        return TeacherContexts(
            prompts=prompts,
            responses=responses,
            steps=steps,
            trajectories=[_as_trajectory(t) for t in _field(data, "stepgym_trajectory")],
            groups=uids,
            old_log_probs=data.batch["old_log_probs"].double().cpu().numpy(),
            budget=ContextBudget(int(budget), int(teacher_cfg.get("min_pi_tokens", 32))),
        )

    def stepgym_score(
        self, contexts: list[list[int]], targets: list[list[int]], role: str
    ) -> list[np.ndarray]:
        """Teacher log-probs of ``targets`` after ``contexts`` through verl's own workers: the rows go into
        TransferQueue like rollout rows (``prompts`` = context, ``responses`` = target) and ``role`` = ``actor``
        (θ_old) or ``ref`` scores them with ``compute_log_prob`` / ``compute_ref_log_prob``."""
        wg = self.actor_rollout_wg  # type: ignore[attr-defined]
        n = len(contexts)
        separate_ref = role == "ref" and not self.ref_in_actor  # type: ignore[attr-defined]
        dp = _dp_size(self.ref_policy_wg, "ref") if separate_ref else _dp_size(wg, "actor")  # type: ignore[attr-defined]
        order = list(range(n)) + [n - 1] * ((-n) % dp)  # repeat the last item so every rank gets equal rows
        keys = [f"t{uuid4().hex}_{k}" for k in range(len(order))]
        rows = [_score_row(contexts[i], targets[i]) for i in order]
        meta = tq.kv_batch_put(
            keys=keys,
            partition_id=TEACHER_PARTITION,
            fields=list_of_dict_to_tensordict(rows),
            tags=[
                {
                    "status": "success",
                    "prompt_len": len(contexts[i]),
                    "response_len": len(targets[i]),
                    "seq_len": len(contexts[i]) + len(targets[i]),
                }
                for i in order
            ],
        )
        meta.extra_info.update(
            {
                "calculate_entropy": False,
                "compute_loss": False,
                "temperature": self.config.actor_rollout_ref.rollout.temperature,
            }
        )
        try:
            if role == "actor":
                wg.compute_log_prob(meta)
            elif role == "ref":
                if self.ref_in_actor:  # type: ignore[attr-defined]
                    meta.extra_info["no_lora_adapter"] = True
                    wg.compute_log_prob(meta)
                else:
                    self.ref_policy_wg.compute_ref_log_prob(meta)  # type: ignore[attr-defined]
            else:
                raise StepRecordError(f"teacher role must be 'actor' or 'ref', got {role!r}")
            got = tq.kv_batch_get(
                keys=keys, partition_id=TEACHER_PARTITION, select_fields=["log_probs", "response_mask"]
            )
            lp = (
                response_from_nested(got["log_probs"], got["response_mask"])
                .to_padded_tensor(0.0)
                .double()
                .numpy()
            )
        finally:
            tq.kv_clear(keys=keys, partition_id=TEACHER_PARTITION)
        return [lp[k, : len(targets[i])] for k, i in enumerate(order[:n])]


def _score_row(context: list[int], target: list[int]) -> dict[str, Any]:
    prompts = torch.tensor(context, dtype=torch.int64)
    responses = torch.tensor(target, dtype=torch.int64)
    ones = torch.ones(len(target), dtype=torch.int64)
    input_ids = torch.cat([prompts, responses])
    return {
        "prompts": prompts,
        "responses": responses,
        "response_mask": ones,
        "loss_mask": ones,
        "input_ids": input_ids,
        "position_ids": torch.arange(len(input_ids), dtype=torch.int64),
        "attention_mask": torch.ones(len(input_ids), dtype=torch.int64),
    }


def _dp_size(wg: Any, role: str) -> int:
    info = getattr(wg, "_dispatch_info", None)
    if info is None or not hasattr(wg, "_query_dispatch_info"):
        return 1
    if role not in info:
        info[role] = wg._query_dispatch_info(role)
    return max(info[role]) + 1


def _resp_len(mask_row: Any) -> int:
    nz = torch.nonzero(mask_row).flatten()
    return int(nz[-1]) + 1 if nz.numel() else 0


def _unpad(row: Any, length: int) -> list[int]:
    return row[:length].tolist()


def _prompt_rows(data: DataProto) -> list[tuple[Any, int]]:
    lengths = data.non_tensor_batch.get("stepgym_prompt_len")
    if lengths is None:
        raise StepRecordError(
            "the batch has no prompt lengths (stepgym_prompt_len): read it with _to_dataproto"
        )
    return [(data.batch["prompts"][i], int(lengths[i])) for i in range(len(data))]


def _object_array(values: list) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _field(data: DataProto, key: str) -> list:
    extra = data.non_tensor_batch.get("extra_fields")
    if extra is None:
        raise StepRecordError(
            f"the batch has no extra_fields, so no {key}: was it played by StepGymAgentLoop?"
        )
    missing = [i for i, e in enumerate(extra) if not isinstance(e, dict) or e.get(key) is None]
    if missing:
        raise StepRecordError(
            f"rows {missing[:5]} ({len(missing)} in all) have no {key} in extra_fields: every row must be played "
            "by StepGymAgentLoop (agent_name 'stepgym', or a subclass)"
        )
    return [e[key] for e in extra]


def _to_dataproto(td: Any) -> DataProto:
    """A TransferQueue batch as the padded ``DataProto`` verl's own step builds, with the non-tensor fields (uid,
    extra_fields) in ``non_tensor_batch`` and each row's prompt length."""
    uid = [str(u) for u in td["uid"]]
    extra = list(td["extra_fields"])
    prompt_len = td["prompts"].offsets().diff().tolist()
    tensors = td.exclude("uid", "extra_fields")
    data = DataProto(batch=tensors.to_padded_tensor())  # right-padded: each row's prompt is prompts[i, :len]
    data.non_tensor_batch["uid"] = _object_array(uid)
    data.non_tensor_batch["extra_fields"] = _object_array(extra)
    data.non_tensor_batch["stepgym_prompt_len"] = np.asarray(prompt_len, dtype=np.int64)
    return data


@register_trainer("stepgym_sync")
class StepGymPPOTrainerSync(StepGymTrainerMixin, PPOTrainerSync):
    """verl's synchronous v1 trainer (``trainer.v1.trainer_mode=stepgym_sync``) with stepgym's advantage step."""


@register_trainer("stepgym_colocate_async")
class StepGymPPOTrainerColocateAsync(StepGymTrainerMixin, PPOTrainerColocateAsync):
    """verl's colocated asynchronous v1 trainer with stepgym's advantage step."""


# ---------------------------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------------------------
def prepare(config: Any) -> None:
    """Write the task parquet files and the agent-loop YAML the config names, unless they exist already."""
    import pandas as pd
    from omegaconf import OmegaConf

    sg = config.stepgym
    env_kwargs = OmegaConf.to_container(sg.env_kwargs, resolve=True) if sg.get("env_kwargs") else {}
    for split, path in ((sg.train_split, config.data.train_files), (sg.val_split, config.data.val_files)):
        if not Path(str(path)).exists():
            Path(str(path)).parent.mkdir(parents=True, exist_ok=True)
            rows = _verl.verl_rows(
                sg.env_id, {**env_kwargs, "split": split}, system_prompt=sg.get("system_prompt")
            )
            with atomic_path(str(path)) as tmp:  # a crash never leaves a half-written dataset behind
                pd.DataFrame(rows).to_parquet(tmp)
    loop_yaml = Path(str(config.actor_rollout_ref.rollout.agent.agent_loop_config_path))
    loop_yaml.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "name": "stepgym",
        "_target_": "stepgym.integrations.verl.StepGymAgentLoop",
        "env_id": str(sg.env_id),  # env_kwargs (with the split) come from each dataset row
        "history_length": int(sg.history_length),
        "max_turn_tokens": int(sg.max_turn_tokens),
    }
    atomic_write_text(loop_yaml, OmegaConf.to_yaml(OmegaConf.create([entry])))


def _add_external_module(name: str) -> None:
    mods = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if name not in mods:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join([*mods, name])


def run(config: Any) -> None:
    """verl's ``main_ppo.main`` with the stepgym trainer: prepare the data, register this module in every verl
    process, validate the config as verl does, and run verl's v1 task runner."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    if not str(config.trainer.v1.trainer_mode).startswith("stepgym_"):
        raise StepRecordError(
            f"trainer.v1.trainer_mode={config.trainer.v1.trainer_mode!r} would run verl's own advantage step; "
            "use stepgym_sync or stepgym_colocate_async"
        )
    ShapeConfig.from_preset(str(config.stepgym.preset))  # an unknown preset fails here, before any GPU work
    prepare(config)
    _add_external_module(__name__)
    auto_set_device(config)
    validate_config(
        config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    run_ppo(config, task_runner_class=TaskRunnerV1)


def main() -> None:
    import hydra

    hydra.main(config_path="config", config_name="alfworld", version_base=None)(run)()


if __name__ == "__main__":
    main()


def _as_trajectory(value: Any) -> schema.Trajectory:
    """A recorded episode back from verl's row: ``AgentLoopOutput.as_dict`` (pydantic's ``model_dump``) turns the
    agent loop's :class:`~stepgym.schema.Trajectory` into nested dicts on its way to TransferQueue."""
    if isinstance(value, schema.Trajectory) or value is None:
        return value
    if not isinstance(value, dict) or "steps" not in value:
        raise StepRecordError(
            f"stepgym_trajectory is neither a Trajectory nor its dict form: {type(value).__name__}"
        )
    steps = [s if isinstance(s, schema.Step) else schema.Step(**s) for s in value["steps"]]
    return schema.Trajectory(
        str(value["task_id"]), value["initial_observation"], dict(value["initial_info"]), steps
    )
