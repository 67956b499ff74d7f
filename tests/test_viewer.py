"""Episode recordings and the viewer's server side: the trainer records exactly the advantages it trained with,
sampling and the size budget hold, damaged or foreign files give clear errors, a reopened file loses only a torn
last member and each episode is read once, `stepgym rollout --record`, GroupRecorder and an endpoint evaluation
write what the viewer reads, the server is loopback-only, and the export cannot carry markup."""

from __future__ import annotations

import gzip
import http.client
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _viewer_runs import EVIL, record_hostile_group

from stepgym.errors import CorruptDataError, DataNotFoundError, FormatVersionError
from stepgym.labels import future_drift
from stepgym.recording import (
    FILE_NAME,
    EpisodeWriter,
    RecordConfig,
    RecordingLockedError,
    read_recording,
    read_records,
)
from stepgym.viewer import ViewerServer, export_html, load_run
from stepgym.viewer.server import _template, unpack_bundle


def _steps(path: Path) -> list[dict]:
    return [r for r in read_records(path) if r["kind"] == "step"]


# ---------------------------------------------------------------------------------------------------------------
# The trainer's hook
# ---------------------------------------------------------------------------------------------------------------
def test_trainer_records_the_advantages_it_trained_with(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from test_trainer_core import scripted, tiny_config

    from stepgym.shapers import ShapeConfig
    from stepgym.trainers.grpo import GRPOTrainer

    cfg = scripted(tiny_config(tmp_path / "run", ShapeConfig.from_preset("proas-grpo")), "noisy-expert:0.3")
    tr = GRPOTrainer(cfg)
    tr.step()
    ro, shaping = tr.last
    tr.close()
    path = tmp_path / "run" / FILE_NAME
    head = next(read_records(path))
    assert head["format"] == "stepgym-episodes" and head["source"] == "train"
    assert head["shapers"] == ["ProAS(GRPO)", "grpo-alfworld", "gigpo-alfworld"]
    steps = _steps(path)
    assert len(steps) == len(ro.rows)
    index = {(r.traj, r.t): i for i, r in enumerate(ro.rows)}
    for s in steps:
        i = index[(s["group"] * ro.group_size + s["rollout"], s["t"])]
        row = ro.rows[i]
        mine = s["adv"]["ProAS(GRPO)"]
        assert mine["step"] == round(float(shaping.shaped.step_advantages[i]), 6)
        assert mine["tokens"] == np.round(shaping.row_advantages(i), 6).tolist()
        # plain GRPO with the same penalty is what the trainer reports as its reference
        assert s["adv"]["grpo-alfworld"]["step"] == round(float(shaping.grpo_steps[i]), 6)
        assert len(s["tokens"]) == len(row.response_ids) == len(mine["tokens"])
        assert s["raw_output"] == row.response_text and s["action"] == row.record["action"]
        assert s["format_valid"] == bool(row.record["format_valid"]) and isinstance(s["rea"], bool)
        assert all(k.startswith("stepgym/") for k in s["info"])
    episodes = [r for r in read_records(path) if r["kind"] == "episode"]
    assert [e["won"] for e in episodes] == ro.successes
    for e in episodes:  # Future-Drift of the trainer's PA labels, episode by episode
        mine = [s for s in steps if (s["group"], s["rollout"]) == (e["group"], e["rollout"])]
        assert [s["future_drift"] for s in mine] == future_drift([s["pa"] for s in mine]).tolist()


def test_trainer_sampling_and_off_switch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from test_trainer_core import scripted, tiny_config

    from stepgym.trainers.grpo import GRPOTrainer

    cfg = scripted(tiny_config(tmp_path / "s"), "noisy-expert:0.3")
    cfg = replace(cfg, record=RecordConfig(every=2, groups=1, compare=()))
    tr = GRPOTrainer(cfg)
    for _ in range(3):
        tr.step()
    tr.close()
    eps = [r for r in read_records(tmp_path / "s" / FILE_NAME) if r["kind"] == "episode"]
    assert sorted({e["iteration"] for e in eps}) == [1, 3]  # every 2nd iteration
    assert all(len({e["group"] for e in eps if e["iteration"] == it}) == 1 for it in (1, 3))  # one group each
    assert len(eps) == 2 * cfg.rollout.group_size
    off = replace(
        cfg, run=replace(cfg.run, output_dir=str(tmp_path / "off")), record=RecordConfig(enabled=False)
    )
    tr = GRPOTrainer(off)
    tr.step()
    tr.close()
    assert not (tmp_path / "off" / FILE_NAME).exists()


# ---------------------------------------------------------------------------------------------------------------
# The file format: budget, damaged tails, foreign files
# ---------------------------------------------------------------------------------------------------------------
def test_budget_stops_recording_with_a_note(tmp_path: Path) -> None:
    w = EpisodeWriter(tmp_path / FILE_NAME, {"source": "test"}, budget_bytes=200)
    rng = np.random.default_rng(0)
    big = [{"kind": "step", "text": rng.bytes(400).hex()}]
    assert w.write(big) is True
    assert w.write(big) is False  # over budget: refused
    recs = list(read_records(tmp_path / FILE_NAME))
    assert [r["kind"] for r in recs] == ["run", "step", "note"]
    assert "budget" in recs[-1]["message"]
    assert EpisodeWriter(tmp_path / FILE_NAME, {}, budget_bytes=200).full  # a resumed run stays stopped


def test_damaged_and_foreign_files(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    w = EpisodeWriter(path, {"source": "test"}, budget_bytes=10**6)
    w.write([{"kind": "note", "message": "one"}])
    good = path.read_bytes()
    w.write([{"kind": "note", "message": "two"}])
    full = path.read_bytes()
    path.write_bytes(full[: len(good) + 12])  # a run killed while writing its last member
    assert [r.get("message") for r in read_records(path)] == [None, "one"]
    (tmp_path / "x.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(CorruptDataError):
        list(read_records(tmp_path / "x.jsonl.gz"))
    foreign = tmp_path / "f" / FILE_NAME
    foreign.parent.mkdir()
    with gzip.open(foreign, "wt") as f:
        f.write(json.dumps({"kind": "run", "format": "something-else"}) + "\n")
    with pytest.raises(FormatVersionError):
        EpisodeWriter(foreign, {}, budget_bytes=10**6)
    with pytest.raises(FormatVersionError):
        load_run(foreign)
    newer = tmp_path / "n" / FILE_NAME
    newer.parent.mkdir()
    with gzip.open(newer, "wt") as f:
        f.write(json.dumps({"kind": "run", "format": "stepgym-episodes", "version": 99}) + "\n")
    with pytest.raises(FormatVersionError, match="newer"):
        load_run(newer)
    with pytest.raises(DataNotFoundError):
        load_run(tmp_path / "empty")


def _notes(path: Path) -> list[str | None]:
    return [r.get("message") for r in read_records(path)]


def test_reopened_writer_cuts_a_torn_tail_and_refuses_earlier_damage(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    w = EpisodeWriter(path, {"source": "test"})
    sizes = []
    for msg in ("one", "two", "three"):
        w.write([{"kind": "note", "message": msg}])
        sizes.append(path.stat().st_size)
    intact = path.read_bytes()
    path.write_bytes(intact[: sizes[2] - 9])  # killed while writing "three"
    EpisodeWriter(path, {"source": "resumed"}).write([{"kind": "note", "message": "four"}])
    assert path.read_bytes()[: sizes[1]] == intact[: sizes[1]]  # the good part is untouched
    assert _notes(path) == [None, "one", "two", "four"]  # no second header: the file was not new
    # damage before the last member is not a torn write: refused, and the file is left alone
    damaged = bytearray(intact)
    damaged[sizes[0] + 12] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptDataError, match="damaged"):
        EpisodeWriter(path, {"source": "test"})
    assert path.read_bytes() == bytes(damaged)
    # a file that is not gzip at all is somebody else's
    other = tmp_path / "o" / FILE_NAME
    other.parent.mkdir()
    other.write_text("hello\n")
    with pytest.raises(FormatVersionError):
        EpisodeWriter(other, {})
    assert other.read_text() == "hello\n"


def test_exclusive_writer_and_each_episode_read_once(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    with EpisodeWriter(path, {"source": "test"}, exclusive=True) as w:
        with pytest.raises(RecordingLockedError):
            EpisodeWriter(path, {}, exclusive=True)
        key = {"iteration": 0, "group": 3, "rollout": 0}
        w.write([{"kind": "episode", **key, "won": True, "steps": 1}, {"kind": "step", **key, "t": 0}])
        # the same episode recorded again (a run resumed from an older checkpoint): the first one counts
        w.write([{"kind": "episode", **key, "won": False, "steps": 2}, {"kind": "step", **key, "t": 0}])
    EpisodeWriter(path, {}, exclusive=True).close()  # the lock went with the first writer
    (ep,) = read_recording(path).episodes
    assert ep["won"] is True and ep["n_steps"] == 1 and [s["t"] for s in ep["steps"]] == [0]
    (summary,) = load_run(path).index
    assert summary["size"] == 1 and summary["wins"] == 1


# ---------------------------------------------------------------------------------------------------------------
# GroupRecorder and `stepgym rollout --record`
# ---------------------------------------------------------------------------------------------------------------
def test_group_recorder_successes_first_with_hindsight(tmp_path: Path) -> None:
    record_hostile_group(tmp_path)
    run = load_run(tmp_path)
    assert run.meta["methods"] == ["toy-expert"] and run.meta["shapers"] == ["toy"]
    (summary,) = run.index
    assert summary["wins"] == 1 and summary["size"] == 2
    eps = run.groups[summary["id"]]["episodes"]
    assert [(e["rollout"], e["won"]) for e in eps] == [(1, True), (0, False)]  # successes first
    assert eps[0]["peer_hindsight"] is None and EVIL in eps[1]["peer_hindsight"]
    assert [s["adv"]["toy"]["step"] for s in eps[1]["steps"]] == [float(-1 - t) for t in range(6)]
    assert eps[0]["steps"][-1]["info"]["stepgym/won"] is True


def test_rollout_cli_records_every_episode(tmp_path: Path) -> None:
    from stepgym.cli import main

    out = tmp_path / "eps.jsonl"
    argv = [
        "rollout",
        "--env",
        "StepGym/CreditToy-v0",
        "--split",
        "valid",
        "--agent",
        "noisy",
        "--limit",
        "4",
    ]
    assert main([*argv, "--no-progress", "--out", str(out), "--record", str(tmp_path / "rec")]) == 0
    played = [json.loads(line) for line in out.read_text().splitlines()]
    run = load_run(tmp_path / "rec")
    got = [run.groups[s["id"]]["episodes"][0] for s in run.index]
    assert [(e["task_id"], e["won"], len(e["steps"])) for e in got] == [
        (p["task_id"], p["won"], p["steps"]) for p in played
    ]
    assert run.meta["methods"] == ["noisy"]


def test_endpoint_evaluation_opens_in_the_viewer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An endpoint evaluation (real HTTP server on 127.0.0.1, scripted replies) writes a recording that the
    viewer's loader opens, one group per task in the split's order, with the numbers the evaluation played:
    compared with the trainer's in-process collector answering from the same policy."""
    from test_eval_endpoint import MODEL, ChatServer, client_for, in_process, scripted_reply

    from stepgym import schema
    from stepgym.cli import main
    from stepgym.llm_eval import EndpointEvalConfig, evaluate_endpoint

    def skip_a_key_in_room_1(prompt: str) -> str:  # loses the tasks whose key lies in room 1: mixed outcomes
        if "Now: Room 1 of" in prompt and "'take key'" in prompt:
            return "<action>go forward</action>"
        return scripted_reply(prompt)

    env_id, kwargs, n = "StepGym/CreditToy-v0", {"split": "valid"}, 6
    server = ChatServer(skip_a_key_in_room_1).start()
    try:
        with client_for(server, timeout=30.0) as client:
            summary = evaluate_endpoint(
                client,
                EndpointEvalConfig(env_id, out_dir=tmp_path, env_kwargs=kwargs, limit=n, concurrency=3),
            )
    finally:
        server.stop()
    run = load_run(tmp_path)
    assert run.meta["methods"] == [MODEL] and run.meta["n_groups"] == run.meta["n_episodes"] == n
    assert [s["group"] for s in run.index] == list(range(n))
    assert sum(s["wins"] for s in run.index) / n == summary["success"] and 0 < summary["success"] < 1
    assert run.meta["n_steps"] == pytest.approx(summary["mean_steps"] * n)
    want = in_process(env_id, kwargs, [s["task_id"] for s in run.index], policy=skip_a_key_in_room_1)
    for s, traj in zip(run.index, want, strict=True):
        (ep,) = run.groups[s["id"]]["episodes"]
        assert (ep["task_id"], ep["won"], ep["reward"]) == (traj.task_id, traj.success, traj.total_reward)
        assert s["wins"] == int(traj.success) and s["steps"] == len(traj.steps)
        assert [st["observation"] for st in ep["steps"]] == [x.observation for x in traj.steps]
        assert [st["reward"] for st in ep["steps"]] == [x.reward for x in traj.steps]
        for field, key in (
            ("raw_output", schema.RAW_OUTPUT),
            ("action", schema.PARSED_ACTION),
            ("format_valid", schema.FORMAT_VALID),
            ("admissible", schema.ADMISSIBLE),
            ("effective", schema.EFFECTIVE),
        ):
            assert [st[field] for st in ep["steps"]] == [x.info[key] for x in traj.steps], field
    assert main(["view", str(tmp_path), "--export", str(tmp_path / "view.html")]) == 0
    assert f"{n} groups, {n} episodes, {run.meta['n_steps']} steps" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------------
# Server and export
# ---------------------------------------------------------------------------------------------------------------
def _get(port: int, path: str, host: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), body


def test_server_is_loopback_only_and_checks_host(tmp_path: Path) -> None:
    record_hostile_group(tmp_path)
    run = load_run(tmp_path)
    with ViewerServer(run) as srv:
        host, port = srv.httpd.server_address[:2]
        assert host == "127.0.0.1" and srv.url == f"http://127.0.0.1:{port}/"
        ok = f"127.0.0.1:{port}"
        status, headers, body = _get(port, "/", ok)
        assert status == 200 and "script-src 'nonce-" in headers["Content-Security-Policy"]
        assert b"window.__pwned" not in body  # the page itself carries no data
        status, _, body = _get(port, "/api/index", ok)
        assert status == 200 and json.loads(body) == run.index
        gid = run.index[0]["id"]
        status, _, body = _get(port, f"/api/group?id={gid}", ok)
        assert json.loads(body)["episodes"][0]["steps"][0]["observation"].count(EVIL) == 1
        assert _get(port, "/api/group?id=nope", ok)[0] == 404
        assert _get(port, "/etc/passwd", ok)[0] == 404
        assert _get(port, "/api/index", f"evil.example:{port}")[0] == 403  # DNS rebinding


def test_export_embeds_data_without_markup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stepgym.cli import main

    record_hostile_group(tmp_path / "run")
    out = tmp_path / "out.html"
    assert main(["view", str(tmp_path / "run"), "--export", str(out)]) == 0
    assert "1 groups, 2 episodes, 11 steps" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    assert "<script>window.__pwned" not in html and "<img src=x" not in html
    assert "connect-src 'none'" in html
    tag = 'id="stepgym-data" data-encoding="gzip-base64">'
    start = html.index(tag) + len(tag)
    bundle = unpack_bundle(html[start : html.index("</script>", start)])
    plain = json.dumps(load_run(tmp_path / "run").as_bundle())
    assert bundle == json.loads(plain)
    assert len(html) < len(_template()) + len(plain) / 2  # compressed: the export is not the JSON's size
    assert export_html(load_run(tmp_path / "run"), out) == out


def test_group_recorder_refuses_a_plain_jsonl_name(tmp_path):
    from stepgym.recording import GroupRecorder

    with pytest.raises(ValueError, match=r"writes gzip.*\.jsonl\.gz"):
        GroupRecorder(tmp_path / "episodes.jsonl")
    assert GroupRecorder(tmp_path / "run").path.name == "episodes.jsonl.gz"


# ---------------------------------------------------------------------------------------------------------------
# Damaged recordings are shown with a warning, never silently partial (issue 52)
# ---------------------------------------------------------------------------------------------------------------
def _episode(it: int, group: int, rollout: int, n_steps: int = 2) -> list[dict]:
    key = {"iteration": it, "group": group, "rollout": rollout}
    ep = {"kind": "episode", **key, "won": rollout == 0, "steps": n_steps, "task_id": f"t{group}"}
    return [ep] + [{"kind": "step", **key, "t": t, "action": "go"} for t in range(n_steps)]


def _recording(path: Path, iterations: int = 4, groups: int = 3) -> list[int]:
    """One member per iteration (as the trainer writes); the file size after each."""
    w = EpisodeWriter(path, {"source": "train", "method": "grpo"})
    sizes = []
    for it in range(1, iterations + 1):
        w.write([r for g in range(groups) for k in range(2) for r in _episode(it, g, k)])
        sizes.append(path.stat().st_size)
    return sizes


def test_a_damaged_member_is_skipped_with_a_warning_and_the_rest_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run" / FILE_NAME
    sizes = _recording(path)
    raw = bytearray(path.read_bytes())
    raw[(sizes[0] + sizes[1]) // 2] ^= 0xFF  # one flipped byte inside iteration 2's member
    path.write_bytes(bytes(raw))
    rec = read_recording(path)
    assert sorted({e["iteration"] for e in rec.episodes}) == [1, 3, 4]  # what follows the damage is kept
    (problem,) = rec.problems
    assert f"at byte {sizes[0]}" in problem and "skipped" in problem
    run = load_run(path.parent)
    assert run.meta["n_episodes"] == 18 and len(run.meta["warnings"]) == 1
    from stepgym.cli.view import main as view_main

    assert view_main([str(path.parent), "--export", str(tmp_path / "v.html")]) == 0
    err = capsys.readouterr().err
    assert err.count("stepgym view: warning: ") == 1 and "skipped" in err
    assert "Traceback" not in err
    # a cut-short tail (a writer killed mid-write) is said too
    path.write_bytes(path.read_bytes()[: sizes[3] - 20])
    rec = read_recording(path)
    assert len(rec.problems) == 2 and "cut short" in rec.problems[1]
    assert sorted({e["iteration"] for e in rec.episodes}) == [1, 3]


def test_records_with_non_numeric_keys_are_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    w = EpisodeWriter(path, {"source": "test"})
    w.write(_episode(1, 0, 0))
    bad = _episode(1, 1, 0)
    for r in bad:
        r["iteration"] = "one"
    w.write(bad)
    w.write([{**r, "group": None} for r in _episode(1, 2, 0)])
    w.write(_episode(2, 0, 0))
    rec = read_recording(path)
    assert [(e["iteration"], e["group"]) for e in rec.episodes] == [(1, 0), (2, 0)]
    assert all(len(e["steps"]) == 2 for e in rec.episodes)
    (problem,) = rec.problems
    assert problem.startswith("6 episode/step record(s) skipped") and "not an integer" in problem
    run = load_run(path)
    assert run.meta["iterations"] == [1, 2] and run.meta["warnings"] == [f"{path}: {problem}"]


def test_an_intact_recording_has_no_warning(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    _recording(path, iterations=2)
    assert read_recording(path).problems == [] and load_run(path).meta["warnings"] == []


def test_a_resumed_run_cuts_what_came_after_its_checkpoint(tmp_path: Path) -> None:
    from stepgym.recording.episode_file import truncate_after

    path = tmp_path / FILE_NAME
    sizes = _recording(path, iterations=4, groups=2)
    assert truncate_after(path, 4) == 0 and path.stat().st_size == sizes[3]
    assert truncate_after(path, 2) == 2 * 2 * 2 * 3  # iterations 3 and 4: 4 episodes of 3 records each
    assert path.stat().st_size == sizes[1]
    w = EpisodeWriter(path, {"source": "train"})  # the resumed run's writer appends its own iteration 3
    w.write(_episode(3, 0, 0))
    keys = [(r["iteration"], r["group"], r["rollout"]) for r in read_records(path) if r["kind"] == "episode"]
    assert len(keys) == len(set(keys)) and max(keys)[0] == 3
    assert truncate_after(tmp_path / "missing.jsonl.gz", 0) == 0
