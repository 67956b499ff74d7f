"""Trainer pieces on their own: the credit toy env, checkpoints, truncation, span mapping, schedules, CLI, presets."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401  (registers the envs)
from stepgym import schema
from stepgym.steps.row import truncate_middle
from stepgym.testing import check_text_env
from stepgym.trainers.checkpoint import CheckpointError, find_latest, read_state, save_checkpoint
from stepgym.trainers.samples import token_budget_batches


# ---------------------------------------------------------------------------------------------------------------
# The credit-assignment toy
# ---------------------------------------------------------------------------------------------------------------
def test_credit_toy_passes_the_env_battery() -> None:
    check_text_env(lambda: gym.make("StepGym/CreditToy-v0"))
    check_text_env(lambda: gym.make("StepGym/CreditToy-v0", n_rooms=6, n_distractors=3, max_steps=12))


def _play(env: gym.Env, task_id: str, policy) -> tuple[bool, int]:
    obs, info = env.reset(options={"task_id": task_id})
    steps = 0
    while True:
        obs, r, term, trunc, info = env.step(policy(info))
        steps += 1
        if term or trunc:
            return bool(info[schema.WON]), steps


def test_credit_toy_only_the_key_decision_matters() -> None:
    env = gym.make("StepGym/CreditToy-v0").unwrapped
    for tid in env.task_ids:
        assert _play(env, tid, lambda i: i[schema.EXPERT_ACTION]) == (True, env.n_rooms + 1)

    # Dawdling ("wait") costs only steps; taking a wrong object or walking past the key is fatal.
    def dawdle(info):
        return "wait" if info[schema.STEP_INDEX] == 0 else info[schema.EXPERT_ACTION]

    assert _play(env, env.task_ids[0], dawdle)[0]

    def wrong_object(info):
        adm = info[schema.ADMISSIBLE_ACTIONS]
        takes = [a for a in adm if a.startswith("take ") and a != "take key"]
        return takes[0] if takes else ("go forward" if "go forward" in adm else "open door")

    assert not _play(env, env.task_ids[0], wrong_object)[0]
    obs, info = env.reset(options={"task_id": env.task_ids[0]})
    assert info[schema.SUBGOAL_KEY] != info[schema.STATE_KEY]
    obs, _, _, _, info = env.step("take a nap")
    assert info[schema.ADMISSIBLE] is False and obs == "Nothing happens."


def test_credit_toy_tasks_are_fixed_and_splits_disjoint() -> None:
    a = gym.make("StepGym/CreditToy-v0", split="train").unwrapped
    b = gym.make("StepGym/CreditToy-v0", split="valid").unwrapped
    assert not set(a.task_ids) & set(b.task_ids)
    o1, i1 = a.reset(seed=3)
    o2, i2 = a.reset(options={"task_id": i1[schema.TASK_ID]})
    assert o1 == o2
    types = {a.reset(options={"task_id": t})[1][schema.TASK_TYPE] for t in a.task_ids}
    assert len(types) == a.n_rooms - 1


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------
def _writer(name: str, data: bytes):
    def write(folder: Path) -> None:
        (folder / name).write_bytes(data)

    return write


def test_checkpoint_atomic_latest_and_pruning(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    for it in (1, 2, 3):
        save_checkpoint(root, it, {"iteration": it}, {"w": _writer("w.bin", bytes([it]))}, keep=2)
    assert find_latest(root).name == "step_000003"
    assert sorted(p.name for p in root.glob("step_*")) == ["step_000002", "step_000003"]
    assert read_state(find_latest(root))["iteration"] == 3

    def crash(folder: Path) -> None:
        (folder / "w.bin").write_bytes(b"torn")
        raise RuntimeError("killed mid-save")

    with pytest.raises(RuntimeError):
        save_checkpoint(root, 4, {"iteration": 4}, {"w": crash})
    assert find_latest(root).name == "step_000003"
    assert (find_latest(root) / "w.bin").read_bytes() == bytes([3])
    assert not list(root.glob(".tmp-*"))
    # A stale pointer (e.g. the folder was deleted by hand) falls back to the newest complete checkpoint.
    (root / "latest").write_text("step_000099\n")
    assert find_latest(root).name == "step_000003"


def test_checkpoint_rejects_foreign_or_incomplete_folders(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(CheckpointError, match="not a complete"):
        read_state(tmp_path / "x")
    (tmp_path / "x" / "trainer_state.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(CheckpointError, match="format"):
        read_state(tmp_path / "x")
    (tmp_path / "x" / "trainer_state.json").write_text("{ torn")
    with pytest.raises(CheckpointError, match=r"trainer_state\.json: cannot be read"):
        read_state(tmp_path / "x")


# ---------------------------------------------------------------------------------------------------------------
# Truncation and spans
# ---------------------------------------------------------------------------------------------------------------
def test_truncate_middle_keeps_head_and_tail() -> None:
    ids = list(range(100))
    cut, flag = truncate_middle(ids, 20)
    assert flag and len(cut) == 20 and cut[:5] == [0, 1, 2, 3, 4] and cut[-15:] == list(range(85, 100))
    assert truncate_middle(ids, 100) == (ids, False)


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("transformers")
    from stepgym.trainers.models import train_tokenizer

    return train_tokenizer(["<think>go</think>\n<action>take key</action> room door"] * 20, vocab_size=300)


def test_action_span_maps_to_the_real_tokens(tokenizer) -> None:
    from stepgym.shapers import structural_target_span
    from stepgym.steps.teacher_context import prefix_token_counter

    text = "<think>the key is here</think>\n<action>take key</action>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    count = prefix_token_counter(tokenizer, ids)
    s, e = structural_target_span(text, count, len(ids), mode="action_only")
    assert tokenizer.decode(ids[s:e]) == "<action>take key</action>"
    assert structural_target_span("no tags", count, len(ids), mode="action_only") is None


def test_privileged_text_is_cut_then_dropped_when_the_context_is_full(tokenizer) -> None:
    from stepgym.steps.row import StepRow
    from stepgym.steps.teacher_context import (
        ACTION_SPAN,
        ContextBudget,
        TeacherStats,
        ahead_items,
        opsd_items,
    )
    from stepgym.trainers.samples import PromptEncoder

    enc = PromptEncoder(tokenizer, max_prompt_tokens=512)
    prompt = "room door " * 10
    pids, _ = enc.encode(prompt)
    reply = "<think>go</think>\n<action>take key</action>"
    rids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    row = StepRow(0, 0, 0, 0, "t", prompt, pids, rids, reply)
    pi = "Environment feedback to this action: " + "the door is locked " * 40
    budget = len(pids) + len(rids)
    n_pi = len(tokenizer("\n\n" + pi, add_special_tokens=False)["input_ids"])
    assert n_pi > 40
    for room, expect in ((n_pi + 8, "whole"), (30, "cut"), (5, "dropped")):
        st = TeacherStats()
        (item,) = ahead_items([row], [pi], enc, ContextBudget(budget + room, 16), st)
        assert item.target == rids  # the scored tokens are never touched
        assert len(item.context) + len(item.target) <= budget + room + 2
        assert (st.pi_truncated, st.pi_dropped) == {"whole": (0, 0), "cut": (1, 0), "dropped": (0, 1)}[expect]
    st = TeacherStats()
    block = "\n<hindsight>\n" + "peer step " * 200 + "\n</hindsight>\n"
    items, spans = opsd_items([row], [block], tokenizer, ContextBudget(budget + 40, 16), st, span=ACTION_SPAN)
    (item,) = items
    s, e = spans[0][0]
    assert item.target == rids[s:e] and item.start == s
    assert item.context[: len(pids) + s] == pids + rids[:s]  # student context kept exactly, block after it
    assert st.pi_truncated == 1 and len(item.context) + len(item.target) <= budget + 40


# ---------------------------------------------------------------------------------------------------------------
# Stale teacher schedule, metrics, presets, CLI, optional backends
# ---------------------------------------------------------------------------------------------------------------
def test_stale_teacher_refreshes_every_n_updates() -> None:
    torch = pytest.importorskip("torch")
    from stepgym.trainers.teacher import StaleTeacher

    model = torch.nn.Linear(2, 2)
    st = StaleTeacher(model, every=10)
    versions = []
    for k in range(1, 26):
        with torch.no_grad():
            model.weight.add_(1.0)
        st.maybe_refresh(model, k)
        versions.append(st.version)
    # the teacher used for update k is the policy after update 10*floor((k-1)/10)
    assert versions[8] == 0 and versions[9] == 10 and versions[19] == 20 and versions[24] == 20
    assert torch.equal(st.model.weight, model.weight - 5.0)
    assert not st.model.weight.requires_grad


def test_metrics_logger_resume_drops_redone_iterations(tmp_path: Path) -> None:
    from stepgym.trainers.metrics import MetricsLogger, read_metrics

    m = MetricsLogger(tmp_path, tensorboard=False)
    for it in (1, 2, 3):
        m.log(it, {"a": float(it), "nan": float("nan"), "flag": True})
    m.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 4, "a": ')  # a torn line from a crash
    m2 = MetricsLogger(tmp_path, tensorboard=False, resume_from=2)
    m2.close()
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in recs] == [1, 2] and recs[0]["nan"] is None and recs[0]["flag"] == 1.0


def test_presets_build_and_cli_overrides() -> None:
    pytest.importorskip("tyro")
    from stepgym.cli.train import parse_config
    from stepgym.trainers.presets import TRAINER_PRESETS

    assert {"alfworld-cpu", "alfworld-gigpo", "alfworld-ahead", "alfworld-stepopsd", "credit-grpo"} <= set(
        TRAINER_PRESETS
    )
    for _, cfg in TRAINER_PRESETS.values():
        assert cfg.rollout.group_size >= 2
    p = TRAINER_PRESETS["alfworld-stepopsd"][1]
    assert p.shaper.token_reweight == "stepopsd" and p.teacher.refresh_every == 10 and p.loss.kl_coef == 0.01
    assert TRAINER_PRESETS["alfworld-gigpo"][1].rollout.max_prompt_tokens == 2048
    cfg = parse_config(["--preset", "credit-gigpo", "--rollout.n-tasks", "3", "--shaper.gamma", "0.9"])
    assert cfg.rollout.n_tasks == 3 and cfg.shaper.gamma == 0.9 and cfg.shaper.base == "gigpo"
    with pytest.raises(KeyError, match="unknown preset"):
        parse_config(["--preset", "nope"])


def test_vllm_backend_is_optional() -> None:
    import importlib.util

    from stepgym.errors import DependencyNotInstalled
    from stepgym.trainers import vllm_backend  # importable without vLLM
    from stepgym.trainers.backends import make_backend

    assert vllm_backend.VLLMBackend
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(DependencyNotInstalled, match="stepgym\\[gpu\\]"):
            make_backend("vllm", model=None, tokenizer=None)


def test_backend_modules_import_no_cycle() -> None:
    # the protocol types live in trainers.generation: a backend module never imports the module that builds backends
    import subprocess
    import sys

    code = (
        "import sys, stepgym.trainers.vllm_backend as v; "
        "print('stepgym.trainers.backends' in sys.modules, v.GenerationRequest.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "stepgym.trainers.generation"]
    from stepgym.trainers import backends, generation

    assert backends.GenerationRequest is generation.GenerationRequest  # the old import path still works


def test_importing_shapers_does_not_import_the_trainer_stack() -> None:
    import subprocess
    import sys

    code = (
        "import stepgym, stepgym.trainers, stepgym.trainers.config, sys; "
        "bad = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_eval_summary_budgets() -> None:
    from stepgym.trainers.evaluate import summarise

    def traj(n_steps: int, won: bool, tt: str) -> schema.Trajectory:
        t = schema.Trajectory("x", "o", {schema.TASK_TYPE: tt})
        for i in range(n_steps):
            info = {
                schema.WON: won and i == n_steps - 1,
                schema.FORMAT_VALID: True,
                schema.ADMISSIBLE: i % 2 == 0,
            }
            t.steps.append(schema.Step("o", "a", 0.0, "o", False, False, info))
        return t

    s = summarise([traj(5, True, "a"), traj(15, True, "a"), traj(50, False, "b")], budgets=(10, 20, 50))
    assert s["within"] == {"10": pytest.approx(1 / 3), "20": pytest.approx(2 / 3), "50": pytest.approx(2 / 3)}
    assert s["per_type"] == {"a": {"n": 2, "success": 1.0}, "b": {"n": 1, "success": 0.0}}
    assert np.isclose(s["valid_action_ratio"], (3 + 8 + 25) / 70)


@pytest.mark.parametrize("seed", range(20))
def test_token_budget_batches_cover_every_row_once_within_budget(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 300, size=int(rng.integers(0, 60)))]
    budget = int(rng.integers(50, 1200))
    batches = token_budget_batches(lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert b, "no empty batch"
        padded = max(lengths[i] for i in b) * len(b)
        assert padded <= budget or len(b) == 1  # an over-long row still gets a batch of its own
    assert token_budget_batches(lengths, budget) == batches  # deterministic


def test_token_budget_batches_groups_similar_lengths():
    assert token_budget_batches([10, 100, 10, 100, 1000], 200) == [[0, 2], [1, 3], [4]]
    assert token_budget_batches([], 10) == []
