# Over 400 lines: the one writer and the one tolerant reader of the recording format, kept side by side.
"""The recording file, ``episodes.jsonl.gz``: writing it safely, reading it back, each episode once.

The format is deliberately plain (documented in docs/viewer.md) so any tool can read it:

* gzip-compressed JSON Lines. Each write (one trainer iteration, one group, one ``stepgym rollout`` episode) is
  appended as its own gzip *member*, so a crash mid-write costs at most that member (:func:`read_records` stops
  cleanly at a truncated tail) and a resumed run appends to the same file;
* records are JSON objects with a ``kind``: one ``run`` header first, then per episode one ``episode`` record
  followed by one ``step`` record per step (made by :mod:`stepgym.recording.records`), and ``note`` records (e.g.
  "size budget reached");
* a size budget (compressed bytes) stops recording once reached.

The same file is the resumable log of an endpoint evaluation (:mod:`stepgym.llm_eval`), so the rules that make a
log resumable live here, once, for every writer: each member is written in one ``write`` under an OS lock and
fsynced; a writer reopening a file drops a torn last member (what a killed process leaves) before appending, and
refuses a file damaged *before* its last member; a resumed trainer first cuts what the interrupted run wrote after
its last checkpoint (:func:`truncate_after`), so every iteration is recorded once; :func:`read_recording` gives
each episode once (the first record of an ``(iteration, group, rollout)`` wins) and says what it could not read
(:attr:`Recording.problems`: a damaged or cut-short part, records whose keys are not integers) instead of
returning a silently partial recording.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepgym.errors import CorruptDataError, FormatVersionError, StepGymError
from stepgym.recording.records import _plain, episode_key

__all__ = [
    "FILE_NAME",
    "FORMAT",
    "VERSION",
    "EpisodeWriter",
    "Recording",
    "RecordingLockedError",
    "find_recordings",
    "read_recording",
    "read_records",
    "truncate_after",
]

FORMAT = "stepgym-episodes"
VERSION = 1
FILE_NAME = "episodes.jsonl.gz"


# ---------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------
class RecordingLockedError(StepGymError, RuntimeError):
    """Another process holds the recording open for exclusive writing (a running evaluation)."""


class EpisodeWriter:
    """Appends records to an ``episodes.jsonl.gz`` file, one gzip member per :meth:`write`, within a byte budget.

    The ``run`` header (``header`` plus format and version) is written when the file is new; an existing file of
    the same format is appended to (a resumed run) after a torn last member is cut off (see :func:`_repair`).
    Each member goes out in one ``write`` on an ``O_APPEND`` descriptor under an OS lock (``flock``) and is
    fsynced, so a crash loses at most the member being written and concurrent writers never interleave.
    ``exclusive`` holds the lock for the writer's lifetime (until :meth:`close`), so a second writer fails at once
    with :class:`RecordingLockedError` (the lock dies with the process). Once the file's size reaches
    ``budget_bytes`` (None: no budget) a ``note`` record is written and every later :meth:`write` is refused
    (returns False).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: Mapping[str, Any],
        *,
        budget_bytes: int | None = None,
        exclusive: bool = False,
    ) -> None:
        self.path = Path(path)
        self.budget_bytes = None if budget_bytes is None else int(budget_bytes)
        self.full = False
        self._held: int | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if exclusive:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise RecordingLockedError(
                    f"another process is writing {self.path}; wait for it to finish"
                ) from None
            self._held = fd
        try:
            with self._locked() as fd:
                if os.fstat(fd).st_size > 0:
                    _repair(self.path, fd)
                if os.fstat(fd).st_size == 0:
                    head = {"kind": "run", "format": FORMAT, "version": VERSION, **_plain(dict(header), 0)}
                    _append_member(fd, [head])
            self.full = self._over_budget()
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        if self._held is not None:
            yield self._held
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def _over_budget(self) -> bool:
        return self.budget_bytes is not None and self.path.stat().st_size >= self.budget_bytes

    def write(self, records: Sequence[Mapping[str, Any]]) -> bool:
        """Append ``records`` as one member; False (nothing written) once the budget is spent."""
        if self.full:
            return False
        with self._locked() as fd:
            _append_member(fd, records)
            if self._over_budget():
                self.full = True
                _append_member(
                    fd, [{"kind": "note", "message": f"size budget of {self.budget_bytes} bytes reached"}]
                )
        return True

    def close(self) -> None:
        """Release the exclusive lock (nothing else is held open between writes)."""
        if self._held is not None:
            os.close(self._held)
            self._held = None

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _append_member(fd: int, records: Iterable[Mapping[str, Any]]) -> None:
    """One gzip member holding ``records``, written with one ``write`` call and fsynced."""
    data = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records)
    member = gzip.compress(data.encode("utf-8"), mtime=0)
    n = os.write(fd, member)
    if n != len(member):  # a full disk: do not leave a torn member behind for the next writer to find
        raise OSError(f"short write ({n} of {len(member)} bytes)")
    os.fsync(fd)


_CHUNK = 1 << 16


class _Damaged(Exception):
    """A gzip member that is cut short or does not decode (bad data, bad CRC); ``start`` is its offset."""

    def __init__(self, start: int, why: str) -> None:
        super().__init__(why)
        self.start = start


def _members(f: Any) -> Iterator[tuple[int, bytes]]:
    """``(end offset, decompressed bytes)`` of each gzip member of the binary file ``f``, in order, each checked
    whole (gzip's CRC and length); the first member that is cut short or damaged raises :class:`_Damaged`."""
    pending, offset = b"", 0  # offset: where `pending` starts in the file
    while True:
        if not pending:
            pending = f.read(_CHUNK)
            if not pending:
                return
        start = offset
        d = zlib.decompressobj(wbits=31)
        parts = []
        while True:
            try:
                parts.append(d.decompress(pending))
            except zlib.error as exc:
                raise _Damaged(start, str(exc)) from None
            if d.eof:
                offset += len(pending) - len(d.unused_data)
                pending = d.unused_data
                break
            offset += len(pending)
            pending = f.read(_CHUNK)
            if not pending:
                raise _Damaged(start, "the last gzip member is cut short")
        yield offset, b"".join(parts)


def _intact_member_at(raw: bytes, start: int) -> bool:
    try:
        next(_members(io.BytesIO(memoryview(raw)[start:])), None)
    except _Damaged:
        return False
    return True


def _repair(path: Path, fd: int) -> None:
    """Check an existing recording before appending: a foreign or newer file is refused
    (:class:`~stepgym.errors.FormatVersionError`); a torn last member (a writer killed mid-write) is cut off; damage
    followed by an intact member is corruption, not a torn write, and raises
    :class:`~stepgym.errors.CorruptDataError` (cutting there would lose the records after it)."""
    good = 0
    with open(path, "rb") as f:
        try:
            for good, _ in _members(f):  # noqa: B007 - the end of the last intact member is what counts
                pass
        except _Damaged:
            pass
    if good > 0:
        with contextlib.closing(read_records(path)) as records:
            _check_header(path, next(records, None))
    if good == os.fstat(fd).st_size:
        return
    raw = path.read_bytes()  # only when something is wrong
    if good == 0 and not raw.startswith(_MAGIC):
        _check_header(path, None)  # not gzip at all: somebody else's file
    later = raw.find(_MAGIC, good + 1)
    while later != -1:
        if _intact_member_at(raw, later):
            raise CorruptDataError(
                f"{path} is damaged at byte {good} (records follow the damage); move it away or cut it by hand"
            )
        later = raw.find(_MAGIC, later + 1)
    os.ftruncate(fd, good)
    os.fsync(fd)


_MAGIC = b"\x1f\x8b\x08"


def _check_header(path: Path, rec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``run`` header of a recording; a foreign file or a newer version is refused."""
    if rec is None or rec.get("kind") != "run" or rec.get("format") != FORMAT:
        raise FormatVersionError(f"{path} is not a {FORMAT} recording (no run header); move it away first")
    if int(rec.get("version", 0)) > VERSION:
        raise FormatVersionError(
            f"{path} was written in format version {rec['version']} by a newer stepgym; this one reads <= {VERSION}"
        )
    return dict(rec)


def _record_iteration(rec: Mapping[str, Any]) -> int | None:
    """The iteration an ``episode`` / ``step`` record belongs to (None: another kind, or no integer iteration)."""
    it = rec.get("iteration")
    if rec.get("kind") not in ("episode", "step") or isinstance(it, bool) or not isinstance(it, int):
        return None
    return it


def truncate_after(path: str | os.PathLike[str], iteration: int) -> int:
    """Cut recording ``path`` before its first gzip member holding a record of an iteration after ``iteration``
    (what a run killed after its last checkpoint wrote; the resumed run writes those iterations again), and return
    how many records were cut. Members are written one per iteration, in order, so nothing of an earlier iteration
    is lost. A missing file is 0; a damaged member stops the walk (the writer's own repair rule applies to it)."""
    p = Path(path)
    if not p.is_file():
        return 0
    fd = os.open(p, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cut, dropped = None, 0
        with open(p, "rb") as f:
            start = 0
            try:
                for end, data in _members(f):
                    recs = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
                    if cut is None and any(
                        (_record_iteration(r) or 0) > iteration for r in recs if isinstance(r, dict)
                    ):
                        cut = start
                    if cut is not None:
                        dropped += len(recs)
                    start = end
            except (_Damaged, UnicodeDecodeError, json.JSONDecodeError):
                pass  # the writer's repair cuts a torn tail and refuses earlier damage
        if cut is not None:
            os.ftruncate(fd, cut)
            os.fsync(fd)
        return dropped
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------------
def read_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every record of a recording (``.jsonl.gz`` or plain ``.jsonl``), in order.

    Only whole gzip members count (each is checked against its CRC and length), so a record is never half of
    what a writer wrote: a truncated or damaged member (a run killed while writing) ends the iteration quietly,
    as does a partial last line of a plain file; a file that is not JSON Lines at all raises
    :class:`~stepgym.errors.CorruptDataError`.
    """
    p = Path(path)
    if p.suffix != ".gz":
        with open(p, encoding="utf-8") as f:
            yield from _parse_lines(p, f, 0)
        return
    n_ok = 0
    with open(p, "rb") as f:
        try:
            for _, data in _members(f):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise CorruptDataError(f"{p}: a record is not UTF-8 text ({exc})") from exc
                for rec in _parse_lines(p, text.splitlines(keepends=True), n_ok):
                    n_ok += 1
                    yield rec
        except _Damaged as exc:
            if n_ok == 0:
                raise CorruptDataError(f"{p} is not a readable gzip file ({exc})") from exc
            # a torn or damaged tail: the records of intact members are all there is


def _parse_lines(p: Path, lines: Iterable[str], n_before: int) -> Iterator[dict[str, Any]]:
    for n, line in enumerate(lines, n_before + 1):
        if not line.endswith("\n"):
            return  # a partial last line (plain .jsonl)
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorruptDataError(f"{p}: line {n} is not JSON ({exc.msg})") from exc
        if not isinstance(rec, dict):
            raise CorruptDataError(f"{p}: line {n} is not a JSON object")
        yield rec


@dataclass
class Recording:
    """A recording read back: its ``run`` ``header``, its ``episodes`` in file order (each an ``episode`` record
    whose ``steps`` is the list of its ``step`` records and ``n_steps`` the recorded count), its ``notes``, and its
    ``problems``: one line per part that could not be read (a damaged or cut-short part, records skipped for keys
    that are not integers), each saying how many records were skipped and why. Empty for an intact file."""

    path: Path
    header: dict[str, Any]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _salvage(raw: bytes, problems: list[str]) -> Iterator[bytes]:
    """The decompressed data of every intact gzip member of ``raw``. A damaged member is skipped up to the next
    intact member (one line in ``problems``: where, how many bytes, at least how many records it held, why); a
    cut-short last member (a writer killed mid-write) is one line too."""
    pos = 0
    while pos < len(raw):
        try:
            for _, data in _members(io.BytesIO(memoryview(raw)[pos:])):
                yield data
            return
        except _Damaged as exc:
            start, why = pos + exc.start, str(exc)
        nxt = raw.find(_MAGIC, start + 1)
        while nxt != -1 and not _intact_member_at(raw, nxt):
            nxt = raw.find(_MAGIC, nxt + 1)
        stop = len(raw) if nxt == -1 else nxt
        lines = _partial_lines(raw[start:stop])
        held = f"at least {lines} record(s)" if lines else "its records"
        if nxt == -1:
            problems.append(
                f"the last {stop - start} bytes (from byte {start}) are cut short or damaged ({why}): {held} "
                "skipped (a writer stopped mid-write?)"
            )
            return
        problems.append(f"{stop - start} damaged bytes at byte {start} ({why}): {held} skipped")
        pos = nxt


def _partial_lines(chunk: bytes) -> int:
    """How many whole lines a damaged member still decompresses to before its damage (a lower bound of the
    records it held)."""
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(chunk)
    except zlib.error:
        return 0
    return out.count(b"\n")


def _key(rec: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """:func:`episode_key`, or None when the record's iteration, group or rollout is not an integer."""
    vals = [rec.get("iteration", 0), rec.get("group", 0), rec.get("rollout", 0)]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in vals):
        return None
    return episode_key(rec)


def _all_records(p: Path, problems: list[str]) -> Iterator[dict[str, Any]]:
    if p.suffix != ".gz":
        yield from read_records(p)
        return
    raw = p.read_bytes()
    first = True
    n_ok = 0
    for data in _salvage(raw, problems):
        first = False
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append("a part is not UTF-8 text: its records skipped")
            continue
        for rec in _parse_lines(p, text.splitlines(keepends=True), n_ok):
            n_ok += 1
            yield rec
    if first and raw:
        raise CorruptDataError(f"{p} is not a readable gzip file ({problems[0] if problems else 'empty'})")


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a whole recording, each episode once: a second ``episode`` record with the same :func:`episode_key`
    (a run that recorded an episode again after a resume) and its steps are ignored, so the first one wins.

    Nothing is dropped silently: a damaged part is skipped up to the next intact one and a cut-short tail ends the
    file, each with a line in :attr:`Recording.problems`; so are ``episode`` / ``step`` records whose iteration,
    group or rollout is not an integer (counted, one line). A file without a ``run`` header or of a newer version
    raises :class:`~stepgym.errors.FormatVersionError`.
    """
    p = Path(path)
    problems: list[str] = []
    records = _all_records(p, problems)
    rec = Recording(p, _check_header(p, next(records, None)))
    seen: set[tuple[int, int, int]] = set()
    current: dict[str, Any] | None = None
    bad_keys = 0
    for r in records:
        kind = r.get("kind")
        if kind in ("episode", "step"):
            key = _key(r)
            if key is None:
                bad_keys += 1
                if kind == "episode":
                    current = None
                continue
        if kind == "episode":
            current = None if key in seen else {**r, "n_steps": r.get("steps", 0), "steps": []}
            if current is not None:
                seen.add(key)
                rec.episodes.append(current)
        elif kind == "step":
            if current is not None and key == _key(current):
                current["steps"].append(r)
        elif kind == "note":
            rec.notes.append(str(r.get("message", "")))
        # a second `run` header (a resumed writer) and unknown kinds are skipped
    if bad_keys:
        problems.append(
            f"{bad_keys} episode/step record(s) skipped: their iteration, group or rollout is not an integer"
        )
    rec.problems = problems
    return rec


def find_recordings(path: str | os.PathLike[str]) -> list[Path]:
    """The recording files a path names: the file itself, ``<dir>/episodes.jsonl.gz``, or those one level down
    (a folder of runs)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if (p / FILE_NAME).is_file():
        return [p / FILE_NAME]
    return sorted(p.glob(f"*/{FILE_NAME}")) if p.is_dir() else []
