"""Print the package's shape in numbers: lines of code, imports running up the layers, private names imported
across packages, public names exported from more than one module, and functions with more than 8 parameters.

Run from a checkout: ``python scripts/api_report.py [--root PATH] [--list]`` (``PATH``: another checkout, to
compare; ``--list``: each name exported from more than one module, with those modules, instead of the counts).
The layer rules are tests/test_layers.py's (the numbers of the first two lines are what those tests hold at 0).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path


def _public_exports(path: Path) -> list[str]:
    """The names a module exports: its ``__all__`` when it has one."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            try:
                return [str(x) for x in ast.literal_eval(node.value)]
            except ValueError:
                return []
    return []


def _wide_functions(path: Path, limit: int = 8) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
            if len(names) > limit:
                out.append(f"{path}:{node.lineno} {node.name} ({len(names)})")
    return out


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def exporters(root: Path) -> dict[str, list[str]]:
    """Each public name exported from more than one module of ``root``'s package: the modules' dotted names,
    sorted (names and modules alike)."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "stepgym").rglob("*.py")):
        for name in set(_public_exports(path)):
            if not name.startswith("_"):
                found.setdefault(name, []).append(_module_name(path, root))
    return {name: sorted(mods) for name, mods in sorted(found.items()) if len(mods) > 1}


def report(root: Path) -> dict[str, int]:
    package = root / "stepgym"
    files = sorted(package.rglob("*.py"))
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)
    exported = Counter(n for p in files for n in set(_public_exports(p)) if not n.startswith("_"))
    # a package's __init__ re-exporting its modules' names is its facade, not a second definition
    modules_only = Counter(
        n for p in files if p.name != "__init__.py" for n in set(_public_exports(p)) if not n.startswith("_")
    )
    wide = [w for p in files for w in _wide_functions(p)]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import test_layers  # the layer declaration and both rules, from the checkout running this script

    upward, private = test_layers.violations(package)
    return {
        "lines of package code": lines,
        "imports running up the layers": len(upward),
        "private names imported across packages": len(private),
        "public names exported from more than one module": sum(1 for c in exported.values() if c > 1),
        "... of them outside package facades (__init__)": sum(1 for c in modules_only.values() if c > 1),
        "public names exported": len(exported),
        "functions with more than 8 parameters": len(wide),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--root", type=Path, default=Path(__file__).resolve().parents[1], help="a stepgym checkout"
    )
    ap.add_argument(
        "--list", action="store_true", help="list the names exported from more than one module, and where"
    )
    args = ap.parse_args(argv)
    if args.list:
        for name, modules in exporters(args.root).items():
            print(f"{name:30s} {' '.join(modules)}")
        return 0
    for name, value in report(args.root).items():
        print(f"{name:50s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
