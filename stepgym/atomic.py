"""Atomic file writes, with one durability rule for every file stepgym writes in place of another.

A write goes to a fresh temporary sibling (``.<name>.<pid>.<random>.tmp``, in the same folder so the rename
stays on one file system); then the temporary is fsynced (a folder: each file in it and the folder itself), renamed
over the target with ``os.replace`` and the target's folder is fsynced, so after a crash the target is either the
old content or the whole new one, never a mix, and the rename itself survives a power loss. An exception while
writing removes the temporary and leaves the old target untouched.

* :func:`atomic_write_bytes`, :func:`atomic_write_text`, :func:`atomic_write_json`: a whole file at once;
* :func:`atomic_path`: a temporary path (a file, or a folder with ``folder=True``) for writers that need one
  (a download stream, a parquet or index writer, a model's ``save_pretrained``);
* :func:`commit`: the rule itself, for a file already written elsewhere in the same folder tree;
* :func:`fsync_path`: fsync one file or folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "commit",
    "fsync_path",
]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a folder. A file's failure raises (its bytes may not be on disk); a folder's is skipped where
    the system does not support it (a folder's fsync only makes a rename in it durable)."""
    folder = Path(path).is_dir()
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if folder else 0))
    except OSError:
        if not folder:
            raise
        return  # e.g. folders cannot be opened on Windows
    try:
        os.fsync(fd)
    except OSError:
        if not folder:
            raise
    finally:
        os.close(fd)


def commit(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """fsync ``tmp`` (every file under it, for a folder), ``os.replace`` it to ``path``, fsync ``path``'s folder."""
    tmp, path = Path(tmp), Path(path)
    if tmp.is_dir():
        for sub in sorted(tmp.rglob("*")):
            fsync_path(sub)
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, folder: bool = False) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write, committed to ``path`` (:func:`commit`) when the block ends.

    With ``folder=True`` the temporary is an empty folder (``os.replace`` cannot replace a non-empty folder, so a
    caller that rebuilds one removes the old ``path`` first, or handles the ``OSError``). If the block raises, the
    temporary is removed and ``path`` is left as it was. ``path``'s folder is created if missing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    if folder:
        tmp.mkdir()
    try:
        yield tmp
        commit(tmp, path)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, keep_mode: bool = True) -> Path:
    """Replace ``path`` with ``data`` atomically; ``keep_mode`` keeps an existing file's permission bits."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
        if keep_mode and path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``text`` atomically (encoded with ``encoding``)."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, **dumps: Any) -> Path:
    """Replace ``path`` with ``json.dumps(obj, **dumps)`` atomically (UTF-8)."""
    return atomic_write_text(path, json.dumps(obj, **dumps))
