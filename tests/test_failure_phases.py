"""Failure semantics in every phase that plays an env (docs/failures.md), with a flaky env: one whose steps raise
on a few percent of steps from the very first one (``rollout.faults 'exception=P,seed=N'``, deterministic by seed).

The tokenizer corpus, the format warm-up, training and evaluation of a tiny-model run all go on, with the aborted
episodes counted (a warning line, ``warmup/aborted_episodes``, ``rollout/aborted/<cause>``,
``eval/<split>/aborted_episodes``, ``n_aborted`` in ``eval.json``) and kept out of the success rates; ``stepgym
eval`` and ``stepgym rollout`` do the same; a single-env episode played by :func:`stepgym.rollout.play_episode` ends
aborted on an env exception, never as a failure.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import pytest

import stepgym  # noqa: F401 - registers the envs
from stepgym.agents import make_agent
from stepgym.rollout import evaluate_agent, play_episode
from stepgym.wrappers.faults import FaultInjectionWrapper, InjectedFault

FLAKY = "exception=0.04,seed=3"


def _flaky(p: float = 0.04, seed: int = 3) -> gym.Env:
    return FaultInjectionWrapper(gym.make("StepGym/CreditToy-v0"), exception=p, seed=seed)


def test_play_episode_ends_an_episode_aborted_on_an_env_exception() -> None:
    env = FaultInjectionWrapper(gym.make("StepGym/CreditToy-v0"), exception=1.0)
    traj = play_episode(env, make_agent("expert"), seed=0)
    assert traj.aborted and traj.abort_cause == "env_exception" and not traj.steps and not traj.success

    class BadReset(gym.Wrapper):
        def reset(self, **kw):
            raise InjectedFault("the server is gone")

    traj = play_episode(
        BadReset(gym.make("StepGym/CreditToy-v0")), make_agent("expert"), options={"task_id": "t"}
    )
    assert traj.aborted and traj.task_id == "t" and traj.steps == []

    class AgentBug:  # an exception of the agent's own is not the env's: it propagates
        def reset(self) -> None:
            pass

        def act(self, obs, info):
            raise KeyError("policy bug")

    with pytest.raises(KeyError):
        play_episode(gym.make("StepGym/CreditToy-v0"), AgentBug())


def test_evaluate_agent_counts_aborted_episodes_out_of_the_success_rate() -> None:
    env = _flaky(0.15, seed=1)
    ids = list(env.unwrapped.task_ids)[:30]
    res = evaluate_agent(env, make_agent("expert"), task_ids=ids, progress=False)
    aborted = [e for e in res.episodes if e.get("aborted")]
    assert aborted and len(aborted) < len(ids), "pick another fault seed"
    assert res.abort_counts() == {"env_exception": len(aborted)}
    wins, n = res.success_by_type()["all"]
    assert n == len(ids) - len(aborted) and wins == n  # the expert wins every finished episode
    assert f"{len(aborted)} of {len(ids)} episodes aborted" in res.table()


def test_stepgym_rollout_with_a_flaky_env(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    from stepgym.cli import main

    make = gym.make
    monkeypatch.setattr(
        gym, "make", lambda *a, **k: FaultInjectionWrapper(make(*a, **k), exception=0.15, seed=1)
    )
    out = tmp_path / "eps.jsonl"
    args = [
        "rollout",
        "--env",
        "StepGym/CreditToy-v0",
        "--agent",
        "expert",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    eps = [json.loads(x) for x in out.read_text().splitlines()]
    n_ab = sum(bool(e.get("aborted")) for e in eps)
    assert 0 < n_ab < len(eps) and all(e["abort_cause"] == "env_exception" for e in eps if e.get("aborted"))
    assert f"{n_ab} of {len(eps)} episodes aborted" in capsys.readouterr().out


def _cfg(tmp_path: Path, faults: str = FLAKY, **run):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from stepgym.trainers.config import RunConfig
    from stepgym.trainers.presets import get_preset

    cfg = get_preset("credit-grpo")
    return replace(
        cfg,
        run=RunConfig(
            output_dir=str(tmp_path / "r"), iterations=2, save_every=0, progress=False, tensorboard=False,
            report=False, credit_trajectories=0, threads=1, **run,
        ),
        rollout=replace(
            cfg.rollout, backend="scripted", scripted_policy="noisy-expert:0.3", n_tasks=4, group_size=3,
            faults=faults, max_abort_rate=0.6,
        ),
        warmup=replace(cfg.warmup, steps=2, episodes=24),
        model=replace(cfg.model, tokenizer_corpus_episodes=24),
        eval=replace(cfg.eval, limit=24, at_start=True),
    )  # fmt: skip


def test_a_flaky_env_trains_evaluates_and_reports_with_the_aborts_counted(tmp_path: Path, caplog) -> None:
    from stepgym.trainers.grpo import GRPOTrainer

    caplog.set_level(logging.WARNING, logger="stepgym.trainers.warmup")
    tr = GRPOTrainer(_cfg(tmp_path))
    try:
        # corpus: the run did not die in it; its aborted episodes were counted in one warning line
        corpus = [r.message for r in caplog.records if "tokenizer corpus" in r.message]
        assert len(corpus) == 1 and "env_exception" in corpus[0]
        assert tr.warmup_stats["warmup/aborted_episodes"] > 0  # format warm-up
        tr.train()
    finally:
        tr.close()
    m = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in m] == [0, 1, 2]
    assert sum(x.get("rollout/aborted/env_exception", 0) for x in m) > 0  # training
    ev = [x["eval/valid/aborted_episodes"] for x in m if "eval/valid/aborted_episodes" in x]
    assert len(ev) == 2 and sum(ev) > 0  # evaluation at the start and at the end
    for r in tr.evals:
        assert r["n_tasks"] + r["n_aborted"] == 24 and r["aborted"] == (
            {"env_exception": r["n_aborted"]} if r["n_aborted"] else {}
        )


def test_stepgym_eval_reports_the_aborted_episodes(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torch")
    from stepgym.cli import main

    args = [
        "eval", "--preset", "credit-grpo", "--run.output-dir", str(tmp_path / "e"), "--run.no-progress",
        "--warmup.steps", "0", "--model.tokenizer-corpus-episodes", "8", "--eval.limit", "24",
        "--rollout.faults", "exception=0.1,seed=4",
    ]  # fmt: skip
    assert main(args) == 0
    results = json.loads((tmp_path / "e-eval" / "eval.json").read_text())
    assert results[0]["n_aborted"] > 0 and results[0]["n_tasks"] + results[0]["n_aborted"] == 24
    assert "aborted:" in capsys.readouterr().out


def test_the_run_still_stops_past_max_abort_rate(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torch")
    from stepgym.cli import main

    args = [
        "train", "--preset", "credit-grpo", "--run.output-dir", str(tmp_path / "s"), "--run.no-progress",
        "--run.no-tensorboard", "--run.no-report", "--rollout.backend", "scripted", "--rollout.n-tasks", "4",
        "--rollout.group-size", "3", "--warmup.steps", "0", "--model.tokenizer-corpus-episodes", "8",
        "--run.iterations", "2", "--rollout.faults", "exception=0.3,seed=0",
    ]  # fmt: skip
    assert main(args) == 1
    err = [x for x in capsys.readouterr().err.strip().splitlines() if "tokenizer corpus" not in x]
    assert len(err) == 1 and "max_abort_rate" in err[0] and "env_exception" in err[0]


def test_faults_that_need_a_worker_are_refused_in_process_with_one_line() -> None:
    from stepgym.trainers.presets import get_preset

    cfg = get_preset("credit-grpo")
    for spec in ("kill=0.1", "hang=0.1,seed=2"):
        with pytest.raises(ValueError, match=r"need env workers.*process or ray"):
            replace(cfg, rollout=replace(cfg.rollout, faults=spec))
    replace(cfg, rollout=replace(cfg.rollout, faults="hang=0.1", env_executor="process"))
