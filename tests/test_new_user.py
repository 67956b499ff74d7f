"""What a new user met (issue 55): the current folder, a preset's env options on another env, ``eval --checkpoint``,
options checked before the run, the CPU recipes, and the messages and help that name what exists.

The console-script test runs ``stepgym`` (the installed script, not ``python -m``) from a folder holding the user's
module, with ``PYTHONPATH`` naming only this checkout (so the script runs this code), never the module's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stepgym.errors import InvalidArgumentError

REPO = Path(__file__).resolve().parents[1]


def _guess_module(folder: Path) -> None:
    from test_byo_env import PAGE, page_script

    modules, _ = page_script(PAGE.read_text(encoding="utf-8"))
    (folder / "guess_env.py").write_text(modules["guess_env.py"], encoding="utf-8")


def _console_script() -> str:
    found = shutil.which("stepgym") or str(Path(sys.executable).parent / "stepgym")
    if not Path(found).is_file():
        pytest.skip("the stepgym console script is not installed")
    return found


@pytest.mark.slow
def test_console_script_finds_a_module_in_the_current_folder(tmp_path: Path) -> None:
    _guess_module(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # this checkout's stepgym; the module's folder is only the current folder
    assert str(tmp_path) not in env["PYTHONPATH"].split(os.pathsep)
    script = _console_script()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )

    rollout = run(
        "rollout", "--env", "guess_env:MyOrg/Guess-v0", "--agent", "random", "--limit", "2", "--no-progress"
    )
    assert rollout.returncode == 0, rollout.stderr
    assert "random on guess_env:MyOrg/Guess-v0" in rollout.stdout
    # train and eval import the module, then refuse the misspelled evaluation split before anything is built
    for command in ("train", "eval"):
        done = run(command, "--env.id", "guess_env:MyOrg/Guess-v0", "--env.eval-splits", "tset")
        assert done.returncode == 1, (command, done.stderr)
        assert "has no split 'tset'" in done.stderr and "cannot import" not in done.stderr, done.stderr
        assert not (tmp_path / "runs").exists()
    server = subprocess.Popen(
        [script, "serve", "guess_env:MyOrg/Guess-v0", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = server.stdout.readline() if server.stdout else ""
        assert " at http://" in ready, server.stderr.read() if server.stderr else ready
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_the_current_folder_is_appended_to_sys_path(tmp_path: Path, monkeypatch) -> None:
    from stepgym.cli import add_cwd_to_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    add_cwd_to_path()
    assert sys.path[-1] == str(tmp_path)
    add_cwd_to_path()
    assert sys.path.count(str(tmp_path)) == 1


def test_a_presets_env_options_are_dropped_when_the_env_changes(capsys) -> None:
    from stepgym.cli.train import parse_config

    cfg = parse_config(["--preset", "credit-gigpo", "--env.id", "StepGym/Sokoban-v0"])
    assert cfg.env.id == "StepGym/Sokoban-v0" and cfg.env.kwargs == "{}"
    err = capsys.readouterr().err
    assert "preset credit-gigpo" in err and "n_rooms" in err and "--env.kwargs" in err
    assert len(err.strip().splitlines()) == 1
    # the options stay on the preset's own env, and options given on the command line are the user's
    assert parse_config(["--preset", "credit-gigpo"]).env.kwargs != "{}"
    given = parse_config(
        ["--preset", "credit-gigpo", "--env.id", "StepGym/Sokoban-v0", "--env.kwargs", '{"n_tasks": 3}']
    )
    assert given.env.kwargs == '{"n_tasks": 3}'
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env.eval-splits", "tset"], "has no split 'tset'; its splits are train, valid"),
        (["--env.id", "StepGym/Sokobon-v0"], "did you mean StepGym/Sokoban-v0?"),
        (["--model.name", "tinny"], "did you mean tiny?"),
        (["--env.kwargs", '{"n_roms": 3}'], "takes no option n_roms"),
        (["--env.train-split", "tran"], "has no split 'tran'"),
        (["--record.compare", "gigpo-alfwrld"], "no shaper preset 'gigpo-alfwrld'"),
        (
            ["--preset", "sokoban-gigpo", "--env.id", "StepGym/CreditToy-v0"],
            "comes from preset sokoban-gigpo",
        ),
    ],
)
def test_every_option_is_checked_before_the_run(tmp_path: Path, argv: list[str], message: str) -> None:
    from stepgym.cli.train import train_main

    out = tmp_path / "run"
    with pytest.raises(InvalidArgumentError, match=message.replace("?", r"\?")):
        train_main([*argv, "--run.output-dir", str(out), "--run.no-progress"])
    assert not out.exists()  # refused before anything was built or written


@pytest.mark.slow
def test_eval_checkpoint_evaluates_what_was_trained(tmp_path: Path, capsys) -> None:
    from stepgym.cli.eval import main as eval_main
    from stepgym.cli.train import train_main

    run = tmp_path / "run"
    common = [
        "--run.no-progress",
        "--warmup.steps",
        "0",
        "--rollout.n-tasks",
        "2",
        "--rollout.group-size",
        "2",
    ]
    trained = [
        "--preset",
        "credit-grpo",
        "--run.iterations",
        "1",
        "--env.eval-splits",
        "train",
        "--eval.limit",
        "2",
    ]
    train_main(
        [
            *trained,
            "--rollout.max-response-tokens",
            "6",
            "--env.max-steps",
            "4",
            "--run.output-dir",
            str(run),
            *common,
        ]
    )
    capsys.readouterr()
    # nothing repeated: the run's env, options, split, step limit and response length; results under the run
    assert eval_main(["--checkpoint", str(run), "--run.no-progress"]) == 0
    results = json.loads((run / "eval" / "eval.json").read_text(encoding="utf-8"))
    assert [r["split"] for r in results] == ["train"] and results[0]["n_tasks"] == 2
    evaluated = json.loads((run / "eval" / "config.json").read_text(encoding="utf-8"))
    assert evaluated["env"]["id"] == "StepGym/CreditToy-v0" and evaluated["env"]["max_steps"] == 4
    assert json.loads(evaluated["env"]["kwargs"]) == {"n_rooms": 5, "n_distractors": 2}
    assert evaluated["rollout"]["max_response_tokens"] == 6
    assert not Path("runs/stepgym-eval").exists() or Path("runs/stepgym-eval").resolve() != run
    # a flag that names another env or model than the run's is one line
    for flag, value in (("--env.id", "StepGym/Sokoban-v0"), ("--model.name", "smollm2-135m-instruct")):
        with pytest.raises(InvalidArgumentError, match=f"was trained with {flag}"):
            eval_main(["--checkpoint", str(run), flag, value])


def _env_prefixes() -> set[str]:
    from stepgym.trainers.presets import TRAINER_PRESETS

    return {name.partition("-")[0] for name in TRAINER_PRESETS} - {"credit"}  # credit-*: the CPU toy already


def test_every_env_with_a_preset_has_a_cpu_recipe() -> None:
    from stepgym.trainers.presets import TRAINER_PRESETS, get_preset

    assert {"sokoban", "textcraft", "babyai", "scienceworld", "alfworld"} <= _env_prefixes()
    for env in _env_prefixes():
        cfg = get_preset(f"{env}-cpu")
        assert cfg.model.name in ("tiny", "smollm2-135m-instruct"), env
        # small, but long enough for the format warm-up's replies (test_cpu_recipe_runs_one_iteration checks them)
        assert cfg.rollout.max_response_tokens <= 96 and cfg.rollout.n_tasks * cfg.rollout.group_size <= 8
        limit = cfg.eval.max_steps or cfg.env.max_steps
        assert 0 < limit <= 16 and max(cfg.eval.budgets) == limit, (env, cfg.eval.budgets, limit)
        assert "GiGPO" not in TRAINER_PRESETS[f"{env}-grpo"][0] if f"{env}-grpo" in TRAINER_PRESETS else True


def test_trainer_page_lists_every_preset() -> None:
    from stepgym.trainers.presets import TRAINER_PRESETS, preset_table

    page = (REPO / "docs" / "trainer.md").read_text(encoding="utf-8")
    block = page.split("<!-- presets:start -->\n", 1)[1].split("\n<!-- presets:end -->", 1)[0]
    assert block == preset_table(), "docs/trainer.md's preset table is stale: python scripts/preset_table.py"
    assert all(f"| `{name}` |" in block for name in TRAINER_PRESETS)


_DATA = {"webshop": "webshop", "searchqa": "searchqa"}


@pytest.mark.slow
@pytest.mark.parametrize("env", ["sokoban", "textcraft", "babyai", "scienceworld", "webshop", "searchqa"])
def test_cpu_recipe_runs_one_iteration(tmp_path: Path, env: str, capsys, caplog) -> None:
    """Each CPU recipe trains an iteration from the command line, and its response budget fits every reply of its
    format warm-up (a longer one is cut before its action closes: one warning line, none here)."""
    from stepgym.cli.train import train_main

    if env == "scienceworld":
        pytest.importorskip("scienceworld")
    if env in _DATA and not (Path(os.environ.get("STEPGYM_DATA", "/nonexistent")) / _DATA[env]).is_dir():
        pytest.skip(f"{env} needs its data under $STEPGYM_DATA")
    out = tmp_path / "run"
    argv = [
        "--preset",
        f"{env}-cpu",
        "--run.iterations",
        "1",
        "--eval.limit",
        "2",
        "--run.output-dir",
        str(out),
    ]
    with caplog.at_level("WARNING"):
        assert train_main([*argv, "--run.no-progress"]) == 0
    assert "format warm-up" not in caplog.text  # no reply over the budget
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert lines[-1]["iteration"] == 1 if "iteration" in lines[-1] else len(lines) == 1
    assert (out / "checkpoints").is_dir() and "eval " in capsys.readouterr().out


_ONE = ("--run.iterations", "1", "--eval.limit", "1", "--warmup.steps", "1")


@pytest.mark.slow
def test_train_prints_each_phase(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "stepgym.cli",
            "train",
            "--preset",
            "sokoban-cpu",
            *_ONE,
            "--run.output-dir",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for phase in ("model (tiny", "format warm-up", "rollout", "scoring", "shaping", "update", "eval test"):
        assert f"stepgym train: {phase}" in run.stderr or f": {phase}" in run.stderr, phase
    assert "iteration 1/1: update: " in run.stderr


def test_help_lists_what_exists() -> None:
    from stepgym.cli import _usage
    from stepgym.cli.endpoint import _format_names
    from stepgym.cli.train import _short_help
    from stepgym.shapers.registry import available
    from stepgym.wrappers.text import FORMATS

    train_line = next(line for line in _usage().splitlines() if line.strip().startswith("train "))
    for name in ("GraphGPO", "HGPO", "RewardFlow", "G2PO", "Oracle", "ProAS", "AHEAD", "StepOPSD"):
        assert name in train_line, name
    assert len(available("base")) <= train_line.count(",") + 2
    assert all(name in _format_names() for name in FORMATS)
    assert "stepgym.envs.sokoban.prompt:FORMAT" in _format_names()
    short = _short_help([], "stepgym train")
    assert "--model.tokenizer-corpus-episodes" in short and "--no-progress" in short


def test_no_progress_is_accepted_both_ways() -> None:
    from stepgym.cli.rollout import build_parser
    from stepgym.cli.train import parse_config, progress_alias

    assert build_parser().parse_args(["--run.no-progress"]).no_progress
    assert build_parser().parse_args(["--no-progress"]).no_progress
    assert not parse_config(progress_alias(["--no-progress"])).run.progress
    assert not parse_config(["--run.no-progress"]).run.progress


def test_check_text_env_takes_an_env_or_a_factory() -> None:
    import gymnasium as gym

    from stepgym.envs.credit import CreditToyEnv
    from stepgym.testing import check_text_env

    env = gym.make("StepGym/CreditToy-v0")
    check_text_env(env)  # the env itself: its spec makes the copies
    check_text_env(lambda: gym.make("StepGym/CreditToy-v0"))
    env.close()
    with pytest.raises(TypeError, match="check_text_env needs a factory"):
        check_text_env(CreditToyEnv())


def test_getting_started_lists_every_extra_of_an_env() -> None:
    page = (REPO / "docs" / "getting_started.md").read_text(encoding="utf-8")
    for extra in ("sokoban", "textcraft", "babyai", "scienceworld"):
        assert f"`{extra}`" in page, extra


def test_eval_budgets_fit_the_step_limit() -> None:
    from stepgym.cli.train import parse_config

    assert parse_config(["--env.max-steps", "8"]).eval.budgets == (
        2,
        3,
        5,
        6,
        8,
    )  # not 10..50 on an 8-step env
    assert max(parse_config(["--env.id", "StepGym/Sokoban-v0", "--env.max-steps", "12"]).eval.budgets) == 12
    assert parse_config(["--env.max-steps", "8", "--eval.budgets", "20", "30"]).eval.budgets == (20, 30)
    assert parse_config(["--env.max-steps", "60"]).eval.budgets == (10, 20, 30, 40, 50)  # they fit: kept
