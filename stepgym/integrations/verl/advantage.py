"""stepgym's shapers as verl advantage estimators, and :func:`compute_step_advantage` for a whole ``DataProto``.

Estimators ``stepgym_grpo``, ``stepgym_drgrpo``, ``stepgym_gigpo``, ``stepgym_proas``, the graph bases'
``stepgym_graphgpo`` ... and one for every base registered in stepgym's shaper registry (:data:`ESTIMATORS`,
:func:`estimator_presets`) run :func:`stepgym.shapers.shape_advantages` on verl's tensors, through the adapter
skeleton's :func:`stepgym.steps.advantages.shape_rows`. verl 0.9's ``compute_advantage`` hands a custom
estimator only ``token_level_rewards``, ``response_mask``, ``index`` (the group uid) and ``config``: that is enough
for the GRPO-family bases (steps = the runs of 1s in ``response_mask``, each step's reward = the token-level rewards
from its first token to the next step's). GiGPO needs each step's state key and ProAS its ARG labels, which live in
the agent loop's extra fields (``non_tensor_batch["stepgym_steps"]``) and which verl does not pass to custom
estimators: :func:`compute_step_advantage` takes the whole ``DataProto`` for a trainer that calls it itself, and
the estimators accept ``non_tensor_batch=`` and refuse clearly without it. AHEAD and StepOPSD need a teacher's
log-prob gaps, which verl does not pass either: :func:`compute_step_advantage` takes them as ``delta=``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from stepgym import _deps
from stepgym.errors import StepRecordError
from stepgym.shapers import SHAPER_PRESETS, ShapeConfig, StepBatch, TokenLayout
from stepgym.shapers.registry import available as available_shapers
from stepgym.steps.advantages import Rows, RowSettings, TokenGaps, refuse_missing, rows_batch, shape_rows
from stepgym.steps.batch import StepBatchOptions, mask_runs
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE, INVALID_RULES

_deps.require("verl", "verl", what="the verl integration")
torch = _deps.require("torch", "verl")

from verl.trainer.ppo.core_algos import register_adv_est  # noqa: E402

__all__ = ["ESTIMATORS", "VerlShaping", "compute_step_advantage", "estimator_presets", "step_batch_from_verl"]

_NO_RECORDS = (
    "they are in the agent loop's extra field 'stepgym_steps', and verl 0.9's compute_advantage passes custom "
    "estimators only token_level_rewards, response_mask, index and config. Call "
    "stepgym.integrations.verl.compute_step_advantage(data, ...) from your trainer, or pass "
    "non_tensor_batch=data.non_tensor_batch"
)
_NO_TEACHER = "pass delta= (B, L); verl does not pass a teacher to advantage estimators"


def _rows(
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any],
    steps: Sequence[Sequence[Mapping[str, Any]]] | None,
) -> Rows:
    """verl's batch as the skeleton's rows: spans from the agent loop's records (steps the response_length cut
    off entirely dropped) or the mask's runs; each step's reward the token rewards from its first token to the
    next step's."""
    rewards_bl = _numpy(token_level_rewards, np.float64)
    mask_bl = _numpy(response_mask, np.int64)
    if rewards_bl.shape != mask_bl.shape or rewards_bl.ndim != 2:
        raise ValueError(
            f"token_level_rewards {rewards_bl.shape} and response_mask {mask_bl.shape} must be (B, L)"
        )
    b, length = mask_bl.shape
    if len(index) != b:
        raise StepRecordError(f"index has {len(index)} entries for {b} rows")
    if steps is not None and len(steps) != b:
        raise StepRecordError(f"steps has {len(steps)} rows for {b} rows")
    # an aborted episode (docs/failures.md): its records say so; its rows get advantage 0, out of every statistic
    cut = [bool(steps is not None and steps[i] and any(r.get("aborted") for r in steps[i])) for i in range(b)]
    spans, rewards, records = [], [], []
    for i in range(b):
        if steps is not None and steps[i] is None:
            raise StepRecordError(f"row {i} has no stepgym_steps: was it played by StepGymAgentLoop?")
        recs = list(steps[i]) if steps is not None else []
        row_spans = [(int(r["start"]), int(r["stop"])) for r in recs] if recs else mask_runs(mask_bl[i])
        if recs:  # steps the response_length cut off entirely hold no token; they take no part
            keep = [t for t, (s, e) in enumerate(row_spans) if e > s]
            recs = [recs[t] for t in keep]
            row_spans = [row_spans[t] for t in keep]
        if not row_spans and not cut[i]:
            raise StepRecordError(f"row {i} has no response token (no step to credit)")
        starts = [s for s, _ in row_spans] + [length]
        rewards.append(
            [
                float(rewards_bl[i, (0 if t == 0 else s) : starts[t + 1]].sum())
                for t, (s, _) in enumerate(row_spans)
            ]
        )
        spans.append(row_spans)
        records.append(recs)
    records_or_none = records if steps is not None else None
    return Rows(
        spans, list(index), length, records=records_or_none, rewards=rewards, aborted=cut, mask=mask_bl
    )


def step_batch_from_verl(
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any],
    steps: Sequence[Sequence[Mapping[str, Any]]] | None = None,
    *,
    invalid_rule: str = FORMAT_OR_INADMISSIBLE,
) -> StepBatch:
    """The shapers' :class:`StepBatch` for a verl batch.

    ``token_level_rewards`` and ``response_mask`` are verl's (B, L) tensors, ``index`` the group uid per row.
    Steps are the agent loop's spans (``steps[b][t]["start"/"stop"]``) when ``steps`` is given, else the runs of
    1s in ``response_mask``. A step's reward is the sum of ``token_level_rewards`` from its first token to the next
    step's first token (the last step: to the end), so whatever verl put in the rewards (the episode return at the
    last token, a KL penalty) is credited to the step it follows. With ``steps`` (the agent loop's
    ``stepgym_steps``): valid = format-valid (and admissible, ``invalid_rule="format_or_inadmissible"``), GiGPO's
    anchor = the state key the action was taken in, ProAS labels when every step has them.
    """
    if invalid_rule not in INVALID_RULES:
        raise ValueError(f"invalid_rule must be one of {INVALID_RULES}, got {invalid_rule!r}")
    rows = _rows(token_level_rewards, response_mask, index, steps)
    return rows_batch(rows, StepBatchOptions(invalid_rule=invalid_rule))


def _numpy(x: Any, dtype: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


@dataclasses.dataclass(frozen=True)
class VerlShaping:
    """What :func:`compute_step_advantage` shapes with besides verl's tensors."""

    config: ShapeConfig
    update_index: int = 0  #: completed policy updates (verl's ``global_steps - 1``)
    invalid_rule: str = FORMAT_OR_INADMISSIBLE
    delta: Any = None  #: the teacher − student log-prob gap (B, L), for AHEAD / StepOPSD
    delta_mask: Any = None  #: the tokens that have one
    target: TokenLayout | None = None  #: StepOPSD's target spans (default: every reply token)


def _shape(
    shaping: VerlShaping,
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any] | None,
    steps: Sequence[Any] | None,
) -> tuple[Any, Any]:
    if index is None:
        raise ValueError("stepgym's estimators need verl's group index (non_tensor_batch['uid'])")
    refuse_missing(
        shaping.config,
        records=_NO_RECORDS if steps is None else None,
        teacher=_NO_TEACHER if shaping.delta is None else None,
    )
    if shaping.invalid_rule not in INVALID_RULES:
        raise ValueError(f"invalid_rule must be one of {INVALID_RULES}, got {shaping.invalid_rule!r}")
    gaps = None
    if shaping.delta is not None:
        mask = None if shaping.delta_mask is None else _numpy(shaping.delta_mask, bool)
        gaps = TokenGaps(_numpy(shaping.delta, np.float64), mask, shaping.target)
    settings = RowSettings(
        shaping.config, StepBatchOptions(invalid_rule=shaping.invalid_rule), update_index=shaping.update_index
    )
    shaped = shape_rows(_rows(token_level_rewards, response_mask, list(index), steps), settings, gaps)
    mask = (
        response_mask
        if isinstance(response_mask, torch.Tensor)
        else torch.as_tensor(np.asarray(response_mask))
    )
    adv = torch.as_tensor(shaped.token_advantages, dtype=torch.float32, device=mask.device) * (mask > 0)
    return adv, adv.clone()


def compute_step_advantage(
    data: Any,
    shape_config: ShapeConfig | str = "gigpo-alfworld",
    *,
    update_index: int = 0,
    delta: Any = None,
    delta_mask: Any = None,
    target: TokenLayout | None = None,
    invalid_rule: str = FORMAT_OR_INADMISSIBLE,
) -> Any:
    """stepgym's per-token advantages for a verl ``DataProto``, written into ``data.batch["advantages"]`` and
    ``["returns"]`` (verl's convention) and returned.

    Reads ``token_level_rewards`` (or ``token_level_scores``), ``response_mask``, ``non_tensor_batch["uid"]`` and,
    when present, the agent loop's ``non_tensor_batch["stepgym_steps"]`` (needed for GiGPO and ProAS).
    ``delta``: the teacher − student log-prob gap (B, L) for AHEAD / StepOPSD presets (``delta_mask``: the tokens
    that have one; ``target``: StepOPSD's target spans, default every reply token). ``update_index``: completed
    policy updates (verl's ``global_steps - 1``).
    """
    cfg = ShapeConfig.from_preset(shape_config) if isinstance(shape_config, str) else shape_config
    keys = data.batch.keys()
    rewards = data.batch["token_level_rewards" if "token_level_rewards" in keys else "token_level_scores"]
    steps = data.non_tensor_batch.get("stepgym_steps")
    adv, ret = _shape(
        VerlShaping(cfg, update_index, invalid_rule, delta, delta_mask, target),
        rewards,
        data.batch["response_mask"],
        data.non_tensor_batch.get("uid"),
        None if steps is None else list(steps),
    )
    data.batch["advantages"] = adv
    data.batch["returns"] = ret
    if steps is not None:  # an aborted episode's rows leave verl's loss (docs/failures.md)
        cut = [bool(r) and any(x.get("aborted") for x in r) for r in steps]
        if any(cut):
            keep = torch.as_tensor([not c for c in cut], device=data.batch["response_mask"].device)
            data.batch["response_mask"] = data.batch["response_mask"] * keep[:, None].to(
                data.batch["response_mask"].dtype
            )
    return data


def _estimator(preset: str) -> Callable[..., tuple[Any, Any]]:
    shaping = VerlShaping(
        ShapeConfig.from_preset(preset) if preset in SHAPER_PRESETS else ShapeConfig(base=preset)
    )

    def estimator(
        token_level_rewards: Any,
        response_mask: Any,
        index: Sequence[Any] | None = None,
        config: Any = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> tuple[Any, Any]:
        steps = None if non_tensor_batch is None else non_tensor_batch.get("stepgym_steps")
        return _shape(
            shaping, token_level_rewards, response_mask, index, None if steps is None else list(steps)
        )

    estimator.__name__ = f"stepgym_{preset.replace('-', '_')}_advantage"
    estimator.__doc__ = f"verl advantage estimator: stepgym's shape_advantages with the {preset!r} preset."
    return estimator


def estimator_presets() -> dict[str, str]:
    """verl estimator name → the stepgym preset it runs, derived from the shaper registry: every registered base
    method, and ProAS, ``m`` becomes ``stepgym_m`` running the first preset of ``m``, ``m-alfworld``, ``m-gigpo``
    that exists (a base of your own with no preset runs ``ShapeConfig(base=m)``). Token stages (AHEAD, StepOPSD)
    need a teacher, which verl does not hand to estimators, and are not among them."""
    out = {}
    for name in [*available_shapers("base"), "proas"]:
        preset = next((p for p in (name, f"{name}-alfworld", f"{name}-gigpo") if p in SHAPER_PRESETS), name)
        out[f"stepgym_{name}"] = preset
    return out


#: verl estimator name → stepgym preset (:func:`estimator_presets`). Set ``algorithm.adv_estimator`` to the name.
ESTIMATORS: dict[str, str] = estimator_presets()

for _name, _preset in ESTIMATORS.items():
    register_adv_est(_name)(_estimator(_preset))
