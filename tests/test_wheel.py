"""The package people install works: the wheel and sdist build with ``python -m build``, and the BUILT WHEEL (not
this checkout) runs the README's first example and ``stepgym --help`` in a fresh virtualenv.

How the virtualenv is made: ``python -m venv`` (no system site packages), then ``pip install --no-deps`` of the
built wheel, so stepgym itself comes only from the wheel. Its dependencies (gymnasium, numpy, pettingzoo, ...) are
not downloaded again: a ``.pth`` file appends the site-packages folders of the interpreter running the tests as
plain paths. Plain paths, not ``site.addsitedir``: that interpreter's own ``.pth`` files (among them the editable
install of the checkout) are not read, so the checkout cannot be imported; everything runs from an empty temporary
folder with ``PYTHONPATH`` unset, and the test asserts that ``stepgym`` was imported from the virtualenv.

The build runs in an isolated build environment, as ``pip install`` of the sdist would (it needs the build
backend, setuptools, from the package index or pip's cache), on a copy of the package's files in a temporary folder,
so the checkout is left untouched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# what `python -m build` reads: the metadata files and the packages (pyproject.toml's packages.find include)
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CHANGELOG.md", "CITATION.cff")
PACKAGES = ("stepgym", "stepgym_verifiers")

pytest.importorskip("build", reason="the `dev` extra has `build`: pip install -e '.[dev]'")


def first_example() -> str:
    """The README's first ```python block: the example a newcomer runs first (no data, no GPU)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", readme, flags=re.S).group(1)


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        shutil.copy2(REPO / name, src / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], cwd=src)
    return out


def _tracked_package_files() -> set[str]:
    """Every file of the packages that git tracks (the checkout's truth), as wheel paths."""
    done = subprocess.run(
        ["git", "ls-files", *PACKAGES], cwd=REPO, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:  # not a git checkout: the files on disk
        return {
            str(p.relative_to(REPO))
            for pkg in PACKAGES
            for p in (REPO / pkg).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
    return set(done.stdout.split())


def test_the_wheel_holds_every_package_file_and_the_metadata(dist: Path) -> None:
    (wheel,) = dist.glob("stepgym-*.whl")
    (sdist,) = dist.glob("stepgym-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        meta = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    missing = sorted(_tracked_package_files() - names)
    assert not missing, (
        f"files of the package missing from the wheel (pyproject.toml package-data): {missing}"
    )
    assert "License-Expression: MIT" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Description-Content-Type: text/markdown" in meta and "pip install stepgym" in meta
    for extra in ("alfworld", "webshop", "searchqa", "train", "trl", "serve", "docs", "dev"):
        assert f"Provides-Extra: {extra}\n" in meta, extra
    assert "Classifier: Programming Language :: Python :: 3.11" in meta
    with tarfile.open(sdist) as archive:
        in_sdist = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "CHANGELOG.md", "CITATION.cff", "pyproject.toml"} <= in_sdist


def _fresh_venv(root: Path) -> Path:
    """A new virtualenv that sees the test interpreter's installed packages as plain paths (docstring)."""
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    vpy = venv / "bin" / "python"
    own = _run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root)
    parent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    lines = [p for p in sorted(parent) if os.path.isdir(p)]
    Path(own.stdout.strip(), "_parent_site.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return venv


def test_the_built_wheel_runs_the_first_example_and_the_cli(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("stepgym-*.whl")
    venv = _fresh_venv(tmp_path)
    vpy = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    pip = [str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index"]
    _run([*pip, str(wheel)], cwd=cwd, env=env)

    where = _run([str(vpy), "-c", "import stepgym; print(stepgym.__file__)"], cwd=cwd, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv), (
        f"stepgym was imported from {where}, not from the installed wheel"
    )

    (cwd / "first_example.py").write_text(first_example(), encoding="utf-8")
    out = _run([str(vpy), "first_example.py"], cwd=cwd, env=env).stdout
    assert "Room 2 of 4" in out and "stepgym/admissible: True" in out, out

    helped = _run([str(venv / "bin" / "stepgym"), "--help"], cwd=cwd, env=env).stdout
    assert helped.startswith("usage: stepgym") and "train" in helped and "view" in helped
    # a packaged data file: the viewer's page and the verl configs come from the wheel
    check = (
        "import pathlib, stepgym; root = pathlib.Path(stepgym.__file__).parent; "
        "assert (root / 'viewer' / 'page.html').is_file(); "
        "assert (root / 'integrations' / 'verl' / 'config' / 'alfworld.yaml').is_file()"
    )
    _run([str(vpy), "-c", check], cwd=cwd, env=env)
