"""No import circle inside the package: every ``import`` between stepgym's modules points one way.

The graph is read from the source (``ast``), not by importing, and it counts *every* import statement, those inside
functions included: a lazy import keeps ``import stepgym`` light but still ties two modules together, and a
circle of lazy imports (``cli.rollout`` → ``llm_eval`` → ``trainers.evaluate`` → ``trainers.collector`` →
``trainers.backends`` → ``llm_eval``, and ``llm_eval`` back to the CLI for a helper) is the tangle this test
keeps out. ``import a.b.c`` is an edge to ``a.b.c`` only; the parent packages' ``__init__`` modules that Python
runs on the way are not edges (they are the packages' own business and import nothing of their children's).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stepgym"


def _modules(root: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _resolve(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The module ``name`` refers to: itself, or (``from pkg import attr``) its longest known prefix."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_statements(module: str, path: Path, is_pkg: bool) -> list[tuple[int, str, str | None]]:
    """``(line, module imported from, attribute or None)`` for every stepgym import of ``module``, relative
    imports made absolute (``import a.b`` gives ``("a.b", None)``, ``from a import b`` gives ``("a", "b")``)."""
    base = module if is_pkg else module.rpartition(".")[0]
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "stepgym"]
        elif isinstance(node, ast.ImportFrom):
            pkg = node.module or ""
            if node.level:
                anchor = base
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                pkg = f"{anchor}.{pkg}" if pkg else anchor
            if pkg.split(".")[0] == "stepgym":
                out += [(node.lineno, pkg, a.name) for a in node.names]
    return out


def _imports(module: str, path: Path, is_pkg: bool, modules: dict[str, tuple[Path, bool]]) -> set[str]:
    found: set[str] = set()
    for _, pkg, attr in import_statements(module, path, is_pkg):
        target = f"{pkg}.{attr}" if attr and f"{pkg}.{attr}" in modules else pkg
        if resolved := _resolve(target, modules):
            found.add(resolved)
    found.discard(module)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(root)
    return {m: _imports(m, p, is_pkg, modules) for m, (p, is_pkg) in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as ``[a, b, ..., a]``, or ``[]`` (an iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt) and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return []


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "stepgym.trainers.vllm_backend" in graph["stepgym.trainers.backends"]  # lazy imports are seen
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_checker_finds_a_circle_through_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "stepgym"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from stepgym.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (pkg / "c.py").write_text("import stepgym.a\ndef g(): pass\n")
    cycle = find_cycle(import_graph(pkg))
    assert cycle[0] == cycle[-1] and set(cycle) == {"stepgym.a", "stepgym.sub.b", "stepgym.c"}
    (pkg / "c.py").write_text("def g(): pass\n")
    assert find_cycle(import_graph(pkg)) == []


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("stepgym.llm_eval", "stepgym.cli.endpoint"),
        ("stepgym.trainers.endpoint_backend", "stepgym.llm_eval"),
        ("stepgym.trainers.backends", "stepgym.llm_eval"),
    ],
)
def test_library_modules_do_not_import_upwards(lower: str, upper: str) -> None:
    assert upper not in import_graph()[lower]
