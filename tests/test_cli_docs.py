"""``stepgym docs``: builds the site from a clone, serves it on loopback, and says what to do without a clone or
without a built site."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

import pytest

from stepgym.cli import docs as docs_cli
from stepgym.cli import main as cli_main
from stepgym.errors import StepGymError

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="the `docs` extra: pip install -e '.[docs]'")


def test_build_only_writes_the_site(tmp_path: Path, capsys) -> None:
    """On a two-page project of its own (tests/test_docs_site.py builds the real site, strictly)."""
    root = tmp_path / "clone"
    (root / "docs").mkdir(parents=True)
    (root / "mkdocs.yml").write_text("site_name: t\nuse_directory_urls: false\n", encoding="utf-8")
    (root / "docs" / "index.md").write_text("# Home\n\n[Next](next.md)\n", encoding="utf-8")
    (root / "docs" / "next.md").write_text("# Next\n", encoding="utf-8")
    assert cli_main(["docs", "--root", str(root), "--build-only"]) == 0
    site = root / "site"
    assert 'href="next.html"' in (site / "index.html").read_text(encoding="utf-8")
    assert "opens from disk" in capsys.readouterr().out


@pytest.mark.network
def test_the_server_answers_on_loopback(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<h1>stepgym</h1>", encoding="utf-8")
    server = docs_cli.serve_site(tmp_path, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as reply:
            assert b"stepgym" in reply.read()
    finally:
        server.shutdown()
        server.server_close()


def test_no_clone_and_no_site_are_clear_errors(tmp_path: Path, capsys) -> None:
    with pytest.raises(StepGymError, match="--root"):
        docs_cli.find_root(tmp_path)  # a folder without mkdocs.yml
    assert docs_cli.find_root(start=REPO / "docs") == REPO  # found from inside the clone
    with pytest.raises(StepGymError, match="no built site"):
        docs_cli.serve_site(tmp_path / "nothing")
    assert cli_main(["docs", "--root", str(tmp_path), "--build-only"]) == 1
    assert "has no mkdocs.yml" in capsys.readouterr().err
