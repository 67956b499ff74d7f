"""Code shape: no function in the package is longer than 80 lines (docs/ conventions: a function reads on one
screen; longer ones are split into named steps), and a module over 400 lines says why on its first line."""

from __future__ import annotations

import ast
from pathlib import Path

import stepgym

MAX_LINES = 80
MAX_MODULE_LINES = 400
#: The first line of a module longer than :data:`MAX_MODULE_LINES`: the reason it is not split.
LONG_MODULE = "# Over 400 lines: "
PACKAGE = Path(stepgym.__file__).parent

# Functions allowed to be longer for now, by "<path under stepgym/>:<qualified name>". Each says why; the list
# is emptied once they are split.
ALLOWED: dict[str, str] = {}


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.AST]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                out.append((name, node))
            out += _functions(node, name + ".")
        else:
            out += _functions(node, prefix)
    return out


def _too_long() -> dict[str, int]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name, node in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            lines = node.end_lineno - node.lineno + 1  # def line to last line, docstring included
            if lines > MAX_LINES:
                found[f"{rel}:{name}"] = lines
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    long = {k: v for k, v in _too_long().items() if k not in ALLOWED}
    assert not long, f"functions over {MAX_LINES} lines (split them into named steps): {long}"


def test_the_allow_list_names_only_functions_that_are_still_long() -> None:
    """An entry whose function got short (or was renamed) must leave the list, so the list cannot go stale."""
    stale = sorted(set(ALLOWED) - set(_too_long()))
    assert not stale, f"no longer over {MAX_LINES} lines, remove from ALLOWED: {stale}"


def test_the_measure_counts_nested_functions_and_methods() -> None:
    body = "\n".join(["        x = 1"] * MAX_LINES)
    tree = ast.parse(f"class A:\n    def f(self):\n{body}\n        def g():\n            pass\n")
    names = {name: node.end_lineno - node.lineno + 1 for name, node in _functions(tree)}
    assert names["A.f"] == MAX_LINES + 3 and names["A.f.g"] == 2


def _long_modules() -> dict[str, str]:
    """Every module over the limit, with its first line."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_MODULE_LINES:
            out[path.relative_to(PACKAGE).as_posix()] = lines[0]
    return out


def test_a_module_over_400_lines_says_why_on_its_first_line() -> None:
    unexplained = [p for p, first in _long_modules().items() if not first.startswith(LONG_MODULE)]
    assert not unexplained, (
        f"modules over {MAX_MODULE_LINES} lines without a '{LONG_MODULE}<reason>' line: {unexplained}"
    )
    empty = [p for p, first in _long_modules().items() if len(first[len(LONG_MODULE) :].strip()) < 10]
    assert not empty, f"a reason is a sentence: {empty}"
