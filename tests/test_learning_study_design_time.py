"""The design-cost script: it finds the design's cells, re-runs the very cells that were committed (their keys map
back), samples discovery and confirmation seeds, and projects the cost with plain arithmetic."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_study as ls  # noqa: E402
import learning_study_design_time as dt  # noqa: E402
import learning_study_llm as llm  # noqa: E402
import learning_study_stats as st  # noqa: E402


def _rec(env: str, learner: str, method: str, seed: int, seconds: float = 1.0) -> dict:
    return {
        "env": env,
        "learner": learner,
        "method": method,
        "seed": seed,
        "seconds": seconds,
        "args": {},
        "key": "",
    }


def test_every_committed_design_cell_maps_back_to_its_key() -> None:
    cells, _ = st.merge(st.CELLS)
    classes = dt.design_cells(cells)
    assert {lrn for _, lrn, _ in classes} >= {"linear", ls.OWN_RATE, "llm"}
    changed = set()
    for rows in classes.values():
        for r in rows:
            cell = dt.cell_of(r)
            key = llm.cell_key(cell) if r.get("learner") == "llm" else ls.cell_key(cell)
            if key != r["key"]:
                changed.add((r["env"], r["method"]))
    # (ALFWorld's ProAS cells of before their graph had a seed per task, whose keys changed on purpose
    # (learning_study.SEEDED_ARG), were rerun and replaced)
    assert changed == set()


def test_design_cells_are_the_core_methods_on_discovery_and_confirmation_seeds() -> None:
    cells = [
        _rec("Sokoban", "linear", "grpo", 3),
        _rec("Sokoban", "linear", "grpo", 25),
        _rec("Sokoban", "linear", "grpo", 45),  # replication seed: not the design
        _rec("Sokoban", "linear", "ahead", 3),  # not a core method
    ]
    classes = dt.design_cells(cells)
    assert list(classes) == [("Sokoban", "linear", "grpo")]
    assert [r["seed"] for r in classes[("Sokoban", "linear", "grpo")]] == [3, 25]


def test_the_sample_alternates_discovery_and_confirmation_seeds() -> None:
    rows = [_rec("A", "linear", "grpo", s) for s in (0, 1, 2, 20, 21)]
    classes = {("A", "linear", "grpo"): rows}
    assert [r["seed"] for r in dt.sample(classes, 1)] == [0]
    assert [r["seed"] for r in dt.sample(classes, 2)] == [0, 20]
    assert [r["seed"] for r in dt.sample(classes, 4)] == [0, 20, 1, 21]
    assert [r["seed"] for r in dt.sample(classes, 9)] == [0, 20, 1, 21, 2]


def test_the_projection_is_median_time_times_cells_over_workers() -> None:
    classes = {
        ("A", "linear", "grpo"): [_rec("A", "linear", "grpo", s, 10.0) for s in range(4)],
        ("A", "linear", "gigpo"): [_rec("A", "linear", "gigpo", s, 10.0) for s in range(2)],
        ("B", "llm", "grpo"): [_rec("B", "llm", "grpo", s, 100.0) for s in range(3)],
        ("B", "llm", "oracle"): [_rec("B", "llm", "oracle", 0)],  # never re-run: left out
    }
    runs = [{"env": "A", "learner": "linear", "method": "grpo", "seconds": s} for s in (1.0, 2.0, 9.0)] + [
        {"env": "A", "learner": "linear", "method": "gigpo", "seconds": 3.0},
        {"env": "B", "learner": "llm", "method": "grpo", "seconds": 20.0},
    ]
    p = dt.project(classes, runs, workers=2)
    rows = {(r["env"], r["learner"]): r for r in p["rows"]}
    assert rows[("A", "linear")] == {"env": "A", "learner": "linear", "cells": 6, "reused": 0,
                                     "cpu_s": 4 * 2 + 2 * 3, "recorded_cpu_s": 60}  # fmt: skip
    assert rows[("B", "llm")]["cells"] == 3 and rows[("B", "llm")]["cpu_s"] == 60
    assert p["cpu_s"] == 74 and p["wall_s"] == 37 and p["recorded_cpu_s"] == 360


def test_per_method_rate_cells_of_the_shared_computation_are_taken_not_projected() -> None:
    """A per-method-rate cell whose key is a shared-rate cell's but for the label costs nothing (a design run takes
    it with --reuse); a class whose every cell is taken is counted with no time; a class re-run whole sums its
    own times instead of a median."""

    def rec(learner: str, method: str, seed: int, fp: str, seconds: float = 5.0) -> dict:
        prefix = "" if learner == "linear" else learner + "/"
        return {**_rec("A", learner, method, seed, seconds), "key": f"{prefix}A/{method}/{seed}/{fp}"}

    classes = {
        ("A", "linear", "grpo"): [rec("linear", "grpo", s, "x") for s in (0, 20)],
        ("A", ls.OWN_RATE, "grpo"): [rec(ls.OWN_RATE, "grpo", s, "x") for s in (0, 20)],  # the shared rate
        ("A", ls.OWN_RATE, "gigpo"): [rec(ls.OWN_RATE, "gigpo", s, "y") for s in (0, 20)],  # its own rate
    }
    skip = dt.reused(classes)
    assert skip == {f"{ls.OWN_RATE}/A/grpo/0/x", f"{ls.OWN_RATE}/A/grpo/20/x"}
    runs = [
        {"env": "A", "learner": lrn, "method": m, "seconds": s}
        for lrn, m, s in (("linear", "grpo", 2.0), ("linear", "grpo", 4.0), (ls.OWN_RATE, "gigpo", 3.0))
    ]
    p = dt.project(classes, runs, workers=1, skip=skip)
    rows = {r["learner"]: r for r in p["rows"]}
    assert rows["linear"] == {"env": "A", "learner": "linear", "cells": 2, "reused": 0, "cpu_s": 6,
                              "recorded_cpu_s": 10}  # fmt: skip
    assert rows[ls.OWN_RATE] == {"env": "A", "learner": ls.OWN_RATE, "cells": 4, "reused": 2, "cpu_s": 6,
                                 "recorded_cpu_s": 10}  # fmt: skip
    result = {"date": "d", "machine": "m", "load_before": 0.1, "per_class": 40, "note": "", "sample_wall_s": 600.0,
              "runs": [{**r, "same_record": True, "same_key": True} for r in runs], "projection": p,
              "whole": True}  # fmt: skip
    text = dt.markdown(result, title=False)
    assert "every cell of the design re-run, 3 cells in 10 minutes" in text
    assert "2 per-method-rate cells are a shared-rate cell's computation" in text
    assert "**The whole design, measured: 10 minutes of wall time on 1 workers**" in text
    assert "| A | linear-own-lr | 4 | 2 | 0.1 | 0.2 |" in text


def test_a_rerun_reproduces_a_committed_cell_and_notices_a_changed_one(data_dir: Path) -> None:
    cells, _ = st.merge(st.CELLS)
    record = dt.design_cells(cells)[("CreditFamily", "linear", "grpo")][0]
    got = dt.rerun(record)
    assert got["same_key"] and got["same_record"] and got["seconds"] > 0
    damaged = copy.deepcopy(record)
    damaged["held"][-1] = {k: 1.0 - v for k, v in damaged["held"][-1].items()}
    assert not dt.rerun(damaged)["same_record"]


def test_bad_arguments_are_one_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        dt.main(["--per-class", "0"])
    assert e.value.code == 2
    assert "--per-class and --workers must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        dt.main(["--envs", "NoSuchEnv"])
    assert e.value.code == 2 and "no design cells" in capsys.readouterr().err


def test_the_token_cells_are_ordered_so_a_seeds_methods_share_its_warm_up() -> None:
    cells = [{"env": "CreditFamily", "method": m, "seed": s} for s in range(4) for m in ("grpo", "gigpo")]
    got = [(c["seed"], c["method"]) for c in llm.sharing_order(cells, 2)]
    assert got == [(0, "grpo"), (1, "grpo"), (0, "gigpo"), (1, "gigpo"), (2, "grpo"), (3, "grpo"), (2, "gigpo"),
                   (3, "gigpo")]  # fmt: skip
    one = [(c["seed"], c["method"]) for c in llm.sharing_order(cells, 1)]
    assert one == [(s, m) for s in range(4) for m in ("grpo", "gigpo")]
    assert sorted(map(str, llm.sharing_order(cells, 3))) == sorted(map(str, cells))  # a permutation
    # seeds far apart (a sample's discovery and confirmation seeds) still share a block
    sparse = [{"env": "CreditFamily", "method": m, "seed": s} for s in (0, 20) for m in ("grpo", "gigpo")]
    got = [(c["seed"], c["method"]) for c in llm.sharing_order(sparse, 2)]
    assert got == [(0, "grpo"), (20, "grpo"), (0, "gigpo"), (20, "gigpo")]


def test_alfworld_proas_graph_is_the_same_on_every_run(data_dir: Path) -> None:
    """ALFWorld's expert breaks ties with the env's generator; ProAS's graph there is seeded with a reset seed per
    task, so two fresh processes (other hash seeds, other OS seeds) build the same graph, seeded in two calls."""
    import subprocess

    child = (
        "import sys; sys.path.insert(0, sys.argv[1]); import learning_study as ls\n"
        "import numpy as np; row = ls.ENVS['ALFWorld']; train, _ = ls.task_lists(row, {'eval_tasks': 2})\n"
        "rng = np.random.default_rng(0); s = ls.ExpertSeeded(row)\n"
        "for _ in range(2): s.seed([train[i] for i in rng.choice(len(train), size=4, replace=False)])\n"
        "print(s.graph.to_json_text())\n"
    )
    texts = []
    for hash_seed in ("1", "2"):
        env = {**__import__("os").environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", child, str(ROOT / "benchmarks")], capture_output=True, text=True, env=env,
            timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        texts.append(out.stdout)
    assert texts[0] == texts[1] and '"tasks"' in texts[0]
    cell = {"env": "ALFWorld", "method": "proas", "seed": 0, "args": {}}
    assert ls.cell_key(cell) != ls.cell_key({**cell, "method": "gigpo"}).replace("gigpo", "proas")


def test_alfworld_ahead_teacher_reads_the_same_expert_on_every_run(data_dir: Path) -> None:
    """AHEAD's modelled teacher reads ALFWorld's expert on the training env, and the expert breaks ties (which
    pillow, which statue) with the env's generator: a cell's training env has it seeded with the cell's seed
    (``learning_study.SEEDED_TEACHER``), so two of them play the same expert through unseeded resets, where two
    generators seeded by the OS differ."""
    ties = [  # tasks whose expert path depends on the generator
        "train/look_at_obj_in_light-Pillow-None-DeskLamp-306/trial_T20190909_075057_227880",
        "train/look_at_obj_in_light-Pillow-None-DeskLamp-316/trial_T20190908_232421_645610",
        "train/look_at_obj_in_light-Statue-None-DeskLamp-304/trial_T20190909_011906_700145",
    ]

    def expert_paths(seed: int) -> list[list[str]]:
        env, paths = ls.training_env(ls.ENVS["ALFWorld"], "ahead", seed), []
        for task in ties * 2:
            _, info = env.reset(options={"task_id": task})
            path = []
            while info.get("stepgym/expert_action") and len(path) < 40:
                path.append(info["stepgym/expert_action"])
                _, _, term, trunc, info = env.step(path[-1])
                if term or trunc:
                    break
            paths.append(path)
        return paths

    first = expert_paths(0)
    assert first == expert_paths(0) and all(first)
    assert first != expert_paths(1)  # the seed does decide the ties
    cell = {"env": "ALFWorld", "method": "ahead", "seed": 0, "args": {}}
    assert ls.cell_key(cell) != ls.cell_key({**cell, "method": "gigpo"}).replace("gigpo", "ahead")


def test_a_stopped_run_is_reported_from_its_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each re-run is appended to ``<out>.partial.jsonl`` as it finishes (after a first line with the load before
    the run); ``--from-partial`` runs nothing and reports those re-runs, the wall time up to the last one; a file
    that is not one is one line."""
    lines = [{"load_before": 0.5}] + [
        {"env": "CreditFamily", "learner": "linear", "method": m, "seed": 0, "seconds": 2.0, "recorded_seconds": 9.0,
         "same_key": True, "same_record": m != "gigpo", "at_s": at, **({"new": {"held": []}} if m == "gigpo" else {})}
        for m, at in (("grpo", 2.5), ("gigpo", 4.0))
    ]  # fmt: skip
    partial = tmp_path / "run.partial.jsonl"
    partial.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "result.json"
    argv = [
        "--envs",
        "CreditFamily",
        "--learners",
        "linear",
        "--from-partial",
        str(partial),
        "--out",
        str(out),
    ]
    assert dt.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["sample_wall_s"] == 4.0 and result["load_before"] == 0.5 and not result["whole"]
    assert [r["method"] for r in result["runs"]] == ["gigpo", "grpo"] and all(
        "new" not in r for r in result["runs"]
    )
    assert (
        "reproduced the committed record (held-out curve, training curve, tasks): 1 of 2"
        in capsys.readouterr().out
    )
    # the records of the re-runs that differ from the committed ones
    written = tmp_path / "cells.jsonl"
    assert dt.main([*argv, "--write-cells", str(written)]) == 0
    assert [json.loads(x) for x in written.read_text().splitlines()] == [{"held": []}]
    partial.write_text("not json\n")
    with pytest.raises(SystemExit, match="not a partial file of this script"):
        dt.main(argv)
