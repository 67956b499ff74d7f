"""The ALFWorld game index: which games a split holds, in a fixed order, with stable task ids.

The layout is what ``alfworld-download`` produces (``$ALFWORLD_DATA``)::

    json_2.1.1/<split>/<task_type>-<Obj>-<MRecep>-<Recep>-<scene>/trial_<id>/{game.tw-pddl, traj_data.json}

A game belongs to a split when its trial folder holds both files and ``game.tw-pddl`` says ``"solvable": true``;
folders whose path mentions ``movable`` or ``Sliced`` are left out. These are the rules of the official loader
(``AlfredTWEnv.collect_game_files``), so the counts match the papers' protocol (valid_seen 140, valid_unseen 134).
Unlike the official loader, which returns games in ``os.walk`` order (file-system dependent), the index is sorted,
so "game 17 of valid_seen" is the same game on every machine.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from stepgym.data import data_root
from stepgym.errors import CorruptDataError, DataNotFoundError

__all__ = ["SHORT_NAMES", "SPLITS", "TASK_TYPES", "GameRecord", "list_games", "resolve_root"]

SPLITS = ("train", "valid_seen", "valid_unseen")
#: The six ALFWorld task types (the prefix of its task ids' second part; the env's registration reads them here);
#: the papers call them Pick, Look, Clean, Heat, Cool, Pick2.
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SHORT_NAMES = dict(zip(TASK_TYPES, ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2"), strict=True))
_SPLIT_DIR = "json_2.1.1"


@dataclass(frozen=True)
class GameRecord:
    """One playable game: ``task_id`` is ``<split>/<game folder>/<trial folder>``."""

    task_id: str
    split: str
    task_type: str
    game_file: Path

    @property
    def traj_file(self) -> Path:
        return self.game_file.with_name("traj_data.json")

    def task_params(self) -> dict[str, str]:
        """``pddl_params`` of the game (object/receptacle/toggle targets) from its ``traj_data.json``."""
        params, _ = traj_task(self.traj_file)
        return {k: v for k, v in params.items() if isinstance(v, str)}


@functools.lru_cache(maxsize=256)
def traj_task(traj_file: Path) -> tuple[dict, str | None]:
    """``pddl_params`` and ``task_type`` of a ``traj_data.json``, read once per file (the env's targets and
    the expert's task both come from them; the file is ~80 KB). Callers only read the result."""
    try:
        traj = json.loads(Path(traj_file).read_bytes())  # bytes: json decodes UTF-8 itself, no text layer
        params = traj["pddl_params"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CorruptDataError(
            f"ALFWorld trajectory file {traj_file} is unreadable or lacks 'pddl_params' ({exc}). "
            "Re-download the data with `stepgym download alfworld`."
        ) from exc
    return params, traj.get("task_type")


def resolve_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The ALFWorld data root (see :mod:`stepgym.data` for the lookup order)."""
    return data_root("alfworld", explicit, must_contain=_SPLIT_DIR)


def _task_type_of(folder_name: str) -> str | None:
    prefix = folder_name.split("-", 1)[0]
    return prefix if prefix in TASK_TYPES else None


_SOLVABLE = re.compile(rb'"solvable"\s*:\s*true')


def _is_solvable(game_file: Path) -> bool:
    """The official loader's ``solvable`` check, done on the raw bytes (a full JSON parse of 3,553 train games
    would take tens of seconds); a file that is corrupt in any other way fails clearly when its game is loaded."""
    try:
        return _SOLVABLE.search(game_file.read_bytes()) is not None
    except OSError as exc:
        raise CorruptDataError(f"ALFWorld game file {game_file} cannot be read ({exc}).") from exc


@functools.lru_cache(maxsize=32)
def _index(root: Path, split: str) -> tuple[GameRecord, ...]:
    split_dir = root / _SPLIT_DIR / split
    if not split_dir.is_dir():
        raise DataNotFoundError(
            f"ALFWorld split folder {split_dir} is missing. Fix: run `stepgym download alfworld`, or point "
            "$STEPGYM_DATA (or $ALFWORLD_DATA) at a complete ALFWorld data root."
        )
    records = []
    for game_dir in sorted(p for p in split_dir.iterdir() if p.is_dir()):
        task_type = _task_type_of(game_dir.name)
        if task_type is None or "movable" in game_dir.name or "Sliced" in game_dir.name:
            continue
        for trial in sorted(p for p in game_dir.iterdir() if p.is_dir()):
            game_file = trial / "game.tw-pddl"
            if not (game_file.is_file() and (trial / "traj_data.json").is_file()):
                continue
            if not _is_solvable(game_file):
                continue
            records.append(GameRecord(f"{split}/{game_dir.name}/{trial.name}", split, task_type, game_file))
    if not records:
        raise DataNotFoundError(
            f"ALFWorld split folder {split_dir} holds no playable game (trial folders need game.tw-pddl and "
            "traj_data.json). Fix: run `stepgym download alfworld`."
        )
    return tuple(records)


def list_games(
    split: str, task_types: tuple[str, ...] | None = None, root: Path | None = None
) -> tuple[GameRecord, ...]:
    """The games of ``split`` (optionally only some task types), sorted by task id."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
    if task_types is not None:
        unknown = set(task_types) - set(TASK_TYPES) - set(SHORT_NAMES.values())
        if unknown:
            raise ValueError(
                f"unknown ALFWorld task types {sorted(unknown)}; expected names from {TASK_TYPES}"
            )
        long_names = {t if t in TASK_TYPES else _long_name(t) for t in task_types}
    games = _index(Path(root) if root is not None else resolve_root(), split)
    if task_types is not None:
        games = tuple(g for g in games if g.task_type in long_names)
        if not games:
            raise ValueError(f"split {split!r} has no game of task types {sorted(task_types)}")
    return games


def _long_name(short: str) -> str:
    return next(k for k, v in SHORT_NAMES.items() if v == short)
