"""The seven datasets load from their stored formats; the train/test splits are fixed and disjoint; bad files fail clearly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stepgym.envs.searchqa.corpus import Corpus
from stepgym.envs.searchqa.datasets import _CACHE, DATASETS, load_questions, load_questions_file, load_split
from stepgym.errors import CorruptDataError, DataNotFoundError

pytest.importorskip("pyarrow")

EXPECTED_TEST = {
    "nq": 1000,
    "triviaqa": 1000,
    "popqa": 1000,
    "bamboogle": 125,
    "hotpotqa": 300,
    "2wikimultihopqa": 12576,
    "musique": 2417,
}


@pytest.mark.parametrize("name", DATASETS)
def test_every_test_set_loads(data_dir: Path, name: str) -> None:
    rows = load_split(name, "test")
    assert len(rows) == EXPECTED_TEST[name]
    assert len({r.task_id for r in rows}) == len(rows), "task ids must be unique"
    assert all(r.dataset == name and r.question and r.golden_answers for r in rows)
    assert all(r.task_id.startswith(f"{name}/") for r in rows)


def test_train_splits_are_disjoint_from_test(data_dir: Path) -> None:
    nq_test, nq_train = load_split("nq", "test"), load_split("nq", "train")
    assert (len(nq_test), len(nq_train)) == (1000, 2610)
    assert not {r.task_id for r in nq_test} & {r.task_id for r in nq_train}
    assert not {r.question.rstrip("?") for r in nq_test} & {r.question.rstrip("?") for r in nq_train}
    hp_test, hp_train = load_split("hotpotqa", "test"), load_split("hotpotqa", "train")
    assert (len(hp_test), len(hp_train)) == (300, 7105)
    assert not {r.question for r in hp_test} & {r.question for r in hp_train}
    mix = load_questions(("nq", "hotpotqa"), "train")
    assert len(mix) == 2610 + 7105 and mix[0].dataset == "nq" and mix[-1].dataset == "hotpotqa"


def test_hotpotqa_test_rows_carry_supporting_titles(data_dir: Path) -> None:
    rows = load_split("hotpotqa", "test")
    assert all(len(r.supporting_titles) >= 2 for r in rows)
    first = rows[0]
    assert first.task_id == "hotpotqa/5a8ce55f554299441c6b9f62"
    assert first.supporting_titles == ("Tinted Windows (album)", "Tinted Windows (band)")
    assert first.golden_answers == ("Tulsa",)


def test_out_of_domain_sets_have_no_train_split(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="out-of-domain evaluation"):
        load_split("triviaqa", "train")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_split("squad", "test")
    with pytest.raises(ValueError, match="unknown split"):
        load_split("nq", "dev")


def _copy_root(data_dir: Path, tmp_path: Path, *rels: str) -> Path:
    root = tmp_path / "searchqa"
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(data_dir / "searchqa" / rel, root / rel)
    _CACHE.clear()
    return root


def test_corrupt_files_raise_clear_errors(data_dir: Path, tmp_path: Path) -> None:
    root = _copy_root(
        data_dir,
        tmp_path,
        "flashrag_format/bamboogle/test.jsonl",
        "qa_pairs/musique_test.json",
        "search_r1/nq_search/test.parquet",
    )
    bam = root / "flashrag_format/bamboogle/test.jsonl"
    lines = bam.read_text(encoding="utf-8").splitlines()
    bam.write_text("\n".join([*lines[:3], lines[3][:25]]) + "\n", encoding="utf-8")  # truncated mid-line
    with pytest.raises(CorruptDataError, match=r"bamboogle/test.jsonl, line 4: not valid JSON"):
        load_split("bamboogle", "test", root)
    (root / "qa_pairs/musique_test.json").write_text('{"question": "not an array"}')
    with pytest.raises(CorruptDataError, match="JSON array"):
        load_split("musique", "test", root)
    bam.write_text(json.dumps({"id": "x", "question": "q?"}) + "\n")  # no gold answers
    _CACHE.clear()
    with pytest.raises(CorruptDataError, match="gold answers"):
        load_split("bamboogle", "test", root)
    pq = root / "search_r1/nq_search/test.parquet"
    pq.write_bytes(pq.read_bytes()[:1000])
    with pytest.raises(CorruptDataError, match="parquet"):
        load_questions_file(pq)
    with pytest.raises(DataNotFoundError, match="stepgym download searchqa"):
        load_split("popqa", "test", root)


def test_corrupt_corpus_raises(tmp_path: Path) -> None:
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"id": "a", "contents": "T\\ntext"}\n{"id": "b", "contents": "T\\ntext"\n')
    with pytest.raises(CorruptDataError, match="line 2"):
        Corpus.load(bad)
    bad.write_text('{"id": "a", "contents": "T\\ntext"}\n{"id": "a", "contents": "U\\ntext"}\n')
    with pytest.raises(CorruptDataError, match="more than once"):
        Corpus.load(bad)
    bad.write_text('{"id": "a", "body": "x"}\n')
    with pytest.raises(CorruptDataError, match="contents"):
        Corpus.load(bad)
    with pytest.raises(DataNotFoundError, match="does not exist"):
        Corpus.load(tmp_path / "missing.jsonl")


def test_questions_files_in_each_format(data_dir: Path) -> None:
    rows = load_questions_file(data_dir / "searchqa/search_r1/nq_search/test.parquet")
    assert len(rows) == 3610 and rows[0].task_id == "nq/test_0"
    assert rows[0].golden_answers == ("Wilhelm Conrad Röntgen",)
    assert load_questions_file(data_dir / "searchqa/flashrag_format/popqa/test.jsonl")[0].dataset == "popqa"
    assert (
        load_questions_file(data_dir / "searchqa/qa_pairs/musique_test.json", "musique")[5].task_id
        == "musique/5"
    )
