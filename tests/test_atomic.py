"""One atomic-write helper (stepgym.atomic): a crash mid-write leaves the old file whole and no temporary behind."""

from __future__ import annotations

import json
import os

import pytest

from stepgym.atomic import atomic_path, atomic_write_bytes, atomic_write_json, atomic_write_text


class Boom(Exception):
    pass


def test_writes_replace_the_file(tmp_path):
    p = tmp_path / "sub" / "a.json"
    atomic_write_json(p, {"x": 1}, indent=1)
    assert json.loads(p.read_text()) == {"x": 1}
    atomic_write_text(p, "new")
    assert p.read_text() == "new"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert os.listdir(p.parent) == ["a.json"]


def test_a_crash_mid_write_keeps_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    with pytest.raises(Boom), atomic_path(p) as tmp:
        with open(tmp, "w") as f:
            f.write("half of the new")
        raise Boom
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_an_unserialisable_value_keeps_the_old_file(tmp_path):
    p = tmp_path / "a.json"
    atomic_write_json(p, [1])
    with pytest.raises(TypeError):
        atomic_write_json(p, {"x": object()})
    assert json.loads(p.read_text()) == [1] and os.listdir(tmp_path) == ["a.json"]


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
    final = tmp_path / "index"
    with pytest.raises(Boom), atomic_path(final, folder=True) as tmp:
        (tmp / "part").write_text("x")
        raise Boom
    assert os.listdir(tmp_path) == []
    with atomic_path(final, folder=True) as tmp:
        (tmp / "part").write_text("x")
        (tmp / "DONE").write_text("")
    assert sorted(os.listdir(final)) == ["DONE", "part"] and os.listdir(tmp_path) == ["index"]


def test_the_file_mode_is_kept(tmp_path):
    p = tmp_path / "a"
    p.write_text("x")
    p.chmod(0o600)
    atomic_write_text(p, "y")
    assert p.stat().st_mode & 0o777 == 0o600
