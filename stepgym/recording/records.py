"""Records: a :class:`~stepgym.schema.Trajectory` as the JSON records of a recording, and back.

One ``episode`` record per episode (task, outcome, hints, the initial annotations) and one ``step`` record per step
(the texts, the validity flags, the state and subgoal keys, the ARG labels, every ``stepgym/*`` annotation of the
step's info and the shapers' advantages). Values are made plain JSON here (numpy unwrapped, non-finite floats as
None, long texts cut), so the file writer (:mod:`stepgym.recording.episode_file`) writes them as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stepgym import schema

__all__ = ["RecordConfig", "episode_key", "episode_trajectory", "trajectory_records"]

_TRUNCATED = " …[truncated]"


@dataclass(frozen=True)
class RecordConfig:
    """What the trainer records for ``stepgym view`` (``<output_dir>/episodes.jsonl.gz``; docs/viewer.md)."""

    enabled: bool = True
    """Record the episodes of each training batch with their advantages."""
    budget_mb: float = 64.0
    """Stop recording once the compressed file reaches this many MB (a note in the file says where it stopped)."""
    every: int = 1
    """Record every N-th iteration (1: all)."""
    groups: int = 0
    """Groups recorded per recorded iteration (0: all); a sample drawn by the recorder's own seeded generator."""
    compare: tuple[str, ...] = ("grpo-alfworld", "gigpo-alfworld")
    """Other shapers (``ShapeConfig`` preset names) computed on the same batch for side-by-side comparison; a
    preset whose inputs the batch lacks (ProAS labels, teacher gaps) is skipped with a note."""
    max_text_chars: int = 4000
    """Longer observations / outputs are cut to this many characters (0: never cut)."""


# ---------------------------------------------------------------------------------------------------------------
# JSON-safe values
# ---------------------------------------------------------------------------------------------------------------
def _plain(value: Any, max_chars: int) -> Any:
    """``value`` as plain JSON data (numpy scalars and arrays unwrapped, non-finite floats as None, long text cut)."""
    if isinstance(value, str):
        return _cut(value, max_chars)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v, max_chars) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v, max_chars) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return _plain(tolist(), max_chars)
    return _cut(str(value), max_chars)


def _cut(text: str, max_chars: int) -> str:
    if max_chars > 0 and len(text) > max_chars:
        return text[:max_chars] + _TRUNCATED
    return text


def _annotations(info: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """Every ``stepgym/*`` schema key of an info dict (other keys are env internals and stay out)."""
    return {str(k): _plain(v, max_chars) for k, v in info.items() if str(k) in schema.KEYS}


# ---------------------------------------------------------------------------------------------------------------
# Trajectory → records
# ---------------------------------------------------------------------------------------------------------------
def trajectory_records(
    traj: schema.Trajectory,
    *,
    iteration: int,
    group: int,
    rollout: int,
    won: bool | None = None,
    peer_hindsight: str | None = None,
    advantages: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    step_extra: Sequence[Mapping[str, Any]] | None = None,
    hints: Mapping[Any, str] | None = None,
    error_steps: Sequence[int] | None = None,
    episode_extra: Mapping[str, Any] | None = None,
    max_text_chars: int = 4000,
) -> list[dict[str, Any]]:
    """One ``episode`` record and one ``step`` record per step of ``traj``.

    ``won`` defaults to :attr:`~stepgym.schema.Trajectory.success` (``WON``, else Search-QA's exact match, else a return of
    at least 1). ``advantages`` maps a shaper name to one ``{"step": float, "tokens": [float, ...]}`` per step
    (tokens optional); ``step_extra`` adds fields to each step record (the trainer's token texts, ARG labels),
    ``episode_extra`` to the episode record (an evaluation's token usage and time). ``hints`` / ``error_steps``
    override the ones a :class:`~stepgym.wrappers.hints.HintWrapper` left in the last info.
    """

    last = traj.steps[-1].info if traj.steps else traj.initial_info
    if hints is None:
        hints = last.get(schema.HINTS) or {}
    hints = {str(k): str(v) for k, v in hints.items()}
    if error_steps is None:
        error_steps = last.get(schema.ERROR_STEPS) or []
    errors = [int(t) for t in error_steps]
    if peer_hindsight is None:
        peer_hindsight = last.get(schema.PEER_HINDSIGHT)
    key = {"iteration": int(iteration), "group": int(group), "rollout": int(rollout)}
    ok = bool(traj.success if won is None else won)
    episode = _episode_record(traj, key, ok, peer_hindsight, hints, errors, max_text_chars)
    out: list[dict[str, Any]] = [{**episode, **_plain(dict(episode_extra or {}), max_text_chars)}]
    labels = last.get(schema.ARG_LABELS) or {}
    for t, st in enumerate(traj.steps):
        rec = _step_record(st, t, key, labels, hints, errors, max_text_chars)
        if step_extra is not None:
            rec.update(_plain(dict(step_extra[t]), max_text_chars))
        if advantages:
            rec["adv"] = {name: _plain(dict(vals[t]), 0) for name, vals in advantages.items()}
        out.append(rec)
    return out


def _episode_record(
    traj: schema.Trajectory,
    key: dict[str, int],
    won: bool,
    peer_hindsight: Any,
    hints: dict[str, str],
    errors: list[int],
    max_text_chars: int,
) -> dict[str, Any]:
    """The ``episode`` record of :func:`trajectory_records`, without its ``episode_extra``."""
    final_obs = traj.steps[-1].next_observation if traj.steps else traj.initial_observation
    return {
        "kind": "episode",
        **key,
        "task_id": str(traj.task_id),
        "task_type": traj.task_type,
        "goal": _cut(str(traj.initial_info.get(schema.GOAL, "")), max_text_chars),
        "won": won,
        "reward": _plain(traj.total_reward, 0),
        "steps": len(traj.steps),
        "peer_hindsight": None if peer_hindsight is None else _cut(str(peer_hindsight), max_text_chars),
        "error_steps": errors,
        "hints": {k: _cut(v, max_text_chars) for k, v in hints.items()},
        "initial": _annotations(traj.initial_info, max_text_chars),
        "final_observation": _cut(str(final_obs), max_text_chars),
        # an aborted episode says so (docs/failures.md); the key is absent on the others
        **({"aborted": True, "abort_cause": traj.abort_cause} if traj.aborted else {}),
    }


def _step_record(
    st: schema.Step,
    t: int,
    key: dict[str, int],
    labels: Mapping[str, Any],
    hints: dict[str, str],
    errors: list[int],
    max_text_chars: int,
) -> dict[str, Any]:
    """The ``step`` record of step ``t`` of :func:`trajectory_records`, without its extras and advantages."""
    info = st.info
    return {
        "kind": "step",
        **key,
        "t": t,
        "observation": _cut(str(st.observation), max_text_chars),
        "raw_output": _cut(str(info.get(schema.RAW_OUTPUT, st.action)), max_text_chars),
        "action": _plain(info.get(schema.PARSED_ACTION, st.action), max_text_chars),
        "reward": _plain(st.reward, 0),
        "terminated": bool(st.terminated),
        "truncated": bool(st.truncated),
        "format_valid": _plain(info.get(schema.FORMAT_VALID), 0),
        "admissible": _plain(info.get(schema.ADMISSIBLE), 0),
        "effective": _plain(info.get(schema.EFFECTIVE), 0),
        "state_key": _plain(info.get(schema.STATE_KEY), max_text_chars),
        "subgoal_key": _plain(info.get(schema.SUBGOAL_KEY), max_text_chars),
        "rea": _plain(_label(labels, "reasonable", t, info.get(schema.ARG_REASONABLE)), 0),
        "pa": _plain(_label(labels, "progress", t, info.get(schema.ARG_PROGRESS)), 0),
        "future_drift": _plain(_label(labels, "future_drift", t, None), 0),
        "hint": hints.get(str(t)),
        "error_step": t in errors,
        "info": _annotations(info, max_text_chars),
    }


def _label(labels: Mapping[str, Any], name: str, t: int, fallback: Any) -> Any:
    values = labels.get(name)
    if isinstance(values, list | tuple) and t < len(values):
        return values[t]
    return fallback


# ---------------------------------------------------------------------------------------------------------------
# Records → trajectory
# ---------------------------------------------------------------------------------------------------------------
def episode_key(record: Mapping[str, Any]) -> tuple[int, int, int]:
    """What identifies an episode in a recording: ``(iteration, group, rollout)``."""
    return int(record.get("iteration", 0)), int(record.get("group", 0)), int(record.get("rollout", 0))


def episode_trajectory(episode: Mapping[str, Any]) -> schema.Trajectory:
    """The :class:`~stepgym.schema.Trajectory` of an episode of :func:`read_recording`.

    Each step's ``action`` is its recorded ``raw_output`` (the model's whole turn), its ``next_observation`` the
    next step's ``observation`` (the episode's ``final_observation`` after the last step) and its ``info`` the
    recorded schema annotations. Complete only for a recording written with ``max_text_chars=0`` (an evaluation's):
    elsewhere long texts were cut, and env-internal info keys are never recorded.
    """
    rows = episode["steps"]
    final = episode.get("final_observation", "")
    steps = [
        schema.Step(
            s["observation"],
            s["raw_output"],
            float(s["reward"] or 0.0),
            rows[t + 1]["observation"] if t + 1 < len(rows) else final,
            bool(s["terminated"]),
            bool(s["truncated"]),
            dict(s.get("info") or {}),
        )
        for t, s in enumerate(rows)
    ]
    initial = rows[0]["observation"] if rows else final
    return schema.Trajectory(
        str(episode["task_id"]),
        initial,
        dict(episode.get("initial") or {}),
        steps,
        aborted=bool(episode.get("aborted", False)),
        abort_cause=episode.get("abort_cause"),
    )
