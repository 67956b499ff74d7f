"""The step record: one typed record per step, built once from the step's ``info``, read by every trainer.

The info dicts that say *why* a step was good or bad (format-valid / admissible / effective, the true state key,
ARG labels, won) are flattened once per step by :func:`step_annotations` into a :class:`StepRecord`, keyed by short
stable names (:data:`STEP_FIELDS`). The bundled trainer (its collector keeps one per step), every adapter (TRL,
verl, SkyRL, OpenRLHF, verifiers: a user's reward function reads ``steps[t]["admissible"]`` whatever the trainer)
and :func:`stepgym.steps.batch.build_step_batch` read the same record, and validity is read from it by one rule
(:func:`valid_flags`). A value the env or its wrappers did not annotate is ``None`` (never guessed).

Low in the layers (it reads only :mod:`stepgym.schema`), so the trainer and the adapters above it share it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from stepgym import schema

__all__ = [
    "ABORTED_STEP",
    "FORMAT_OR_INADMISSIBLE",
    "INVALID_RULES",
    "STEP_FIELDS",
    "StepRecord",
    "arg_labels",
    "episode_annotations",
    "step_annotations",
    "valid_flags",
]


class StepRecord(TypedDict):
    """One step, as :func:`step_annotations` reads it from the step's info (a plain ``dict`` at run time, so it
    travels through any trainer's metadata and JSON). ``None``: the env or its wrappers did not say."""

    reward: float  #: the env reward (unscaled)
    action: str | None  #: the parsed env command (``None``: the text interface found none)
    format_valid: bool | None  #: ``schema.FORMAT_VALID``
    admissible: bool | None  #: ``schema.ADMISSIBLE``
    effective: bool | None  #: ``schema.EFFECTIVE``
    state_key: str | None  #: ``schema.STATE_KEY`` of the state the action was taken in
    next_state_key: str | None  #: ``schema.STATE_KEY`` of the state it led to
    won: bool | None  #: ``schema.WON`` after the step
    terminated: bool  #: the step ended the episode before its step limit
    value_gain: float | None  #: ``schema.VALUE_GAIN`` (``ValueWrapper``)
    arg_reasonable: bool | None  #: ``schema.ARG_REASONABLE``
    arg_progress: bool | None  #: ``schema.ARG_PROGRESS``


#: The fields of a per-step record, in order.
STEP_FIELDS: tuple[str, ...] = tuple(StepRecord.__annotations__)

_FLAGS = {
    "format_valid": schema.FORMAT_VALID,
    "admissible": schema.ADMISSIBLE,
    "effective": schema.EFFECTIVE,
    "arg_reasonable": schema.ARG_REASONABLE,
    "arg_progress": schema.ARG_PROGRESS,
}


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _key(value: Any) -> str | None:
    return None if value is None else str(value)


def step_annotations(
    before: Mapping[str, Any],
    action: Any,
    reward: float,
    after: Mapping[str, Any],
    *,
    terminated: bool = False,
) -> StepRecord:
    """The record of one step (the one place a step's info becomes its record): ``before`` is the info the action
    was chosen from, ``after`` the step's info.

    ``action`` is the parsed env command when a text interface recorded one (``None`` for an unparsable reply),
    else the action as sent; ``state_key`` is the state the action was taken in, ``next_state_key`` the one it led
    to (GiGPO's anchor states and the ARG's vertices; the graph methods' edges); ``terminated`` whether the step
    ended the episode before its step limit (RewardFlow's rule for the last state); ``value_gain`` the step's true
    gain when a :class:`~stepgym.values.ValueWrapper` labelled it (the ``oracle`` ceiling), else ``None``.
    """
    parsed = after.get(schema.PARSED_ACTION, action)  # None when a text interface found no action
    rec: dict[str, Any] = {
        "reward": float(reward),
        "action": None if parsed is None else str(parsed),
        "state_key": _key(before.get(schema.STATE_KEY)),
        "next_state_key": _key(after.get(schema.STATE_KEY)),
        "won": _flag(after.get(schema.WON)),
        "terminated": bool(terminated),
        "value_gain": None if after.get(schema.VALUE_GAIN) is None else float(after[schema.VALUE_GAIN]),
    }
    rec.update({name: _flag(after.get(key)) for name, key in _FLAGS.items()})
    return StepRecord(**{name: rec[name] for name in STEP_FIELDS})  # type: ignore[typeddict-item]


def episode_annotations(
    trajectory: schema.Trajectory, steps: Sequence[StepRecord] | None = None
) -> dict[str, Any]:
    """The record of a (possibly unfinished) episode: task id, outcome, return and one record per step (``steps``:
    the step records already read while the episode was played, one per step; else read from the trajectory)."""
    infos = trajectory.infos()
    if steps is None:
        steps = [
            step_annotations(infos[t], s.action, s.reward, s.info, terminated=s.terminated)
            for t, s in enumerate(trajectory.steps)
        ]
    elif len(steps) != len(trajectory.steps):
        raise ValueError(f"{len(steps)} step records for {len(trajectory.steps)} steps")
    steps = [StepRecord(**r) for r in steps]  # copies: the caller's records stay its own
    last = infos[-1]
    return {
        "task_id": trajectory.task_id,
        "won": trajectory.success,
        "return": trajectory.total_reward,
        "n_steps": len(steps),
        "terminated": bool(trajectory.steps and trajectory.steps[-1].terminated),
        "truncated": bool(trajectory.steps and trajectory.steps[-1].truncated),
        "arg_labels": last.get(schema.ARG_LABELS),
        "aborted": trajectory.aborted,  # cut off by an infrastructure failure (docs/failures.md)
        "abort_cause": trajectory.abort_cause,
        "steps": steps,
    }


#: The record that stands in for a step of an aborted episode that has no record (the reply the env never
#: answered): its values are never read, since the shapers leave an aborted episode's rows out.
ABORTED_STEP: StepRecord = {name: None for name in STEP_FIELDS} | {  # type: ignore[assignment]
    "reward": 0.0, "won": False, "terminated": False,
}  # fmt: skip

#: The default validity rule: format-valid and not known to be inadmissible (:func:`valid_flags`).
FORMAT_OR_INADMISSIBLE = "format_or_inadmissible"

#: How a step record's validity is read for the invalid-action penalty (every trainer's ``invalid_rule``).
INVALID_RULES: tuple[str, ...] = ("format", FORMAT_OR_INADMISSIBLE)


def valid_flags(records: Sequence[Mapping[str, Any]], invalid_rule: str) -> np.ndarray:
    """Each record's validity for the invalid-action penalty: format-valid (``invalid_rule="format"``) or
    format-valid and not known to be inadmissible (``"format_or_inadmissible"``; an env that does not annotate
    admissibility counts as admissible)."""
    if invalid_rule not in INVALID_RULES:
        raise ValueError(f"invalid_rule must be one of {INVALID_RULES}, got {invalid_rule!r}")
    strict = invalid_rule == FORMAT_OR_INADMISSIBLE
    return np.asarray(
        [bool(r["format_valid"]) and not (strict and r["admissible"] is False) for r in records], dtype=bool
    )


def arg_labels(records: Sequence[Mapping[str, Any]], field: str) -> np.ndarray | None:
    """ProAS's label ``field`` (``"arg_reasonable"`` / ``"arg_progress"``) per record, only when every record has
    both labels (else ``None``)."""
    labelled = bool(records) and all(
        r.get("arg_reasonable") is not None and r.get("arg_progress") is not None for r in records
    )
    return np.asarray([r[field] for r in records], dtype=bool) if labelled else None
