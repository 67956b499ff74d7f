"""Episode recordings: the episodes a run trained on (or played), step by step, in an open and compact format.

The point is to *look* at credit assignment after the fact (``stepgym view``), so a recording keeps everything a
step was annotated with, next to the advantages the shapers gave it. Sampling (every N-th iteration, K groups per
iteration, drawn by the recorder's own seeded generator so the run's randomness is untouched) keeps big runs small.

The parts, one module each (their public names are re-exported here):

* :mod:`~stepgym.recording.records`: a :class:`~stepgym.schema.Trajectory` as ``episode`` and ``step`` records
  (:func:`trajectory_records`) and back (:func:`episode_trajectory`), and the trainer's :class:`RecordConfig`;
* :mod:`~stepgym.recording.episode_file`: the ``episodes.jsonl.gz`` file (format in docs/viewer.md): the writer
  that survives crashes and concurrent writers (:class:`EpisodeWriter`) and the readers (:func:`read_records`,
  :func:`read_recording`, :func:`find_recordings`);
* :mod:`~stepgym.recording.group`: :class:`GroupRecorder`, the few-line way for a :class:`~stepgym.GroupEnv` user
  to record groups.

The bundled trainer's hook, which adds every compared shaper's advantages to a recording, belongs to the trainer
(:mod:`stepgym.trainers.recorder`): this package sits below the shapers and imports none of them.
"""

from __future__ import annotations

from stepgym.recording.episode_file import (
    FILE_NAME,
    FORMAT,
    VERSION,
    EpisodeWriter,
    Recording,
    RecordingLockedError,
    find_recordings,
    read_recording,
    read_records,
)
from stepgym.recording.group import GroupRecorder
from stepgym.recording.records import (
    RecordConfig,
    RecordExtras,
    episode_key,
    episode_trajectory,
    trajectory_records,
)

__all__ = [
    "FILE_NAME",
    "FORMAT",
    "VERSION",
    "EpisodeWriter",
    "GroupRecorder",
    "RecordConfig",
    "RecordExtras",
    "Recording",
    "RecordingLockedError",
    "episode_key",
    "episode_trajectory",
    "find_recordings",
    "read_recording",
    "read_records",
    "trajectory_records",
]
