"""ProAS's Agentic Reference Graph: construction rules, labels, online growth, persistence, and the wrapper."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import networkx as nx
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.errors import CorruptDataError, FormatVersionError
from stepgym.schema import Step, Trajectory
from stepgym.wrappers.arg import FORMAT_VERSION, AgenticReferenceGraph, ARGWrapper, label_trajectory


class Pantry(TextEnv):
    """A toy task: take salt and pepper (in any order), then cook. Items can be dropped again."""

    ACTIONS = ("take salt", "take pepper", "drop salt", "drop pepper", "cook", "wait")

    def __init__(self, with_keys: bool = True):
        super().__init__(max_steps=12)
        self.with_keys = with_keys
        self.held: set[str] = set()
        self.cooked = False

    def _info(self, admissible: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            schema.TASK_ID: "pantry/0",
            schema.WON: self.cooked,
            schema.ADMISSIBLE: admissible,
            schema.ADMISSIBLE_ACTIONS: list(self.ACTIONS),
        }
        if self.with_keys:
            info[schema.STATE_KEY] = f"held={','.join(sorted(self.held))};cooked={int(self.cooked)}"
        return info

    def _reset_task(self, options):
        self.held, self.cooked = set(), False
        return "You are in a pantry.", self._info(True)

    def _step_action(self, action, problem):
        verb, _, item = action.partition(" ")
        ok = False
        if verb == "take" and item in ("salt", "pepper") and item not in self.held:
            self.held.add(item)
            ok = True
        elif verb == "drop" and item in self.held:
            self.held.discard(item)
            ok = True
        elif action == "cook" and self.held == {"salt", "pepper"}:
            self.cooked = ok = True
        return ("Done." if ok else "Nothing happens."), float(self.cooked), self.cooked, self._info(ok)


def play(env: gym.Env, actions: list[str]) -> Trajectory:
    obs, info = env.reset(seed=0)
    traj = Trajectory(str(info[schema.TASK_ID]), obs, info)
    for a in actions:
        nxt, r, term, trunc, info = env.step(a)
        traj.steps.append(Step(obs, a, r, nxt, term, trunc, info))
        obs = nxt
        if term or trunc:
            break
    return traj


SALT_FIRST = ["take salt", "take pepper", "cook"]
PEPPER_FIRST = ["take pepper", "take salt", "cook"]


def test_labels_on_a_toy_env_with_an_error_step():
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    env = ARGWrapper(Pantry(), graph=arg)
    traj = play(env, ["take salt", "wait", "take pepper", "cook"])
    final = traj.steps[-1].info[schema.ARG_LABELS]
    assert final["reasonable"] == [True, False, True, True]
    assert final["progress"] == [True, False, True, True]
    assert final["future_drift"] == [1.0, 1.0, 0.0, 0.0]
    assert [s.info[schema.ARG_REASONABLE] for s in traj.steps] == final["reasonable"]
    assert [s.info[schema.ARG_PROGRESS] for s in traj.steps] == final["progress"]
    assert label_trajectory(arg, traj).as_dict() == final  # offline == online


def test_order_insensitive_steps_are_merged_into_one_class():
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    arg.add_trajectory(play(Pantry(), PEPPER_FIRST))
    g = arg.graph("pantry/0")
    assert g.number_of_nodes() == 4  # nothing, one item (salt or pepper), both, cooked
    one_item = next(n for n, d in g.nodes(data=True) if len(d["members"]) == 2)
    assert g.nodes[one_item]["members"] == {"held=salt;cooked=0", "held=pepper;cooked=0"}
    # Dropping salt and taking pepper instead is no progress: same class as before.
    labels = label_trajectory(
        arg, play(Pantry(), ["take salt", "drop salt", "take pepper", "take salt", "cook"])
    )
    assert labels.progress == [True, False, False, True, True]
    assert labels.reasonable == [True, False, True, True, True]


def test_online_growth_makes_a_new_path_reasonable_and_refuses_failures():
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    new = play(Pantry(), PEPPER_FIRST)
    before = label_trajectory(arg, new)
    assert before.reasonable[0] is False and before.progress[0] is False
    assert arg.add_trajectory(new) > 0
    after = label_trajectory(arg, new)
    assert after.reasonable == [True, True, True] and after.progress == [True, True, True]
    failed = play(Pantry(), ["take salt", "wait"])
    with pytest.raises(ValueError, match="did not succeed"):
        arg.add_trajectory(failed)


def test_wrapper_grows_the_graph_after_labelling_when_asked():
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    env = ARGWrapper(Pantry(), graph=arg, grow=True)
    first = play(env, PEPPER_FIRST).steps[-1].info[schema.ARG_LABELS]
    second = play(env, PEPPER_FIRST).steps[-1].info[schema.ARG_LABELS]
    assert first["reasonable"][0] is False  # labelled before its own success was added
    assert second["reasonable"] == [True, True, True]


def test_detours_are_loop_erased_and_errors_pruned():
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), ["take salt", "drop salt", "wait", "take salt", "take pepper", "cook"]))
    g = arg.graph("pantry/0")
    assert g.number_of_nodes() == 4 and g.number_of_edges() == 3
    assert all("drop salt" not in d["actions"] for *_, d in g.edges(data=True))


def test_graph_stays_a_dag_after_many_random_unions():
    rng = np.random.default_rng(0)
    arg = AgenticReferenceGraph()
    for _ in range(300):
        n = int(rng.integers(2, 12))
        states = [f"s{int(x)}" for x in rng.integers(0, 8, size=n)] + ["goal"]
        actions = [f"a{int(x)}" for x in rng.integers(0, 3, size=n)]
        arg.add_path("t", states, actions, won=True)
        assert nx.is_directed_acyclic_graph(arg.graph("t"))
    stats = arg.stats()
    assert arg.is_dag() and stats["edges"] > 0 and stats["dropped_cycle_edges"] > 0


def test_an_env_without_state_keys_needs_an_explicit_state_key():
    with pytest.raises(ValueError, match="state_key"):
        ARGWrapper(Pantry(with_keys=False)).reset(seed=0)
    env = ARGWrapper(Pantry(with_keys=False), state_key=lambda info: str(info[schema.WON]))
    _, info = env.reset(seed=0)
    assert info[schema.ARG_STATE] == "False"


def test_save_load_round_trip_and_atomicity(tmp_path, monkeypatch):
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    arg.add_trajectory(play(Pantry(), PEPPER_FIRST))
    path = arg.save(tmp_path / "arg.json")
    loaded = AgenticReferenceGraph.load(path)
    assert loaded == arg and loaded.stats() == arg.stats()
    probe = play(Pantry(), ["take salt", "drop salt", "take pepper", "take salt", "cook"])
    assert label_trajectory(loaded, probe) == label_trajectory(arg, probe)

    original = path.read_bytes()
    bigger = AgenticReferenceGraph()
    bigger.add_path("other", ["a", "b"], ["x"], won=True)

    def crash(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(json, "dump", crash)
    with pytest.raises(OSError, match="simulated"):
        bigger.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arg.json"]  # no temp file left behind


def test_corrupt_foreign_and_future_files_fail_clearly(tmp_path):
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    text = arg.save(tmp_path / "arg.json").read_text()
    (tmp_path / "truncated.json").write_text(text[: len(text) // 2])
    with pytest.raises(CorruptDataError, match="truncated"):
        AgenticReferenceGraph.load(tmp_path / "truncated.json")
    (tmp_path / "foreign.json").write_text(json.dumps({"nodes": [], "links": []}))
    with pytest.raises(FormatVersionError, match="not a stepgym ARG file"):
        AgenticReferenceGraph.load(tmp_path / "foreign.json")
    data = json.loads(text)
    data["version"] = FORMAT_VERSION + 1
    (tmp_path / "future.json").write_text(json.dumps(data))
    with pytest.raises(FormatVersionError, match="Upgrade stepgym"):
        AgenticReferenceGraph.load(tmp_path / "future.json")
    data["version"] = FORMAT_VERSION
    data["tasks"]["pantry/0"]["edges"].append(
        {
            "source": data["tasks"]["pantry/0"]["edges"][-1]["target"],
            "target": data["tasks"]["pantry/0"]["edges"][0]["source"],
            "actions": ["x"],
        }
    )
    (tmp_path / "cyclic.json").write_text(json.dumps(data))
    with pytest.raises(CorruptDataError, match="acyclic"):
        AgenticReferenceGraph.load(tmp_path / "cyclic.json")


def test_labels_are_deterministic():
    arg = AgenticReferenceGraph()
    arg.add_trajectory(play(Pantry(), SALT_FIRST))
    probe = ["take pepper", "wait", "take salt", "drop pepper", "take pepper", "cook"]
    a = label_trajectory(arg, play(Pantry(), probe))
    b = label_trajectory(arg, play(Pantry(), probe))
    assert a == b


@pytest.mark.usefixtures("data_dir")
def test_wrapper_passes_check_env_on_alfworld():
    from gymnasium.utils.env_checker import check_env

    base = gym.make("StepGym/ALFWorld-v0", split="valid_seen").unwrapped
    arg = AgenticReferenceGraph()
    arg.seed_from_walkthroughs(base, base.task_ids[:3])
    check_env(ARGWrapper(base, graph=arg), skip_render_check=True)


def test_edges_use_the_parsed_action_behind_a_text_interface():
    from stepgym.wrappers.text import TextInterfaceWrapper

    arg = AgenticReferenceGraph()
    arg.add_trajectory(
        play(
            TextInterfaceWrapper(Pantry(), fmt="alfworld"),
            [f"<think>first {a}</think><action>{a}</action>" for a in SALT_FIRST],
        )
    )
    g = arg.graph("pantry/0")
    assert all(a in SALT_FIRST for *_, d in g.edges(data=True) for a in d["actions"])
    other_words = play(
        TextInterfaceWrapper(Pantry(), fmt="alfworld"),
        [f"<think>hmm</think> <action>{a}</action>" for a in SALT_FIRST],
    )
    assert label_trajectory(arg, other_words).reasonable == [True, True, True]
