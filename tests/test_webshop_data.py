"""WebShop data: validation of corrupt files, upstream's product processing, the download command."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import threading
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.webshop.catalogue import (
    document_contents,
    iter_json_array,
    load_catalogue,
    process_raw_product,
)
from stepgym.envs.webshop.download import download
from stepgym.errors import CorruptDataError, ServiceUnavailableError


@pytest.fixture(scope="module")
def ws(data_dir: Path) -> Path:
    root = data_dir / "webshop"
    if not (root / "data" / "items_shuffle_1000.documents.jsonl").is_file():
        pytest.skip("WebShop data not available")
    return root


def _docs(ws: Path) -> list[str]:
    return (ws / "data" / "items_shuffle_1000.documents.jsonl").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("damage", ["truncate", "not_json", "missing_field", "bad_type", "empty"])
def test_corrupt_document_file(ws: Path, tmp_path: Path, damage: str) -> None:
    lines = _docs(ws)[:50]
    bad = tmp_path / "items_shuffle_1000.documents.jsonl"
    if damage == "truncate":
        text = "\n".join(lines)
        bad.write_text(text[: len(text) - 5000])
    elif damage == "not_json":
        bad.write_text("<html>quota exceeded</html>\n")
    elif damage == "missing_field":
        doc = json.loads(lines[0])
        del doc["product"]["Title"]
        bad.write_text(json.dumps(doc) + "\n")
    elif damage == "bad_type":
        doc = json.loads(lines[0])
        doc["product"]["options"] = ["red"]
        bad.write_text(json.dumps(doc) + "\n")
    else:
        bad.write_text("")
    with pytest.raises(CorruptDataError, match=re.escape(str(bad))):
        load_catalogue(bad)


def test_corrupt_catalogue_through_the_env(ws: Path, tmp_path: Path) -> None:
    root = tmp_path / "webshop"
    (root / "data").mkdir(parents=True)
    shutil.copy(ws / "data" / "items_ins_v2_1000.json", root / "data")
    text = "\n".join(_docs(ws)[:20])
    (root / "data" / "items_shuffle_1000.documents.jsonl").write_text(text[:-300])
    with pytest.raises(CorruptDataError, match=r"items_shuffle_1000\.documents\.jsonl:20"):
        gym.make("StepGym/WebShop-v0", data_root=root)


def test_truncated_raw_array(ws: Path, tmp_path: Path) -> None:
    raw = (ws / "data" / "items_shuffle_1000.first13.json").read_text(encoding="utf-8")
    path = tmp_path / "items_shuffle_1000.json"
    path.write_text(raw[:30000])
    with pytest.raises(CorruptDataError, match="truncated"):
        list(iter_json_array(path, chunk_chars=4096))
    path.write_text(raw)
    assert len(list(iter_json_array(path, chunk_chars=1000))) == 13


def test_raw_array_values_cut_by_a_chunk_boundary_are_read_whole(tmp_path: Path) -> None:
    """A number split across two reads (``12`` | ``3``) is one value, not ``12`` followed by a syntax error."""
    path = tmp_path / "items.json"
    values = [123, 4567, -8.25e10, {"a": 10}, "tail"]
    path.write_text(json.dumps(values), encoding="utf-8")
    for chunk in (1, 2, 3, 5):
        assert list(iter_json_array(path, chunk_chars=chunk)) == values


def test_raw_processing_reproduces_upstream_documents(ws: Path) -> None:
    attrs = json.loads((ws / "data" / "items_ins_v2_1000.json").read_text())
    raw = json.loads((ws / "data" / "items_shuffle_1000.first13.json").read_text())
    for record, line in zip(raw, _docs(ws)[:13], strict=True):
        p = process_raw_product(record, attrs)
        # byte-identical to upstream's converter output, key order included
        assert json.dumps({"id": p["asin"], "contents": document_contents(p), "product": p}) == line


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        return


@pytest.fixture
def file_server(tmp_path: Path):
    served = tmp_path / "served"
    served.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(served))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    with urllib.request.urlopen(base + "/", timeout=10) as resp:  # health check before use
        assert resp.status == 200
    yield served, base
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.mark.network
def test_download_from_local_server(ws: Path, tmp_path: Path, file_server) -> None:
    served, base = file_server
    shutil.copy(ws / "data" / "items_shuffle_1000.first13.json", served / "items_shuffle_1000.json")
    shutil.copy(ws / "data" / "items_ins_v2_1000.json", served / "items_ins_v2_1000.json")
    shutil.copy(ws / "baseline_models" / "data" / "human_goals.json", served / "human_goals.json")
    human = {}
    for line in _docs(ws):
        p = json.loads(line)["product"]
        if "instructions" in p:
            human[p["asin"]] = p["instructions"]
    (served / "items_human_ins.json").write_text(json.dumps(human))
    dest = download(tmp_path / "dl" / "webshop", base_url=base, progress=False)
    out = (dest / "data" / "items_shuffle_1000.documents.jsonl").read_text().splitlines()
    assert out == _docs(ws)[:13]
    assert (dest / "baseline_models" / "data" / "human_goals.json").is_file()
    # the downloaded data runs the env end to end: 5 of the 13 products carry synthetic instructions
    env = gym.make("StepGym/WebShop-v0", data_root=dest, split="all").unwrapped
    assert {g.asin for g in env.core.goals} == {
        "B07B6DVG41",
        "B087TR48KK",
        "B08ZRR3DZT",
        "B09B7G7P58",
        "B08XQRDDT1",
    }
    _, info = env.reset(options={"goal_index": 0})
    while True:
        _, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
        if term or trunc:
            break
    assert term and info[schema.REWARD_INFO]["bought_asin"] == env.goal.asin


@pytest.mark.network
def test_download_errors_name_the_url(tmp_path: Path, file_server) -> None:
    served, base = file_server
    with pytest.raises(ServiceUnavailableError, match=r"items_shuffle_1000\.json"):
        download(tmp_path / "dl", base_url=base, progress=False)
    (served / "items_shuffle_1000.json").write_text('[{"asin": ')
    for name in ("items_ins_v2_1000.json", "items_human_ins.json", "human_goals.json"):
        (served / name).write_text("{}" if name != "human_goals.json" else "[]")
    with pytest.raises(CorruptDataError, match=r"items_shuffle_1000\.json"):
        download(tmp_path / "dl2", base_url=base, progress=False)
