"""The docs pages that took over the README's reference sections stay true: the schema table is generated from the
schema, every registered env and every stepgym command and preset they name exist, and the results tables moved
with their figure regions (scripts/doc_figures.py; tests/test_doc_figures.py and tests/test_credit_fidelity.py
rebuild them from the committed results). Links and anchors are checked by the strict site build
(tests/test_docs_site.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from stepgym import schema
from stepgym.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_schema_table_is_generated_from_the_schema():
    block = _page("schema.md").split("<!-- schema:begin", 1)[1].split("<!-- schema:end -->", 1)[0]
    table = block.split("-->", 1)[1].strip()
    assert table == schema.describe()


def test_every_registered_env_has_a_row_and_a_page():
    import stepgym

    envs = _page("envs.md")
    for env_id in stepgym.ENV_IDS:
        row = next((line for line in envs.splitlines() if line.startswith(f"| `{env_id}`")), None)
        assert row is not None, f"docs/envs.md has no row for {env_id}"
        pages = re.findall(r"\]\(([\w./]+\.md)\)", row)
        assert pages and all((DOCS / p).is_file() for p in pages), (env_id, pages)


def test_the_env_table_and_the_env_nav_are_generated_from_the_registry(monkeypatch):
    """docs/envs.md's env table and mkdocs.yml's env pages are scripts/doc_figures.py's output for today's registry
    (rows and pages in ENV_IDS's order, from each env page's front matter): an env registered without a page, a
    page for an env that is not registered, or a hand edit of either region fails here."""
    sys.path.insert(0, str(REPO / "scripts"))
    import doc_figures

    assert doc_figures.main(["--check", "--only", "env-table", "--only", "env-pages"]) == 0, (
        "run `python scripts/doc_figures.py --write --only env-table --only env-pages`"
    )
    import stepgym

    table = doc_figures.env_table()
    assert re.findall(r"^\| `(StepGym/[\w-]+)`", table, flags=re.M) == list(stepgym.ENV_IDS)
    monkeypatch.setattr(doc_figures, "_registry", lambda: (*stepgym.ENV_IDS, "StepGym/Unpaged-v0"))
    with pytest.raises(SystemExit, match=r"no page declares \['StepGym/Unpaged-v0'\]"):
        doc_figures.env_table()
    monkeypatch.setattr(doc_figures, "_registry", lambda: stepgym.ENV_IDS[1:])
    with pytest.raises(SystemExit, match="pages declare envs that are not registered"):
        doc_figures.env_nav()


def test_a_built_in_envs_page_lives_in_its_folder_and_docs_holds_its_generated_copy(monkeypatch, tmp_path):
    """docs/<env>.md is generated from stepgym/envs/<env>/README.md (links made relative to docs/); a hand edit of
    the generated page, or a README edited without regenerating, fails the check; the README's own links resolve
    from its folder."""
    import dataclasses

    sys.path.insert(0, str(REPO / "scripts"))
    import doc_figures

    folders = {"alfworld", "babyai", "scienceworld", "searchqa", "sokoban", "textcraft", "webshop"}
    assert folders <= set(doc_figures.ENV_READMES)
    only = [arg for name in doc_figures.ENV_READMES for arg in ("--only", f"env-page-{name}")]
    assert doc_figures.main(["--check", *only]) == 0, "run `python scripts/doc_figures.py --write`"
    for name, readme in doc_figures.ENV_READMES.items():
        for target in re.findall(r"\]\(([^)\s#:]+)(?:#[^)]*)?\)", readme.read_text(encoding="utf-8")):
            assert (readme.parent / target).is_file(), (readme, target)
        assert "../../../docs/" not in _page(f"{name}.md")
    sokoban = doc_figures.env_page(doc_figures.ENV_READMES["sokoban"])
    assert (
        "](values.md)" in sokoban and "stepgym/envs/sokoban/README.md" in sokoban.split("\n---\n", 1)[1][:200]
    )
    figure = doc_figures.FIGURES["env-page-sokoban"]
    edited = tmp_path / "sokoban.md"
    edited.write_text(figure.page.read_text(encoding="utf-8").replace("# Sokoban", "# Sokoban (edited)", 1))
    monkeypatch.setitem(doc_figures.FIGURES, "env-page-sokoban", dataclasses.replace(figure, page=edited))
    assert doc_figures.main(["--check", "--only", "env-page-sokoban"]) == 1
    assert doc_figures.main(["--write", "--only", "env-page-sokoban"]) == 0
    assert edited.read_text(encoding="utf-8") == sokoban


def test_every_stepgym_command_and_preset_in_the_guides_exists():
    from stepgym.trainers.presets import TRAINER_PRESETS

    text = "\n".join(_page(p) for p in ("getting_started.md", "trainer.md", "scale_out.md", "index.md"))
    code = "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL))
    commands = set(re.findall(r"^stepgym (\w+)", code, flags=re.MULTILINE))
    commands |= set(re.findall(r"`stepgym (\w+)", text))
    assert commands and commands <= set(SUBCOMMANDS), commands - set(SUBCOMMANDS)
    presets = set(re.findall(r"--preset ([a-z][a-z0-9-]+)", text))  # not a placeholder (NAME)
    assert presets and presets <= set(TRAINER_PRESETS), presets - set(TRAINER_PRESETS)


def test_the_results_figures_live_on_the_benchmarks_page():
    sys.path.insert(0, str(REPO / "scripts"))
    import doc_figures

    for name in ("arg-stats", "credit-fidelity"):
        figure = doc_figures.FIGURES[name]
        assert figure.page == DOCS / "benchmarks.md", name
        assert f"<!-- figure:{name} -->" in _page("benchmarks.md")
    # the README holds only the generated learning-study headline (the claims file's confirmed results)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert set(re.findall(r"<!-- figure:([\w-]+) -->", readme)) == {"learning-study-headline"}


def test_the_home_page_runs_the_readme_first_example():
    """docs/index.md shows the README's first example verbatim (tests/test_docs_code.py runs it there too)."""
    first = re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    assert first in _page("index.md") and first in _page("getting_started.md")
