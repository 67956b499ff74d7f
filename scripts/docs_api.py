"""The documentation site's API reference, generated at build time from the package's public modules.

MkDocs loads this file as a hook (``hooks:`` in ``mkdocs.yml``). It walks ``stepgym/`` and ``stepgym_verifiers/``
on disk (no import: griffe, behind mkdocstrings, reads the source statically, so building the docs never imports
torch or an engine) and, for every public module (no path part starting with ``_``, ``__init__`` standing for its
package), adds a page ``api/<dotted.name>.md`` holding one ``::: dotted.name`` directive, plus the navigation
under the ``API reference`` entry of ``nav``. A module that moves or is renamed moves its page with it; one that
disappears takes its page along, and a link to it from a guide fails ``mkdocs build --strict``.

Run as a script it lists the modules it would document: ``python scripts/docs_api.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stepgym", "stepgym_verifiers")
API_DIR = "api"
NAV_TITLE = "API reference"


def public_modules(root: Path = ROOT) -> list[str]:
    """Dotted names of every public module and package, sorted (a package before its modules)."""
    names = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(p.startswith("_") for p in parts):
                continue
            if not (root.joinpath(*parts[:-1]) / "__init__.py").exists() and len(parts) > 1:
                continue  # a loose script inside a data folder, not an importable module
            names.append(".".join(parts))
    return sorted(set(names), key=lambda n: n.split("."))


def page_path(module: str) -> str:
    return f"{API_DIR}/{module}.md"


def page_text(module: str) -> str:
    return f"::: {module}\n"


def _is_package(module: str, root: Path = ROOT) -> bool:
    return (root.joinpath(*module.split(".")) / "__init__.py").exists()


def api_nav(modules: list[str]) -> list:
    """Nested navigation: each package a section opening with its own page, then its modules and subpackages."""

    def section(package: str) -> list:
        items: list = [{package: page_path(package)}]
        children = [m for m in modules if m.rsplit(".", 1)[0] == package and m != package]
        for child in children:
            items.append({child: section(child)} if _is_package(child) else {child: page_path(child)})
        return items

    nav: list = [f"{API_DIR}/index.md"]
    for package in PACKAGES:
        if package in modules:
            nav.append({package: section(package)})
    return nav


# --- MkDocs hook events ----------------------------------------------------------------------------------------


def on_config(config):
    """Put the generated pages under the ``API reference`` entry of ``nav`` (which must exist)."""
    modules = public_modules()
    for i, entry in enumerate(config.nav or []):
        if isinstance(entry, dict) and NAV_TITLE in entry:
            config.nav[i] = {NAV_TITLE: api_nav(modules)}
            break
    else:
        raise ValueError(
            f"mkdocs.yml: nav needs an entry '{NAV_TITLE}: {API_DIR}/index.md' for the API pages"
        )
    return config


def on_files(files, config):
    """Add one generated page per public module (none is written to disk)."""
    from mkdocs.structure.files import File

    for module in public_modules():
        files.append(File.generated(config, page_path(module), content=page_text(module)))
    return files


if __name__ == "__main__":
    mods = public_modules()
    print("\n".join(mods))
    print(f"{len(mods)} modules", file=sys.stderr)
