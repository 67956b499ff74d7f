"""Regenerate (or check) the figures the docs quote from a command's output, so they cannot go stale.

Each figure is a region of a docs page (``Figure.page``; docs/benchmarks.md by default) between
``<!-- figure:NAME -->`` and ``<!-- /figure:NAME -->`` (``# figure:NAME`` and ``# /figure:NAME`` in mkdocs.yml),
rebuilt from the output of stepgym's own commands, from a committed results file or from the env registry (the
env table of docs/envs.md and the env pages in the site's navigation: ``env-table``, ``env-pages``). A built-in
env's page is written in its folder, ``stepgym/envs/<name>/README.md``, and ``docs/<name>.md`` is generated from it
whole (``env-page-<name>``: its links made relative to docs/). ``--check`` (what ``tests/test_doc_figures.py`` runs) exits 1 with a diff when a page
differs from a fresh run; ``--write`` puts the fresh figures in.

    STEPGYM_DATA=../shared/data python scripts/doc_figures.py --check
    STEPGYM_DATA=../shared/data python scripts/doc_figures.py --write

Only deterministic outputs belong here (seeded agents, fixed splits); timings stay in the benchmark scripts, which
print them with the date and machine.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"  # the README's results sections moved here


def _stepgym(*argv: str) -> str:
    """stdout of ``python -m stepgym.cli ARGV`` (stderr passes through; a failure raises with its output)."""
    done = subprocess.run(
        [sys.executable, "-m", "stepgym.cli", *argv], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"stepgym {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def _all_rows(table: str) -> dict[str, list[str]]:
    """The ``all`` rows of ``stepgym arg stats``'s table: agent -> [steps, Rea, PA, unreasonable-in-won]."""
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[1] == "all":
            rows[cells[0]] = cells[2:]
    if not rows:
        raise SystemExit(f"no 'all' rows in stepgym arg stats output:\n{table[-2000:]}")
    return rows


def arg_stats() -> str:
    """docs/benchmarks.md's "ProAS labels on ALFWorld" table: both graph sources, the three agents, valid_seen."""
    agents = {"expert": "handcoded expert", "noisy(0.2)": "noisy expert (20%)", "random": "random"}
    lines = [
        "| graph seeded from (valid_seen, 140 games) | agent | steps | Rea | PA | unreasonable steps in successful episodes |",
        "|---|---|---|---|---|---|",
    ]
    for source, label in (
        ("walkthroughs", "stored walkthroughs"),
        ("walkthroughs+expert", "walkthroughs + expert successes"),
    ):
        rows = _all_rows(
            _stepgym("arg", "stats", "--split", "valid_seen", "--source", source, "--no-progress")
        )
        for agent, name in agents.items():
            steps, rea, pa, bad = rows[agent]
            lines.append(f"| {label} | {name} | {int(steps):,} | {rea} | {pa} | {bad} |")
    return "\n".join(lines)


CREDIT_FIDELITY = ROOT / "benchmarks" / "results" / "credit_fidelity_2026-12-04.json"


def credit_fidelity() -> str:
    """docs/benchmarks.md's credit-fidelity tables, rebuilt from the committed results file (the run itself takes minutes:
    ``python benchmarks/credit_fidelity.py`` writes a fresh one)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import json

    import credit_fidelity as cf

    return cf.report_tables(json.loads(CREDIT_FIDELITY.read_text(encoding="utf-8"))["results"])


CREDIT_FIDELITY_ALL = ROOT / "benchmarks" / "results" / "credit_fidelity_2026-12-06.json"
CREDIT_STUDY_CELLS = ROOT / "benchmarks" / "results" / "credit_study_2026-12-05_cells.jsonl.gz"


def credit_fidelity_methods() -> str:
    """docs/credit_fidelity.md's tables of every method (the graph bases with both keyings, the ceiling), rebuilt
    from the committed results file."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import json

    import credit_fidelity as cf

    return cf.docs_tables(json.loads(CREDIT_FIDELITY_ALL.read_text(encoding="utf-8"))["results"])


def credit_fidelity_grouping() -> str:
    """docs/credit_fidelity.md's grouping diagnostics (singleton step groups, purity against the exact state, per env
    and keying), rebuilt from the committed results file."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import json

    import credit_fidelity as cf

    return cf.grouping_table(json.loads(CREDIT_FIDELITY_ALL.read_text(encoding="utf-8"))["grouping"])


CREDIT_FIDELITY_TAU2 = ROOT / "benchmarks" / "results" / "credit_fidelity_tau2_2026-12-07.json"


def credit_fidelity_tau2() -> str:
    """docs/credit_fidelity.md's τ²-bench tables (scored against the steps-to-go bound), rebuilt from the committed
    results file of ``python benchmarks/credit_fidelity.py --only tau2``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import json

    import credit_fidelity as cf

    data = json.loads(CREDIT_FIDELITY_TAU2.read_text(encoding="utf-8"))
    return cf.env_method_table(data["results"], "Tau2") + "\n\n" + cf.grouping_table(data["grouping"])


def credit_study_methods() -> str:
    """docs/credit_study.md's table of every method per CreditFamily setting (learning-curve AUC, its paired
    differences to GRPO and to the ceiling), rebuilt from the committed cells."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import credit_study as cs

    rows = cs.summarise(cs.load_cells(CREDIT_STUDY_CELLS), smooth=2)
    return cs.markdown(rows)


def _learning_study_stats():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import learning_study_stats as st

    return st


def _json(path: Path) -> dict:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def learning_study() -> str:
    """docs/learning_study.md's tables: what the committed cells are (from the cells), then every comparison of the
    committed claims file (``python benchmarks/learning_study_stats.py claims --out ...`` writes it from the cells;
    tests/test_learning_study_stats.py checks it matches them)."""
    st = _learning_study_stats()
    import learning_study as ls

    return ls.run_facts(st.merge(st.CELLS)[0]) + "\n\n" + st.claims_markdown(_json(st.CLAIMS))


def learning_study_fidelity() -> str:
    """docs/learning_study.md's fidelity-learning relation, from the committed claims file."""
    st = _learning_study_stats()
    return st.fidelity_markdown(_json(st.CLAIMS))


def learning_study_learners() -> str:
    """docs/learning_study.md's two-learner table (linear vs the bundled trainer's token-level policy), from the
    committed claims file."""
    st = _learning_study_stats()
    return st.learners_markdown(_json(st.CLAIMS))


def learning_study_profiles() -> str:
    """docs/learning_study.md's performance profiles, from the committed claims file."""
    st = _learning_study_stats()
    return st.profiles_markdown(_json(st.CLAIMS))


def learning_study_replication() -> str:
    """docs/learning_study.md's replication table: every confirmed claim on the seeds run after the verdicts."""
    st = _learning_study_stats()
    return st.replication_markdown(_json(st.CLAIMS))


def learning_study_timing() -> str:
    """docs/learning_study.md's cost table: the committed cells' own wall times, from the committed claims file."""
    st = _learning_study_stats()
    return st.timing_markdown(_json(st.CLAIMS))


def learning_study_design_time() -> str:
    """docs/learning_study.md's design cost on an idle machine: the committed re-timed sample of the design."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import learning_study_design_time as dt

    return dt.markdown(_json(dt.RESULT), title=False)


def learning_study_rerun() -> str:
    """docs/learning_study.md's verdicts with every re-run of the whole design in place of its committed cell,
    against the committed verdicts (both claims files committed)."""
    st = _learning_study_stats()
    return st.verdict_changes_markdown(st.verdict_changes(_json(st.CLAIMS), _json(st.RERUN_CLAIMS)))


def learning_study_llm_probes() -> str:
    """docs/learning_study.md's probes of the token-level learner on real envs, from their committed cells."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import learning_study_llm as llm

    return llm.probe_markdown()


def learning_study_power() -> str:
    """docs/learning_study.md's power analysis, from the committed power file."""
    st = _learning_study_stats()
    return st.power_markdown(_json(st.POWER))


def learning_study_headline() -> str:
    """The README's learning-study bullet: the confirmed claims of the committed claims file."""
    st = _learning_study_stats()
    return st.headline(_json(st.CLAIMS))


FAULT_INJECTION = ROOT / "benchmarks" / "results" / "fault_injection_2026-12-06.json"


def fault_injection() -> str:
    """docs/failures.md's fault-injection table, rebuilt from the committed results file (the run takes minutes:
    ``python benchmarks/fault_injection.py`` writes a fresh one)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import json

    import fault_injection as fi

    return fi.markdown(json.loads(FAULT_INJECTION.read_text(encoding="utf-8")))


ENV_PAGES = ROOT / "docs"


def _registry() -> tuple[str, ...]:
    """stepgym's own env ids, from the registry of the checkout this script is in."""
    sys.path.insert(0, str(ROOT))
    import stepgym

    return stepgym.ENV_IDS


#: The env pages written in their env's folder (a built-in env is one folder): ``docs/<name>.md`` is generated from
#: ``stepgym/envs/<name>/README.md`` (:func:`env_page`); the other env pages are written in docs/.
ENV_READMES = {path.parent.name: path for path in sorted((ROOT / "stepgym" / "envs").glob("*/README.md"))}
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def _docs_link(target: str, folder: Path) -> str:
    """A link of a page in ``folder``, made relative to docs/ (a URL, an anchor or an absolute path unchanged)."""
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#|/", target):
        return target
    path, sep, anchor = target.partition("#")
    rel = os.path.relpath(os.path.normpath(folder / path), ROOT / "docs")
    return rel.replace(os.sep, "/") + sep + anchor


def env_page(readme: Path) -> str:
    """``docs/<name>.md`` from ``stepgym/envs/<name>/README.md``: the same text with its relative links made
    relative to docs/, and a line after the front matter naming the file to edit."""
    text = readme.read_text(encoding="utf-8")
    text = _LINK.sub(lambda m: m.group(1) + _docs_link(m.group(2), readme.parent) + m.group(3), text)
    note = (
        f"<!-- generated from {readme.relative_to(ROOT).as_posix()} by scripts/doc_figures.py --write: "
        "edit that file -->\n"
    )
    end = text.index("\n---\n", 4) + 5 if text.startswith("---\n") else 0
    return text[:end] + note + text[end:]


def env_pages() -> dict[str, dict]:
    """Each env page's front matter (``title``, and ``envs``: per env id it documents, the ``what`` and ``speed``
    cells of the env table and ``see_also`` pages), by page name, in the registry's order of their first env.

    Every registered env has exactly one page and every page's env is registered (else a one-line error)."""
    import yaml

    pages: dict[str, dict] = {}
    for stem in sorted({path.stem for path in ENV_PAGES.glob("*.md")} | set(ENV_READMES)):
        readme = ENV_READMES.get(stem)  # a generated page: read from its source
        text = (
            env_page(readme) if readme is not None else (ENV_PAGES / f"{stem}.md").read_text(encoding="utf-8")
        )
        if text.startswith("---\n"):
            meta = yaml.safe_load(text[4 : text.index("\n---\n", 4)]) or {}
            if "envs" in meta:
                pages[f"{stem}.md"] = meta
    owner: dict[str, str] = {}
    for name, meta in pages.items():
        for env_id in meta["envs"]:
            if env_id in owner:
                raise SystemExit(f"{env_id} is documented by two pages: {owner[env_id]} and {name}")
            owner[env_id] = name
    ids = _registry()
    missing = [i for i in ids if i not in owner]
    unknown = [i for i in owner if i not in ids]
    if missing or unknown:
        raise SystemExit(
            f"env pages and the registry differ: no page declares {missing} in its front matter's envs:; "
            f"pages declare envs that are not registered: {unknown}"
        )
    first = {name: min(ids.index(i) for i in meta["envs"]) for name, meta in pages.items()}
    return {name: pages[name] for name in sorted(pages, key=first.__getitem__)}


def env_table() -> str:
    """docs/envs.md's env table: one row per registered env, in the registry's order, from its page's front matter."""
    pages = env_pages()
    rows = {i: (name, meta) for name, meta in pages.items() for i in meta["envs"]}
    lines = ["| id | what | speed (this repo's benchmark scripts) | docs |", "|---|---|---|---|"]
    for env_id in _registry():
        name, meta = rows[env_id]
        cells = meta["envs"][env_id]
        links = [name, *cells.get("see_also", ())]
        docs = ", ".join(f"[{link.removesuffix('.md').replace('_', ' ')}]({link})" for link in links)
        lines.append(f"| `{env_id}` | {cells['what'].strip()} | {cells.get('speed', '').strip()} | {docs} |")
    return "\n".join(lines)


def env_nav() -> str:
    """mkdocs.yml's env pages under "Environments", in the registry's order (titles from the pages' front matter)."""
    return "\n".join(f"      - {meta['title']}: {name}" for name, meta in env_pages().items())


@dataclass(frozen=True)
class Figure:
    name: str
    build: Callable[[], str]
    page: Path = BENCHMARKS  # the file holding the figure's region
    comment: tuple[str, str] = ("<!-- ", " -->")  # how the page writes the region's markers
    whole: bool = False  # the figure is the whole file (a generated page), not a region


FIGURES = {
    f.name: f
    for f in (
        Figure("arg-stats", arg_stats),
        Figure("credit-fidelity", credit_fidelity),
        Figure("credit-fidelity-methods", credit_fidelity_methods, ROOT / "docs" / "credit_fidelity.md"),
        Figure("credit-fidelity-grouping", credit_fidelity_grouping, ROOT / "docs" / "credit_fidelity.md"),
        Figure("credit-fidelity-tau2", credit_fidelity_tau2, ROOT / "docs" / "credit_fidelity.md"),
        Figure("credit-study-methods", credit_study_methods, ROOT / "docs" / "credit_study.md"),
        Figure("learning-study", learning_study, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-fidelity", learning_study_fidelity, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-power", learning_study_power, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-learners", learning_study_learners, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-profiles", learning_study_profiles, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-replication", learning_study_replication, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-timing", learning_study_timing, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-design-time", learning_study_design_time, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-llm-probes", learning_study_llm_probes, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-rerun", learning_study_rerun, ROOT / "docs" / "learning_study.md"),
        Figure("learning-study-headline", learning_study_headline, README),
        Figure("fault-injection", fault_injection, ROOT / "docs" / "failures.md"),
        Figure("env-table", env_table, ROOT / "docs" / "envs.md"),
        Figure("env-pages", env_nav, ROOT / "mkdocs.yml", ("# ", "")),
        *(
            Figure(
                f"env-page-{name}",
                functools.partial(env_page, readme),
                ROOT / "docs" / f"{name}.md",
                whole=True,
            )
            for name, readme in ENV_READMES.items()
        ),
    )
}


def _region(name: str, comment: tuple[str, str] = ("<!-- ", " -->")) -> re.Pattern[str]:
    open_, close = (re.escape(c) for c in comment)
    return re.compile(
        rf"({open_}figure:{re.escape(name)}{close}\n)(.*?)(\n[ \t]*{open_}/figure:{re.escape(name)}{close})",
        re.S,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff if a page is stale")
    mode.add_argument("--write", action="store_true", help="write the fresh figures into their pages")
    ap.add_argument("--only", choices=sorted(FIGURES), action="append", help="just these figures")
    args = ap.parse_args(argv)
    texts: dict[Path, str] = {}
    stale = []
    for name in args.only or sorted(FIGURES):
        page = FIGURES[name].page
        text = texts.setdefault(page, page.read_text(encoding="utf-8") if page.exists() else "")
        open_, close = FIGURES[name].comment
        pattern = (
            re.compile("()(.*)()", re.S) if FIGURES[name].whole else _region(name, FIGURES[name].comment)
        )
        match = pattern.search(text)
        if match is None:
            raise SystemExit(
                f"{page.name} has no {open_}figure:{name}{close} … {open_}/figure:{name}{close} region"
            )
        fresh = FIGURES[name].build()
        if match.group(2) != fresh:
            stale.append(name)
            diff = difflib.unified_diff(
                match.group(2).splitlines(), fresh.splitlines(), page.name, "fresh", lineterm=""
            )
            print(f"figure {name} is stale:\n" + "\n".join(diff))
            texts[page] = text[: match.start(2)] + fresh + text[match.end(2) :]
    if args.write:
        for page, text in texts.items():
            page.write_text(text, encoding="utf-8")
        print(f"wrote {len(stale)} figure(s): {', '.join(stale) or 'none changed'}")
        return 0
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
