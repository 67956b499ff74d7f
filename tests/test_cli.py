"""The real ``stepgym`` command, run as a subprocess: expected failures print one message, bugs a traceback.

Every case runs ``python -m stepgym.cli`` (the console script's ``main``) on this checkout, so what is checked is
what a user sees on stderr and as the exit status.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _stepgym(
    *args: str, extra_env: dict[str, str] | None = None, pythonpath: str = ""
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STEPGYM_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "stepgym.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def _assert_clean_failure(out: subprocess.CompletedProcess, *fragments: str) -> None:
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.splitlines()[0].startswith("stepgym ")
    for fragment in fragments:
        assert fragment in out.stderr, out.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_data_prints_the_fix_without_a_traceback(tmp_path: Path) -> None:
    out = _stepgym("rollout", "--limit", "1", extra_env={"STEPGYM_DATA": str(tmp_path)})
    _assert_clean_failure(out, "stepgym rollout: error: No alfworld data found", "stepgym download alfworld")
    assert "--debug" in out.stderr  # says how to get the traceback


@pytest.mark.parametrize("how", ["flag-first", "flag-last", "env"])
def test_debug_shows_the_traceback(tmp_path: Path, how: str) -> None:
    args = ["rollout", "--limit", "1"]
    env = {"STEPGYM_DATA": str(tmp_path)}
    if how == "flag-first":
        args = ["--debug", *args]
    elif how == "flag-last":
        args = [*args, "--debug"]
    else:
        env["STEPGYM_DEBUG"] = "1"
    out = _stepgym(*args, extra_env=env)
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "DataNotFoundError" in out.stderr
    assert "No alfworld data found" in out.stderr


def test_download_without_a_network_is_one_message(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{_closed_port()}"
    out = _stepgym("download", "webshop", "--dest", str(tmp_path / "w"), "--base-url", base)
    _assert_clean_failure(out, f"could not download {base}/")


def test_a_missing_extra_names_the_pip_command(tmp_path: Path, data_dir: Path) -> None:
    blocked = tmp_path / "blocked"
    (blocked / "alfworld").mkdir(parents=True)
    (blocked / "alfworld" / "__init__.py").write_text(
        "raise ImportError('not installed (blocked by the test)')\n"
    )
    out = _stepgym("rollout", "--limit", "1", pythonpath=str(blocked))
    _assert_clean_failure(out, "`alfworld` is not installed", "pip install 'stepgym[alfworld]'")


def test_an_unknown_env_id_is_one_message() -> None:
    out = _stepgym("rollout", "--env", "StepGym/NoSuchEnv-v0")
    _assert_clean_failure(out, "NoSuchEnv")


def test_an_unexpected_exception_keeps_its_traceback() -> None:
    # a string where the env expects an int reaches Python's own TypeError: a bug-shaped failure
    out = _stepgym("rollout", "--env-kwarg", 'max_steps="ten"')
    assert out.returncode != 0
    assert "Traceback" in out.stderr and "TypeError" in out.stderr


def test_unknown_command_and_help() -> None:
    out = _stepgym("nope")
    assert out.returncode == 2 and "unknown command 'nope'" in out.stderr
    out = _stepgym("--help")
    assert out.returncode == 0 and "--debug" in out.stdout and "rollout" in out.stdout


# ---------------------------------------------------------------------------------------------------------------
# Bad values end in one line naming the fix (issue 28: items 6, 7, 8, 14)
# ---------------------------------------------------------------------------------------------------------------
def _assert_one_line(out: subprocess.CompletedProcess, *fragments: str) -> None:
    _assert_clean_failure(out, *fragments)
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


TOY = "StepGym/CreditToy-v0"


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["train", "--preset", "alfworld-gigp"],
            ["unknown preset 'alfworld-gigp'", "--preset alfworld-gigpo"],
        ),
        (["eval", "--preset", "nope"], ["unknown preset 'nope'", "--list-presets"]),
        (["rollout", "--env", TOY, "--split", "valid_seen"], ["has no split 'valid_seen'", "train, valid"]),
        (["arg", "stats", "--env", TOY, "--split", "test"], ["has no split 'test'", "--split valid"]),
        (["eval", "--model", "m", "--env", TOY, "--split", "x"], ["has no split 'x'", "train, valid"]),
        (
            ["rollout", "--env", TOY, "--agent", "noisy", "--error-rate", "-0.5"],
            ["--error-rate", "between 0 and 1"],
        ),
        (["rollout", "--env", TOY, "--max-steps", "-1"], ["--max-steps must be 0 or more", "env's default"]),
        (
            ["rollout", "--env", TOY, "--limit", "-3"],
            ["--limit must be 0 or more, got -3", "the whole split"],
        ),
        (["arg", "build", "--env", TOY, "--out", "x.json", "--limit", "-3"], ["--limit must be 0 or more"]),
        (["eval", "--model", "m", "--env", TOY, "--limit", "-3"], ["--limit must be 0 or more"]),
        (["train", "--run.iterations", "-1"], ["--run.iterations must be 0 or more, got -1"]),
        (["train", "--preset", "credit-grpo", "--eval.limit", "-2"], ["--eval.limit must be 0 or more"]),
        (["rollout", "--env", TOY, "--env-kwarg", "max_steps"], ["--env-kwarg expects KEY=VALUE"]),
    ],
)
def test_bad_values_are_one_line(args: list[str], fragments: list[str]) -> None:
    out = _stepgym(*args, extra_env={"OPENAI_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1"})
    _assert_one_line(out, *fragments)


def test_training_into_a_used_folder_names_resume_and_output_dir(tmp_path: Path) -> None:
    from stepgym.trainers.checkpoint import checkpoint_name

    run = tmp_path / "run"
    state = run / "checkpoints" / checkpoint_name(2) / "trainer_state.json"
    state.parent.mkdir(parents=True)
    state.write_text("{}")
    out = _stepgym("train", "--preset", "credit-grpo", "--run.output-dir", str(run))
    _assert_one_line(out, "already holds a training run", "--run.resume auto", "--run.output-dir")
    out = _stepgym("train", "--preset", "credit-grpo", "--run.resume", str(tmp_path / "nothing-here"))
    _assert_one_line(out, "--run.resume", "not a complete stepgym checkpoint")


def test_the_split_defaults_to_the_envs_evaluation_split() -> None:
    out = _stepgym("rollout", "--env", TOY, "--limit", "2", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert f"expert on {TOY} (valid, a stratified sample of 2 tasks (seed 0))" in out.stdout


def test_limit_zero_is_the_whole_split(tmp_path: Path) -> None:
    out = _stepgym(
        "rollout",
        "--env",
        TOY,
        "--env-kwarg",
        "n_tasks=5",
        "--limit",
        "0",
        "--no-progress",
        "--out",
        str(tmp_path / "e.jsonl"),
    )
    assert out.returncode == 0, out.stderr
    assert len((tmp_path / "e.jsonl").read_text().splitlines()) == 5


def test_env_splits_match_the_envs_own_tables() -> None:
    from stepgym.envs import ENV_IDS, registered_envs
    from stepgym.envs.alfworld import games
    from stepgym.envs.credit import family, toy
    from stepgym.envs.searchqa import datasets
    from stepgym.envs.webshop import goals

    entries = registered_envs()
    assert set(ENV_IDS) <= set(entries) and all(entries[e].splits is not None for e in ENV_IDS)
    own = {
        "StepGym/ALFWorld-v0": set(games.SPLITS),
        "StepGym/WebShop-v0": {*goals.HUMAN_SPLITS, "all"},
        "StepGym/WebShopSite-v0": {*goals.HUMAN_SPLITS, "all"},
        "StepGym/SearchQA-v0": set(datasets.SPLITS),
        "StepGym/CreditToy-v0": set(toy._SPLIT_OFFSET),
        "StepGym/CreditFamily-v0": set(family._SPLIT_OFFSET),
    }
    for env_id, own_splits in own.items():
        splits = entries[env_id].splits
        assert set(splits.names) == own_splits and splits.evaluation in splits.names, env_id


def test_limit_takes_a_seeded_stratified_sample(data_dir: Path) -> None:
    """ALFWorld's split order is sorted by task type, so the first 12 valid_seen games are of one type or two; the
    sample of 12 holds every type, is the same for the same seed, and grows by adding tasks."""
    from stepgym.data import sample_tasks, task_group
    from stepgym.envs.alfworld.games import list_games

    ids = [g.task_id for g in list_games("valid_seen", root=data_dir / "alfworld")]
    types = {task_group(t) for t in ids}
    assert len(types) == 6 and len({task_group(t) for t in ids[:12]}) <= 2
    sample = sample_tasks(ids, 12, seed=0)
    assert {task_group(t) for t in sample} == types and sample == sample_tasks(ids, 12, seed=0)
    assert sample != sample_tasks(ids, 12, seed=1) and set(sample) < set(sample_tasks(ids, 30, seed=0))
    assert sample == [t for t in ids if t in set(sample)]  # in the split's order
    assert sample_tasks(ids, 0) == ids


def test_ctrl_c_says_what_was_saved_and_how_to_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    import stepgym.cli as cli
    from stepgym.cli import _options as _args
    from stepgym.cli.train import _train_interrupt_note
    from stepgym.trainers.config import RunConfig, TrainConfig

    def interrupted(argv: list[str]) -> int:
        _args.on_interrupt(lambda: "3 episodes are recorded in OUT; run the same command again")
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules[__name__], "interrupted", interrupted, raising=False)
    monkeypatch.setitem(cli.SUBCOMMANDS, "fake", (f"{__name__}:interrupted", ""))
    assert cli.main(["fake"]) == 130
    assert "stepgym fake: interrupted; 3 episodes are recorded in OUT" in capsys.readouterr().err
    cfg = TrainConfig(run=RunConfig(output_dir=str(tmp_path / "run")))
    assert "no checkpoint was saved yet" in _train_interrupt_note(cfg)
    from stepgym.trainers.checkpoint import checkpoint_name

    (tmp_path / "run" / "checkpoints" / checkpoint_name(4)).mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / checkpoint_name(4) / "trainer_state.json").write_text("{}")
    assert "--run.resume auto" in _train_interrupt_note(cfg) and checkpoint_name(4) in _train_interrupt_note(
        cfg
    )


def test_helps_show_what_a_new_user_needs() -> None:
    out = _stepgym("rollout", "--help")
    assert out.returncode == 0 and "--base-url" in out.stdout and "--concurrency" in out.stdout
    out = _stepgym("arg", "stats", "--help")
    assert (
        out.returncode == 0
        and "Progress-Advancing" in out.stdout
        and "the env's evaluation split" in out.stdout
    )
    out = _stepgym("train", "--help")
    assert out.returncode == 0 and "--preset NAME" in out.stdout and "alfworld-gigpo" in out.stdout
    assert "--run.resume" in out.stdout and "--help-all" in out.stdout
    assert len(out.stdout.splitlines()) < 60  # the short help; every field (400+ lines) is behind --help-all
    out = _stepgym("train", "--preset", "webshop-gigpo", "--help")
    assert "(now: 'StepGym/WebShop-v0')" in out.stdout  # the common flags show the preset's values
    out = _stepgym("train", "--help-all")
    assert (
        out.returncode == 0
        and "--teacher.max-context-tokens" in out.stdout
        and "--record.compare" in out.stdout
    )
    out = _stepgym("eval", "--help")  # the same short help, with eval's own flags
    assert out.returncode == 0 and "--checkpoint DIR" in out.stdout and "--model NAME" in out.stdout
    assert "--eval.limit" in out.stdout and len(out.stdout.splitlines()) < 60
    out = _stepgym("eval", "--help-all")
    assert out.returncode == 0 and "--eval.budgets" in out.stdout


def test_presets_give_each_env_its_own_budgets_and_comparisons() -> None:
    from stepgym.trainers.presets import TRAINER_PRESETS

    step_limit = {"StepGym/ALFWorld-v0": 50, "StepGym/WebShop-v0": 15, "StepGym/SearchQA-v0": 5, TOY: 10}
    for name, (_, cfg) in TRAINER_PRESETS.items():
        limit = cfg.eval.max_steps or cfg.env.max_steps or step_limit[cfg.env.id]
        assert max(cfg.eval.budgets) == limit, name  # budgets reach the episode's end, never past it
        if "ALFWorld" not in cfg.env.id:
            assert "alfworld" not in cfg.record.compare[0], name  # the viewer's second column


def test_paper_presets_take_each_envs_token_budgets() -> None:
    """ALFWorld's 2048/512 was every env's: WebShop's observations (verl-agent: 4096/512) and Search-QA's retrieved
    passages (Search-R1: 4096/500) need their own recipes' budgets."""
    from stepgym.trainers.presets import TRAINER_PRESETS

    want = {
        "StepGym/ALFWorld-v0": (2048, 512),
        "StepGym/WebShop-v0": (4096, 512),
        "StepGym/SearchQA-v0": (4096, 500),
    }
    seen = set()
    for name, (_, cfg) in TRAINER_PRESETS.items():
        if cfg.model.name.startswith("Qwen/") and cfg.env.id in want:
            got = (cfg.rollout.max_prompt_tokens, cfg.rollout.max_response_tokens)
            assert got == want[cfg.env.id], name
            seen.add(cfg.env.id)
    assert seen == set(want)


def test_a_webshop_rollout_needs_no_split(data_dir: Path) -> None:
    """The README's WebShop command: no --split (it used to default to ALFWorld's valid_seen and crash)."""
    out = _stepgym(
        "rollout",
        "--env",
        "StepGym/WebShop-v0",
        "--limit",
        "2",
        "--no-progress",
        extra_env={"STEPGYM_DATA": str(data_dir)},
    )
    assert out.returncode == 0, out.stderr
    assert "expert on StepGym/WebShop-v0 (test, a stratified sample of 2 tasks" in out.stdout


def test_a_help_piped_into_head_ends_quietly(monkeypatch, capsys) -> None:
    """``stepgym train --help | head -1``: writing into the closed pipe is no error (no 'Broken pipe' line)."""
    from stepgym import cli

    class ClosedPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise ValueError("no file")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["train", "--help"]) == 0
    assert "Broken pipe" not in capsys.readouterr().err
