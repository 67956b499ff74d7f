"""The retrieval corpus: wiki-18 passages in Search-R1/FlashRAG's jsonl format.

One passage per line, ``{"id": ..., "contents": "<title>\\n<text>"}`` (Search-R1's ``wiki-18.jsonl``, FlashRAG's
corpora, and ``wiki18_subset/corpus.jsonl`` here); ``{"id", "title", "text"}`` lines are accepted too and joined the
same way. ``.jsonl.gz`` is read directly. Every derived artefact (BM25 and FAISS indexes, embeddings) is keyed by the
sha256 of the corpus file, so a user's own corpus in the same format just works and never collides with ours.

The corpus also answers the oracle's question "which passages hold a gold answer?" (:meth:`Corpus.answer_passages`)
with one normalised concatenation of all passages searched with ``str.find``; on the 9,648-passage subset that is
about 2 ms a question.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from stepgym.data import data_root, file_sha256
from stepgym.envs.searchqa.protocol import normalize_answer
from stepgym.errors import CorruptDataError, DataNotFoundError

__all__ = ["DEFAULT_CORPUS", "Corpus", "default_corpus_path", "load_corpus", "read_jsonl"]

#: The corpus kept with the data, relative to the searchqa data root.
DEFAULT_CORPUS = "wiki18_subset/corpus.jsonl"
#: Where ``stepgym download searchqa --corpus`` puts the full wiki-18 (relative to the data root).
FULL_CORPUS = "wiki18/wiki-18.jsonl.gz"

_SEP = "\x00"


class Corpus:
    """Passages with ids, loaded from a jsonl file. ``contents[i]`` is ``title + "\\n" + text``."""

    def __init__(self, path: Path, ids: list[str], contents: list[str], sha256: str):
        self.path = path
        self.ids = ids
        self.contents = contents
        self.sha256 = sha256
        self.index_of = {pid: i for i, pid in enumerate(ids)}
        self._norm: str | None = None
        self._starts: list[int] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"Corpus({str(self.path)!r}, {len(self)} passages, sha256={self.sha256[:12]})"

    @property
    def key(self) -> str:
        """The cache key of everything derived from this corpus."""
        return self.sha256[:16]

    def title(self, i: int) -> str:
        return self.contents[i].partition("\n")[0]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Corpus:
        """Read and validate a corpus file; a malformed line raises :class:`CorruptDataError` naming it."""
        p = Path(path).expanduser()
        if not p.is_file():
            raise DataNotFoundError(
                f'corpus file {p} does not exist. Fix: pass corpus= a jsonl file of {{"id", "contents"}} lines, '
                "or run `stepgym download searchqa` (the data root holds wiki18_subset/corpus.jsonl)."
            )
        ids: list[str] = []
        contents: list[str] = []
        for lineno, rec in read_jsonl(p):
            pid, text = _passage(rec, p, lineno)
            ids.append(pid)
            contents.append(text)
        if not ids:
            raise CorruptDataError(
                f"corpus file {p} holds no passages. Fix: re-download it or point corpus= elsewhere."
            )
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise CorruptDataError(
                f"corpus file {p}: passage id {dup!r} appears more than once; ids must be unique."
            )
        return cls(p.resolve(), ids, contents, file_sha256(p))

    # -- the oracle's answer index -------------------------------------------------------------------------------
    def _ensure_norm(self) -> None:
        with self._lock:
            if self._norm is not None:
                return
            parts, starts, pos = [], [], 0
            for c in self.contents:
                n = f" {normalize_answer(c)} "
                starts.append(pos)
                parts.append(n)
                pos += len(n) + 1
            self._starts = starts
            self._norm = _SEP.join(parts)

    def answer_passages(self, golden_answers: Iterable[str], limit: int = 50) -> list[int]:
        """Indices of passages in which a gold answer occurs as a whole-token span (sorted, at most ``limit``)."""
        self._ensure_norm()
        assert self._norm is not None
        found: set[int] = set()
        for gold in golden_answers:
            g = normalize_answer(str(gold))
            if not g:
                continue
            needle = f" {g} "
            start = self._norm.find(needle)
            while start != -1 and len(found) < limit:
                found.add(bisect.bisect_right(self._starts, start) - 1)
                start = self._norm.find(needle, start + 1)
        return sorted(found)[:limit]


_CORPUS_FIX = "Fix: re-download it (`stepgym download searchqa`) or rebuild it."


def read_jsonl(
    path: Path, fix: str = _CORPUS_FIX, unreadable: tuple[type[BaseException], ...] = (OSError,)
) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a UTF-8 jsonl file (gzip-compressed when its name ends
    in ``.gz``). A line that is not a JSON object, bad bytes, a truncated gzip or an ``unreadable`` error is a
    :class:`~stepgym.errors.CorruptDataError` that names the file and line and ends with ``fix``."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CorruptDataError(
                        f"{path}, line {lineno}: not valid JSON ({exc.msg}). The file is truncated or not a jsonl "
                        f"file. {fix}"
                    ) from exc
                if not isinstance(rec, dict):
                    raise CorruptDataError(
                        f"{path}, line {lineno}: expected a JSON object, got {type(rec).__name__}. {fix}"
                    )
                yield lineno, rec
    except (*unreadable, EOFError, UnicodeDecodeError) as exc:  # truncated gzip, bad bytes
        raise CorruptDataError(
            f"{path} cannot be read as UTF-8 jsonl{' (gzip)' if path.suffix == '.gz' else ''}: {exc}. {fix}"
        ) from exc


def _passage(rec: dict, path: Path, lineno: int) -> tuple[str, str]:
    pid = rec.get("id")
    if pid is None or isinstance(pid, (dict, list)):
        raise CorruptDataError(f'{path}, line {lineno}: a passage needs an "id" (string or number).')
    if isinstance(rec.get("contents"), str):
        return str(pid), rec["contents"]
    if isinstance(rec.get("text"), str):
        return str(pid), f"{rec.get('title', '')}\n{rec['text']}"
    raise CorruptDataError(
        f'{path}, line {lineno}: a passage needs "contents" (title + newline + text) or "title"/"text" strings.'
    )


def default_corpus_path(root: str | os.PathLike[str] | None = None) -> Path:
    """The corpus to use when none is given: the kept wiki-18 subset, else a downloaded full wiki-18."""
    base = data_root("searchqa", root)
    for rel in (DEFAULT_CORPUS, FULL_CORPUS, FULL_CORPUS.removesuffix(".gz")):
        if (base / rel).is_file():
            return base / rel
    raise DataNotFoundError(
        f"no corpus under {base} (looked for {DEFAULT_CORPUS} and {FULL_CORPUS}). Fix: pass corpus=<a jsonl of "
        '{"id", "contents"} lines> or run `stepgym download searchqa --corpus`.'
    )


_CACHE: dict[tuple[str, int, int], Corpus] = {}
_CACHE_LOCK = threading.Lock()


def load_corpus(path: str | os.PathLike[str]) -> Corpus:
    """:meth:`Corpus.load`, memoised per process by (path, size, mtime): envs and retrievers share one copy."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return Corpus.load(p)  # raises the clear not-found error
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    corpus = Corpus.load(p)
    with _CACHE_LOCK:
        return _CACHE.setdefault(key, corpus)
