"""The package's layers, declared once, and the two import rules that keep them honest.

Dependencies point down only: a module may import its own layer or any layer below it, never one above (every
``import`` counts, those inside functions too, read from the source with ``ast`` as in tests/test_import_graph.py).
And a name that begins with ``_`` is private to its package: no module imports a private module or attribute of
another package (``stepgym`` itself counts as the package of its top-level modules, so its private helper modules
``stepgym._deps`` and ``stepgym._env_worker`` may be used by its top-level modules only). The layers are
:data:`LAYERS` below, top to bottom; ``scripts/api_report.py`` prints the counts these tests hold at zero.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_import_graph import PACKAGE, _modules, _resolve, import_statements

#: Top to bottom, one top-level module or package per layer (a layer shared by two would hide a loop between them).
#: A module belongs to the layer of the longest entry that is its name or a prefix of it. ``stepgym.steps``, the one
#: home of a step's data, sits below the bundled trainer and the adapters and above the envs, wrappers and shapers.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("stepgym.cli",),
    ("stepgym.integrations",),
    ("stepgym.llm_eval",),
    ("stepgym.serve",),
    ("stepgym.viewer",),
    ("stepgym.trainers",),
    ("stepgym.steps",),
    ("stepgym.group",),
    ("stepgym._env_worker",),
    ("stepgym.workers",),
    ("stepgym.graph_seeding",),
    ("stepgym.rollout",),
    ("stepgym.agents",),
    ("stepgym.recording",),
    ("stepgym.testing",),
    ("stepgym.values",),
    ("stepgym.wrappers",),
    ("stepgym.llm_client",),
    ("stepgym.reference_graph",),
    ("stepgym.envs",),
    ("stepgym.shapers",),
    ("stepgym.labels",),
    ("stepgym.hindsight",),
    ("stepgym.episodes",),
    ("stepgym.data",),
    ("stepgym.fetch",),
    ("stepgym.spaces",),
    ("stepgym.text_format",),
    ("stepgym.text_utils",),
    ("stepgym.schema",),
    ("stepgym.lazy",),
    ("stepgym.atomic",),
    ("stepgym._deps",),
    ("stepgym.errors",),
    ("stepgym",),
)


#: ``stepgym/__init__.py``, the facade: it registers the envs and exports a few names lazily. It is in no layer: any
#: module may import it (Python runs it before any submodule anyway), and its own imports are not checked.
FACADE = "stepgym"


def layer_of(module: str) -> int:
    best, level = "", None
    for i, entries in enumerate(LAYERS):
        for e in entries:
            if (module == e or module.startswith(e + ".")) and len(e) > len(best):
                best, level = e, i
    if level is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py")
    return level


def _package_of(module: str, is_pkg: bool) -> str:
    return module if is_pkg else module.rpartition(".")[0]


def violations(root: Path = PACKAGE) -> tuple[list[str], list[str]]:
    """(upward imports, private cross-package imports), each as 'file:line: what'."""
    modules = _modules(root)
    upward, private = [], []
    for module, (path, is_pkg) in sorted(modules.items()):
        if module == FACADE:
            continue
        mine = layer_of(module)
        here = _package_of(module, is_pkg)
        rel = path.relative_to(root.parent)
        for line, target, attr in import_statements(module, path, is_pkg):
            full = f"{target}.{attr}" if attr else target
            resolved = _resolve(full if full in modules else target, modules) or target
            if resolved == FACADE:  # `import stepgym` (its version, its env registration) is allowed anywhere
                continue
            if resolved != module and layer_of(resolved) < mine:
                upward.append(
                    f"{rel}:{line}: {module} (layer {mine}) imports {resolved} (layer {layer_of(resolved)})"
                )
            # private: the first `_x` part of what is imported belongs to the package that holds it (a private
            # module's parent package, a private attribute's module's package); only that package may import it
            parts = full.split(".")
            first = next(
                (i for i, p in enumerate(parts) if i and p.startswith("_") and not p.startswith("__")), None
            )
            if first is None:
                continue
            owner = ".".join(parts[:first])
            if owner in modules and not modules[owner][1]:
                owner = owner.rpartition(".")[0]
            if not (here == owner or here.startswith(owner + ".")):
                private.append(f"{rel}:{line}: {module} imports {full}")
    return upward, private


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        if module != FACADE:
            layer_of(module)


def test_every_layer_holds_one_top_level_module() -> None:
    """No shared layer: two top-level modules in one layer could import each other unseen."""
    assert all(len(entries) == 1 for entries in LAYERS), [e for e in LAYERS if len(e) > 1]
    names = [e for entries in LAYERS for e in entries]
    assert len(names) == len(set(names))
    assert all(n == FACADE or n.count(".") == 1 for n in names), "an entry is a top-level module or package"
    tops = {".".join(m.split(".")[:2]) for m in _modules() if m != FACADE}
    assert tops <= set(names), sorted(tops - set(names))


def test_steps_is_below_the_trainer_and_the_adapters_and_above_what_it_reads() -> None:
    steps = layer_of("stepgym.steps")
    for above in ("stepgym.trainers", "stepgym.integrations", "stepgym.cli"):
        assert layer_of(above) < steps, above
    for below in ("stepgym.shapers", "stepgym.wrappers", "stepgym.envs", "stepgym.schema"):
        assert layer_of(below) > steps, below


def test_no_lower_layer_imports_a_higher_one() -> None:
    upward, _ = violations()
    assert not upward, "imports running up the layers:\n" + "\n".join(upward)


def test_no_module_imports_a_private_name_of_another_package() -> None:
    _, private = violations()
    assert not private, "private names imported across packages:\n" + "\n".join(private)


@pytest.mark.parametrize(
    ("source", "upward", "private"),
    [
        ("from stepgym.trainers.grpo import GRPOTrainer\n", 1, 0),  # shapers → trainers: up
        ("from stepgym.schema import TASK_ID\n", 0, 0),  # down: fine
        ("from stepgym.trainers.teacher import _x\n", 1, 1),  # up, and a private name of another package
        ("def f():\n    from stepgym.cli import main\n", 1, 0),  # a lazy import counts too
    ],
)
def test_the_rules_catch_what_they_should(tmp_path: Path, source: str, upward: int, private: int) -> None:
    import shutil

    root = tmp_path / "stepgym"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.html", "*.yaml"))
    (root / "shapers" / "probe.py").write_text(source, encoding="utf-8")
    up, priv = violations(root)
    assert len([v for v in up if "probe.py" in v]) == upward
    assert len([v for v in priv if "probe.py" in v]) == private
