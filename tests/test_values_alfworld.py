"""ALFWorld's value labels on the real games: equal to an unpruned brute-force search, never above the
walkthrough, 0 exactly when won, consistent along steps, honest about an exhausted budget, and invisible to the
rollout they label."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.errors import ValueOracleError
from stepgym.values import step_value_class
from stepgym.wrappers import ValueWrapper

pytestmark = pytest.mark.usefixtures("data_dir")
ENV_ID = "StepGym/ALFWorld-v0"
SMALL_GAME = 0  # valid_seen's first game: look_at_obj_in_light, a 3-command walkthrough
BRUTE_LIMIT = 6_000  # successor states; states farther than that from a win are not brute-forced


def brute_force(env, limit: int = BRUTE_LIMIT) -> int | str | None:
    """Fewest commands to a win from ``env``'s state by breadth-first search over *every* admissible command
    (no pruning, no bound) on a separate native engine; ``"limit"`` when it needs more than ``limit`` states."""
    from stepgym.envs.alfworld.native import NativeEngine

    engine = NativeEngine(cache_size=2)
    root = env.get_state().engine
    state = engine.set_state(root)
    if state["won"]:
        return 0
    seen = {engine.key_facts().state_key()}
    frontier = deque([(root, state["admissible_commands"], 0)])
    generated = 0
    while frontier:
        snap, commands, depth = frontier.popleft()
        for command in commands:
            engine.set_state(snap)
            child = engine.step(command)
            generated += 1
            if child["won"]:
                return depth + 1
            key = engine.key_facts().state_key()
            if key not in seen:
                seen.add(key)
                frontier.append((engine.get_state(), child["admissible_commands"], depth + 1))
            if generated >= limit:
                return "limit"
    return None


@pytest.fixture(scope="module")
def wrapped():
    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped, budget=5_000)
    yield env
    env.close()


def test_values_equal_brute_force_along_noisy_rollouts(wrapped) -> None:
    rng = np.random.default_rng(1)
    compared = 0
    for _ in range(3):
        obs, info = wrapped.reset(options={"task_id": wrapped.unwrapped.task_ids[SMALL_GAME]})
        assert info[schema.VALUE_AFTER] <= len(wrapped.unwrapped.walkthrough)
        for _ in range(6):
            truth = brute_force(wrapped.unwrapped)
            if truth != "limit" and info[schema.VALUE_EXACT]:
                assert info[schema.VALUE_REACHABLE] == (truth is not None)
                assert info[schema.VALUE_AFTER] == (0.0 if truth is None else float(truth))
                compared += 1
            expert = info[schema.EXPERT_ACTION]
            acts = info[schema.ADMISSIBLE_ACTIONS]
            action = expert if expert and rng.random() < 0.5 else acts[int(rng.integers(len(acts)))]
            before = info[schema.VALUE_AFTER]
            obs, r, term, trunc, info = wrapped.step(action)
            assert info[schema.VALUE_BEFORE] == before
            if info[schema.VALUE_EXACT] and info[schema.VALUE_REACHABLE]:
                assert info[schema.VALUE_BEFORE] <= 1.0 + info[schema.VALUE_AFTER]
            if term:
                assert info[schema.WON] and info[schema.VALUE_AFTER] == 0.0
                break
    assert compared >= 6


def test_the_walkthrough_is_optimal_step_by_step_and_zero_exactly_when_won(wrapped) -> None:
    obs, info = wrapped.reset(options={"task_id": wrapped.unwrapped.task_ids[SMALL_GAME]})
    walkthrough = wrapped.unwrapped.walkthrough
    assert info[schema.VALUE_EXACT] and info[schema.VALUE_AFTER] == brute_force(wrapped.unwrapped)
    for i, command in enumerate(walkthrough):
        obs, r, term, trunc, info = wrapped.step(command)
        left = len(walkthrough) - 1 - i
        assert info[schema.VALUE_AFTER] == left and info[schema.VALUE_GAIN] == 1.0
        assert (info[schema.VALUE_AFTER] == 0.0) == info[schema.WON]
        assert step_value_class(info) == 1


def test_reversible_moves_are_consistent_both_ways(wrapped) -> None:
    obs, info = wrapped.reset(options={"task_id": wrapped.unwrapped.task_ids[SMALL_GAME]})
    gos = sorted(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to "))[:3]
    here = wrapped.step(gos[0])[-1]
    for target in gos[1:]:
        there = wrapped.step(target)[-1]
        back = wrapped.step(gos[0])[-1]  # back where we were: the same state
        assert back[schema.STATE_KEY] == here[schema.STATE_KEY]
        assert there[schema.VALUE_EXACT] and back[schema.VALUE_EXACT]
        assert abs(there[schema.VALUE_AFTER] - back[schema.VALUE_AFTER]) <= 1.0


def test_an_exhausted_budget_is_said_in_the_label() -> None:
    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped, budget=0, cache_size=0)
    game = env.unwrapped.task_ids[60]
    obs, info = env.reset(options={"task_id": game})
    *_, info = env.step(info[schema.ADMISSIBLE_ACTIONS][0])
    # no search at all: the expert's completion, an upper bound, never called exact
    assert info[schema.VALUE_EXACT] is False
    assert info[schema.VALUE_REACHABLE] is True and info[schema.VALUE_AFTER] >= 1.0
    assert env.oracle.stats["bound"] >= 1
    plain = gym.make(ENV_ID, split="valid_seen", expert=False).unwrapped
    env = ValueWrapper(plain, budget=0, cache_size=0)
    obs, info = env.reset(options={"task_id": game})
    # at the start the walkthrough bounds it; with no search that is exact only where the lower bound meets it
    assert info[schema.VALUE_AFTER] == len(env.unwrapped.walkthrough)
    if info[schema.VALUE_EXACT]:
        assert brute_force(env.unwrapped) in ("limit", info[schema.VALUE_AFTER])
    *_, info = env.step(info[schema.ADMISSIBLE_ACTIONS][0])
    assert info[schema.VALUE_EXACT] is False and info[schema.VALUE_REACHABLE] is False  # unknown, said so
    assert info[schema.VALUE_GAIN] == 0.0


def test_labels_do_not_change_the_rollout() -> None:
    actions = []
    runs = []
    for wrap in (False, True):
        env = gym.make(ENV_ID, split="valid_seen").unwrapped
        if wrap:
            env = ValueWrapper(env, budget=300)
        obs, info = env.reset(seed=7)
        rng = np.random.default_rng(3)
        out = [(obs, info[schema.EXPERT_ACTION], info[schema.STATE_KEY])]
        for t in range(8):
            if not wrap:
                acts = info[schema.ADMISSIBLE_ACTIONS]
                expert = info[schema.EXPERT_ACTION]
                actions.append(
                    expert if expert and rng.random() < 0.5 else acts[int(rng.integers(len(acts)))]
                )
            obs, r, term, trunc, info = env.step(actions[t])
            out.append((obs, r, info[schema.EXPERT_ACTION], info[schema.STATE_KEY]))
            if term:
                break
        runs.append(out)
    assert runs[0] == runs[1]


def test_the_textworld_engine_is_refused_at_wrap_time() -> None:
    env = gym.make(ENV_ID, split="valid_seen", engine="textworld").unwrapped
    with pytest.raises(ValueOracleError, match='engine="native"'):
        ValueWrapper(env)


def test_a_detour_next_to_a_labelled_state_gets_a_bound_from_the_cache() -> None:
    # no expert: without the cache, an out-of-budget search would have no bound at all ("unknown")
    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen", expert=False).unwrapped, budget=5_000)
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[SMALL_GAME]})
    first = env.unwrapped.walkthrough[0]
    *_, info = env.step(first)
    here, value = first, info[schema.VALUE_AFTER]
    assert info[schema.VALUE_EXACT]
    detour = next(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to ") and a != here)
    env.oracle.budget = 60  # one layer of the search: enough to meet the cached state one step back
    *_, info = env.step(detour)
    assert info[schema.VALUE_REACHABLE] is True
    assert info[schema.VALUE_AFTER] <= 1.0 + value  # going back is one step, and the value there is known


def _noisy_states(env, task: str, steps: int, rng: np.random.Generator, prefer_take_other: bool = False):
    """Yield (info, the env's state as PlanView atoms, the view) along one noisy rollout of ``task``."""
    from stepgym.envs.alfworld.native.plan import PlanView
    from stepgym.envs.alfworld.state import TaskTargets

    base = env.unwrapped
    obs, info = env.reset(options={"task_id": task})
    targets = TaskTargets(base.get_state().game.task_params())
    for _ in range(steps):
        view = PlanView(base.engine)
        yield info, view.atoms_of(base.get_state().engine), view
        if info[schema.WON]:
            return
        acts = info[schema.ADMISSIBLE_ACTIONS]
        others = [
            a
            for a in acts
            if a.startswith("take ") and not targets.is_target_object(a[5:].split(" from ")[0])
        ]
        if prefer_take_other and others:
            action = others[0]  # hold an object the task does not need: the search must put it down first
        elif info[schema.EXPERT_ACTION] and rng.random() < 0.5:
            action = info[schema.EXPERT_ACTION]
        else:
            action = acts[int(rng.integers(len(acts)))]
        *_, term, trunc, info = env.step(action)
        if term or trunc:
            return


def _one_game_per_task_type(env) -> list[str]:
    seen: dict[str, str] = {}
    for task in env.unwrapped.task_ids:
        seen.setdefault(task.split("/")[1].split("-")[0], task)
    assert len(seen) == 6, seen
    return list(seen.values())


def test_the_text_free_successors_step_like_the_engine() -> None:
    """PlanView (what the search expands) against the engine: every admissible command's true atoms."""
    from stepgym.envs.alfworld.native import NativeEngine

    env = gym.make(ENV_ID, split="valid_seen").unwrapped
    engine = NativeEngine(cache_size=2)
    rng = np.random.default_rng(5)
    compared = 0
    for task in _one_game_per_task_type(env)[:3]:
        for info, atoms, view in _noisy_states(env, task, 5, rng):
            snap = env.get_state().engine
            tables = view.tables(atoms)
            options = view.options(tables)
            assert sorted({c for _, c in options}) == sorted(info[schema.ADMISSIBLE_ACTIONS])
            for op, command in options:
                engine.set_state(snap)
                state = engine.step(command)
                assert view.apply(atoms, tables, op) == view.atoms_of(engine.get_state()), command
                assert view.won(view.tables(view.apply(atoms, tables, op))) == state["won"]
                compared += 1
    assert compared > 100


@pytest.mark.parametrize("take_other", [False, True], ids=["noisy", "holding-another-object"])
def test_exact_labels_equal_an_unpruned_search_on_every_task_type(take_other: bool) -> None:
    """Exact labels against reference_cost (no pruning, no heuristic, no cache) wherever that finishes, and the
    search's lower bound never above an exact value; one game of each of the six task types."""
    from stepgym.envs.alfworld.values import LowerBound, reference_cost

    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped)
    rng = np.random.default_rng(11)
    compared = exact = 0
    for task in _one_game_per_task_type(env):
        for info, atoms, view in _noisy_states(env, task, 8, rng, prefer_take_other=take_other):
            value = env.cache.peek((task, info[schema.STATE_KEY]))
            assert value is not None
            if not value.exact:
                continue
            exact += 1
            if value.reachable:
                assert LowerBound(view)(view.tables(atoms).data) <= value.cost
            truth = reference_cost(view, atoms, limit=4_000)
            if truth == "limit":
                continue
            assert (value.cost if value.reachable else None) == (None if truth is None else float(truth)), (
                task
            )
            compared += 1
    assert compared >= 10 and exact >= 30, (compared, exact)


def test_holding_an_object_the_task_does_not_need_is_not_a_lost_game() -> None:
    """Regression: the search once never put a held object down, so holding one read as "success unreachable"."""
    from stepgym.envs.alfworld.state import TaskTargets

    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped)
    checked = 0
    for task in env.unwrapped.task_ids[6:40:8]:
        obs, info = env.reset(options={"task_id": task})
        targets = TaskTargets(env.unwrapped.get_state().game.task_params())
        rng = np.random.default_rng(len(task))
        for _ in range(10):
            acts = info[schema.ADMISSIBLE_ACTIONS]
            other = [
                a
                for a in acts
                if a.startswith("take ") and not targets.is_target_object(a[5:].split(" from ")[0])
            ]
            if other:
                *_, info = env.step(other[0])
                assert info[schema.VALUE_REACHABLE] and info[schema.VALUE_EXACT], other[0]
                assert brute_force(env.unwrapped, 20_000) in ("limit", info[schema.VALUE_AFTER])
                checked += 1
                break
            gos = [a for a in acts if a.startswith("go to ")]
            *_, info = env.step(gos[int(rng.integers(len(gos)))])
    assert checked >= 3


_LABELS_SCRIPT = """
import json, sys
import gymnasium as gym, numpy as np
import stepgym
from stepgym import schema
from stepgym.wrappers import ValueWrapper
env = ValueWrapper(gym.make("StepGym/ALFWorld-v0", split="valid_seen").unwrapped, budget=3)
rng = np.random.default_rng(2)
out = []
for task in env.unwrapped.task_ids[100:103]:
    obs, info = env.reset(options={"task_id": task})
    for _ in range(6):
        acts = info[schema.ADMISSIBLE_ACTIONS]
        *_, term, trunc, info = env.step(acts[int(rng.integers(len(acts)))])
        out.append([info[k] for k in (schema.VALUE_AFTER, schema.VALUE_EXACT, schema.VALUE_REACHABLE)])
        if term or trunc:
            break
print(json.dumps([out, env.oracle.stats]))
"""


def test_labels_do_not_depend_on_the_hash_seed() -> None:
    """With a budget small enough to run out (so the search's order shows in the labels), two processes with
    different string hashing give the same labels and the same search statistics."""
    import os
    import subprocess
    import sys

    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _LABELS_SCRIPT], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(done.stdout.strip().splitlines()[-1])
    assert runs[0] == runs[1]
    labels, stats = __import__("json").loads(runs[0])
    assert stats["bound"] + stats["unknown"] > 0  # the budget did run out somewhere: order mattered


def test_an_object_in_two_overlapping_receptacles() -> None:
    """Regression: ALFWorld's receptacles overlap (a pan on two burners), and taking an object from one leaves it
    "in" the other, which the goal accepts. The lower bound once assumed one receptacle per object and a put at the
    end, overestimated, and the search returned a longer way than the shortest."""
    from stepgym.envs.alfworld.values import LowerBound, reference_cost

    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped)
    task = next(t for t in env.unwrapped.task_ids if "Pan-None-StoveBurner-23" in t)
    obs, info = env.reset(options={"task_id": task})
    from stepgym.envs.alfworld.native.plan import PlanView

    view = PlanView(env.unwrapped.engine)
    atoms = view.atoms_of(env.unwrapped.get_state().engine)
    pans = [o for o, r in dict(atoms)["inreceptacle"] if o.startswith("pan")]
    assert len(pans) > len(set(pans))  # the setting: a pan in two receptacles at once
    assert info[schema.VALUE_EXACT]
    assert LowerBound(view)(dict(atoms)) <= info[schema.VALUE_AFTER]
    assert reference_cost(view, atoms, limit=300_000) == info[schema.VALUE_AFTER] == 4.0


def test_the_check_script_runs_on_one_game() -> None:
    """scripts/alfworld_values_check.py (the every-game check the README quotes) on one game: exit 0, no
    disagreement, and it did check something."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [
            sys.executable,
            "scripts/alfworld_values_check.py",
            "--task",
            "Pan-None-StoveBurner-23",
            "--limit",
            "3000",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 games" in done.stdout and "0 disagreements" in done.stdout


def _group_labels(envs, task: str, seed: int) -> list[list]:
    """Every env of ``envs`` plays ``task`` (the expert with probability 0.6, else a random admissible command),
    in lockstep as a group does; returns each env's labels per step (None for an env without ``ValueWrapper``)."""
    rng = np.random.default_rng(seed)
    infos = [env.reset(options={"task_id": task})[1] for env in envs]
    out: list[list] = [[(i.get(schema.VALUE_AFTER), i.get(schema.VALUE_EXACT))] for i in infos]
    live = list(range(len(envs)))
    for _ in range(10):
        for g in list(live):
            acts, expert = infos[g][schema.ADMISSIBLE_ACTIONS], infos[g][schema.EXPERT_ACTION]
            action = expert if expert and rng.random() < 0.6 else acts[int(rng.integers(len(acts)))]
            *_, term, trunc, infos[g] = envs[g].step(action)
            keys = (schema.VALUE_BEFORE, schema.VALUE_AFTER, schema.VALUE_GAIN, schema.VALUE_EXACT)
            out[g].append(tuple(infos[g].get(k) for k in keys))
            if term or trunc:
                live.remove(g)
    return out


def test_a_group_shares_what_it_proved_and_labels_as_one_wrapper_alone() -> None:
    """The wrappers of a group (one per env, as GroupEnv wraps its copies) share the game's work and the exact
    values proved: a state one of them labelled costs the others no search, and every label equals the label a
    wrapper gets alone, with nothing shared (the shared work cleared before each env plays)."""
    from stepgym.envs.alfworld.values import clear_shared_work

    make = lambda: ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped)  # noqa: E731
    tasks = [make().unwrapped.task_ids[i] for i in (SMALL_GAME, 60, 100)]
    for task in tasks:
        clear_shared_work()
        group = [make() for _ in range(4)]
        together = _group_labels(group, task, seed=5)
        assert group[0].oracle.stats["searches"] >= 1
        assert group[1].oracle.stats["searches"] < group[0].oracle.stats["searches"] + 5
        alone = []
        for g in range(4):  # the same rollouts (same seeded choices), only env g labelled, nothing shared
            clear_shared_work()
            envs = [make() if i == g else gym.make(ENV_ID, split="valid_seen").unwrapped for i in range(4)]
            alone.append(_group_labels(envs, task, seed=5)[g])
        assert together == alone
    # the start state, labelled by the first wrapper of the group, is read back by the others: no search there
    clear_shared_work()
    first, second = make(), make()
    first.reset(options={"task_id": tasks[1]})
    obs, info = second.reset(options={"task_id": tasks[1]})
    assert second.oracle.stats["searches"] == 0 and info[schema.VALUE_EXACT]


def test_no_cache_shares_nothing() -> None:
    """``cache_size=0`` (every step runs the oracle) neither reads nor writes the shared exact values: an exhausted
    budget stays an upper bound even after another wrapper proved the state."""
    from stepgym.envs.alfworld.values import clear_shared_work

    clear_shared_work()
    task = gym.make(ENV_ID, split="valid_seen").unwrapped.task_ids[60]
    proved = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped)
    obs, info = proved.reset(options={"task_id": task})
    *_, info = proved.step(info[schema.ADMISSIBLE_ACTIONS][0])
    assert info[schema.VALUE_EXACT]
    starved = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped, budget=0, cache_size=0)
    obs, info = starved.reset(options={"task_id": task})
    *_, info = starved.step(info[schema.ADMISSIBLE_ACTIONS][0])
    assert info[schema.VALUE_EXACT] is False
