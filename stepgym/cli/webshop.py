"""``stepgym webshop ...``: build search indexes, compare backends, run the oracle, serve the site.

```text
stepgym webshop index     [--search bm25s|lucene|all]        build (or find) the cached indexes, with times
stepgym webshop agreement [--goals synthetic|human]           top-10 agreement and target hits per backend
stepgym webshop oracle    [--split all] [--option-match ...]  the oracle's success on a split
stepgym webshop nouns                                         heuristic vs spaCy title nouns: reward effect
stepgym webshop serve     [--port 3000] [--split test]        the site for people, until Ctrl-C
```
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

__all__ = ["main"]


def _core(args: argparse.Namespace, search: str) -> Any:
    from stepgym.envs.webshop.core import shared_core

    return shared_core(
        args.data_root, args.goals, search, option_match=getattr(args, "option_match", "upstream")
    )


def _cmd_index(args: argparse.Namespace) -> int:
    names = ["bm25s", "lucene"] if args.search == "all" else [args.search]
    for name in names:
        t0 = time.perf_counter()
        core = _core(args, name)
        backend = core.engine.search_backend
        print(
            json.dumps(
                {
                    "backend": name,
                    "index": str(getattr(backend, "path", "")),
                    "build_seconds": round(backend.build_seconds, 3),
                    "load_seconds": round(time.perf_counter() - t0, 3),
                    "products": len(core.catalogue),
                }
            )
        )
    return 0


def _cmd_agreement(args: argparse.Namespace) -> int:
    from stepgym.envs.webshop.analysis import compare_backends

    a, b = _core(args, "bm25s"), _core(args, "lucene")
    out = {"goals": args.goals, **compare_backends(a.engine.search_backend, b.engine.search_backend, a.goals)}
    print(json.dumps(out, indent=2))
    return 0


def _cmd_oracle(args: argparse.Namespace) -> int:
    from stepgym.envs.webshop.analysis import run_oracle
    from stepgym.envs.webshop.text_env import WebShopEnv

    env = WebShopEnv(
        split=args.split,
        goals=args.goals,
        search=args.search,
        data_root=args.data_root,
        option_match=args.option_match,
    )
    res = run_oracle(env, env.task_ids)
    res.pop("rewards")
    print(json.dumps(res, indent=2))
    return 0


def _cmd_nouns(args: argparse.Namespace) -> int:
    from stepgym.envs.webshop.analysis import noun_effect

    core = _core(args, args.search)
    print(json.dumps(noun_effect(core.catalogue, core.goals, core.engine.results), indent=2))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from stepgym.envs.webshop.server import ShopSite

    core = _core(args, args.search)
    site = ShopSite(core, port=args.port, default_split=args.split).start()
    print(f"WebShop at {site.base_url}/ (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        site.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="stepgym webshop", description="WebShop tools (see docs/webshop.md)"
    )
    parser.add_argument(
        "--data-root", default=None, help="WebShop data folder (default: $STEPGYM_DATA/webshop)"
    )
    parser.add_argument("--goals", default="synthetic", choices=["synthetic", "human"])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("index", help="build the cached search indexes")
    p.add_argument("--search", default="bm25s", choices=["bm25s", "lucene", "all"])
    p.set_defaults(func=_cmd_index)
    p = sub.add_parser("agreement", help="bm25s vs Lucene: top-10 agreement and target hits")
    p.set_defaults(func=_cmd_agreement)
    p = sub.add_parser("oracle", help="the oracle policy's success on a split")
    p.add_argument("--split", default="all")
    p.add_argument("--search", default="bm25s", choices=["bm25s", "lucene"])
    p.add_argument("--option-match", default="upstream", choices=["upstream", "values"])
    p.set_defaults(func=_cmd_oracle)
    p = sub.add_parser(
        "nouns", help="reward effect of the title-noun heuristic vs spaCy (needs en_core_web_sm)"
    )
    p.add_argument("--search", default="bm25s", choices=["bm25s", "lucene"])
    p.set_defaults(func=_cmd_nouns)
    p = sub.add_parser("serve", help="serve the site on 127.0.0.1 for people")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--split", default="all")
    p.add_argument("--search", default="bm25s", choices=["bm25s", "lucene"])
    p.set_defaults(func=_cmd_serve)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
