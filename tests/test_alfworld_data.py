"""Data-path resolution, clear errors for missing/corrupt data, optional-dependency errors, the download command."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import gymnasium as gym
import pytest

import stepgym  # noqa: F401
from stepgym.errors import CorruptDataError, DataNotFoundError

REPO = Path(__file__).resolve().parents[1]


def _copy_one_game(src_root: Path, dst_root: Path, split: str = "valid_seen") -> Path:
    game = sorted((src_root / "json_2.1.1" / split).iterdir())[0]
    trial = sorted(game.iterdir())[0]
    target = dst_root / "json_2.1.1" / split / game.name / trial.name
    target.mkdir(parents=True)
    for name in ("game.tw-pddl", "traj_data.json"):
        shutil.copyfile(trial / name, target / name)
    return target


def test_missing_data_root_names_the_path_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPGYM_DATA", str(tmp_path / "nowhere"))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("STEPGYM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError) as err:
        gym.make("StepGym/ALFWorld-v0")
    msg = str(err.value)
    assert str(tmp_path / "nowhere" / "alfworld") in msg and "stepgym download alfworld" in msg


def test_empty_split_folder_is_a_clear_error(tmp_path):
    (tmp_path / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(DataNotFoundError, match="no playable game"):
        gym.make("StepGym/ALFWorld-v0", split="valid_seen", data_root=tmp_path)


def test_alfworld_data_variable_is_honoured(tmp_path, monkeypatch, data_dir):
    _copy_one_game(data_dir / "alfworld", tmp_path)
    monkeypatch.delenv("STEPGYM_DATA", raising=False)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    env = gym.make("StepGym/ALFWorld-v0", split="valid_seen")
    assert len(env.unwrapped.task_ids) == 1
    env.reset(seed=0)


def test_corrupt_game_file_names_the_path(tmp_path, data_dir):
    trial = _copy_one_game(data_dir / "alfworld", tmp_path)
    text = (trial / "game.tw-pddl").read_text()
    (trial / "game.tw-pddl").write_text(
        text[: len(text) // 2]
    )  # truncated, still says "solvable": true first?
    if '"solvable": true' not in text[: len(text) // 2]:
        (trial / "game.tw-pddl").write_text('{"solvable": true, "pddl_problem": ' + text[: len(text) // 3])
    env = gym.make("StepGym/ALFWorld-v0", split="valid_seen", data_root=tmp_path)
    with pytest.raises(CorruptDataError) as err:
        env.reset(seed=0)
    assert str(trial / "game.tw-pddl") in str(err.value) and "stepgym download alfworld" in str(err.value)


@pytest.mark.parametrize("damage", ["truncated", "not utf-8", "no pddl_params"])
def test_corrupt_trajectory_file_names_the_path(tmp_path, data_dir, damage):
    from stepgym.envs.alfworld.games import traj_task

    trial = _copy_one_game(data_dir / "alfworld", tmp_path)
    traj = trial / "traj_data.json"
    text = traj.read_bytes()
    broken = {
        "truncated": text[: len(text) // 2],
        "not utf-8": text.replace(b'"pddl_params"', b'"pddl_\xff_params"', 1),
        "no pddl_params": json.dumps({"task_type": "pick_and_place_simple"}).encode(),
    }[damage]
    traj.write_bytes(broken)
    traj_task.cache_clear()
    env = gym.make("StepGym/ALFWorld-v0", split="valid_seen", data_root=tmp_path)
    with pytest.raises(CorruptDataError) as err:
        env.reset(seed=0)
    assert str(traj) in str(err.value) and "stepgym download alfworld" in str(err.value)


def test_import_stepgym_stays_light():
    code = (
        "import sys, stepgym, gymnasium as gym\n"
        "heavy = [m for m in ('torch', 'textworld', 'alfworld', 'faiss', 'selenium', 'pyserini', 'bm25s', 'transformers')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert 'StepGym/ALFWorld-v0' in gym.registry\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_missing_extra_raises_dependency_not_installed(data_dir):
    code = (
        "import sys\n"
        "sys.modules['alfworld'] = None  # simulate: the extra is not installed\n"
        "import gymnasium as gym, stepgym\n"
        "from gymnasium.error import DependencyNotInstalled\n"
        "try:\n"
        "    gym.make('StepGym/ALFWorld-v0', split='valid_seen')\n"
        "except DependencyNotInstalled as e:\n"
        "    assert \"pip install 'stepgym[alfworld]'\" in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=REPO, env={**os.environ, "STEPGYM_DATA": str(data_dir)}
    )


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        return None


def test_download_command_against_a_local_server(tmp_path, data_dir):
    """`stepgym download alfworld --base-url` fetches and unpacks the two release archives (layout as upstream)."""
    src = data_dir / "alfworld" / "json_2.1.1" / "valid_seen"
    game = sorted(src.iterdir())[0]
    trial = sorted(game.iterdir())[0]
    site = tmp_path / "site"
    for rel, member in (
        ("0.2.2/json_2.1.1_json.zip", "traj_data.json"),
        ("0.4.0/json_2.1.2_tw-pddl.zip", "game.tw-pddl"),
    ):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(site / rel, "w") as zf:
            zf.write(trial / member, f"json_2.1.1/valid_seen/{game.name}/{trial.name}/{member}")
    handler = lambda *a, **k: _Quiet(*a, directory=str(site), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        dest = tmp_path / "alfworld"
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "stepgym.cli",
                "download",
                "alfworld",
                "--dest",
                str(dest),
                "--base-url",
                f"http://127.0.0.1:{server.server_port}",
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert "alfworld data ready" in out.stdout
    finally:
        server.shutdown()
    env = gym.make("StepGym/ALFWorld-v0", split="valid_seen", data_root=dest)
    assert env.unwrapped.task_ids == [f"valid_seen/{game.name}/{trial.name}"]
    env.reset(seed=0)
    assert (dest / "logic" / "alfred.pddl").is_file()
    assert not list((dest / ".archives").glob("*.zip"))


def test_download_from_a_dead_server_fails_clearly(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "stepgym.cli",
            "download",
            "alfworld",
            "--dest",
            str(tmp_path / "a"),
            "--base-url",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode != 0 and "could not download http://127.0.0.1:9/" in out.stderr


def test_corrupt_archive_is_reported(tmp_path):
    from stepgym.fetch import extract_zip

    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(CorruptDataError, match="not a valid zip"):
        extract_zip(bad, tmp_path / "out")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(CorruptDataError, match="escape"):
        extract_zip(evil, tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


def test_manifest_hashes_match_what_the_env_loads(data_dir):
    """The shared data's manifest sha256 agrees with the files the index lists (guards against a racy copy)."""
    from stepgym.data import file_sha256
    from stepgym.envs.alfworld.games import list_games

    manifest = [
        json.loads(line) for line in (data_dir / "alfworld" / "manifest.jsonl").read_text().splitlines()
    ]
    by_path = {m["path"]: m for m in manifest}
    games = list_games("valid_seen", root=data_dir / "alfworld")[:10]
    for g in games:
        rel = str(g.game_file.relative_to(data_dir / "alfworld"))
        entry = by_path.get(rel) or by_path.get(str(Path(rel).parent))
        assert entry is not None, rel
        assert file_sha256(g.game_file) == entry["game_sha256"]
