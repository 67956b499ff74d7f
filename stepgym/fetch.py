"""Fetching official release files into the user cache, safely.

Downloads go to a temporary file in the destination folder, are checked (size, optional sha256) and only then
renamed into place, so an interrupted download never leaves a half file that looks complete. Archives are
extracted member by member with path checks (no ``..``, no absolute paths, no symbolic links) into a temporary
folder, and only a complete extraction is moved into place (merged file by file into the target).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from stepgym.atomic import atomic_path, commit
from stepgym.errors import CorruptDataError, ServiceUnavailableError

__all__ = ["extract_zip", "fetch"]

_CHUNK = 1 << 20


def fetch(
    url: str,
    dest_dir: str | os.PathLike[str],
    *,
    filename: str | None = None,
    sha256: str | None = None,
    timeout: float = 60.0,
    progress: bool = True,
) -> Path:
    """Download ``url`` into ``dest_dir`` (atomically) and return the file's path.

    An existing file with the right sha256 (or any existing file when no sha256 is given) is reused.
    Raises :class:`ServiceUnavailableError` when the server cannot be reached or answers an error, and
    :class:`CorruptDataError` when the bytes do not match ``sha256``.
    """
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    name = filename or url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0] or "download"
    target = dest / name
    if target.exists() and (sha256 is None or _sha256(target) == sha256):
        return target
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as out:
            try:
                resp = urllib.request.urlopen(url, timeout=timeout)
            except (urllib.error.URLError, OSError) as exc:
                raise ServiceUnavailableError(f"could not download {url}: {exc}") from exc
            with resp:
                total = int(resp.headers.get("Content-Length") or 0) or None
                bar = _progress(total, name) if progress else None
                got = 0
                while block := resp.read(_CHUNK):
                    out.write(block)
                    got += len(block)
                    if bar is not None:
                        bar.update(len(block))
                if bar is not None:
                    bar.close()
        if total is not None and got != total:
            raise ServiceUnavailableError(f"download of {url} stopped after {got} of {total} bytes")
        if sha256 is not None and (digest := _sha256(tmp)) != sha256:
            raise CorruptDataError(f"{url}: sha256 {digest} does not match the expected {sha256}")
    return target


def extract_zip(
    archive: str | os.PathLike[str], dest_dir: str | os.PathLike[str], *, strip: str = ""
) -> Path:
    """Extract a zip into ``dest_dir`` safely; ``strip`` removes a leading folder from member names."""
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extract.", dir=dest))
    try:
        try:
            zf = zipfile.ZipFile(archive)
        except zipfile.BadZipFile as exc:
            raise CorruptDataError(f"{archive} is not a valid zip archive: {exc}") from exc
        with zf:
            for member in zf.infolist():
                name = member.filename
                if strip and name.startswith(strip):
                    name = name[len(strip) :]
                name = name.lstrip("/")
                if not name:
                    continue
                out = (staging / name).resolve()
                if not out.is_relative_to(staging.resolve()) or ".." in Path(name).parts:
                    raise CorruptDataError(
                        f"{archive}: member {member.filename!r} would escape the target folder"
                    )
                if (member.external_attr >> 16) & 0o170000 == 0o120000:
                    raise CorruptDataError(f"{archive}: member {member.filename!r} is a symbolic link")
                if member.is_dir():
                    out.mkdir(parents=True, exist_ok=True)
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
        # Merge into the target file by file (archives of one release share top folders, e.g. json_2.1.1/).
        for path in sorted(staging.rglob("*")):
            if path.is_file():
                final = dest / path.relative_to(staging)
                final.parent.mkdir(parents=True, exist_ok=True)
                commit(path, final)
        return dest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _progress(total: int | None, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False)
