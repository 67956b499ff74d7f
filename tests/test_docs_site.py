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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def site_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The repository's site, built once for every test of it here (a strict build takes a minute)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    return build(REPO / "mkdocs.yml", site, REPO), site


def test_the_site_builds_strictly(site_build: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, site = site_build
    problems = locate(done.stdout + done.stderr, REPO / "docs")
    assert done.returncode == 0 and not problems, "mkdocs build --strict:\n" + "\n".join(
        problems or [done.stderr[-4000:]]
    )
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


# ---------------------------------------------------------------------------------------------------------------
# The site works with no network: opened from disk (file://) and served on 127.0.0.1
# ---------------------------------------------------------------------------------------------------------------
_REMOTE = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I
)  # http://, https://, //host (data: and relative are local)
_CSS_URL = re.compile(r"""@import\s+(?:url\()?\s*['"]?([^'")\s;]+)|url\(\s*['"]?([^'")]+)""")


def remote_references(site: Path) -> list[str]:
    """Every remote URL a built page loads: ``<script src>``, ``<link href>`` (stylesheets, fonts, preconnects,
    icons: every ``<link>`` but a page ``canonical``), and ``@import`` / ``url()`` in CSS (style attributes and
    ``<style>`` blocks in pages, and every .css file), as ``file: url`` lines."""
    from html.parser import HTMLParser

    found: list[str] = []

    class Page(HTMLParser):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name, self.in_style = name, False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = {k: v or "" for k, v in attrs}
            url = a.get("src", "") if tag == "script" else ""
            if tag == "link" and "canonical" not in a.get("rel", "").split():
                url = a.get("href", "")
            if url and _REMOTE.match(url):
                found.append(f"{self.name}: <{tag}> {url}")
            css(self.name, a.get("style", ""))
            self.in_style = tag == "style"

        def handle_data(self, data: str) -> None:
            if self.in_style:
                css(self.name, data)

    def css(name: str, text: str) -> None:
        for m in _CSS_URL.finditer(text):
            url = m.group(1) or m.group(2)
            if _REMOTE.match(url.strip()):
                found.append(f"{name}: css {url}")

    for f in sorted(site.rglob("*.html")):
        Page(str(f.relative_to(site))).feed(f.read_text(encoding="utf-8"))
    for f in sorted(site.rglob("*.css")):
        css(str(f.relative_to(site)), f.read_text(encoding="utf-8"))
    return found


def test_remote_references_are_found(tmp_path: Path) -> None:
    """The check itself: each way a page can load something remote is caught, local and data: URLs are not."""
    (tmp_path / "a.html").write_text(
        '<script src="https://cdn.example/x.js"></script><script src="assets/local.js"></script>'
        '<link rel="stylesheet" href="//fonts.example/css"><link rel="preconnect" href="https://fonts.gstatic.com">'
        '<link rel="canonical" href="https://example.org/a.html"><div style="background:url(http://e/x.png)"></div>'
        '<style>@import "https://e/y.css";</style><a href="https://example.org">a link is not a load</a>',
        encoding="utf-8",
    )
    (tmp_path / "s.css").write_text(
        '@font-face{src:url("https://e/f.woff2")} .x{background:url(data:image/png;base64,AA)} .y{background:url(i.png)}',
        encoding="utf-8",
    )
    found = remote_references(tmp_path)
    assert found == [
        "a.html: <script> https://cdn.example/x.js",
        "a.html: <link> //fonts.example/css",
        "a.html: <link> https://fonts.gstatic.com",
        "a.html: css http://e/x.png",
        "a.html: css https://e/y.css",
        "s.css: css https://e/f.woff2",
    ]


def test_no_page_loads_anything_from_the_network(
    site_build: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, site = site_build
    # the pages are written even when the strict build fails on a link (test_the_site_builds_strictly reports that)
    assert (site / "index.html").is_file(), done.stderr[-2000:]
    found = remote_references(site)
    assert not found, "remote scripts, styles or fonts:\n" + "\n".join(found[:20])


@pytest.fixture(scope="module")
def chromium() -> Any:
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    from stepgym.envs.webshop.site_env import CHROMIUM_FLAGS

    chromium_exe, driver_exe = "/usr/bin/chromium", "/usr/bin/chromedriver"
    for exe in (chromium_exe, driver_exe):
        if not os.access(exe, os.X_OK):
            pytest.skip(f"{exe} missing: apt-get install -y chromium chromium-driver")
    profile = tempfile.mkdtemp(prefix="stepgym-docs-test-")
    opts = Options()
    opts.binary_location = chromium_exe
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument("--window-size=1400,1000")
    d = webdriver.Chrome(service=Service(executable_path=driver_exe), options=opts)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _search(d: Any, address: str, query: str) -> list[str]:
    """Open ``address``, type ``query`` into the search box, return the titles of the results."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d.get(address)
    wait = WebDriverWait(d, 30)
    query_box = "input[data-md-component=search-query]"
    try:
        wait.until(lambda drv: any(e.is_displayed() for e in drv.find_elements(By.CSS_SELECTOR, query_box)))
    except TimeoutException:
        raise AssertionError(f"no search box on {address}") from None
    box = next(e for e in d.find_elements(By.CSS_SELECTOR, query_box) if e.is_displayed())
    box.click()
    box.send_keys(query)
    try:
        wait.until(lambda drv: drv.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
    except TimeoutException:
        meta = d.find_elements(By.CSS_SELECTOR, ".md-search-result__meta")
        shown = meta[0].get_attribute("textContent") if meta else "(no result list)"
        raise AssertionError(f"no search result on {address}: {shown!r}") from None
    meta = d.find_element(By.CSS_SELECTOR, ".md-search-result__meta").get_attribute("textContent")
    assert "Initializing" not in meta, meta
    return [
        e.get_attribute("textContent") for e in d.find_elements(By.CSS_SELECTOR, ".md-search-result__item h1")
    ]


@pytest.mark.browser
@pytest.mark.network
def test_search_works_offline_from_disk_and_from_a_local_server(
    site_build: tuple[subprocess.CompletedProcess[str], Path], chromium: Any
) -> None:
    """In a headless Chromium with no network: the search box is there and finds pages, both from disk
    (file://) and served on 127.0.0.1."""
    import functools
    import http.server
    import threading

    done, site = site_build
    assert (site / "index.html").is_file(), done.stderr[-2000:]
    assert _search(chromium, (site / "index.html").as_uri(), "GiGPO"), "no result from disk"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # no request log in the test output
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        assert _search(chromium, url, "GiGPO"), "no result from 127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
