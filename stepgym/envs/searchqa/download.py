"""``stepgym download searchqa``: the official Search-QA files into the user cache.

Official sources, all hosted on the Hugging Face hub (so unreachable on machines that only reach PyPI/Debian/npm;
the data kept in ``shared/data/searchqa`` is the offline substitute, see its SOURCE.md):

* FlashRAG's processed QA sets (``RUC-NLPIR/FlashRAG_datasets``, the files Search-R1's
  ``scripts/data_process/qa_search_*_merge.py`` load): ``nq/{train,test}``, ``triviaqa/test``, ``popqa/test``,
  ``bamboogle/test``, ``hotpotqa/{train,dev}``, ``2wikimultihopqa/dev``, ``musique/dev`` → ``flashrag_format/``;
* Search-R1's merged training/evaluation parquet files (``PeterJinGo/nq_hotpotqa_train``:
  ``train.parquet`` 169,615 rows = NQ train + HotpotQA train, ``test.parquet``) → ``search_r1/nq_hotpotqa_train/``;
* with ``corpus=True``: the 21M-passage wiki-18 corpus (``PeterJinGo/wiki-18-corpus``, ``wiki-18.jsonl.gz``, ~14 GB
  unpacked) → ``wiki18/``. Search-R1's prebuilt e5 FAISS index (``PeterJinGo/wiki-18-e5-index``, ~60 GB) is not
  fetched: run Search-R1's own server on a large machine and give the env its URL (same ``/retrieve`` protocol), or
  build a stepgym index (``stepgym retriever build --backend dense --encoder intfloat/e5-base-v2``).

The layout is the one :mod:`stepgym.envs.searchqa.datasets` reads, so after a download ``split="train"`` uses the
official NQ/HotpotQA train files. ``base_url`` replaces ``https://huggingface.co`` (a mirror, or a local test
server). Every file is fetched atomically and parsed before the call returns; a file that does not parse is deleted
and reported (:class:`~stepgym.errors.CorruptDataError`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stepgym.data import cache_dir, file_sha256
from stepgym.envs.searchqa.corpus import Corpus
from stepgym.envs.searchqa.datasets import _jsonl, _parquet
from stepgym.errors import CorruptDataError
from stepgym.fetch import fetch

__all__ = ["DEFAULT_BASE_URL", "FILES", "download"]

DEFAULT_BASE_URL = "https://huggingface.co"
_FLASHRAG = "datasets/RUC-NLPIR/FlashRAG_datasets/resolve/main"
_SEARCH_R1 = "datasets/PeterJinGo/nq_hotpotqa_train/resolve/main"
_CORPUS = "datasets/PeterJinGo/wiki-18-corpus/resolve/main"

#: (remote path under the base URL, local path under dest)
FILES: tuple[tuple[str, str], ...] = (
    *(
        (f"{_FLASHRAG}/{name}/{split}.jsonl", f"flashrag_format/{name}/{split}.jsonl")
        for name, split in (
            ("nq", "test"),
            ("nq", "train"),
            ("triviaqa", "test"),
            ("popqa", "test"),
            ("bamboogle", "test"),
            ("hotpotqa", "dev"),
            ("hotpotqa", "train"),
            ("2wikimultihopqa", "dev"),
            ("musique", "dev"),
        )
    ),
    (f"{_SEARCH_R1}/train.parquet", "search_r1/nq_hotpotqa_train/train.parquet"),
    (f"{_SEARCH_R1}/test.parquet", "search_r1/nq_hotpotqa_train/test.parquet"),
)
CORPUS_FILE = (f"{_CORPUS}/wiki-18.jsonl.gz", "wiki18/wiki-18.jsonl.gz")


def _check(path: Path) -> None:
    try:
        if path.name.endswith(".parquet"):
            _parquet(path)
        elif path.name.endswith(".jsonl.gz"):
            Corpus.load(path)
        else:
            _jsonl(path)
    except CorruptDataError:
        path.unlink(missing_ok=True)
        raise


def download(
    dest: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    *,
    corpus: bool = False,
    progress: bool = True,
) -> Path:
    """Fetch the official files into ``dest`` (default ``<cache>/data/searchqa``) and return ``dest``."""
    root = Path(dest).expanduser() if dest is not None else cache_dir() / "data" / "searchqa"
    base = (base_url or DEFAULT_BASE_URL).rstrip("/")
    files = [*FILES, CORPUS_FILE] if corpus else list(FILES)
    manifest = {}
    for remote, local in files:
        target = root / local
        path = fetch(f"{base}/{remote}", target.parent, filename=target.name, progress=progress)
        _check(path)
        manifest[local] = {"url": f"{base}/{remote}", "sha256": file_sha256(path)}
    (root / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return root
