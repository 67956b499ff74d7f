"""Episode recordings: the episodes a run trained on (or played), step by step, in an open and compact format.

The point is to *look* at credit assignment after the fact (``stepgym view``), so a recording keeps everything a
step was annotated with, next to the advantages the shapers gave it. The format is deliberately plain (documented
in docs/viewer.md) so any tool can read it:

* one file, ``episodes.jsonl.gz``: gzip-compressed JSON Lines. Each write (one trainer iteration, one group, one
  ``stepgym rollout`` episode) is appended as its own gzip *member*, so a crash mid-write costs at most that
  member (:func:`read_records` stops cleanly at a truncated tail) and a resumed run appends to the same file;
* records are JSON objects with a ``kind``: one ``run`` header first, then per episode one ``episode`` record
  followed by one ``step`` record per step, and ``note`` records (e.g. "size budget reached");
* a size budget (compressed bytes) stops recording once reached, and sampling (every N-th iteration, K groups per
  iteration, drawn by the recorder's own seeded generator so the run's randomness is untouched) keeps big runs small.

:class:`EpisodeWriter` writes; :func:`trajectory_records` turns a :class:`~stepgym.schema.Trajectory` into
records; :class:`GroupRecorder` is the few-line way for a :class:`~stepgym.GroupEnv` user to record groups; the
trainer's hook lives in :mod:`stepgym.recording.trainer`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepgym import schema
from stepgym.errors import CorruptDataError, FormatVersionError

__all__ = [
    "FILE_NAME",
    "FORMAT",
    "VERSION",
    "EpisodeWriter",
    "GroupRecorder",
    "RecordConfig",
    "find_recordings",
    "read_records",
    "trajectory_records",
]

FORMAT = "stepgym-episodes"
VERSION = 1
FILE_NAME = "episodes.jsonl.gz"
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
    max_text_chars: int = 4000,
) -> list[dict[str, Any]]:
    """One ``episode`` record and one ``step`` record per step of ``traj``.

    ``advantages`` maps a shaper name to one ``{"step": float, "tokens": [float, ...]}`` per step (tokens
    optional); ``step_extra`` adds fields to each step record (the trainer's token texts, ARG labels).
    ``hints`` / ``error_steps`` override the ones a :class:`~stepgym.wrappers.hints.HintWrapper` left in the
    last info.
    """
    last = traj.steps[-1].info if traj.steps else traj.initial_info
    ok = bool(traj.won if won is None else won)
    if hints is None:
        hints = last.get(schema.HINTS) or {}
    hints = {str(k): str(v) for k, v in hints.items()}
    if error_steps is None:
        error_steps = last.get(schema.ERROR_STEPS) or []
    errors = [int(t) for t in error_steps]
    labels = last.get(schema.ARG_LABELS) or {}
    if peer_hindsight is None:
        peer_hindsight = last.get(schema.PEER_HINDSIGHT)
    key = {"iteration": int(iteration), "group": int(group), "rollout": int(rollout)}
    out: list[dict[str, Any]] = [
        {
            "kind": "episode",
            **key,
            "task_id": str(traj.task_id),
            "task_type": str(traj.initial_info.get(schema.TASK_TYPE, "")),
            "goal": _cut(str(traj.initial_info.get(schema.GOAL, "")), max_text_chars),
            "won": ok,
            "reward": _plain(traj.total_reward, 0),
            "steps": len(traj.steps),
            "peer_hindsight": None if peer_hindsight is None else _cut(str(peer_hindsight), max_text_chars),
            "error_steps": errors,
            "hints": {k: _cut(v, max_text_chars) for k, v in hints.items()},
            "initial": _annotations(traj.initial_info, max_text_chars),
        }
    ]
    for t, st in enumerate(traj.steps):
        info = st.info
        rec: dict[str, Any] = {
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
        if step_extra is not None:
            rec.update(_plain(dict(step_extra[t]), max_text_chars))
        if advantages:
            rec["adv"] = {name: _plain(dict(vals[t]), 0) for name, vals in advantages.items()}
        out.append(rec)
    return out


def _label(labels: Mapping[str, Any], name: str, t: int, fallback: Any) -> Any:
    values = labels.get(name)
    if isinstance(values, list | tuple) and t < len(values):
        return values[t]
    return fallback


# ---------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------
class EpisodeWriter:
    """Appends records to an ``episodes.jsonl.gz`` file, one gzip member per :meth:`write`, within a byte budget.

    The ``run`` header (``header`` plus format and version) is written when the file is new; an existing file of
    the same format is appended to (a resumed run). Once the file's size reaches ``budget_bytes`` a ``note``
    record is written and every later :meth:`write` is refused (returns False).
    """

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, Any], *, budget_bytes: int) -> None:
        self.path = Path(path)
        self.budget_bytes = int(budget_bytes)
        self.full = False
        if self.path.is_file() and self.path.stat().st_size > 0:
            with contextlib.closing(read_records(self.path)) as records:
                first = next(records, None)
            if first is None or first.get("format") != FORMAT:
                raise FormatVersionError(f"{self.path} exists and is not a {FORMAT} file; move it away first")
            self.full = self._over_budget()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append([{"kind": "run", "format": FORMAT, "version": VERSION, **_plain(dict(header), 0)}])

    def _over_budget(self) -> bool:
        return self.path.stat().st_size >= self.budget_bytes

    def _append(self, records: Iterable[Mapping[str, Any]]) -> None:
        data = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records)
        with open(self.path, "ab") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(data.encode("utf-8"))

    def write(self, records: Sequence[Mapping[str, Any]]) -> bool:
        """Append ``records`` as one member; False (nothing written) once the budget is spent."""
        if self.full:
            return False
        self._append(records)
        if self._over_budget():
            self.full = True
            self._append([{"kind": "note", "message": f"size budget of {self.budget_bytes} bytes reached"}])
        return True


class GroupRecorder:
    """Record :class:`~stepgym.GroupEnv` groups (or plain trajectories) for ``stepgym view``.

    Usage::

        rec = GroupRecorder("runs/mine", meta={"env_id": "StepGym/ALFWorld-v0"})
        for it in range(n):
            ...play the group to the end...
            rec.record_group(group_env, iteration=it)

    ``advantages`` (optional) maps a shaper name to a per-trajectory list of per-step values (or of
    ``{"step": x, "tokens": [...]}`` dicts), in the group's rollout order.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        meta: Mapping[str, Any] | None = None,
        budget_mb: float = 64.0,
        max_text_chars: int = 4000,
    ) -> None:
        p = Path(path)
        if p.suffix not in (".gz", ".jsonl"):
            p = p / FILE_NAME
        header = {"source": "group", **dict(meta or {})}
        self.writer = EpisodeWriter(p, header, budget_bytes=int(budget_mb * 2**20))
        self.max_text_chars = max_text_chars
        self._next_group: dict[int, int] = {}

    @property
    def path(self) -> Path:
        return self.writer.path

    def record_trajectories(
        self,
        trajectories: Sequence[schema.Trajectory],
        *,
        iteration: int = 0,
        group: int | None = None,
        successes: Sequence[bool] | None = None,
        hindsight: Sequence[str | None] | None = None,
        advantages: Mapping[str, Sequence[Sequence[Any]]] | None = None,
    ) -> bool:
        """Record the trajectories of one group (G rollouts of one task); False once the budget is spent."""
        if group is None:
            group = self._next_group.get(iteration, 0)
        self._next_group[iteration] = max(self._next_group.get(iteration, 0), group + 1)
        records: list[dict[str, Any]] = []
        for r, traj in enumerate(trajectories):
            adv = None
            if advantages:
                adv = {name: [_as_adv(v) for v in per_traj[r]] for name, per_traj in advantages.items()}
            records += trajectory_records(
                traj,
                iteration=iteration,
                group=group,
                rollout=r,
                won=None if successes is None else bool(successes[r]),
                peer_hindsight=None if hindsight is None else hindsight[r],
                advantages=adv,
                max_text_chars=self.max_text_chars,
            )
        return self.writer.write(records)

    def record_group(self, group_env: Any, *, iteration: int = 0, advantages: Any = None) -> bool:
        """Record a finished :class:`~stepgym.GroupEnv` group."""
        return self.record_trajectories(
            group_env.trajectories,
            iteration=iteration,
            successes=group_env.successes(),
            hindsight=group_env.peer_hindsight(),
            advantages=advantages,
        )


def _as_adv(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {"step": float(value)}


# ---------------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------------
def read_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every record of a recording (``.jsonl.gz`` or plain ``.jsonl``), in order.

    A truncated last gzip member or last line (a run killed while writing) ends the iteration quietly; a file
    that is not JSON Lines at all raises :class:`~stepgym.errors.CorruptDataError`.
    """
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    n_ok = 0
    with opener(p, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        while True:
            try:
                line = f.readline()
            except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
                if n_ok == 0:
                    raise CorruptDataError(f"{p} is not a readable gzip file ({exc})") from exc
                return
            if not line:
                return
            if not line.endswith("\n"):
                return  # a partial last line
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorruptDataError(f"{p}: line {n_ok + 1} is not JSON ({exc.msg})") from exc
            if not isinstance(rec, dict):
                raise CorruptDataError(f"{p}: line {n_ok + 1} is not a JSON object")
            n_ok += 1
            yield rec


def find_recordings(path: str | os.PathLike[str]) -> list[Path]:
    """The recording files a path names: the file itself, ``<dir>/episodes.jsonl.gz``, or those one level down
    (a folder of runs)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if (p / FILE_NAME).is_file():
        return [p / FILE_NAME]
    return sorted(p.glob(f"*/{FILE_NAME}")) if p.is_dir() else []
