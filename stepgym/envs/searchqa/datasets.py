"""The seven Search-QA datasets, each read from the format it is stored in, with fixed train/test splits.

Search-R1 trains on NQ + HotpotQA (their train splits) and evaluates on the test/dev sets of NQ, TriviaQA, PopQA,
HotpotQA, 2WikiMultihopQA, MuSiQue and Bamboogle (the last five out of domain). The data kept here holds only
test/dev files, so the ``train`` split of NQ and HotpotQA is carved out of them, disjoint from ``test``:

===============  ==========================================================  =======================================
dataset          ``test`` (evaluation)                                       ``train``
===============  ==========================================================  =======================================
nq               ``flashrag_format/nq/test.jsonl`` (the 1,000-row sample:    ``flashrag_format/nq/train.jsonl`` when
                 its questions are the ones behind ``wiki18_subset``)        downloaded, else the other 2,610 rows of
                                                                             ``search_r1/nq_search/test.parquet``
hotpotqa         ``hotpotqa/distractor_dev_300.jsonl`` (300 rows, with       ``flashrag_format/hotpotqa/train.jsonl``
                 supporting-fact titles), else FlashRAG ``dev.jsonl``        when downloaded, else the other 7,105
                                                                             rows of ``hotpot_dev_v1_simplified.json``
triviaqa, popqa  ``flashrag_format/<name>/test.jsonl``                       none (out of domain)
bamboogle        ``flashrag_format/bamboogle/test.jsonl`` (all 125)          none
2wikimultihopqa  FlashRAG ``dev.jsonl``, else ``qa_pairs/2wikimultihopqa_    none
                 test.json`` (12,576)
musique          FlashRAG ``dev.jsonl``, else ``qa_pairs/musique_test.json``  none
===============  ==========================================================  =======================================

The first file of a row that exists is used; official files (``stepgym download searchqa``) take precedence over the
carve-outs. Rows keep their file order (the fixed evaluation order). Task ids are ``<dataset>/<id in the file>``, or
``<dataset>/<row number>`` for files without ids. A malformed file raises :class:`CorruptDataError` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepgym._deps import require
from stepgym.data import data_root
from stepgym.envs.searchqa.corpus import read_jsonl
from stepgym.errors import CorruptDataError, DataNotFoundError

__all__ = [
    "DATASETS",
    "SPLITS",
    "TRAIN_DATASETS",
    "QARecord",
    "load_questions",
    "load_questions_file",
    "load_split",
]

DATASETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
TRAIN_DATASETS = ("nq", "hotpotqa")
SPLITS = ("train", "test")
_FIX = "Fix: re-download it with `stepgym download searchqa`, or point $STEPGYM_DATA / data_root= at a good copy."


@dataclass(frozen=True)
class QARecord:
    """One question. ``supporting_titles`` are HotpotQA's supporting-fact page titles (empty when unknown)."""

    task_id: str
    dataset: str
    question: str
    golden_answers: tuple[str, ...]
    supporting_titles: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


# ---------------------------------------------------------------------------------------------------------------
# File readers (one per stored format)
# ---------------------------------------------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    return [rec for _, rec in read_jsonl(path, _FIX, unreadable=())]


def _json_array(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptDataError(f"{path}: not a valid JSON file ({exc}). {_FIX}") from exc
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CorruptDataError(f"{path}: expected a JSON array of objects. {_FIX}")
    return data


def _parquet(path: Path) -> list[dict]:
    pq = require("pyarrow.parquet", "searchqa", what="reading Search-R1's parquet files")
    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError subclasses for damaged files
        raise CorruptDataError(f"{path}: not a readable parquet file ({exc}). {_FIX}") from exc


def _answers(rec: dict, path: Path, i: int) -> tuple[str, ...]:
    golds = rec.get("golden_answers")
    if golds is None and isinstance(rec.get("reward_model"), dict):
        golds = rec["reward_model"].get("ground_truth", {}).get("target")
    if golds is None:
        golds = rec.get("answer")
    if isinstance(golds, str):
        golds = [golds]
    if (
        not isinstance(golds, list | tuple)
        or not golds
        or not all(isinstance(g, str | int | float) for g in golds)
    ):
        raise CorruptDataError(f"{path}, row {i}: no usable gold answers (golden_answers/answer). {_FIX}")
    return tuple(str(g) for g in golds)


def _question(rec: dict, path: Path, i: int) -> str:
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        raise CorruptDataError(f'{path}, row {i}: no "question" string. {_FIX}')
    return q.strip()


def _supporting(rec: dict) -> tuple[str, ...]:
    sf = rec.get("supporting_facts")
    if sf is None and isinstance(rec.get("metadata"), dict):
        sf = rec["metadata"].get("supporting_facts")
    titles: list[str] = []
    if isinstance(sf, dict):
        titles = [str(t) for t in sf.get("title", [])]
    elif isinstance(sf, list):  # original HotpotQA: [[title, sent_id], ...]
        titles = [str(x[0]) for x in sf if isinstance(x, list | tuple) and x]
    return tuple(dict.fromkeys(titles))


def _records(
    rows: list[dict],
    dataset: str,
    path: Path,
    *,
    use_ids: bool = True,
    keep: Callable[[dict], bool] | None = None,
) -> list[QARecord]:
    out = []
    for i, rec in enumerate(rows):
        if keep is not None and not keep(rec):
            continue
        rid = rec.get("id") if use_ids else None
        name = rec.get("data_source") if dataset == "*" else dataset
        out.append(
            QARecord(
                task_id=f"{name}/{rid if rid is not None else i}",
                dataset=str(name or "custom"),
                question=_question(rec, path, i),
                golden_answers=_answers(rec, path, i),
                supporting_titles=_supporting(rec),
                meta={"source": path.name, "row": i},
            )
        )
    return out


def load_questions_file(path: str | os.PathLike[str], dataset: str | None = None) -> list[QARecord]:
    """Questions from one file, by extension: ``.parquet`` (Search-R1), ``.jsonl`` (FlashRAG), ``.json`` (array).

    ``dataset`` names the rows' task type; by default a Search-R1 parquet's ``data_source`` column, else the file's
    parent folder name.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataNotFoundError(f"questions file {p} does not exist.")
    suffix = p.suffix.lower()
    rows = _parquet(p) if suffix == ".parquet" else _jsonl(p) if suffix == ".jsonl" else _json_array(p)
    name = dataset or ("*" if suffix == ".parquet" else p.parent.name)
    return _records(rows, name, p)


# ---------------------------------------------------------------------------------------------------------------
# The split table
# ---------------------------------------------------------------------------------------------------------------
def _flashrag(name: str, split: str) -> str:
    return f"flashrag_format/{name}/{split}.jsonl"


def _nq_train(root: Path) -> list[QARecord]:
    test_ids = {r.get("id") for r in _jsonl(root / _flashrag("nq", "test"))}
    path = root / "search_r1/nq_search/test.parquet"
    return _records(_parquet(path), "nq", path, keep=lambda r: r.get("id") not in test_ids)


def _hotpot_train(root: Path) -> list[QARecord]:
    test_q = {r.get("question", "").strip() for r in _jsonl(root / "hotpotqa/distractor_dev_300.jsonl")}
    path = root / "hotpotqa/hotpot_dev_v1_simplified.json"
    rows = _json_array(path)
    return [r for r in _records(rows, "hotpotqa", path, use_ids=False) if r.question not in test_q]


# (dataset, split) -> candidates in order: (file that must exist, [other files needed], loader)
_Loader = Callable[[Path], list[QARecord]]


def _file_loader(rel: str, dataset: str, use_ids: bool = True) -> _Loader:
    def load(root: Path) -> list[QARecord]:
        p = root / rel
        rows = (
            _parquet(p)
            if rel.endswith(".parquet")
            else _jsonl(p)
            if rel.endswith(".jsonl")
            else _json_array(p)
        )
        return _records(rows, dataset, p, use_ids=use_ids)

    return load


_TABLE: dict[tuple[str, str], list[tuple[tuple[str, ...], _Loader]]] = {
    ("nq", "test"): [
        ((_flashrag("nq", "test"),), _file_loader(_flashrag("nq", "test"), "nq")),
        (("search_r1/nq_search/test.parquet",), _file_loader("search_r1/nq_search/test.parquet", "nq")),
    ],
    ("nq", "train"): [
        ((_flashrag("nq", "train"),), _file_loader(_flashrag("nq", "train"), "nq")),
        ((_flashrag("nq", "test"), "search_r1/nq_search/test.parquet"), _nq_train),
    ],
    ("hotpotqa", "test"): [
        (
            ("hotpotqa/distractor_dev_300.jsonl",),
            _file_loader("hotpotqa/distractor_dev_300.jsonl", "hotpotqa"),
        ),
        ((_flashrag("hotpotqa", "dev"),), _file_loader(_flashrag("hotpotqa", "dev"), "hotpotqa")),
    ],
    ("hotpotqa", "train"): [
        ((_flashrag("hotpotqa", "train"),), _file_loader(_flashrag("hotpotqa", "train"), "hotpotqa")),
        (("hotpotqa/distractor_dev_300.jsonl", "hotpotqa/hotpot_dev_v1_simplified.json"), _hotpot_train),
    ],
    ("2wikimultihopqa", "test"): [
        (
            (_flashrag("2wikimultihopqa", "dev"),),
            _file_loader(_flashrag("2wikimultihopqa", "dev"), "2wikimultihopqa"),
        ),
        (
            ("qa_pairs/2wikimultihopqa_test.json",),
            _file_loader("qa_pairs/2wikimultihopqa_test.json", "2wikimultihopqa", use_ids=False),
        ),
    ],
    ("musique", "test"): [
        ((_flashrag("musique", "dev"),), _file_loader(_flashrag("musique", "dev"), "musique")),
        (
            ("qa_pairs/musique_test.json",),
            _file_loader("qa_pairs/musique_test.json", "musique", use_ids=False),
        ),
    ],
}
for _name in ("triviaqa", "popqa", "bamboogle"):
    _TABLE[(_name, "test")] = [((_flashrag(_name, "test"),), _file_loader(_flashrag(_name, "test"), _name))]

_CACHE: dict[tuple[str, str, str], list[QARecord]] = {}


def load_split(dataset: str, split: str, root: str | os.PathLike[str] | None = None) -> list[QARecord]:
    """The rows of one dataset's split (see the module table); memoised per process."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {DATASETS}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if (dataset, split) not in _TABLE:
        raise ValueError(
            f"{dataset} has no {split!r} split: Search-R1 trains on {' + '.join(TRAIN_DATASETS)} only and uses "
            f"{dataset} for out-of-domain evaluation (split='test')."
        )
    base = data_root("searchqa", root)
    key = (str(base), dataset, split)
    if key in _CACHE:
        return _CACHE[key]
    for needed, loader in _TABLE[(dataset, split)]:
        if all((base / rel).is_file() for rel in needed):
            rows = loader(base)
            if not rows:
                raise CorruptDataError(f"{base / needed[0]} holds no {dataset} questions. {_FIX}")
            _CACHE[key] = rows
            return rows
    wanted = " or ".join(" + ".join(n) for n, _ in _TABLE[(dataset, split)])
    raise DataNotFoundError(
        f"no {dataset} {split} data under {base}: need {wanted}. Fix: run `stepgym download searchqa` or point "
        "$STEPGYM_DATA at a folder holding searchqa/."
    )


def load_questions(
    datasets: str | Iterable[str], split: str, root: str | os.PathLike[str] | None = None
) -> list[QARecord]:
    """Several datasets' rows of one split, concatenated in the given order (e.g. Search-R1's NQ + HotpotQA)."""
    names = [datasets] if isinstance(datasets, str) else list(datasets)
    if not names:
        raise ValueError("no dataset given")
    out: list[QARecord] = []
    for name in names:
        out.extend(load_split(name, split, root))
    return out
