"""A shaper registered from outside the package is found by the pipeline and trains through ``stepgym train``
(issue 13: "a registry that does nothing"). The module below is written to a temporary folder, as a user's own
file would be, and named with ``--shaper-module``."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from stepgym.errors import StepGymError
from stepgym.shapers import available, load_shaper_modules

USER_MODULE = textwrap.dedent(
    '''
    """A user's shaper: RLOO's leave-one-out baseline (s - mean of the *other* rows of the group)."""
    import numpy as np

    from stepgym.shapers import BaseAdvantage, register

    CALLS = []


    @register("{name}", stage="base")
    def leave_one_out(batch, config, scores):
        g = np.asarray(batch.group_ids)
        n = np.bincount(g)[g].astype(float)
        total = np.bincount(g, weights=scores)[g]
        others = np.where(n > 1, (total - scores) / np.maximum(n - 1, 1), 0.0)
        CALLS.append(len(scores))
        return BaseAdvantage(scores - others)
    '''
)


def _write(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(USER_MODULE.format(name=name), encoding="utf-8")
    return path


def test_load_shaper_modules_by_file_and_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_shaper_modules([str(_write(tmp_path, "rloo_file"))])
    assert "rloo_file" in available("base")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    _write(pkg, "rloo_named")
    monkeypatch.syspath_prepend(str(pkg))
    load_shaper_modules(["rloo_named"])
    assert "rloo_named" in available("base")
    with pytest.raises(StepGymError, match="could not be imported"):
        load_shaper_modules(["no_such_module_xyz"])
    with pytest.raises(StepGymError, match="no such file"):
        load_shaper_modules([str(tmp_path / "missing.py")])


@pytest.mark.slow
def test_a_shaper_registered_outside_the_package_trains_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tyro")
    from stepgym.cli import main

    name = "user_rloo"
    module = _write(tmp_path, name)
    out = tmp_path / "run"
    args = [
        "train",
        "--shaper-module",
        str(module),
        "--shaper.base",
        name,
        "--run.output-dir",
        str(out),
        "--run.iterations",
        "1",
        "--run.no-progress",
        "--run.no-tensorboard",
        "--run.no-report",
        "--run.threads",
        "1",
        "--rollout.backend",
        "scripted",
        "--rollout.scripted-policy",
        "noisy-expert:0.5",
        "--rollout.n-tasks",
        "2",
        "--rollout.group-size",
        "3",
        "--rollout.max-response-tokens",
        "8",
        "--model.tokenizer-corpus-episodes",
        "8",
        "--eval.limit",
        "1",
    ]
    assert main(args) == 0
    user = sys.modules[f"stepgym_user_{name}"]
    assert user.CALLS and user.CALLS[0] > 0  # the pipeline called the user's stage on the batch
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["shaper"]["base"] == name
    rec = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert rec["iteration"] == 1
    # an unregistered name is refused before anything is built, naming the way to register it
    with pytest.raises(SystemExit):
        main(["train", "--shaper.base", "not_registered_anywhere", "--run.output-dir", str(tmp_path / "x")])
