"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml), and a failure names the file and line.

Strict mode with mkdocs.yml's ``validation`` settings turns each of these into a failure: a link to a page or an
anchor that does not exist, a page missing from the navigation (or a navigation entry without a page), and, in the
generated API reference (scripts/docs_api.py), a docstring cross-reference to a name that is gone. The build runs
into a temporary folder; its warnings are reported as ``path:line: message`` lines (the line of a broken link is
found in the page's source).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import docs_api  # noqa: E402

pytest.importorskip("mkdocs", reason="the `docs` extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings", reason="the `docs` extra: pip install -e '.[docs]'")

_LINK = re.compile(r"Doc file '(?P<page>[^']+)' contains a link '(?P<link>[^']+)'")
_NAV = re.compile(r"not included in the \"nav\" configuration:\n(?P<pages>(?:\s+- \S+\n?)+)")
_AT = re.compile(r"(?P<path>[\w./-]+\.(?:py|md)):(?P<line>\d+)")


def _line_of(path: Path, needle: str) -> int:
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return i
    return 1


def locate(output: str, docs_dir: Path) -> list[str]:
    """Each WARNING/ERROR of a build's output as ``path:line: message`` (the message alone when it names no
    file). A broken link's line is the first line of the page that holds the link's text."""
    found = []
    for match in _NAV.finditer(output):
        for page in re.findall(r"- (\S+)", match.group("pages")):
            found.append(f"{docs_dir.name}/{page}:1: a page that is not in mkdocs.yml's nav")
    for raw in output.splitlines():
        if not raw.startswith(("WARNING", "ERROR")):
            continue
        message = raw.split("-", 1)[1].strip()
        link = _LINK.search(message)
        at = _AT.search(message)
        if link:
            page = docs_dir / link.group("page")
            line = _line_of(page, f"]({link.group('link')}") if page.exists() else 1
            found.append(f"{docs_dir.name}/{link.group('page')}:{line}: {message}")
        elif at:
            found.append(f"{at.group('path')}:{at.group('line')}: {message}")
        elif "To disable this warning" not in message:
            found.append(message)
    return found


def build(config: Path, site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(REPO / "mkdocs.yml", tmp_path / "site", REPO)
    problems = locate(done.stdout + done.stderr, REPO / "docs")
    assert done.returncode == 0 and not problems, "mkdocs build --strict:\n" + "\n".join(
        problems or [done.stderr[-4000:]]
    )
    site = tmp_path / "site"
    # the pages open from disk (file://): links end in .html, not in folders a browser cannot list
    assert 'href="getting_started.html"' in (site / "index.html").read_text(encoding="utf-8")
    # every public module has its API page, and the links work from disk (file://): pages end in .html
    for module in docs_api.public_modules():
        assert (site / "api" / f"{module}.html").is_file(), module


def test_every_module_is_documented_and_private_ones_are_not(tmp_path: Path) -> None:
    pkg = tmp_path / "stepgym"
    for rel in ("__init__.py", "a.py", "_private.py", "sub/__init__.py", "sub/b.py", "_hidden/c.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text('"""doc"""\n', encoding="utf-8")
    (pkg / "sub" / "data").mkdir()
    (pkg / "sub" / "data" / "script.py").write_text("", encoding="utf-8")  # no __init__.py: not a module
    mods = docs_api.public_modules(tmp_path)
    assert mods == ["stepgym", "stepgym.a", "stepgym.sub", "stepgym.sub.b"]
    assert docs_api.page_text("stepgym.sub.b") == "::: stepgym.sub.b\n"


def _tiny_site(tmp_path: Path, page: str, docstring: str = "Nothing to see.") -> Path:
    """A two-page site with the repository's validation settings and mkdocstrings on a one-module package."""
    import yaml

    main = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(page, encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Known section\n", encoding="utf-8")
    (tmp_path / "docs" / "ref.md").write_text("::: tinypkg\n", encoding="utf-8")
    (tmp_path / "tinypkg").mkdir()
    (tmp_path / "tinypkg" / "__init__.py").write_text(
        f'"""The package."""\n\n\ndef f() -> None:\n    """{docstring}"""\n', encoding="utf-8"
    )
    config = {
        "site_name": "t",
        "strict": True,
        "use_directory_urls": False,
        "validation": main["validation"],
        "plugins": ["autorefs", {"mkdocstrings": {"handlers": {"python": {"paths": ["."]}}}}],
        "nav": ["index.md", "other.md", "ref.md"],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("# Home\n\nSee [the other page](missing.md).\n", "docs/index.md:3:"),
        ("# Home\n\nText.\n\nSee [a section](other.md#no-such-section).\n", "docs/index.md:5:"),
    ],
    ids=["missing-page", "missing-anchor"],
)
def test_a_broken_link_fails_with_its_file_and_line(tmp_path: Path, page: str, expected: str) -> None:
    config = _tiny_site(tmp_path, page)
    done = build(config, tmp_path / "site", tmp_path)
    problems = locate(done.stdout + done.stderr, tmp_path / "docs")
    assert done.returncode != 0
    assert any(p.startswith(expected) for p in problems), problems


def test_a_page_missing_from_the_nav_fails(tmp_path: Path) -> None:
    config = _tiny_site(tmp_path, "# Home\n")
    (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    done = build(config, tmp_path / "site", tmp_path)
    assert done.returncode != 0
    assert "docs/orphan.md:1: a page that is not in mkdocs.yml's nav" in locate(
        done.stdout + done.stderr, tmp_path / "docs"
    )


def test_a_docstring_reference_to_a_renamed_name_fails(tmp_path: Path) -> None:
    config = _tiny_site(tmp_path, "# Home\n", docstring="Calls [the old name][tinypkg.renamed_away].")
    done = build(config, tmp_path / "site", tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "tinypkg.renamed_away" in output
    assert any("tinypkg/__init__.py:" in p for p in locate(output, tmp_path / "docs")), output[-2000:]


def test_sphinx_roles_render_as_code_on_the_site() -> None:
    import griffe_rst

    text = "Uses :class:`StepBatch` and :func:`~stepgym.shapers.shape_advantages`.\n\nUsage::\n\n    x = 1\n"
    assert griffe_rst.markdownify(text) == (
        "Uses `StepBatch` and `stepgym.shapers.shape_advantages`.\n\nUsage:\n\n    x = 1\n"
    )
