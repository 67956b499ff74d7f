"""Every ```python block of docs/**/*.md runs: a page's blocks in order, as one script in a fresh interpreter, in a
temporary folder, on the real data. A block that cannot run here (it needs a served LLM, a GPU, a long training
run, or is a fragment that names the caller's own variables) carries ``<!-- not run: reason -->`` on the line
before its fence; the test honours the marker, requires a reason and reports every such block. README.md's blocks
are run by tests/test_readme.py (all of them: the README has no such marker, checked here)."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").rglob("*.md"))
_BLOCK = re.compile(r"(?:<!--\s*not run:(?P<reason>.*?)-->\s*\n)?```python\n(?P<code>.*?)```", re.S)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str
    not_run: str | None  # the marker's reason, or None: the block runs


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code"))
        reason = m.group("reason")
        page = path.relative_to(REPO / "docs").as_posix() if path.is_relative_to(REPO / "docs") else path.name
        out.append(Block(page, line, m.group("code"), None if reason is None else reason.strip()))
    return out


def test_the_marker_is_read_and_needs_a_reason(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "```python\nx = 1\n```\n<!-- not run: needs a GPU -->\n```python\nimport vllm\n```\n"
        "<!-- not run: -->\n```python\ny\n```\n",
        encoding="utf-8",
    )
    got = [(b.code, b.not_run) for b in blocks(page)]
    assert got == [("x = 1\n", None), ("import vllm\n", "needs a GPU"), ("y\n", "")]


def test_every_skipped_block_says_why_and_the_readme_skips_none(capsys: pytest.CaptureFixture[str]) -> None:
    skipped = [b for p in DOCS for b in blocks(p) if b.not_run is not None]
    assert all(b.not_run for b in skipped), [f"{b.page}:{b.line}" for b in skipped if not b.not_run]
    assert all(b.not_run is None for b in blocks(REPO / "README.md"))  # tests/test_readme.py runs them all
    with capsys.disabled():
        print(f"\n{len(skipped)} docs code blocks are not run:")
        for b in skipped:
            print(f"  docs/{b.page}:{b.line}: {b.not_run}")


@pytest.mark.slow
@pytest.mark.usefixtures("data_dir")
@pytest.mark.parametrize(
    "page",
    [p for p in DOCS if any(b.not_run is None for b in blocks(p))],
    ids=lambda p: p.relative_to(REPO / "docs").as_posix(),
)
def test_the_pages_code_runs(page: Path, tmp_path: Path) -> None:
    runnable = [b for b in blocks(page) if b.not_run is None]
    # each block keeps its own line numbers in a traceback: pad with blank lines up to where it starts
    lines: list[str] = []
    for b in runnable:
        lines += [""] * max(0, b.line - len(lines))
        lines += b.code.splitlines()
    script = tmp_path / page.name.replace(
        ".md", "_md.py"
    )  # a traceback names docs/<page> by the assert below
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env_cwd = tmp_path / "cwd"
    env_cwd.mkdir()
    run = subprocess.run(
        [sys.executable, str(script)], cwd=env_cwd, capture_output=True, text=True, timeout=900
    )
    rel = page.relative_to(REPO / "docs").as_posix()
    assert run.returncode == 0, (
        f"docs/{rel} (a traceback's line numbers are the page's):\n{run.stderr[-4000:]}"
    )
