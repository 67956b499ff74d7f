"""ProAS's Agentic Reference Graph: construction rules, labels, online growth, persistence, and the wrapper."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import networkx as nx
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.errors import CorruptDataError, FormatVersionError
from stepgym.graph_seeding import seed_graph_from_walkthroughs
from stepgym.reference_graph import FORMAT_VERSION, AgenticReferenceGraph, label_trajectory, state_id
from stepgym.schema import Step, Trajectory
from stepgym.wrappers.arg import ARGWrapper


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
    traj = Trajectory(str(info.get(schema.TASK_ID, "")), obs, info)
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

    monkeypatch.setattr(os, "fsync", crash)  # the new file is written, not yet in place
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
    seed_graph_from_walkthroughs(arg, base, base.task_ids[:3])
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


# ---------------------------------------------------------------------------------------------------------------
# A user's own env (issue: tuple state keys, Gymnasium-style success, rejected steps, file permissions)
# ---------------------------------------------------------------------------------------------------------------
class Switches(gym.Env):
    """A user's own env, written without stepgym: flip switches a and b on (any order), then press go.

    No stepgym info keys: the state is a tuple in ``info["my/state"]``, success is Gymnasium's convention (reward
    1.0 with ``terminated=True``), and ``info["ok"]`` is False for a rejected action ("jam" is rejected but
    jams switch a on anyway, an env quirk)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Text(100)
        self.action_space = gym.spaces.Text(100)
        self.on: set[str] = set()

    def _info(self, ok: bool = True) -> dict[str, Any]:
        return {"my/state": tuple(sorted(self.on)), "ok": ok}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.on = set()
        return "Two switches and a button.", self._info()

    def step(self, action):
        ok = action in ("flip a", "flip b", "go")
        if action == "jam":
            self.on.add("a")
        elif action.startswith("flip "):
            self.on ^= {action[5:]}
        won = action == "go" and self.on == {"a", "b"}
        return "Click.", float(won), won, False, self._info(ok)


def my_state(info: dict[str, Any]) -> tuple:
    return info["my/state"]


def test_tuple_state_keys_label_the_same_online_and_offline():
    arg = AgenticReferenceGraph(state_key=my_state)
    arg.add_path("", [(), ("a",), ("a", "b"), ("a", "b")], ["flip a", "flip b", "go"], won=True)
    traj = play(ARGWrapper(Switches(), graph=arg), ["flip a", "flip b"])
    online = [s.info[schema.ARG_REASONABLE] for s in traj.steps]
    assert online == [True, True]
    assert label_trajectory(arg, traj).reasonable == online
    assert traj.steps[-1].info[schema.ARG_STATE] == arg.state_key(traj.steps[-1].info) == "('a', 'b')"


def test_state_ids_are_str_with_sets_and_dicts_sorted_and_refuse_address_reprs():
    assert state_id("s") == "s" and state_id(3) == "3" and state_id(("a", 1)) == str(("a", 1))
    words = [f"w{i}" for i in range(20)]
    assert state_id((frozenset(words), {"k": set(words[::-1])})) == state_id(
        (frozenset(reversed(words)), {"k": set(words)})
    )
    assert state_id({"b", "a"}) == "{'a', 'b'}"
    with pytest.raises(TypeError, match="memory address"):
        AgenticReferenceGraph(state_key=lambda info: (object(),)).state_key({})


def test_a_gymnasium_style_success_seeds_and_grows_the_graph():
    arg = AgenticReferenceGraph(state_key=my_state)
    assert arg.add_trajectory(play(Switches(), ["flip a", "flip b", "go"])) == 2  # "go" is a self-loop class
    env = ARGWrapper(Switches(), graph=arg, grow=True)
    play(env, ["flip b", "flip a", "go"])
    assert arg.stats()["trajectories"] == 2
    assert env.get_wrapper_attr("grown") == 1 and env.get_wrapper_attr("episodes") == 1
    with pytest.raises(ValueError, match="did not succeed"):
        AgenticReferenceGraph(state_key=my_state, success_fn=lambda t: False).add_trajectory(
            play(Switches(), ["flip a", "flip b", "go"])
        )


def test_growth_that_never_happens_is_counted_and_warned_about():
    arg = AgenticReferenceGraph(state_key=my_state)
    env = ARGWrapper(Switches(), graph=arg, grow=True, success_fn=lambda t: False, warn_after=3)
    for _ in range(2):
        play(env, ["flip a", "flip b", "go"])
    with pytest.warns(RuntimeWarning, match="success_fn"):
        play(env, ["flip a", "flip b", "go"])
    assert env.get_wrapper_attr("episodes") == 3 and env.get_wrapper_attr("grown") == 0
    assert arg.stats()["trajectories"] == 0


def test_rejected_steps_add_no_edges():
    arg = AgenticReferenceGraph()
    arg.add_path("t", ["s0", "s1", "s2"], ["jam", "go in"], won=True, errors=[True, False])
    assert set(arg.graph("t").edges) == {("s1", "s2")}
    arg = AgenticReferenceGraph(state_key=my_state)
    traj = play(Switches(), ["jam", "flip b", "go"])
    for s in traj.steps:
        s.info[schema.ADMISSIBLE] = s.info["ok"]
    arg.add_trajectory(traj)
    assert set(arg.graph("").edges) == {("('a',)", "('a', 'b')")}


def test_saved_graphs_get_normal_permissions(tmp_path):
    arg = AgenticReferenceGraph()
    arg.add_path("t", ["a", "b"], ["x"], won=True)
    old = os.umask(0o022)
    try:
        path = arg.save(tmp_path / "arg.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o640)
    arg.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # rewriting keeps the file's mode, like open(path, "w")


_KILLED_SAVE = """
import os, signal, sys
from stepgym.reference_graph import AgenticReferenceGraph
arg = AgenticReferenceGraph()
arg.add_path("t", ["a", "b"], ["x"], won=True)
def killed(fd):  # killed once the temporary is written, before it replaces the file
    os.kill(os.getpid(), signal.SIGKILL)
os.fsync = killed
arg.save(sys.argv[1])
"""


def test_a_save_cleans_the_temporaries_a_killed_save_left(tmp_path):
    run = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(tmp_path / "arg.json")], check=False)
    assert run.returncode == -signal.SIGKILL
    stale = [p.name for p in tmp_path.iterdir()]
    assert len(stale) == 1 and stale[0].startswith(".arg.json.") and stale[0].endswith(".tmp")
    live = tmp_path / f".arg.json.{os.getpid()}.0123abcd.tmp"  # a save in progress in a live process
    live.write_text("{")
    other = tmp_path / ".other.json.1.0123abcd.tmp"  # another graph's temporary: not this save's business
    other.write_text("{")
    arg = AgenticReferenceGraph()
    arg.add_path("t", ["a", "b"], ["x"], won=True)
    arg.save(tmp_path / "arg.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["arg.json", live.name, other.name])
    assert AgenticReferenceGraph.load(tmp_path / "arg.json") == arg


def test_the_custom_env_example_in_the_docs_runs(tmp_path, monkeypatch):
    text = (Path(__file__).resolve().parents[1] / "docs" / "arg.md").read_text(encoding="utf-8")
    section = text.split("## Your own env", 1)[1].split("\n## ", 1)[0]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))
    assert "success_fn" in code and "ARGWrapper" in code and "add_trajectory" in code
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/arg.md", "exec"), {"__name__": "docs_arg_example"})


def test_the_graph_has_one_home():
    import stepgym.wrappers
    import stepgym.wrappers.arg
    from stepgym import reference_graph

    assert stepgym.AgenticReferenceGraph is stepgym.ARG is reference_graph.AgenticReferenceGraph
    for module in (stepgym.wrappers, stepgym.wrappers.arg):
        assert not hasattr(module, "AgenticReferenceGraph") and not hasattr(module, "label_trajectory")
