"""scripts/_venv.sh: an integration venv that must see the parent environment sees the packages of whichever
interpreter runs the tests (a system Python, a virtualenv, a conda env), not only the base interpreter's, and fails
loudly when gymnasium/stepgym are not importable in it. (`python -m venv --system-site-packages` from inside a
virtualenv exposes the *base* interpreter's site-packages: the README's test command then stopped at collection
with ModuleNotFoundError.)"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _site_packages(venv: Path) -> Path:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _parent_venv(tmp_path: Path, *, sees_stack: bool) -> Path:
    """A throwaway virtualenv A (no pip) holding a marker module; with ``sees_stack`` it also sees this test
    interpreter's packages (gymnasium...), through a .pth file of its own, as a user's virtualenv would have them."""
    a = tmp_path / "parent"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(a)], check=True)
    sp = _site_packages(a)
    (sp / "stepgym_marker_mod.py").write_text("WHERE = 'parent'\n", encoding="utf-8")
    if sees_stack:
        dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
        lines = [f"import site; site.addsitedir({d!r})" for d in sorted(dirs) if os.path.isdir(d)]
        (sp / "_test_stack.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return a


def _venv_for(parent: Path, child: Path, then: str) -> subprocess.CompletedProcess[str]:
    script = f'source scripts/_venv.sh && venv_for test "{child}" --sees-parent --without-pip && {then}'
    env = {**os.environ, "PYTHON": str(parent / "bin" / "python"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_layered_venv_sees_the_parent_virtualenv_and_shadows_it(tmp_path: Path) -> None:
    parent, child = _parent_venv(tmp_path, sees_stack=True), tmp_path / "child"
    proc = _venv_for(parent, child, '"$VPY" -c "import stepgym_marker_mod as m; print(m.WHERE)"')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "parent"
    # the child's own installs win over the parent's (what lets verifiers pin an older openai)
    (_site_packages(child) / "stepgym_marker_mod.py").write_text("WHERE = 'child'\n", encoding="utf-8")
    proc = _venv_for(parent, child, '"$VPY" -c "import stepgym_marker_mod as m; print(m.WHERE)"')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "child"


def test_a_parent_without_stepgyms_stack_fails_loudly(tmp_path: Path) -> None:
    parent, child = _parent_venv(tmp_path, sees_stack=False), tmp_path / "child"
    proc = _venv_for(parent, child, "echo reached")
    assert proc.returncode != 0
    assert "reached" not in proc.stdout
    assert "cannot import gymnasium/stepgym" in proc.stderr and str(parent) in proc.stderr


# Every script that builds an integration venv (found by what it sources, so a new one cannot be left out).
_INTEGRATION_SCRIPTS = sorted(
    p.name
    for p in (ROOT / "scripts").glob("test_*.sh")
    if "scripts/_venv.sh" in p.read_text(encoding="utf-8")
)


def test_the_integration_scripts_are_all_found() -> None:
    assert {"test_openenv.sh", "test_verifiers.sh", "test_verl.sh", "test_vllm_cpu.sh"} <= set(
        _INTEGRATION_SCRIPTS
    )


@pytest.mark.parametrize("script", _INTEGRATION_SCRIPTS)
def test_every_integration_script_checks_its_venv(script: str) -> None:
    text = (ROOT / "scripts" / script).read_text(encoding="utf-8")
    assert "source scripts/_venv.sh" in text and "--system-site-packages" not in text
    assert "venv_check" in text or "--sees-parent" in text
