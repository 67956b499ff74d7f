"""A recording as the viewer needs it: a small index of groups (loaded at once) and each group's episodes (loaded
on demand), so a run of tens of thousands of steps opens instantly and the browser only ever holds one group.

Reading (header check, each episode once) is :func:`stepgym.recording.read_recording`'s. Groups are keyed
``"<file>:<iteration>:<group>"``; several recordings (a folder of runs) load side by side and
the ``method`` of each group comes from its file's ``run`` header, which is what the viewer's method filter uses.
What a damaged file could not give (:attr:`stepgym.recording.Recording.problems`) goes to ``meta["warnings"]``,
which the page shows above everything else and ``stepgym view`` prints: a partial recording is never shown as a
whole one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepgym.errors import DataNotFoundError
from stepgym.recording import find_recordings, read_recording

__all__ = ["RunData", "load_run"]


@dataclass
class RunData:
    """``meta`` (run-wide facts), ``index`` (one summary per group) and ``groups`` (id → full group)."""

    meta: dict[str, Any]
    index: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_bundle(self) -> dict[str, Any]:
        """Everything in one JSON-able object (what ``--export`` embeds)."""
        return {"meta": self.meta, "index": self.index, "groups": self.groups}


def _load_file(fi: int, path: Path, groups: dict[str, dict[str, Any]], meta: dict[str, Any]) -> None:
    rec = read_recording(path)
    head = rec.header
    method = str(head.get("method") or head.get("source") or path.parent.name)
    for name in head.get("shapers") or []:
        if name not in meta["shapers"]:
            meta["shapers"].append(name)
    meta["sources"].append({"file": str(path), "method": method, "source": head.get("source", "")})
    meta["notes"] += [f"{path.parent.name}: {note}" for note in rec.notes]
    meta["warnings"] += [f"{path}: {problem}" for problem in rec.problems]
    for ep in rec.episodes:
        gid = f"{fi}:{ep.get('iteration', 0)}:{ep.get('group', 0)}"
        grp = groups.get(gid)
        if grp is None:
            grp = groups[gid] = {
                "id": gid,
                "iteration": int(ep.get("iteration", 0)),
                "group": int(ep.get("group", 0)),
                "task_id": ep.get("task_id", ""),
                "task_type": ep.get("task_type", ""),
                "goal": ep.get("goal", ""),
                "method": method,
                "episodes": [],
            }
        grp["episodes"].append(ep)
        for step in ep["steps"]:
            for name in step.get("adv") or ():
                if name not in meta["shapers"]:  # a recorder whose header lists no shapers (GroupRecorder)
                    meta["shapers"].append(name)


def _summary(grp: dict[str, Any]) -> dict[str, Any]:
    eps = grp["episodes"]
    return {
        "id": grp["id"],
        "iteration": grp["iteration"],
        "group": grp["group"],
        "task_id": grp["task_id"],
        "task_type": grp["task_type"],
        "goal": grp["goal"],
        "method": grp["method"],
        "size": len(eps),
        "wins": sum(bool(e.get("won")) for e in eps),
        "steps": sum(len(e["steps"]) for e in eps),
        "max_steps": max((len(e["steps"]) for e in eps), default=0),
    }


def load_run(path: str | os.PathLike[str]) -> RunData:
    """Load a run folder, a recording file, or a folder of runs (each with its ``episodes.jsonl.gz``)."""
    files = find_recordings(path)
    if not files:
        raise DataNotFoundError(
            f"no episodes.jsonl.gz in {path} (nor one level below). Record one with `stepgym train` (on by "
            "default), `stepgym eval --model NAME` (an endpoint evaluation), `stepgym rollout --record DIR` or "
            "stepgym.recording.GroupRecorder."
        )
    meta: dict[str, Any] = {"shapers": [], "sources": [], "notes": [], "warnings": []}
    groups: dict[str, dict[str, Any]] = {}
    for fi, f in enumerate(files):
        _load_file(fi, f, groups, meta)
    for grp in groups.values():  # successes first, then rollout order
        grp["episodes"].sort(key=lambda e: (not e.get("won"), e.get("rollout", 0)))
    index = [_summary(g) for g in groups.values()]
    index.sort(key=lambda s: (s["method"], s["iteration"], s["group"], s["id"]))
    meta.update(
        title=str(Path(path).resolve().name),
        methods=sorted({s["method"] for s in index}),
        iterations=sorted({s["iteration"] for s in index}),
        task_types=sorted({s["task_type"] for s in index}),
        n_groups=len(index),
        n_episodes=sum(s["size"] for s in index),
        n_steps=sum(s["steps"] for s in index),
    )
    return RunData(meta, index, groups)
