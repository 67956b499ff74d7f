"""The README stays true: a front page of at most 200 lines whose commands, presets, env ids and links match the
code, and whose first example runs in seconds with no data and no GPU. (The schema table and the results moved to
the docs site: tests/test_docs_pages.py checks them there.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from stepgym.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200
    head = "\n".join(README.splitlines()[:60])  # the first screen or two: what it is, and how to install it
    assert "pip install stepgym" in head


def test_the_two_commands_exist_and_ci_runs_the_test_command():
    assert (
        "bash scripts/setup.sh && STEPGYM_DATA=../shared/data stepgym train --preset alfworld-cpu" in README
    )
    assert "bash scripts/test.sh" in README
    assert (REPO / "scripts" / "setup.sh").is_file() and (REPO / "scripts" / "test.sh").is_file()
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_every_stepgym_command_and_preset_in_the_readme_exists():
    from stepgym.trainers.presets import TRAINER_PRESETS

    code = "\n".join(re.findall(r"```bash\n(.*?)```", README, flags=re.DOTALL))
    commands = set(re.findall(r"^stepgym (\w+)", code, flags=re.MULTILINE))
    commands |= set(re.findall(r"`stepgym (\w+)", README))
    assert commands and commands <= set(SUBCOMMANDS), commands - set(SUBCOMMANDS)
    presets = set(re.findall(r"--preset ([\w-]+)", README))
    assert presets and presets <= set(TRAINER_PRESETS), presets - set(TRAINER_PRESETS)


def test_every_relative_link_resolves():
    """Each relative link's file exists, and a link into a docs page names a heading that page has (the README is
    not part of the site, so `mkdocs build --strict` does not check its links)."""
    from markdown.extensions.toc import slugify

    for target, anchor in re.findall(r"\]\(([^)#:]+)(?:#([^)]*))?\)", README):
        assert (REPO / target).exists(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (REPO / target).read_text(encoding="utf-8"), flags=re.M)
            slugs = {slugify(h.replace("`", ""), "-") for h in headings}
            assert anchor in slugs, f"README links to {target}#{anchor}, which has no such heading"


def test_every_registered_env_is_in_the_readme():
    import stepgym

    for env_id in stepgym.ENV_IDS:
        assert f"`{env_id}`" in README, env_id
    named = set(re.findall(r"`(StepGym/[\w-]+)`", README))
    assert named <= set(stepgym.ENV_IDS), (
        f"the README names envs that are not registered: {named - set(stepgym.ENV_IDS)}"
    )


def test_the_first_example_runs_without_data_and_prints_what_its_comments_say(tmp_path):
    """Every ```python block of the README (the first example), run as one script in a fresh interpreter from an
    empty folder with no data root: it needs no data and no GPU. tests/test_wheel.py runs it from the built wheel."""
    code = "\n".join(re.findall(r"```python\n(.*?)```", README, flags=re.S))
    assert "gym.make(" in code and "shape_advantages" in code
    script = tmp_path / "first_example.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("STEPGYM_DATA", "ALFWORLD_DATA")}
    env["STEPGYM_CACHE"] = str(tmp_path / "empty-cache")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert "Room 2 of 4. You hold nothing." in out
    assert "stepgym/admissible: True" in out and "stepgym/expert_action: 'go forward'" in out
    # the arrays the comments quote
    assert "[ 0.91  0.91  0.91 -0.91 -0.91 -0.91]" in out
    assert "[ 0.91  0.    0.91 -1.1  -1.1  -0.55]" in out
