"""The bundled trainer on a tiny in-process model (no downloads): it updates every parameter, its token ↔ step
alignment is exact, shaped advantages keep their sign on real batches, and it resumes exactly."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from stepgym.shapers import ShapeConfig, TokenLayout, broadcast_to_tokens  # noqa: E402
from stepgym.trainers.checkpoint import find_latest  # noqa: E402
from stepgym.trainers.config import (  # noqa: E402
    EnvConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
    WarmupConfig,
)
from stepgym.trainers.grpo import GRPOTrainer  # noqa: E402
from stepgym.trainers.samples import pack, response_logprobs  # noqa: E402


def tiny_config(out: Path, shaper: ShapeConfig | None = None, **over) -> TrainConfig:
    cfg = TrainConfig(
        run=RunConfig(
            output_dir=str(out),
            iterations=2,
            save_every=0,
            progress=False,
            tensorboard=False,
            report=False,
            threads=1,
            credit_trajectories=2,
        ),
        env=EnvConfig(id="StepGym/CreditToy-v0", history=1, eval_splits=("valid",)),
        model=ModelConfig(name="tiny", tokenizer_corpus_episodes=16),
        # per-call seeds: the random stream these tests' batches were chosen with (group seeds are the default)
        rollout=RolloutConfig(
            n_tasks=3, group_size=4, max_prompt_tokens=256, max_response_tokens=8, group_seeds=False
        ),
        shaper=shaper or ShapeConfig.from_preset("grpo-alfworld"),
        optim=OptimConfig(lr=1e-3),
        warmup=WarmupConfig(steps=0),
        eval=EvalConfig(limit=4, parallel=4),
    )
    return replace(cfg, **over)


def scripted(cfg: TrainConfig, policy: str = "random") -> TrainConfig:
    return replace(cfg, rollout=replace(cfg.rollout, backend="scripted", scripted_policy=policy))


def params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------------------------------------------------------
# Two steps change every trainable parameter, loss finite
# ---------------------------------------------------------------------------------------------------------------
def test_two_steps_change_every_parameter(tmp_path: Path) -> None:
    tr = GRPOTrainer(scripted(tiny_config(tmp_path / "run")))
    before = params(tr.model)
    stats = [tr.step() for _ in range(2)]
    after = params(tr.model)
    unchanged = [n for n in before if torch.equal(before[n], after[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    for m in stats:
        assert math.isfinite(m["actor/pg_loss"]) and math.isfinite(m["actor/grad_norm"])
        assert m["actor/grad_norm"] > 0
        assert m["rollout/rows"] > 0
    assert all(torch.isfinite(p).all() for p in after.values())
    tr.close()


# ---------------------------------------------------------------------------------------------------------------
# Token ↔ step alignment on real tokenised rows
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch_trainer(tmp_path_factory: pytest.TempPathFactory) -> GRPOTrainer:
    tr = GRPOTrainer(scripted(tiny_config(tmp_path_factory.mktemp("align"))))
    yield tr
    tr.close()


def test_rows_decode_to_their_step_and_advantages_land_on_them(batch_trainer: GRPOTrainer) -> None:
    tr = batch_trainer
    ro = tr.collect()
    rows = ro.rows
    tok = tr.tokenizer
    # Each row is one step of one trajectory, in (trajectory, step) order, and its tokens decode to that step's reply.
    assert [(r.traj, r.t) for r in rows] == sorted((r.traj, r.t) for r in rows)
    for r in rows:
        step = ro.trajectories[r.traj].steps[r.t]
        assert step.info[schema_raw()] == r.response_text
        assert tok.decode(r.response_ids, skip_special_tokens=True) == r.response_text
        assert r.response_ids[-1] == tok.eos_token_id
    # A distinct value per step lands on exactly that step's generated tokens, nowhere else.
    from stepgym.steps.row import response_matrix

    ids, mask = response_matrix([r.response_ids for r in rows], tr.pad_id)
    layout = TokenLayout.from_step_rows(mask)
    values = np.arange(1, len(rows) + 1, dtype=np.float64)
    tok_adv = broadcast_to_tokens(values, layout)
    for b, r in enumerate(rows):
        n = len(r.response_ids)
        assert np.all(tok_adv[b, :n] == b + 1)
        assert np.all(tok_adv[b, n:] == 0)
        assert list(ids[b, :n]) == r.response_ids
    # In the packed model input (right-aligned, left padding), the scored targets are the response tokens and
    # they sit at the end of each sequence, right after the prompt.
    batch = pack([r.prompt_ids for r in rows], [r.response_ids for r in rows], pad_id=tr.pad_id)
    width = batch.input_ids.shape[1]
    for b, r in enumerate(rows):
        n = len(r.response_ids)
        seq = batch.input_ids[b, width - n - len(r.prompt_ids) :].tolist()
        assert seq == r.prompt_ids + r.response_ids
        assert batch.target_ids[b, :n].tolist() == r.response_ids
        assert batch.target_mask[b].sum().item() == n


def schema_raw():
    from stepgym import schema

    return schema.RAW_OUTPUT


def test_batched_logprobs_equal_unpadded_ones(batch_trainer: GRPOTrainer) -> None:
    """The gather of packed logits onto response coordinates is exact: each row's log-probs equal those of the same
    sequence scored alone, without padding (so no advantage is ever paired with another token's log-prob)."""
    tr = batch_trainer
    rows = tr.collect().rows[:12]
    model = tr.model.eval()
    with torch.no_grad():
        batch = pack([r.prompt_ids for r in rows], [r.response_ids for r in rows], pad_id=tr.pad_id)
        logp, _ = response_logprobs(model, batch)
        for b, r in enumerate(rows):
            x = torch.tensor([r.prompt_ids + r.response_ids])
            full = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
            p = len(r.prompt_ids)
            ref = torch.stack([full[p - 1 + j, tok] for j, tok in enumerate(r.response_ids)])
            assert torch.allclose(logp[b, : len(r.response_ids)], ref, atol=1e-5), b
            assert torch.all(logp[b, len(r.response_ids) :] == 0)
        _, ent = response_logprobs(model, batch, with_entropy=True)
        r = rows[0]
        x = torch.tensor([r.prompt_ids + r.response_ids])
        lp = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
        p = len(r.prompt_ids)
        ref_ent = -(lp.exp() * lp).sum(-1)[p - 1 : p - 1 + len(r.response_ids)]
        assert torch.allclose(ent[0, : len(r.response_ids)], ref_ent, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Sign preservation of shaped advantages on real batches (AHEAD, StepOPSD with real teacher gaps)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["ahead", "stepopsd-alfworld"])
def test_token_reweighting_preserves_sign_on_real_batches(tmp_path: Path, preset: str) -> None:
    from stepgym.steps.advantages import shape_rows
    from stepgym.steps.row import trainer_rows
    from stepgym.trainers.grpo import teacher_gaps

    cfg = scripted(tiny_config(tmp_path / preset, ShapeConfig.from_preset(preset)), "noisy-expert:0.5")
    tr = GRPOTrainer(cfg)
    tr.step()  # one update, so StepOPSD's stale teacher differs from the policy (non-zero gaps everywhere)
    ro = tr.collect()
    rows = ro.rows
    old = tr.scorer.score(tr.model, [r.prompt_ids for r in rows], [r.response_ids for r in rows])
    teacher = tr.rescore(ro, old)
    assert teacher["metrics"]["teacher/items"] > 0
    assert teacher["metrics"]["teacher/delta_std"] > 0  # real, non-trivial gaps
    tr.iteration = 1
    res = shape_rows(trainer_rows(rows, tr.pad_id), tr.row_settings(), teacher_gaps(teacher))
    mask = res.mask
    base = broadcast_to_tokens(res.shaped.step_advantages, res.batch.layout)
    shaped = res.token_advantages
    assert np.any(base != 0), "the batch has no non-zero advantage: the check would be vacuous"
    assert np.array_equal(np.sign(shaped), np.sign(base))
    assert not np.allclose(shaped[mask], base[mask]), "the teacher changed nothing"
    assert np.all(shaped[~mask] == 0)
    tr.close()


def test_proas_keeps_or_zeroes_the_sign_on_real_batches(tmp_path: Path) -> None:
    """ProAS only rescales (MUI: × Rea ∈ {0, 1}; APR: × D_t/D̄ ≥ 0): a shaped step never flips its base sign, and
    APR preserves each failed trajectory's mean penalty when its base advantage is constant."""
    from stepgym.steps.advantages import shape_rows
    from stepgym.steps.row import trainer_rows

    cfg = scripted(tiny_config(tmp_path / "proas", ShapeConfig.from_preset("proas-grpo")), "noisy-expert:0.5")
    tr = GRPOTrainer(cfg)
    ro = tr.collect()
    rea, pa = tr.arg.label(ro)
    assert rea.any() and not rea.all()  # expert-seeded graph: some steps reasonable, some not
    res = shape_rows(trainer_rows(ro.rows, tr.pad_id, (rea, pa)), tr.row_settings())
    base, shaped = res.shaped.base_advantages, res.shaped.step_advantages
    assert np.any(base != 0)
    assert np.all(base * shaped >= 0)
    assert np.any((base > 0) & (shaped == 0)), "MUI zeroed no unreasonable step of a success"
    tr.close()


# ---------------------------------------------------------------------------------------------------------------
# Exact resume and crash-safe checkpoints
# ---------------------------------------------------------------------------------------------------------------
def test_resume_reproduces_the_next_step_bitwise(tmp_path: Path) -> None:
    """Sampling goes through HF generate (torch RNG), the tiny model's weights and the stale teacher are all
    restored: iteration 2 after a resume from the iteration-1 checkpoint is *bitwise* identical."""
    shaper = ShapeConfig.from_preset("stepopsd-alfworld")
    cfg = tiny_config(tmp_path / "a", shaper)
    cfg = replace(
        cfg,
        run=replace(cfg.run, save_every=1),
        teacher=replace(cfg.teacher, refresh_every=1),
        warmup=WarmupConfig(steps=5, episodes=8),
    )
    a = GRPOTrainer(cfg)
    a.train()
    final_a = params(a.model)
    teacher_a = {n: p.clone() for n, p in a.stale.model.named_parameters()}
    a.close()
    ckpt = a.ckpt_dir / "step_000001"
    assert ckpt.is_dir()
    cfg_b = replace(cfg, run=replace(cfg.run, output_dir=str(tmp_path / "b"), resume=str(ckpt)))
    b = GRPOTrainer(cfg_b)
    assert b.iteration == 1
    b.train()
    final_b = params(b.model)
    for n in final_a:
        assert torch.equal(final_a[n], final_b[n]), n
    for n, p in b.stale.model.named_parameters():
        assert torch.equal(teacher_a[n], p), n
    lines_a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    lines_b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]

    # every metric of the resumed iteration but the clock's (teacher/* are there when a group had a success)
    def same(rec: dict) -> dict:
        return {k: v for k, v in rec.items() if not k.startswith(("time/", "perf/"))}

    assert same(lines_a[-1]) == same(lines_b[-1])
    assert {"rollout/success", "actor/pg_loss", "actor/grad_norm"} <= set(lines_a[-1])
    b.close()


def test_a_cached_warm_up_gives_the_same_run_bit_for_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``warmup.cache_dir``: a second run of the same seed (another credit method) loads the warm-up instead of
    training again and ends with the same weights and metrics as a run without the cache; another seed warms up
    afresh; a damaged entry is one warning and a fresh warm-up."""
    import stepgym.trainers.warmup as warmup

    calls = []
    real = warmup.format_warmup

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(warmup, "format_warmup", counted)
    cache = tmp_path / "cache"

    def run(
        name: str,
        *,
        use_cache: bool = True,
        seed: int = 0,
        preset: str = "grpo-alfworld",
        values: bool = False,
    ):
        cfg = tiny_config(tmp_path / name, ShapeConfig.from_preset(preset))
        cfg = replace(
            cfg,
            run=replace(cfg.run, seed=seed),
            env=replace(cfg.env, value_labels=values),
            warmup=WarmupConfig(steps=5, episodes=8, cache_dir=str(cache) if use_cache else ""),
        )
        tr = GRPOTrainer(cfg)
        tr.train()
        out = params(tr.model), tr.warmup_stats
        tr.close()
        lines = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return out, [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))} for r in lines]

    (plain, plain_stats), plain_lines = run("plain", use_cache=False)
    assert len(calls) == 1 and not cache.exists()
    (first, first_stats), first_lines = run("first")
    assert len(calls) == 2 and len(list(cache.glob("*.pt"))) == 1
    (second, second_stats), second_lines = run("second", preset="gigpo-alfworld")
    assert len(calls) == 2  # loaded, not trained
    assert first_stats == second_stats == plain_stats
    for n in plain:
        assert torch.equal(plain[n], first[n]), n
    assert first_lines == plain_lines
    # the other method's run equals that method without the cache
    (gigpo, _), gigpo_lines = run("gigpo-plain", use_cache=False, preset="gigpo-alfworld")
    assert all(torch.equal(gigpo[n], second[n]) for n in gigpo) and gigpo_lines == second_lines
    # the ceiling's true-value labels change no observation: it shares the warm-up too
    (oracle, _), oracle_lines = run("oracle", preset="oracle", values=True)
    assert len(calls) == 3
    (oracle_plain, _), oracle_plain_lines = run("oracle-plain", use_cache=False, preset="oracle", values=True)
    assert all(torch.equal(oracle[n], oracle_plain[n]) for n in oracle) and oracle_lines == oracle_plain_lines
    run("other-seed", seed=1)
    assert len(calls) == 5 and len(list(cache.glob("*.pt"))) == 2
    # a damaged entry: one warning, warmed up again, the same result (weights cut short; metadata whose
    # statistics are damaged after a valid random state: nothing may be loaded before all of it is read)
    for pt in cache.glob("*.pt"):
        pt.write_bytes(pt.read_bytes()[:100])
    with caplog.at_level("WARNING"):
        (again, _), again_lines = run("damaged")
    assert len(calls) == 6 and "unreadable" in caplog.text
    assert all(torch.equal(again[n], plain[n]) for n in plain) and again_lines == plain_lines
    for meta in cache.glob("*.json"):
        bad = json.loads(meta.read_text())
        bad["stats"] = {"warmup/first_loss": "not a number"}
        meta.write_text(json.dumps(bad))
    (again, _), again_lines = run("damaged-meta")
    assert len(calls) == 7
    assert all(torch.equal(again[n], plain[n]) for n in plain) and again_lines == plain_lines


def test_crash_during_save_keeps_previous_checkpoint(tmp_path: Path) -> None:
    cfg = scripted(tiny_config(tmp_path / "run", ShapeConfig.from_preset("proas-grpo")))
    tr = GRPOTrainer(cfg)
    tr.step()
    first = tr.save()
    saved = params(tr.model)
    tr.step()

    def boom(folder: Path) -> None:
        (folder / "partial.bin").write_bytes(b"half a file")
        raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        tr.save(extra_parts={"zz_boom": boom})
    assert find_latest(tr.ckpt_dir) == first
    assert not list(tr.ckpt_dir.glob(".tmp-*")), "the half-written folder must be cleaned up"
    tr.close()
    again = GRPOTrainer(replace(cfg, run=replace(cfg.run, resume="auto")))
    assert again.iteration == 1
    for n, p in params(again.model).items():
        assert torch.equal(p, saved[n]), n
    from stepgym.reference_graph import AgenticReferenceGraph

    assert again.arg is not None
    assert again.arg.graph == AgenticReferenceGraph.load(first / "arg" / "graph.json")
    again.close()


def test_fresh_run_refuses_a_directory_with_checkpoints(tmp_path: Path) -> None:
    from stepgym.trainers.checkpoint import CheckpointError

    cfg = scripted(tiny_config(tmp_path / "run"))
    tr = GRPOTrainer(cfg)
    tr.step()
    tr.save()
    tr.close()
    with pytest.raises(CheckpointError, match="resume auto"):
        GRPOTrainer(cfg)


# ---------------------------------------------------------------------------------------------------------------
# A full iteration through GroupEnv with the scripted backend, for every method, plus evaluation and the report
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "preset", ["grpo-alfworld", "gigpo-alfworld", "proas-grpo", "ahead", "stepopsd-alfworld"]
)
def test_scripted_iteration_every_method(tmp_path: Path, preset: str) -> None:
    cfg = scripted(tiny_config(tmp_path / preset, ShapeConfig.from_preset(preset)), "noisy-expert:0.3")
    cfg = replace(cfg, run=replace(cfg.run, iterations=1, report=True))
    tr = GRPOTrainer(cfg)
    result = tr.train()
    tr.close()
    rec = json.loads((tmp_path / preset / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0.0 <= rec["rollout/success"] <= 1.0
    assert rec["rollout/valid_action_ratio"] > 0.5  # the scripted replies are well-formed
    assert "eval/valid/success" in rec and "eval/valid/within_10" in rec
    report = Path(result["report"])
    assert report.is_file() and "credit" in report.read_text()
    credit = json.loads((tmp_path / preset / "credit.json").read_text())
    assert credit["trajectories"] and all(t["steps"] for t in credit["trajectories"])
    if preset == "proas-grpo":
        assert rec["arg/vertices"] > 0


# ---------------------------------------------------------------------------------------------------------------
# DAPO dynamic sampling, and the CLI entry points
# ---------------------------------------------------------------------------------------------------------------
def test_dynamic_sampling_drops_constant_groups(tmp_path: Path) -> None:
    cfg = scripted(tiny_config(tmp_path / "ds"), "noisy-expert:0.5")
    cfg = replace(cfg, rollout=replace(cfg.rollout, dynamic_sampling=True, max_gen_batches=3))
    tr = GRPOTrainer(cfg)
    ro = tr.collect()
    assert len(ro.task_ids) == cfg.rollout.n_tasks
    assert len(ro.trajectories) == cfg.rollout.n_tasks * cfg.rollout.group_size
    assert sorted({r.traj for r in ro.rows}) == list(range(len(ro.trajectories)))
    m = tr.step()
    assert m["rollout/groups"] == cfg.rollout.n_tasks
    tr.close()


def test_cli_train_then_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stepgym.cli import main

    out = tmp_path / "cli"
    common = [
        "--preset",
        "credit-grpo",
        "--run.output-dir",
        str(out),
        "--run.no-progress",
        "--run.no-tensorboard",
        "--rollout.backend",
        "scripted",
        "--rollout.scripted-policy",
        "noisy-expert:0.3",
        "--rollout.n-tasks",
        "2",
        "--rollout.group-size",
        "3",
        "--warmup.steps",
        "0",
        "--model.tokenizer-corpus-episodes",
        "8",
        "--eval.limit",
        "2",
    ]
    assert main(["train", *common, "--run.iterations", "1"]) == 0
    assert "report:" in capsys.readouterr().out
    assert (out / "checkpoints" / "latest").is_file()
    assert main(["eval", *common, "--checkpoint", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "success" in printed and "within budget" in printed
    ev = json.loads((Path(str(out) + "-eval") / "eval.json").read_text())
    assert ev[0]["split"] == "valid" and ev[0]["n_tasks"] == 2 and ev[0]["iteration"] == 1


def test_warmup_replies_longer_than_the_response_budget_are_one_clear_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A format warm-up reply longer than ``rollout.max_response_tokens`` is one the model learns but generation
    always cuts before the action closes (an invalid reply, and no error anywhere). Their share is one warning
    line naming the budget to set; when it is every reply, nothing valid can be learned and the run stops before
    any update. At that budget the same warm-up runs without a word."""

    def run(name: str, budget: int) -> GRPOTrainer:
        cfg = tiny_config(tmp_path / name, warmup=WarmupConfig(steps=2, episodes=8))
        return GRPOTrainer(replace(cfg, rollout=replace(cfg.rollout, max_response_tokens=budget)))

    with pytest.raises(ValueError, match=r"100% of its replies .* rollout\.max_response_tokens=2,") as err:
        run("short", 2)
    need = int(str(err.value).rsplit(" ", 1)[1])
    with caplog.at_level("WARNING"):
        tr = run("fits", need)
    assert tr.warmup_stats["warmup/reply_tokens_max"] == need
    assert tr.warmup_stats["warmup/replies_over_budget"] == 0.0 and "format warm-up" not in caplog.text
    tr.close()
    with caplog.at_level("WARNING"):
        tr = run("some", need - 1)
    share = tr.warmup_stats["warmup/replies_over_budget"]
    assert 0 < share < 1 and f"{share:.0%} of its replies (up to {need} tokens)" in caplog.text
    tr.close()


def test_sampled_evaluation_repeats_exactly_for_an_unchanged_policy(tmp_path: Path) -> None:
    """Sampled evaluation draws its tasks and its random stream from the run's seed alone, not from the training
    stream: the same policy scores the same at every evaluation point, however far training's stream has moved
    (the learning study's held-out curves rely on it)."""
    cfg = tiny_config(tmp_path / "run", eval=EvalConfig(limit=6, parallel=6, greedy=False))
    tr = GRPOTrainer(cfg)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "iteration"} for r in rs]  # noqa: E731
    first = strip(tr.evaluate())
    tr._sample_tasks(3)  # the training stream moves on
    assert strip(tr.evaluate()) == first
    tr.step()
    assert tr.iteration == 1 and [r["iteration"] for r in tr.evaluate()] == [1]
    tr.close()


@pytest.mark.parametrize("policy", ["random", "expert", "noisy-expert:0.5"])
def test_the_warm_up_imitates_the_policy_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy
) -> None:
    """``warmup.policy``: the rows a warm-up learns from are that policy's replies. Under ``expert`` every reply is
    the env's expert action in the state it answered; under ``random`` (the default) many are not; a noisy expert
    lies between. The imitated policy is part of the warm-up cache's fingerprint, and only when it is not the
    default (the fingerprints of earlier warm-ups stand)."""
    import stepgym.trainers.warmup as warmup
    from stepgym import schema

    seen: list = []
    real = warmup._imitated_rows

    def keep(*a, **k):
        rows, aborted = real(*a, **k)
        seen.extend(rows)
        return rows, aborted

    monkeypatch.setattr(warmup, "_imitated_rows", keep)
    cfg = tiny_config(tmp_path / "run", warmup=WarmupConfig(steps=1, episodes=16, policy=policy))
    tr = GRPOTrainer(cfg)
    before = {(r.traj, r.t): r for r in seen}
    experts = [
        (before[(r.traj, r.t - 1)].info.get(schema.EXPERT_ACTION), r)
        for r in seen
        if (r.traj, r.t - 1) in before
    ]
    # (the toy has no expert once its decisive choice was lost: such a step is random under every policy)
    agree = [f"<action>{e}</action>" in r.response_text for e, r in experts if e is not None]
    assert len(agree) > 20
    share = sum(agree) / len(agree)
    if policy == "expert":
        assert share == 1.0
    elif policy == "random":
        assert share < 0.8
    else:
        assert 0.5 < share < 1.0
    fp = warmup.warmup_fingerprint(tr.model, tr.tokenizer, cfg, np.random.default_rng(0), 0)
    default = replace(cfg, warmup=replace(cfg.warmup, policy="random"))
    assert (
        fp == warmup.warmup_fingerprint(tr.model, tr.tokenizer, default, np.random.default_rng(0), 0)
    ) == (policy == "random")
    tr.close()


@pytest.mark.parametrize("bad", ["garbage", "smart", "noisy-expert:2", "noisy-expert:x"])
def test_an_unknown_warm_up_policy_is_one_clear_line(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match=r"warmup\.policy must be random, expert or noisy-expert:P"):
        tiny_config(tmp_path / "run", warmup=WarmupConfig(steps=1, policy=bad))
