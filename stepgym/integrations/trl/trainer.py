"""``StepGRPOTrainer``: TRL's ``GRPOTrainer`` with stepgym's per-token advantages, over the global batch of
every process; and ``step_batch_from_rollouts``, the ``StepBatch`` of GroupRollout completions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stepgym import _deps
from stepgym.errors import StepRecordError
from stepgym.shapers import ShapeConfig, StepBatch, TokenLayout, shape_advantages
from stepgym.steps.batch import REWARD_SCALE, StepBatchOptions, build_step_batch
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE

_deps.require("trl", "trl", what="the TRL integration")
torch = _deps.require("torch", "trl")

from trl import GRPOTrainer  # noqa: E402

from stepgym.integrations.trl._common import gather_all  # noqa: E402
from stepgym.integrations.trl.rollout import GroupRollout  # noqa: E402
from stepgym.integrations.trl.teacher import TeacherGaps, TokenGapFn  # noqa: E402


def step_batch_from_rollouts(
    steps: Sequence[Sequence[Mapping[str, Any]]],
    *,
    length: int,
    reward_scale: float = REWARD_SCALE,
    invalid_rule: str = FORMAT_OR_INADMISSIBLE,
) -> StepBatch:
    """The shapers' :class:`StepBatch` for a batch of :class:`GroupRollout` completions.

    ``steps[b]`` is completion b's ``stepgym_steps`` (its rows in step order); one token row per completion,
    ``length`` its padded completion length. Group = the step records' ``group``; trajectory = the completion;
    reward = env reward × ``reward_scale``; valid = format-valid (``invalid_rule="format"``) or format-valid and
    admissible (default, as the bundled trainer); GiGPO's anchor = the state the action was taken in; ProAS labels
    from ``ARGWrapper`` when every step has them; a completion whose records say ``aborted`` (docs/failures.md)
    is carried as ``StepBatch.aborted``.
    """
    groups = []
    for b, rows in enumerate(steps):
        if not rows:
            raise ValueError(f"completion {b} has no steps")
        k = {int(r["group"]) for r in rows}
        if len(k) != 1:
            raise StepRecordError(f"completion {b}'s steps name several groups {sorted(k)}")
        groups.append(k.pop())
    return build_step_batch(
        [[(int(r["start"]), int(r["stop"])) for r in rows] for rows in steps],
        groups,
        length,
        records=[list(rows) for rows in steps],
        options=StepBatchOptions(reward_scale, invalid_rule),
        aborted=[any(r.get("aborted") for r in rows) for rows in steps],
    )


class StepGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with stepgym's per-token advantages instead of TRL's one advantage per sequence.

    Use it with ``rollout_func=GroupRollout(...)``. After TRL has generated and scored a batch, the steps the
    rollout recorded become a :class:`~stepgym.shapers.StepBatch` (:func:`step_batch_from_rollouts`) and
    :func:`~stepgym.shapers.shape_advantages` computes the (B, L) token advantages with ``shape_config``
    (a :class:`~stepgym.shapers.ShapeConfig` or a preset name such as ``"gigpo-alfworld"`` or
    ``"proas-gigpo"``); they replace ``inputs["advantages"]`` and TRL's loss, which accepts (B, L) advantages,
    optimises them. ``update_index`` is the number of completed optimizer steps.

    The env's per-step rewards drive the advantages; TRL's reward functions are still computed and logged but do
    not enter them. ProAS needs ARG labels (wrap the env with ``ARGWrapper``); AHEAD and StepOPSD need teacher
    log-prob gaps: by default :class:`TeacherGaps` scores them as the bundled trainer does; any other
    ``token_gaps(trainer, inputs, outputs, batch) -> {"delta": (B, L), "delta_mask": ..., "target": TokenLayout}``
    (arrays over the completion tokens) replaces it. ``last_batch`` / ``last_shaped`` keep the last batch's
    :class:`~stepgym.shapers.StepBatch` and result (of the global batch).

    Under ``accelerate launch --num_processes N`` every process gathers all processes' step records (and teacher
    gaps), shapes the global batch once, the same way on every process, and keeps its own rows, so the advantages
    equal those of one process on the same global batch even when a group straddles two processes.
    """

    def __init__(
        self,
        *args: Any,
        shape_config: ShapeConfig | str = "gigpo-alfworld",
        reward_scale: float = REWARD_SCALE,
        invalid_rule: str = FORMAT_OR_INADMISSIBLE,
        token_gaps: TokenGapFn | None = None,
        **kwargs: Any,
    ) -> None:
        self.shape_config = (
            ShapeConfig.from_preset(shape_config) if isinstance(shape_config, str) else shape_config
        )
        if token_gaps is None and self.shape_config.token_reweight in ("ahead", "stepopsd"):
            token_gaps = TeacherGaps()
        if self.shape_config.token_reweight is not None and token_gaps is None:
            raise ValueError(
                f"token_reweight={self.shape_config.token_reweight!r} needs teacher log-prob gaps: pass token_gaps="
            )
        self.reward_scale = float(reward_scale)
        self.invalid_rule = invalid_rule
        self.token_gaps = token_gaps
        super().__init__(*args, **kwargs)
        if not isinstance(self.rollout_func, GroupRollout):
            raise ValueError(
                "StepGRPOTrainer needs rollout_func=GroupRollout(...): only it records which tokens belong to "
                "which env step (TRL's environment_factory tool loop keeps no such record)"
            )
        self.last_batch: StepBatch | None = None
        self.last_shaped = None

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        width = int(out["completion_ids"].shape[1])
        rows, offset, batch = self._global_batch(inputs, width)
        mode = "train" if self.model.training else "eval"
        if self.token_gaps is not None:
            local = dict(self.token_gaps(self, inputs, out, batch))
            for key, value in _gather_gaps(self, local, rows, batch.layout.shape[1]).items():
                setattr(batch, key, value)
            for key, value in getattr(self.token_gaps, "last_metrics", {}).items():
                self._metrics[mode][key].append(float(value))
        shaped = shape_advantages(batch, self.shape_config, update_index=int(self.state.global_step))
        self.last_batch, self.last_shaped = batch, shaped
        mine = shaped.token_advantages[offset : offset + len(inputs), :width]
        adv = torch.as_tensor(
            np.ascontiguousarray(mine), dtype=torch.float32, device=out["completion_ids"].device
        )
        out["advantages"] = adv
        aborted = [any(r.get("aborted") for r in x["stepgym_steps"]) for x in inputs]
        if any(aborted):  # an aborted episode's row leaves TRL's loss (docs/failures.md)
            keep = torch.as_tensor([not a for a in aborted], device=out["completion_mask"].device)
            out["completion_mask"] = out["completion_mask"] * keep[:, None].to(out["completion_mask"].dtype)
        trained = (out["completion_mask"] * out.get("tool_mask", 1)).bool()
        self._metrics[mode]["stepgym/token_advantage_abs_mean"].append(float(adv[trained].abs().mean()))
        self._metrics[mode]["stepgym/steps_per_episode"].append(float(len(batch.rewards)) / sum(rows))
        return out

    def _global_batch(self, inputs: list[dict[str, Any]], width: int) -> tuple[list[int], int, StepBatch]:
        """The whole batch's :class:`StepBatch`, over every process's rows (gathered in process order, the order of
        TRL's global batch); with it, each process's row count and this process's first row.

        Every process builds and later shapes the same global batch (the shapers are deterministic numpy), so no
        broadcast is needed; each then keeps its own rows."""
        for i, x in enumerate(inputs):
            if not x.get("stepgym_steps"):
                raise StepRecordError(
                    f"row {i} of process {self.accelerator.process_index} has no stepgym_steps: StepGRPOTrainer "
                    "needs GroupRollout's step records on every row"
                )
        local = [x["stepgym_steps"] for x in inputs]
        parts = gather_all(self, {"steps": local, "width": width})
        rows = [len(p["steps"]) for p in parts]
        if len(set(rows)) != 1:
            raise StepRecordError(
                f"processes hold {rows} rows: TRL slices the global batch into equal parts, so rows were lost"
            )
        steps = [r for p in parts for r in p["steps"]]
        _check_groups(steps, self.num_generations if self.model.training else self.num_generations_eval)
        batch = step_batch_from_rollouts(
            steps,
            length=max(int(p["width"]) for p in parts),
            reward_scale=self.reward_scale,
            invalid_rule=self.invalid_rule,
        )
        return rows, int(self.accelerator.process_index) * rows[0], batch


def _check_groups(steps: Sequence[Sequence[Mapping[str, Any]]], g: int) -> None:
    """Global row b must belong to group b // G, and every group must hold G rows: else a group lost rows or TRL's
    ``num_generations`` is not the group size the rollout played."""
    for b, recs in enumerate(steps):
        k = {int(s["group"]) for s in recs}
        if k != {b // g}:
            raise StepRecordError(
                f"global row {b} belongs to group {sorted(k)}, expected {b // g} with num_generations={g}: the "
                "rollout's groups do not match TRL's (a group split or lost rows, or num_generations is not the "
                "group size)"
            )
    if len(steps) % g:
        raise StepRecordError(f"the last group holds {len(steps) % g} of num_generations={g} rows")


def _gather_gaps(trainer: Any, local: dict[str, Any], rows: list[int], width: int) -> dict[str, Any]:
    """Every process's ``token_gaps`` result, stacked over the global batch on a grid ``width`` wide: ``delta``
    padded with NaN, ``delta_mask`` with False, ``target`` renumbered (steps of later processes come after)."""
    if int(trainer.accelerator.num_processes) == 1 and all(
        np.shape(v)[-1] == width if k != "target" else v.shape[1] == width for k, v in local.items()
    ):
        return local
    packed = {
        k: (v.token_step, v.n_steps, v.step_row) if k == "target" else np.asarray(v) for k, v in local.items()
    }
    parts = gather_all(trainer, packed)
    keys = set(parts[0])
    if any(set(p) != keys for p in parts):
        raise StepRecordError(
            f"token_gaps returned different keys on different processes: {[sorted(p) for p in parts]}"
        )
    out: dict[str, Any] = {}

    def widen(a: np.ndarray, fill: Any) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)

    for key in keys:
        if key == "target":
            ts, n, sr, row0 = [], 0, [], 0
            for p, r in zip(parts, rows, strict=True):
                t, k, s = p[key]
                ts.append(widen(np.where(t >= 0, t + n, -1), -1))
                sr.append(np.asarray(s) + row0)
                n, row0 = n + int(k), row0 + r
            out[key] = TokenLayout(
                np.concatenate(ts).astype(np.int64), n, np.concatenate(sr).astype(np.int64)
            )
        else:
            fill = False if parts[0][key].dtype == bool else np.nan
            out[key] = np.concatenate([widen(p[key], fill) for p in parts])
    return out
