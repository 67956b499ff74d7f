"""``stepgym download <benchmark>``: each benchmark's official data into the user cache.

Every env package provides ``download(dest=None, base_url=None) -> Path``; this module only parses arguments and
dispatches. ``--base-url`` points at a mirror (or a local test server); ``--dest`` overrides the cache folder.
"""

from __future__ import annotations

import argparse
import importlib

from stepgym.data import BENCHMARKS, DATA_ENV_VAR


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stepgym download", description=__doc__.split("\n\n")[0])
    ap.add_argument("benchmark", choices=BENCHMARKS)
    ap.add_argument("--dest", default=None, help="target folder (default: <cache>/data/<benchmark>)")
    ap.add_argument("--base-url", default=None, help="mirror base URL replacing the official host")
    ap.add_argument(
        "--full", action="store_true", help="webshop: the full 1.18M-product catalogue, not the 1k one"
    )
    ap.add_argument(
        "--corpus", action="store_true", help="searchqa: also the full 21M-passage wiki-18 corpus"
    )
    args = ap.parse_args(argv)
    module = importlib.import_module(f"stepgym.envs.{args.benchmark}.download")
    extra = {}
    if args.full:
        if args.benchmark != "webshop":
            ap.error("--full applies to webshop only")
        extra["full"] = True
    if args.corpus:
        if args.benchmark != "searchqa":
            ap.error("--corpus applies to searchqa only")
        extra["corpus"] = True
    root = module.download(dest=args.dest, base_url=args.base_url, **extra)
    print(f"{args.benchmark} data ready in {root}")
    print(f"stepgym finds it there by default; or set {DATA_ENV_VAR} to its parent folder.")
    return 0
