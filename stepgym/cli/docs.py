"""``stepgym docs``: build the documentation site from a clone and serve it on 127.0.0.1.

The site's sources (``mkdocs.yml`` and ``docs/``) live in the repository, not in the installed package, so the
command needs a clone: the folder given with ``--root``, else the first folder holding ``mkdocs.yml`` from the
current one upwards, else the clone an editable install points at. It runs ``mkdocs build`` (the ``docs`` extra)
into ``--out`` (default ``<root>/site``) and serves that folder with the standard library's HTTP server on
loopback; ``--build-only`` stops after the build (the pages also open from disk: their links end in ``.html``).
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from stepgym.cli._options import serve_until_interrupted
from stepgym.errors import DependencyNotInstalled, StepGymError

__all__ = ["build_site", "find_root", "main", "serve_site"]


def find_root(root: str | Path | None = None, start: Path | None = None) -> Path:
    """The clone whose site to build: ``root`` if given, else a folder with ``mkdocs.yml`` above ``start`` (the
    current folder) or above the installed package."""
    if root is not None:
        path = Path(root).expanduser().resolve()
        if not (path / "mkdocs.yml").is_file():
            raise StepGymError(f"--root {path} has no mkdocs.yml: pass the folder of a stepgym clone")
        return path
    here = (start or Path.cwd()).resolve()
    package_parent = Path(__file__).resolve().parents[2]
    for folder in (here, *here.parents, package_parent):
        if (folder / "mkdocs.yml").is_file() and (folder / "docs").is_dir() and (folder / "stepgym").is_dir():
            return folder
    raise StepGymError(
        "stepgym docs builds the site from a clone of the repository (mkdocs.yml and docs/), and none was found "
        "here or above: run it inside a clone, or pass --root <clone>"
    )


def build_site(root: Path, out: Path) -> Path:
    """``mkdocs build`` of ``root`` into ``out``; returns ``out``. Needs the ``docs`` extra."""
    try:
        import mkdocs  # noqa: F401
    except ImportError as exc:
        raise DependencyNotInstalled(
            "`mkdocs` is not installed (needed for stepgym docs). Install it with: pip install 'stepgym[docs]'"
        ) from exc
    cmd = [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(root / "mkdocs.yml"), "-d", str(out)]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StepGymError(f"mkdocs build failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    return out


def serve_site(site: Path, port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``site`` on 127.0.0.1 (``port`` 0: a free one); call ``serve_forever()`` on it."""
    if not (site / "index.html").is_file():
        raise StepGymError(f"{site} holds no built site (index.html): run `stepgym docs` without --no-build")

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Quiet, directory=str(site)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="stepgym docs",
        description="Build the documentation site from a clone and serve it on 127.0.0.1.",
    )
    ap.add_argument("--root", default=None, help="the stepgym clone (default: found from here upwards)")
    ap.add_argument("--out", default=None, help="where the site is built (default: <root>/site)")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--build-only", action="store_true", help="build the site and stop")
    mode.add_argument("--no-build", action="store_true", help="serve the site built before")
    args = ap.parse_args(argv)
    if args.port < 0:
        ap.error(f"--port must be >= 0, got {args.port}")
    root = find_root(args.root)
    site = Path(args.out).resolve() if args.out else root / "site"
    if not args.no_build:
        build_site(root, site)
        print(f"built {site / 'index.html'} (opens from disk too)", flush=True)
    if args.build_only:
        return 0
    server = serve_site(site, args.port)
    print(f"http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C to stop)", flush=True)
    return serve_until_interrupted(server.serve_forever, server.server_close)
