"""The bundled trainer's rows: one row per step (verl-agent's layout), the step's tokens beside its record.

Every model turn is one training row (:class:`StepRow`): the rendered turn prompt and its token ids, the tokens the
model generated for that turn, and the step's record (:func:`stepgym.steps.record.step_annotations`, read once from
its infos by the collector). What the record says (reward, validity, the parsed action, the state keys, whether the
step ended the episode) is read from the record only, so a row holds nothing a record already holds.

Token ↔ step alignment is exact by construction: a row's response tokens are stored *separately* from its prompt
(``StepRow.response_ids``), every per-token array of the trainer is in **response coordinates** (``(B, R)``, column
j = the j-th generated token of row b, left aligned, padding after; :func:`response_matrix`), and a row is a step,
so a step's advantage can only land on that step's generated tokens. :func:`trainer_rows` hands the rows to
:func:`stepgym.steps.advantages.shape_rows` as :class:`~stepgym.steps.advantages.Rows` (step i's span is row i's
whole response), read under ``StepBatchOptions(layout="step_rows", success="won")``.

Prompt truncation policy (:func:`truncate_middle`, prompts longer than the budget): keep the first quarter of the
budget (the chat-template head and the task statement) and the last three quarters (the current observation, the
admissible actions and the instruction), dropping the middle (the oldest history).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from stepgym.errors import StepRecordError
from stepgym.shapers import StepBatch
from stepgym.steps.advantages import Rows, rows_batch
from stepgym.steps.batch import StepBatchOptions
from stepgym.steps.record import StepRecord

__all__ = [
    "TRAINER_LAYOUT",
    "StepRow",
    "response_matrix",
    "rows_step_batch",
    "trainer_rows",
    "truncate_middle",
]

#: How the bundled trainer's rows are read (besides its reward scale, validity rule and keying): one token row per
#: step, and ``success`` from each record's ``won``.
TRAINER_LAYOUT: dict[str, str] = {"layout": "step_rows", "success": "won"}


def truncate_middle(ids: Sequence[int], limit: int, head_share: float = 0.25) -> tuple[list[int], bool]:
    """Cut ``ids`` to ``limit`` tokens keeping ``head_share`` of the budget from the start, the rest from the end."""
    ids = list(ids)
    if limit <= 0 or len(ids) <= limit:
        return ids, False
    head = int(limit * head_share)
    tail = limit - head
    return ids[:head] + ids[len(ids) - tail :], True


@dataclass
class StepRow:
    """One step of one rollout: a training row.

    ``group`` indexes the task group in the batch, ``rollout`` the member of the group, ``traj`` the trajectory in
    the batch (``group * G + rollout``), ``t`` the step index inside the trajectory (0-based). The step itself
    (reward, validity, action, state keys, terminated) is ``record``; the rest is what only the trainer knows.
    """

    group: int
    rollout: int
    traj: int
    t: int
    task_id: str
    prompt: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    prompt_truncated: bool = False
    finished: bool = True  #: the response ended with EOS (False: cut at max_response_tokens)
    observation: str = ""  #: the raw observation the action was taken in (``anchor="observation"``'s key)
    next_observation: str = ""  #: the raw observation the step led to
    info: Mapping[str, Any] = field(default_factory=dict)  #: the env info returned for this step
    aborted: bool = (
        False  #: the episode was cut off by an infrastructure failure (docs/failures.md): no credit
    )
    #: The step's record (:func:`stepgym.steps.record.step_annotations`), read once from its infos by the
    #: collector; ``None`` only for a row made for scoring alone (it cannot be credited).
    record: StepRecord | None = None


def response_matrix(responses: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-aligned (B, R) token ids (padded with ``pad_id``) and their (B, R) bool mask."""
    width = max((len(r) for r in responses), default=0)
    ids = np.full((len(responses), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(responses), width), dtype=bool)
    for b, r in enumerate(responses):
        ids[b, : len(r)] = r
        mask[b, : len(r)] = True
    return ids, mask


def trainer_rows(rows: Sequence[StepRow], pad_id: int, labels: tuple[Any, Any] | None = None) -> Rows:
    """The rows (one per step, in (trajectory, step) order) as :func:`~stepgym.steps.advantages.shape_rows`' input:
    per trajectory its steps' spans (each step's whole response, in its own row), group, records, abort flag and
    the observation texts it went through; the (B, R) response mask; ``labels``: the caller's ARG labels."""
    _, mask = response_matrix([r.response_ids for r in rows], pad_id)
    trajs: list[list[StepRow]] = []
    for r in rows:
        if r.record is None:
            raise StepRecordError(
                f"row (traj {r.traj}, step {r.t}) has no step record: it cannot be credited"
            )
        if trajs and trajs[-1][-1].traj == r.traj:
            trajs[-1].append(r)
        else:
            trajs.append([r])
    return Rows(
        spans=[[(0, len(r.response_ids)) for r in tr] for tr in trajs],
        groups=[tr[0].group for tr in trajs],
        width=mask.shape[1],
        records=[[r.record for r in tr] for tr in trajs],  # type: ignore[misc]
        aborted=[tr[0].aborted for tr in trajs],
        mask=mask,
        observations=[[*(r.observation for r in tr), tr[-1].next_observation] for tr in trajs],
        labels=labels,
    )


def rows_step_batch(
    rows: Sequence[StepRow],
    *,
    reward_scale: float,
    invalid_rule: str,
    pad_id: int,
    anchor: Literal["state_key", "observation"] = "state_key",
) -> tuple[StepBatch, np.ndarray]:
    """The shapers' batch of the rows as the bundled trainer reads them (:data:`TRAINER_LAYOUT`, states keyed by
    ``anchor``, the records' ARG labels) and the (B, R) response mask, without shaping it."""
    r = trainer_rows(rows, pad_id)
    options = StepBatchOptions(reward_scale, invalid_rule, anchor, **TRAINER_LAYOUT)  # type: ignore[arg-type]
    return rows_batch(r, options), r.mask
