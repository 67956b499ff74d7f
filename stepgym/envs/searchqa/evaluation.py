"""How good is a retriever here: answer recall per dataset, and agreement with the real Search-R1 retriever.

* **Answer recall@k** (DPR/FlashRAG's retrieval metric): the share of questions for which one of the top-k
  passages for the question text holds a gold answer as a whole-token span after Search-R1's normalisation.
* **Agreement with Search-R1's e5-base-v2** on ``wiki18_subset/search_log.jsonl``: for each of the 4,996 searches a
  Search-R1 model really issued, the ids of the top-3 passages the real retriever (e5-base-v2 + FAISS flat over the
  21M-passage wiki-18) returned. ``overlap@3`` is the mean share of those passages in our top 3, ``top1`` the share of
  searches whose first passage is the same, ``in_top10`` the mean share of them in our top 10; ``answer@3`` compares
  answer recall of our top 3 with the logged top 3 for the same queries.

Caveat, stated wherever these numbers are quoted: the corpus is exactly the union of the passages e5 returned for
these searches (9,648 of 21M), so every passage is a plausible e5 hit and the distractors are few; agreement over
the full wiki-18 would be lower. The numbers compare backends on equal terms, they do not estimate full-scale recall.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from stepgym.data import data_root
from stepgym.envs.searchqa.corpus import Corpus
from stepgym.envs.searchqa.datasets import QARecord
from stepgym.envs.searchqa.protocol import has_answer
from stepgym.envs.searchqa.retrievers import Retriever
from stepgym.errors import CorruptDataError, DataNotFoundError

__all__ = ["SEARCH_LOG", "agreement", "answer_recall", "is_clean_query", "load_search_log"]

SEARCH_LOG = "wiki18_subset/search_log.jsonl"
_BATCH = 256


def load_search_log(
    path: str | os.PathLike[str] | None = None, root: str | os.PathLike[str] | None = None
) -> list[dict]:
    """The logged Search-R1 searches (``dataset, query, golden_answers, top3_ids`` per row)."""
    p = Path(path) if path is not None else data_root("searchqa", root) / SEARCH_LOG
    if not p.is_file():
        raise DataNotFoundError(
            f"search log {p} does not exist (it ships with the searchqa data as {SEARCH_LOG})."
        )
    rows = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row["query"], str) or not isinstance(row["top3_ids"], list):
                    raise TypeError("query/top3_ids have the wrong type")
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise CorruptDataError(f"{p}, line {lineno}: not a search-log row ({exc}).") from exc
            rows.append(row)
    return rows


def is_clean_query(query: str) -> bool:
    """A logged query without tag debris or newlines (227 of the 4,996 logged queries hold some)."""
    return "<" not in query and ">" not in query and "\n" not in query


def _search_all(retriever: Retriever, queries: Sequence[str], k: int) -> list[list[Any]]:
    out: list[list[Any]] = []
    for start in range(0, len(queries), _BATCH):
        out.extend(retriever.search(list(queries[start : start + _BATCH]), k))
    return out


def answer_recall(
    retriever: Retriever, questions: Sequence[QARecord], ks: Iterable[int] = (1, 3, 5)
) -> dict[str, float]:
    """``{"recall@k": share}`` for each k, querying with each question's text."""
    ks = sorted(set(ks))
    results = _search_all(retriever, [q.question for q in questions], max(ks))
    first_gold = []
    for q, hits in zip(questions, results, strict=True):
        pos = next((i for i, h in enumerate(hits) if has_answer(h.contents, q.golden_answers)), None)
        first_gold.append(pos)
    n = max(1, len(questions))
    return {f"recall@{k}": sum(1 for p in first_gold if p is not None and p < k) / n for k in ks}


def agreement(
    retriever: Retriever, log: Sequence[dict], corpus: Corpus | None = None, *, clean_only: bool = False
) -> dict[str, dict[str, float]]:
    """Agreement with the logged e5-base-v2 top-3, per dataset of the log and ``"all"`` (see the module docstring).

    ``corpus`` (for ``answer@3`` of the logged passages) maps logged ids to their contents.
    """
    rows = [r for r in log if is_clean_query(r["query"])] if clean_only else list(log)
    results = _search_all(retriever, [r["query"] for r in rows], 10)
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row, hits in zip(rows, results, strict=True):
        logged = [str(i) for i in row["top3_ids"]]
        ours3 = [h.id for h in hits[:3]]
        ours10 = {h.id for h in hits[:10]}
        golds = row.get("golden_answers") or []
        values = {
            "n": 1.0,
            "overlap@3": len(set(ours3) & set(logged)) / len(logged) if logged else 0.0,
            "top1": float(bool(ours3) and bool(logged) and ours3[0] == logged[0]),
            "in_top10": len(ours10 & set(logged)) / len(logged) if logged else 0.0,
            "answer@3": float(any(has_answer(h.contents, golds) for h in hits[:3])),
        }
        if corpus is not None:
            texts = [corpus.contents[corpus.index_of[i]] for i in logged if i in corpus.index_of]
            values["logged_answer@3"] = float(any(has_answer(t, golds) for t in texts))
        for group in (row.get("dataset", "?"), "all"):
            for key, v in values.items():
                sums[group][key] += v
    out: dict[str, dict[str, float]] = {}
    for group, s in sums.items():
        n = s.pop("n")
        out[group] = {"n": n, **{k: v / n for k, v in s.items()}}
    return out
