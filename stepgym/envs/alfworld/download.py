"""``stepgym download alfworld``: ALFWorld's official release archives into the user cache.

The same two archives ``alfworld-download`` (alfworld 0.4.2) fetches for the text games, from the ALFWorld
GitHub releases: ``json_2.1.1_json.zip`` (``traj_data.json`` per trial) and ``json_2.1.2_tw-pddl.zip``
(``game.tw-pddl`` per trial). The PDDL-only archive and the MaskRCNN detector (vision agents) are not needed
by the text env and are skipped. ``logic/alfred.{pddl,twl2}`` are copied from the installed alfworld package,
as upstream does. ``base_url`` replaces ``https://github.com/alfworld/alfworld/releases/download`` (a mirror,
or a local server in tests).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from stepgym.data import cache_dir
from stepgym.errors import DataNotFoundError
from stepgym.fetch import extract_zip, fetch

__all__ = ["ARCHIVES", "OFFICIAL_BASE_URL", "download"]

OFFICIAL_BASE_URL = "https://github.com/alfworld/alfworld/releases/download"
ARCHIVES = ("0.2.2/json_2.1.1_json.zip", "0.4.0/json_2.1.2_tw-pddl.zip")


def download(
    dest: str | os.PathLike[str] | None = None, base_url: str | None = None, *, keep_archives: bool = False
) -> Path:
    """Download and unpack ALFWorld's text-game data; returns the data root (ready for ``$ALFWORLD_DATA``)."""
    root = Path(dest) if dest is not None else cache_dir() / "data" / "alfworld"
    root.mkdir(parents=True, exist_ok=True)
    base = (base_url or OFFICIAL_BASE_URL).rstrip("/")
    for rel in ARCHIVES:
        archive = fetch(f"{base}/{rel}", root / ".archives")
        extract_zip(archive, root)
        if not keep_archives:
            archive.unlink()
    _copy_logic(root)
    if not (root / "json_2.1.1").is_dir():
        raise DataNotFoundError(f"the ALFWorld archives unpacked into {root} hold no json_2.1.1 folder")
    return root


def _copy_logic(root: Path) -> None:
    try:
        from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH
    except ImportError:  # the games embed their own domain and grammar; logic/ is a convenience copy
        return
    logic = root / "logic"
    logic.mkdir(exist_ok=True)
    for src in (ALFRED_PDDL_PATH, ALFRED_TWL2_PATH):
        shutil.copyfile(src, logic / Path(src).name)
