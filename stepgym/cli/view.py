"""``stepgym view RUN_DIR_OR_FILE``: serve the episode and advantage viewer, or export it as one HTML file."""

from __future__ import annotations

import argparse
import sys

from stepgym.cli._options import serve_until_interrupted
from stepgym.viewer.data import load_run
from stepgym.viewer.server import ViewerServer, export_html

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="stepgym view",
        description="Browse recorded episodes (episodes.jsonl.gz) with their step and token advantages.",
    )
    ap.add_argument("path", help="a run folder, a recording file, or a folder of run folders")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    ap.add_argument(
        "--export",
        metavar="OUT.html",
        default=None,
        help="write one self-contained HTML file instead of serving",
    )
    args = ap.parse_args(argv)
    run = load_run(args.path)
    m = run.meta
    summary = f"{m['n_groups']} groups, {m['n_episodes']} episodes, {m['n_steps']} steps"
    for warning in m.get("warnings", []):  # a damaged file: shown partly, and said so (the page says it too)
        print(f"stepgym view: warning: {warning}", file=sys.stderr)
    if args.export:
        out = export_html(run, args.export)
        print(f"wrote {out} ({summary})")
        return 0
    server = ViewerServer(run, port=args.port)
    print(f"stepgym view: {summary}\n{server.url}  (Ctrl-C to stop)", flush=True)
    return serve_until_interrupted(server.serve_forever, server.httpd.server_close)
