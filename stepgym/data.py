"""Where benchmark data and caches live.

Resolution order for a benchmark's data root (first hit wins):

1. an explicit ``data_root=`` argument (env kwargs, CLI ``--data-root``);
2. ``$STEPGYM_DATA/<benchmark>`` (one setting for all benchmarks; e.g. ``STEPGYM_DATA=../shared/data``);
3. the benchmark's upstream variable, where one exists (``$ALFWORLD_DATA`` for ALFWorld);
4. the user cache, ``<cache>/data/<benchmark>``, which is where ``stepgym download <benchmark>`` puts the
   official release files.

The cache is ``$STEPGYM_CACHE``, else ``$XDG_CACHE_HOME/stepgym``, else ``~/.cache/stepgym``. Derived artefacts
(search indexes, embeddings) go to ``<cache>/indexes`` keyed by the hash of what they were built from, never next
to the data (which may be read-only).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from stepgym.errors import DataNotFoundError

__all__ = [
    "BENCHMARKS",
    "DATA_ENV_VAR",
    "cache_dir",
    "data_root",
    "file_sha256",
    "index_dir",
    "sample_tasks",
    "stratified_order",
]

DATA_ENV_VAR = "STEPGYM_DATA"
CACHE_ENV_VAR = "STEPGYM_CACHE"
BENCHMARKS = ("alfworld", "webshop", "searchqa")
_UPSTREAM_VARS = {"alfworld": "ALFWORLD_DATA"}


def cache_dir() -> Path:
    """The user cache root (created on demand by the code that writes into it)."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "stepgym"
    return Path.home() / ".cache" / "stepgym"


def index_dir(kind: str) -> Path:
    """Folder for derived artefacts of one kind (e.g. ``"webshop-bm25"``); created if missing."""
    path = cache_dir() / "indexes" / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def _candidates(benchmark: str, explicit: str | os.PathLike[str] | None) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    if explicit is not None:
        out.append(("data_root argument", Path(explicit).expanduser()))
        return out
    if os.environ.get(DATA_ENV_VAR):
        out.append((f"${DATA_ENV_VAR}/{benchmark}", Path(os.environ[DATA_ENV_VAR]).expanduser() / benchmark))
    upstream = _UPSTREAM_VARS.get(benchmark)
    if upstream and os.environ.get(upstream):
        out.append((f"${upstream}", Path(os.environ[upstream]).expanduser()))
    out.append(("user cache", cache_dir() / "data" / benchmark))
    return out


def data_root(
    benchmark: str, explicit: str | os.PathLike[str] | None = None, *, must_contain: str | None = None
) -> Path:
    """Return the data folder of ``benchmark``.

    ``must_contain`` is a relative path that a usable root holds (e.g. ``"json_2.1.1"``); candidates without it are
    skipped. Raises :class:`DataNotFoundError` naming every place looked at and the fix.
    """
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    tried = []
    for label, path in _candidates(benchmark, explicit):
        ok = path.is_dir() and (must_contain is None or (path / must_contain).exists())
        if ok:
            return path.resolve()
        tried.append(
            f"  {label}: {path} ({'exists but lacks ' + must_contain if path.is_dir() else 'missing'})"
        )
    raise DataNotFoundError(
        f"No {benchmark} data found. Looked in:\n" + "\n".join(tried) + "\n"
        f"Fix: run `stepgym download {benchmark}` (official release files into the user cache), or point "
        f"${DATA_ENV_VAR} at a folder holding `{benchmark}/`"
        + (
            f", or ${_UPSTREAM_VARS[benchmark]} at an existing {benchmark} data root"
            if benchmark in _UPSTREAM_VARS
            else ""
        )
        + "."
    )


def file_sha256(path: str | os.PathLike[str], *, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (used to key caches by the data they were built from)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def stratified_order(
    task_ids: Sequence[str], *, seed: int = 0, group: Callable[[str], str] | None = None
) -> list[str]:
    """Every task of ``task_ids`` in a seeded order whose every prefix is a stratified sample.

    The tasks of each group (task type, :func:`task_group`) are shuffled with ``random.Random(seed)`` and the k-th
    of a group of n is placed at ``(k + 0.5) / n``; sorting by place interleaves the groups in proportion (a
    systematic stratified sample: any prefix holds each type within one task of its share)."""
    key = group or task_group
    groups: dict[str, list[str]] = defaultdict(list)
    for tid in task_ids:
        groups[key(tid)].append(tid)
    rng = random.Random(seed)
    placed: list[tuple[float, str, int, str]] = []
    for g in sorted(groups):
        members = groups[g]
        rng.shuffle(members)
        placed += [((k + 0.5) / len(members), g, k, tid) for k, tid in enumerate(members)]
    return [tid for *_, tid in sorted(placed)]


def sample_tasks(
    task_ids: Sequence[str], limit: int, *, seed: int = 0, group: Callable[[str], str] | None = None
) -> list[str]:
    """``limit`` of ``task_ids`` (all when ``limit`` is 0 or covers them), stratified by task type and seeded, in
    the split's order.

    A split's fixed order is sorted by task id, and ALFWorld's ids start with the task type, so "the first N
    tasks" would all be one type. The sample is the first ``limit`` of :func:`stratified_order`: the same ``seed``
    always gives the same tasks, and a smaller ``limit`` gives a subset of a larger one (an evaluation resumed with
    a larger ``--limit`` keeps its finished episodes).
    """
    ids = list(task_ids)
    if limit <= 0 or limit >= len(ids):
        return ids
    chosen = set(stratified_order(ids, seed=seed, group=group)[:limit])
    return [t for t in ids if t in chosen]


def task_group(task_id: str) -> str:
    """The stratum of a task id in :func:`sample_tasks`: an ALFWorld id's task type
    (``<split>/<task_type>-<Obj>-.../trial_...``); '' (one stratum) for the other envs' ids."""
    parts = task_id.split("/")
    return parts[1].split("-", 1)[0] if len(parts) >= 3 else ""
