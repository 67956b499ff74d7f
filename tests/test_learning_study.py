"""benchmarks/learning_study.py on a tiny budget: its advantages are stepgym's shape_advantages on the trainer's
batch, held-out tasks are never trained on, finished cells are skipped on resume, the report is built from the
cells, and the second learner (``learning_study_llm.py``) runs the bundled trainer for one iteration with the tiny in-process model."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_study as ls  # noqa: E402

from stepgym import schema  # noqa: E402
from stepgym.shapers import ShapeConfig, StepBatch, TokenLayout, shape_advantages  # noqa: E402

ALF = ls.ENVS["ALFWorld"]
TINY = [
    "--seeds", "1", "--iterations", "2", "--eval-every", "1", "--n-tasks", "2", "--group-size", "2",
    "--eval-tasks", "2", "--max-steps", "6", "--warm-tasks", "2",
]  # fmt: skip


def _episodes(values: bool) -> tuple[list, ls.Policy]:
    """Two groups of three sampled ALFWorld episodes from the warm-started policy."""
    train, _ = ls.task_lists(ALF, {"eval_tasks": 2})
    policy = ls.warm_start(ALF, train, 4, 1, 0.5, 10)
    env = ls.make_env(ALF, ALF.train_split, values=values)
    rng = np.random.default_rng(3)
    eps = []
    for g, task in enumerate(train[:2]):
        for _ in range(3):
            e = ls.play(env, policy, task, rng, 10)
            e.group = g
            eps.append(e)
    return eps, policy


def test_advantages_are_shape_advantages_on_the_same_batch(data_dir: Path) -> None:
    """The ceiling and GRPO advantages equal shape_advantages on a StepBatch built here from the episodes (the
    true gains of ValueWrapper, the preset's reward scale), so the study trains on stepgym's own credit."""
    eps, policy = _episodes(values=True)
    steps = [s for e in eps for s in e.steps]
    n = len(steps)
    gains = [float(s.next_info[schema.VALUE_GAIN]) for s in steps]
    assert any(g != 0.0 for g in gains)
    mine = StepBatch(
        group_ids=[e.group for e in eps for _ in e.steps],
        traj_ids=[i for i, e in enumerate(eps) for _ in e.steps],
        rewards=[10.0 * s.reward for s in steps],
        valid=[True] * n,
        anchor_obs=[s.info[schema.STATE_KEY] for s in steps],
        next_obs=[s.next_info[schema.STATE_KEY] for s in steps],
        dones=[s.done for s in steps],
        step_index=[t for e in eps for t in range(len(e.steps))],
        true_gain=gains,
        layout=TokenLayout.from_step_rows(np.ones((n, 1))),
    )
    for method, cfg in (
        ("oracle", ShapeConfig.from_preset("oracle")),
        ("grpo", ls.shaper_config(ALF, "grpo")[0]),
    ):
        got, batch = ls.advantages(method, ALF, eps, it=0, graph=None, stale=policy, strength=2.0)
        want = shape_advantages(mine, cfg, update_index=0).token_advantages[:, 0]
        assert got.shape == (n,)
        np.testing.assert_allclose(got, want, atol=1e-12)
        np.testing.assert_allclose(batch.rewards, mine.rewards)
    oracle, _ = ls.advantages("oracle", ALF, eps, it=0, graph=None, stale=policy, strength=2.0)
    grpo, _ = ls.advantages("grpo", ALF, eps, it=0, graph=None, stale=policy, strength=2.0)
    assert not np.allclose(oracle, grpo)  # the ceiling is step credit, not the episode's
    # the -obs keying anchors on the observation text, the default on STATE_KEY
    _, b_obs = ls.advantages("g2po-obs", ALF, eps, it=0, graph=None, stale=policy, strength=2.0)
    assert list(b_obs.anchor_obs) == [s.obs for s in steps]
    # Dr.GRPO is GRPO without the std division: same sign, other scale
    dr, _ = ls.advantages("drgrpo", ALF, eps, it=0, graph=None, stale=policy, strength=2.0)
    assert np.array_equal(np.sign(dr), np.sign(grpo))


def test_policy_gradient_raises_the_chosen_action(data_dir: Path) -> None:
    eps, _ = _episodes(values=False)
    s = eps[0].steps[0]
    p = ls.Policy()
    before = ls.cs.softmax(p.logits(s.ctx, s.actions))[s.chosen]
    p.update(s.ctx, s.actions, ls.cs.softmax(p.logits(s.ctx, s.actions)), s.chosen, 1.0)
    assert ls.cs.softmax(p.logits(s.ctx, s.actions))[s.chosen] > before
    assert ls.parse_action("take apple 1 from countertop 2") == ("take", ("apple", "countertop"))


def _first_state(name: str):
    env = ls.make_env(ls.ENVS[name], "train")
    obs, info = env.reset(options={"task_id": next(iter(env.task_ids))})
    return env, obs, info


def test_env_feature_sets_read_the_state(data_dir: Path) -> None:
    """The env feature sets parse real observations: Sokoban's grid (player, box, the push's outcome), BabyAI's
    goal object (in view, which side), TextCraft's recipe tree (the goal at depth 0, the expert's item in it)."""
    env, obs, info = _first_state("Sokoban")
    ctx = ls.context(info, obs, "", frozenset(), "sokoban")
    assert ctx.facts[0] == "sokoban" and len(ctx.facts[1]) == len(obs.splitlines())
    feats = {a: ls.features(ctx, a) for a in info[schema.ADMISSIBLE_ACTIONS]}
    assert all(any(f[0] == "sk1" for f in fs) for fs in feats.values())
    assert len({tuple(sorted(map(repr, fs))) for fs in feats.values()}) == 4  # the four moves differ
    grid = ls.sokoban_facts({}, "######\n#PX_O#\n######", frozenset())
    right, left = ls.sokoban_features(grid, "right"), ls.sokoban_features(grid, "left")
    assert ("sk1", "right", "box") in right and ("skpush", "right", -1) in right  # the push nears the target
    assert ("sk1", "left", "wall") in left and not any(f[0] == "skpush" for f in left)
    env, obs, info = _first_state("BabyAI")
    facts = ls.babyai_facts(info, obs, frozenset())
    assert facts[0] == "babyai" and facts[1] is True  # "go to the green ball": the ball is in view
    assert ls.babyai_facts({schema.GOAL: "go to the red box"}, "You see a red box 2 steps left", frozenset()) == (
        "babyai", True, -1, 0, "none",
    )  # fmt: skip
    wall = ls.babyai_facts({schema.GOAL: "go to the red box"}, "You see a wall 1 step forward", frozenset())
    assert wall[-1] == "wall"
    env, obs, info = _first_state("TextCraft")
    facts = ls.textcraft_facts(info, obs, frozenset({"get 2 bamboo"}))
    depth = dict(facts[1])
    assert depth[facts[1][0][0]] >= 0 and 0 in depth.values()
    assert ls.textcraft_item(info[schema.EXPERT_ACTION]) in depth  # the expert gets what the recipe needs
    assert "bamboo" in facts[3] and ls.textcraft_item("craft 1 stick using 2 bamboo") == "stick"
    fs = ls.textcraft_features(facts, info[schema.EXPERT_ACTION])
    assert ("tdh", "get", True, True) in fs  # in the tree, and got already


def test_cells_train_on_train_games_only_and_resume(tmp_path: Path, data_dir: Path, capsys) -> None:
    out = tmp_path / "ls"
    argv = ["--out", str(out), *TINY, "--envs", "ALFWorld", "--methods", "grpo", "oracle"]
    assert ls.main(argv) == 0
    cells = [json.loads(x) for x in (out / "cells.jsonl").read_text().splitlines()]
    assert {c["method"] for c in cells} == {"grpo", "oracle"}
    train_ids = set(ls.make_env(ALF, "train", expert=False).task_ids)
    for c in cells:
        held = {t for ids in c["held_tasks"].values() for t in ids}
        assert set(c["held_tasks"]) == {"valid_seen", "valid_unseen"}
        assert c["trained_tasks"] and set(c["trained_tasks"]) <= train_ids
        assert not held & set(c["trained_tasks"]) and not held & train_ids
        assert c["eval_its"] == [0, 1, 2] and len(c["held"]) == 3 and len(c["train_curve"]) == 2
        assert all(0.0 <= v <= 1.0 for h in c["held"] for v in h.values())
    # both methods start from the same warm-started policy and evaluation stream
    assert cells[0]["held"][0] == cells[1]["held"][0]
    capsys.readouterr()
    assert ls.main(argv) == 0  # resume: nothing to run
    assert "2 cells done, 0 to run" in capsys.readouterr().out
    assert len((out / "cells.jsonl").read_text().splitlines()) == 2
    # a torn last line (a killed run) is dropped and that cell rerun
    data = (out / "cells.jsonl").read_bytes()
    (out / "cells.jsonl").write_bytes(data[: data.rfind(b"\n", 0, len(data) - 1) + 1] + b'{"key": "tor')
    assert ls.main(argv) == 0
    assert "1 cells done, 1 to run" in capsys.readouterr().out
    assert len((out / "cells.jsonl").read_text().splitlines()) == 2
    assert (out / "learning_study_curves_ALFWorld.png").stat().st_size > 1000


_FEATURE_ORDER = """
import sys
sys.path.insert(0, sys.argv[1])
import learning_study as ls
from stepgym import schema
ctx = ls.context({schema.GOAL: "put a clean soapbar in the cabinet under the sink"}, "You are in a bathroom.",
                 "", frozenset({"go to sink 1", "take soapbar 1 from sink 1"}))
print(repr([ls.features(ctx, a) for a in ("take soapbar 2 from cabinet 1", "go to cabinet 3")]))
"""


def test_features_come_in_the_same_order_in_every_process() -> None:
    """A logit sums its features' weights in the order :func:`features` lists them, and that order decides the
    sum's last bits, on which a sampled action can flip: so the list must not follow a set's hash order, which
    changes with ``PYTHONHASHSEED`` (a cell rerun in a new process once came out different from its record)."""
    import os
    import subprocess

    outs = set()
    for hash_seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run(
            [sys.executable, "-c", _FEATURE_ORDER, str(ROOT / "benchmarks")],
            env=env, capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
        outs.add(run.stdout)
    assert len(outs) == 1 and "soapbar" in outs.pop()


def test_reuse_takes_cells_of_the_same_computation_instead_of_running_them(tmp_path: Path, capsys) -> None:
    """``--reuse``: a per-method-rate cell whose rate is the shared one is the shared cell's computation; it is
    taken from the given cells file (relabelled, ``seconds`` 0, ``reused_from``), and only the others run."""
    shared = tmp_path / "shared"
    tiny = [*TINY, "--envs", "Sokoban", "--methods", "grpo", "gigpo"]
    assert ls.main(["--out", str(shared), *tiny, "--no-report"]) == 0
    base = {
        c["method"]: c for c in (json.loads(x) for x in (shared / "cells.jsonl").read_text().splitlines())
    }
    rates = tmp_path / "rates.json"
    rates.write_text(
        json.dumps({"chosen": {"Sokoban/grpo": 5.0, "Sokoban/gigpo": 2.0}})
    )  # grpo: the shared 5
    own = tmp_path / "own"
    capsys.readouterr()
    argv = [
        "--out",
        str(own),
        *tiny,
        "--no-report",
        "--rates",
        str(rates),
        "--reuse",
        str(shared / "cells.jsonl"),
    ]
    assert ls.main(argv) == 0
    out = capsys.readouterr().out
    assert "1 cells taken from 1 file(s), not run" in out and "1 to run" in out
    cells = {c["method"]: c for c in (json.loads(x) for x in (own / "cells.jsonl").read_text().splitlines())}
    grpo = cells["grpo"]
    assert (
        grpo["learner"] == ls.OWN_RATE and grpo["reused_from"] == base["grpo"]["key"] and grpo["seconds"] == 0
    )
    assert grpo["key"].startswith("linear-own-lr/") and ls.computation(grpo["key"]) == base["grpo"]["key"]
    assert {k: v for k, v in grpo.items() if k not in ("key", "learner", "seconds", "reused_from")} == {
        k: v for k, v in base["grpo"].items() if k not in ("key", "seconds")
    }
    assert "reused_from" not in cells["gigpo"] and cells["gigpo"]["args"]["lr"] == 2.0  # its own rate: run
    assert ls.main(argv) == 0 and "2 cells done, 0 to run" in capsys.readouterr().out  # resumes as before
    with pytest.raises(SystemExit, match="--reuse: no cells file"):
        ls.main(["--out", str(tmp_path / "x"), *tiny, "--no-report", "--reuse", str(tmp_path / "none.jsonl")])


def _cell(method: str, seed: int, curve: list[float]) -> dict:
    return {
        "env": "ALFWorld", "method": method, "seed": seed, "eval_its": [0, 5, 10],
        "held": [{"valid_seen": v, "valid_unseen": v} for v in curve], "held_tasks": {"valid_seen": ["x"]},
        "args": {"iterations": 10, "n_tasks": 4, "group_size": 8, "lr": 20.0, "max_steps": 0,
                 "eval_every": 5, "warm_tasks": 10},
        "seconds": 1.0,
    }  # fmt: skip


def test_a_rate_per_method_plans_its_own_learner(tmp_path: Path) -> None:
    """``--rates`` (learning_study_lr.py's --json) gives each method its chosen rate, labels the cells
    ``linear-own-lr`` (a family of their own in the statistics, keys that never meet the shared-rate cells) and
    refuses a method it has no rate for in one line."""
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"chosen": {"Sokoban/grpo": 5.0, "Sokoban/gigpo": 2.0}}))
    args = ls.parse(
        ["--envs", "Sokoban", "--methods", "grpo", "gigpo", "--seeds", "1", "--rates", str(rates)]
    )
    cells = {c["method"]: c for c in ls.plan(args)}
    assert cells["grpo"]["args"]["lr"] == 5.0 and cells["gigpo"]["args"]["lr"] == 2.0
    assert {c["args"]["learner"] for c in cells.values()} == {ls.OWN_RATE}
    shared = {
        c["method"]: c for c in ls.plan(ls.parse(["--envs", "Sokoban", "--methods", "grpo", "--seeds", "1"]))
    }
    assert ls.cell_key(cells["grpo"]).startswith("linear-own-lr/Sokoban/grpo/0/")
    assert (
        ls.cell_key(cells["grpo"]) != ls.cell_key(shared["grpo"]) and "learner" not in shared["grpo"]["args"]
    )
    with pytest.raises(SystemExit, match="has no learning rate for Sokoban/proas"):
        ls.plan(ls.parse(["--envs", "Sokoban", "--methods", "proas", "--rates", str(rates)]))
    rates.write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"not a learning_study_lr\.py --json file"):
        ls.plan(ls.parse(["--envs", "Sokoban", "--methods", "grpo", "--rates", str(rates)]))


def test_report_statistics_on_known_cells() -> None:
    """The reach metric on hand-made cells, and the report's tables: learning_study_stats' comparisons of the cells
    (tests/test_learning_study_stats.py tests the procedures), one row per method and family."""
    grpo, oracle, slow = (
        _cell("grpo", 0, [0.1, 0.2, 0.3]),
        _cell("oracle", 0, [0.1, 0.3, 0.5]),
        _cell("x", 0, [0.1] * 3),
    )
    assert ls.metrics(oracle, 0.3)["reach"] == pytest.approx(5.0)  # 0.3 reached at 5 instead of 10
    assert ls.metrics(slow, 0.3)["reach"] == pytest.approx(15.0)  # never: censored at 15
    assert ls.metrics(grpo, None)["gain"] == pytest.approx(0.2)
    cells = []
    for s in range(10):
        cells.append(_cell("grpo", s, [0.1, 0.2, 0.3 + 0.01 * (s % 3)]))
        cells.append(_cell("oracle", s, [0.1, 0.3, 0.5 + 0.01 * (s % 2)]))
        cells.append(_cell("gigpo", s, [0.1, 0.2, 0.3 + 0.01 * (s % 4)]))
    md = ls.markdown(cells, ls.st.analyse(cells, fidelity_path=None, n_boot=200))
    assert "3 methods, each on seeds 0–9" in md
    oracle_row = next(x for x in md.splitlines() if x.startswith("| ALFWorld | oracle | 10 |"))
    assert oracle_row.endswith("| 0 | — | — | awaiting confirmation |")  # faster, no confirmation seeds yet
    assert "| ALFWorld | gigpo | 10 |" in md and "no difference detected" in md


@pytest.mark.slow
def test_llm_learner_runs_the_bundled_trainer_one_iteration(tmp_path: Path, data_dir: Path, capsys) -> None:
    pytest.importorskip("torch")
    import learning_study_llm as llm

    argv = ["--model", "tiny", "--out", str(tmp_path), *TINY[:-2], "--iterations", "1", "--envs", "ALFWorld"]
    (rec,) = llm.run_llm(llm.parse([*argv, "--methods", "gigpo"]))
    assert rec["method"] == "gigpo" and rec["eval_its"] == [0, 1] and rec["learner"] == "llm"
    assert set(rec["held"][0]) == set(rec["held"][1]) == {"valid_seen", "valid_unseen"}
    assert rec["last_step"]["rollout/rows"] > 0 and math.isfinite(rec["last_step"]["actor/pg_loss"])


def test_llm_learner_tiny_recipe_on_a_real_env_warms_up_the_format() -> None:
    """The tiny model on a real env gets the env's tiny CPU recipe with the ``credit-*`` format warm-up (without
    it no reply is valid and no rollout wins), the study row's env options and the row's step limit in
    evaluation; CreditFamily's configs and cell keys are unchanged (its committed cells still resume), and an env
    whose CPU recipe is another model's (ALFWorld) keeps its preset."""
    pytest.importorskip("torch")
    import learning_study_llm as llm

    from stepgym.trainers.presets import get_preset

    args = llm.parse(["--envs", "Sokoban", "--methods", "gigpo", "--seeds", "1"])
    sok = llm.llm_config(args, ls.ENVS["Sokoban"], "gigpo", 0, Path("/tmp/x"))
    assert replace(sok.warmup, cache_dir="") == get_preset("credit-grpo").warmup and sok.warmup.steps == 200
    assert sok.warmup.cache_dir == str(
        Path("/tmp") / llm.WARMUP_CACHE
    )  # the run folder's: a seed warms up once
    assert sok.model.name == "tiny" and sok.env.history == 1 and sok.env.kwargs == "{}"
    assert sok.env.max_steps == ls.ENVS["Sokoban"].max_steps and sok.eval.max_steps == 0
    tc = llm.llm_config(args, ls.ENVS["TextCraft"], "grpo", 0, Path("/tmp/x"))
    assert json.loads(tc.env.kwargs) == {}  # not the CPU recipe's {"distractors": 0}
    assert llm.tiny_recipe(ls.ENVS["ALFWorld"], "tiny") is None
    assert llm.tiny_recipe(ls.ENVS["CreditFamily"], "tiny") is None
    assert llm.tiny_recipe(ls.ENVS["Sokoban"], "/models/qwen") is None
    (sok_cell,) = llm.plan(args)
    cf_args = llm.parse(["--envs", "CreditFamily", "--methods", "grpo", "--seeds", "1"])
    (cf_cell,) = llm.plan(cf_args)
    with __import__("gzip").open(
        ROOT / "benchmarks/results/learning_study_llm_2026-12-07_cells.jsonl.gz", "rt"
    ) as f:
        committed = {json.loads(line)["key"] for line in f if line.strip()}
    assert llm.cell_key(cf_cell) in committed
    first_trial = "llm/Sokoban/grpo/900/e774b50f8f"  # the recipe without the warm-up: another key
    trial = llm.plan(llm.parse(["--envs", "Sokoban", "--methods", "grpo", "--seeds", "1", "--first-seed", "900",
                                "--iterations", "2", "--eval-every", "1", "--eval-tasks", "8"]))  # fmt: skip
    assert llm.cell_key(trial[0]) != first_trial and llm.cell_key(sok_cell).startswith("llm/Sokoban/gigpo/0/")
    # the reply budget: Sokoban's 12 tokens (its committed cells keep their keys); more on BabyAI and TextCraft,
    # since 12 cut their replies ("<action>turn" at the 12th token), and their cells under it never count
    with __import__("gzip").open(
        ROOT / "benchmarks/results/learning_study_llm_sokoban_2026-12-07_cells.jsonl.gz", "rt"
    ) as f:
        sokoban = {json.loads(line)["key"] for line in f if line.strip()}
    assert sok.rollout.max_response_tokens == 12 and llm.cell_key(sok_cell) in sokoban
    cut_at_12 = "llm/BabyAI/grpo/100/54fcfb80d7"  # the first BabyAI probe's key: every reply cut
    budget = {
        env: llm.llm_config(args, ls.ENVS[env], "grpo", 0, Path("/tmp/x")).rollout.max_response_tokens
        for env in ("BabyAI", "TextCraft")
    }
    assert budget["BabyAI"] == get_preset("babyai-cpu").rollout.max_response_tokens > 12
    assert (
        budget["TextCraft"] == llm.TINY_RESPONSE_TOKENS["TextCraft"] > 75
    )  # its distractor recipes' replies
    (ba,) = llm.plan(
        llm.parse(["--envs", "BabyAI", "--methods", "grpo", "--seeds", "1", "--first-seed", "100"])
    )
    assert llm.cell_key(ba) != cut_at_12


def test_llm_learner_rate_and_kl_options_set_the_policy_and_key_only_when_set() -> None:
    """``--lr`` sets every method's policy rate and ``--kl-coef`` its KL penalty; left at 0 the preset's values
    stay and so does every cell key (the committed CreditFamily cells still resume), while a cell at another rate
    or penalty never counts as one at the preset's."""
    pytest.importorskip("torch")
    import learning_study_llm as llm

    from stepgym.trainers.presets import get_preset

    base = ["--envs", "CreditFamily", "--methods", "grpo", "--seeds", "1"]
    default, fast = llm.parse(base), llm.parse([*base, "--lr", "0.002"])
    row = ls.ENVS["CreditFamily"]
    assert (
        llm.llm_config(default, row, "grpo", 0, Path("/tmp/x")).optim.lr == get_preset("credit-grpo").optim.lr
    )
    assert llm.llm_config(fast, row, "grpo", 0, Path("/tmp/x")).optim.lr == 0.002
    (d,), (f,) = llm.plan(default), llm.plan(fast)
    with __import__("gzip").open(
        ROOT / "benchmarks/results/learning_study_llm_2026-12-07_cells.jsonl.gz", "rt"
    ) as fh:
        committed = {json.loads(line)["key"] for line in fh if line.strip()}
    assert llm.cell_key(d) in committed and llm.cell_key(f) not in committed
    assert llm.cell_key(f) != llm.cell_key(llm.plan(llm.parse([*base, "--lr", "0.005"]))[0])
    assert llm.cell_folder(d, Path("o")) != llm.cell_folder(f, Path("o"))  # the trainers never share a folder
    assert llm.cell_folder(d, Path("o")).name.startswith("CreditFamily_grpo_0_")
    kl = llm.parse([*base, "--kl-coef", "0.05"])
    assert llm.llm_config(default, row, "grpo", 0, Path("/tmp/x")).loss.kl_coef == 0.0
    assert llm.llm_config(kl, row, "grpo", 0, Path("/tmp/x")).loss.kl_coef == 0.05
    assert llm.cell_key(llm.plan(kl)[0]) not in committed | {llm.cell_key(f)}


def test_llm_learner_warm_up_options_set_the_imitated_policy_and_key_only_when_set() -> None:
    """``--warmup-policy``, ``--warmup-steps`` and ``--warmup-episodes`` set every method's format warm-up (the
    BabyAI-RedBall cells imitate a noisy expert); left unset the preset's warm-up and every committed key stay,
    and the probe table names the flags a cell was run with."""
    pytest.importorskip("torch")
    import learning_study_llm as llm

    from stepgym.trainers.presets import get_preset

    base = ["--envs", "Sokoban", "--methods", "grpo", "--seeds", "1"]
    plain = llm.parse(base)
    noisy = llm.parse([*base, "--warmup-policy", "noisy-expert:0.75", "--warmup-steps", "600",
                       "--warmup-episodes", "256"])  # fmt: skip
    row = ls.ENVS["Sokoban"]
    w0 = llm.llm_config(plain, row, "grpo", 0, Path("/tmp/x")).warmup
    w1 = llm.llm_config(noisy, row, "grpo", 0, Path("/tmp/x")).warmup
    assert replace(w0, cache_dir="") == get_preset("credit-grpo").warmup and w0.policy == "random"
    assert (w1.policy, w1.steps, w1.episodes) == ("noisy-expert:0.75", 600, 256) and w1.lr == w0.lr
    with __import__("gzip").open(
        ROOT / "benchmarks/results/learning_study_llm_sokoban_2026-12-07_cells.jsonl.gz", "rt"
    ) as fh:
        committed = {json.loads(line)["key"] for line in fh if line.strip()}
    assert llm.cell_key(llm.plan(plain)[0]) in committed and llm.cell_key(llm.plan(noisy)[0]) not in committed
    assert llm.probe_flags(llm.plan(noisy)[0]["args"]) == (
        "--warmup-policy noisy-expert:0.75 --warmup-steps 600 --warmup-episodes 256"
    )
    assert llm.probe_flags(llm.plan(plain)[0]["args"]) == "(the study's)"
