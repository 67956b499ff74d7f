"""Graph / history credit bases (docs/shapers.md §10–§14): worked examples from each public code's rules, properties,
bad input, registry and presets."""

from __future__ import annotations

import math

import numpy as np
import pytest

import stepgym.shapers as S
from stepgym.shapers import ShapeConfig, StepBatch, shape_advantages

# One group, two trajectories (rows in time order):
#   A: s0 -> s1 -> (success)   rewards 0, 10   (R = 10)
#   B: s0 -> s2 -> s2          rewards 0, 0    (R = 0; its last state s2 is a dead end)
TWO = dict(
    group_ids=[0, 0, 0, 0],
    traj_ids=[0, 0, 1, 1],
    rewards=[0.0, 10.0, 0.0, 0.0],
    anchor_obs=["s0", "s1", "s0", "s2"],
    next_obs=["s1", "s3", "s2", "s2"],
)


#: ShapeConfig's shared fields; every other keyword of _run is an option of the base (its options dataclass)
_SHARED = {"gamma", "step_weight", "invalid_penalty", "proas", "eps", "singleton"}


def _run(base: str, batch: dict | None = None, **cfg) -> S.ShapedAdvantages:
    shared = {k: v for k, v in cfg.items() if k in _SHARED}
    options = {k: v for k, v in cfg.items() if k not in _SHARED}
    config = ShapeConfig(base=base, **shared, options={base: options} if options else {})
    return shape_advantages(StepBatch(**(batch or TWO)), config)


# ---------------------------------------------------------------------------------------------------- GraphGPO §10
def test_graphgpo_worked_example() -> None:
    # d(success) = 0, d(s1) = 1, d(s0) = 2; s2 cannot reach success: max finite (2) + 1 = 3.
    # γ = 0.5: r = 10·γ^d(next) = [5, 10, 1.25, 1.25]. Anchor group s0 = rows 0, 2: mean 3.125 → ±1.875;
    # s1, s2 are singletons → 0. Episode (mean_norm): scores [10, 10, 0, 0] − 5 = ±5.
    out = _run("graphgpo", gamma=0.5, step_mode="mean_norm")
    np.testing.assert_allclose(out.gigpo.returns, [5, 10, 1.25, 1.25])
    np.testing.assert_allclose(out.base_advantages, [6.875, 5, -6.875, -5])
    # mean_std_norm (default): step ±1.875/(std([5, 1.25]) + ε) with std = 3.75/√2; episode ±5/(√(100/3) + ε)
    out = _run("graphgpo", gamma=0.5)
    s, e = 1.875 / (3.75 / math.sqrt(2) + 1e-6), 5 / (math.sqrt(100 / 3) + 1e-6)
    np.testing.assert_allclose(out.base_advantages, [e + s, e, -e - s, -e], rtol=1e-12)


def test_graphgpo_normalize_distance_and_weights() -> None:
    # r = 10·γ^(d(next) − d(cur) + 1): row0 10·.5^0 = 10, row1 10·.5^0 = 10, row2 10·.5^2 = 2.5, row3 10·.5^1 = 5
    out = _run("graphgpo", gamma=0.5, step_mode="mean_norm", normalize_distance=True)
    np.testing.assert_allclose(out.gigpo.returns, [10, 10, 2.5, 5])
    np.testing.assert_allclose(out.base_advantages, [8.75, 5, -8.75, -5])  # s0 group [10, 2.5] → ±3.75
    out = _run("graphgpo", gamma=0.5, step_mode="mean_norm", episode_weight=0.0, step_weight=2.0)
    np.testing.assert_allclose(out.base_advantages, [3.75, 0, -3.75, 0])


def test_graphgpo_penalty_and_no_success_rule() -> None:
    # invalid row 2 (c = 0.1): r = 1.25 − 0.1, score −0.1
    b = dict(TWO, valid=[True, True, False, True])
    out = _run("graphgpo", b, gamma=0.5, step_mode="mean_norm", invalid_penalty=0.1)
    np.testing.assert_allclose(out.gigpo.returns, [5, 10, 1.15, 1.25])
    np.testing.assert_allclose(out.gigpo.scores, [10, 10, -0.1, 0])
    # a group where nobody succeeded: every node gets d = 0 + 1 = 1 → r = 10γ everywhere, step term 0
    fail = dict(TWO, rewards=[0.0] * 4)
    out = _run("graphgpo", fail, gamma=0.5)
    np.testing.assert_allclose(out.gigpo.returns, [5.0] * 4)
    np.testing.assert_array_equal(out.base_advantages, 0.0)


def test_graphgpo_success_field_overrides_reward_rule_and_similarity() -> None:
    # StepBatch.success marks B's last row instead: then B's path is the short one
    out = _run("graphgpo", dict(TWO, success=[False, False, False, True]), gamma=0.5, step_mode="mean_norm")
    # s2 → success: d(s2) = 1, d(s0) = 2; s1 and s3 cannot reach it: 2 + 1 = 3 → r = [1.25, 1.25, 5, 10]
    np.testing.assert_allclose(out.gigpo.returns, [10 * 0.5**3, 10 * 0.5**3, 10 * 0.5, 10.0])
    # the similarity canonicaliser merges near-identical texts into one node
    sim = dict(
        TWO, anchor_obs=["room a", "room b", "room a", "room c"], next_obs=["room b", "x", "room c", "room c"]
    )
    a = _run("graphgpo", sim, gamma=0.5).base_advantages
    b = _run("graphgpo", sim, gamma=0.5, similarity=True, similarity_tau=0.99).base_advantages
    np.testing.assert_allclose(a, b)


# ---------------------------------------------------------------------------------------------------- HGPO §11
HG = dict(
    group_ids=[0] * 6,
    traj_ids=[0, 0, 1, 1, 2, 2],
    rewards=[0, 1, 0, 0, 0, 1.0],
    anchor_obs=["x", "y", "x", "y", "z", "y"],
)


def test_hgpo_worked_example() -> None:
    # γ = 0.5 returns: A [0.5, 1], B [0, 0], C [0.5, 1].
    # k = 1: {A0, B0} [0.5, 0]: pop σ 0.25 → ±1; {A1, B1, C1} [1, 0, 1]: μ 2/3, σ √(2/9) → [.7071, −1.4142, .7071];
    #        {C0} alone: no item.  k = 2 (t = 1 rows): (x, y) = {A1, B1} [1, 0] → ±1; (z, y) = {C1} alone.
    # weights (k+1)^1: 2, 3.  A1 = (2·.7071 + 3·1)/(5 + 1e-6) etc.
    eps = 1e-6
    k1x = 0.25 / (0.25 + eps)
    sig = math.sqrt(2 / 9)
    hi, lo = (1 / 3) / (sig + eps), (-2 / 3) / (sig + eps)
    k2 = 0.5 / (0.5 + eps)
    want = [
        2 * k1x / (2 + 1e-6),
        (2 * hi + 3 * k2) / (5 + 1e-6),
        -2 * k1x / (2 + 1e-6),
        (2 * lo - 3 * k2) / (5 + 1e-6),
        0.0,
        2 * hi / (2 + 1e-6),
    ]
    out = _run("hgpo", HG, gamma=0.5)
    np.testing.assert_allclose(out.base_advantages, want, rtol=1e-12)
    # history 0: k = 1 only
    out = _run("hgpo", HG, gamma=0.5, history=0)
    np.testing.assert_allclose(out.base_advantages[[1, 3]], [2 * hi / (2 + 1e-6), 2 * lo / (2 + 1e-6)])


def test_hgpo_base_group_adds_the_episode_item() -> None:
    # episode scores over the 6 rows: [1, 1, 0, 0, 1, 1]: μ 2/3, unbiased σ = √((4/9 + 4·1/9... )) → A^E of C = .6455
    sc = np.array([1, 1, 0, 0, 1, 1.0])
    e = (sc - sc.mean()) / (sc.std(ddof=1) + 1e-6)
    out = _run("hgpo", HG, gamma=0.5, base_group=True)
    assert out.base_advantages[4] == pytest.approx(e[4] / (1 + 1e-6), rel=1e-12)  # C0 has only the k = 0 item


# ---------------------------------------------------------------------------------------------------- RewardFlow §12
def test_rewardflow_worked_example() -> None:
    # states: A s0 (0), s1 (0), s3 (10, ended); B s0, s2 (0), s2. γ = 0.5: V(s3) 10, V(s1) 5, V(s0) 2.5, V(s2) 0.
    # r̃ = V(next) − V(cur) = [2.5, 5, −2.5, 0]; mean_norm: episode ±5, s0 group [2.5, −2.5] → ±2.5
    out = _run("rewardflow", gamma=0.5)
    np.testing.assert_allclose(out.gigpo.returns, [2.5, 5, -2.5, 0])
    np.testing.assert_allclose(out.base_advantages, [7.5, 5, -7.5, -5])
    # trajectories cut at the horizon: no final state, last rows keep their raw reward → r̃ [0, 10, 0, 0]
    out = _run("rewardflow", dict(TWO, dones=[False] * 4), gamma=0.5)
    np.testing.assert_allclose(out.gigpo.returns, [0, 10, 0, 0])
    np.testing.assert_allclose(out.base_advantages, [5, 5, -5, -5])


def test_rewardflow_propagation_rounds_and_first_seen() -> None:
    # chain a → b → c with c worth 8: one round reaches b only
    v = S.rewardflow.propagate_decay([0, 0, 8.0], [0, 1], [1, 2], 0.5, rounds=1)
    np.testing.assert_allclose(v, [0, 4, 8])
    np.testing.assert_allclose(S.rewardflow.propagate_decay([0, 0, 8.0], [0, 1], [1, 2], 0.5), [2, 4, 8])
    # first seen wins: s1 first entered with reward 0 (traj A), later with 4 (traj B) → V(s1) starts at 0
    b = dict(
        group_ids=[0] * 4,
        traj_ids=[0, 0, 1, 1],
        rewards=[0, 0, 4, 0.0],
        anchor_obs=["s0", "s1", "s2", "s1"],
        next_obs=["s1", "s9", "s1", "s8"],
        dones=[False] * 4,
    )
    out = _run("rewardflow", b, gamma=0.5)
    # graph: s0 → s1, s2 → s1; V(s1) = 0 (first seen), V(s0) = V(s2) = 0 → r̃ row0 0, row2 0; last rows raw
    np.testing.assert_allclose(out.gigpo.returns, [0, 0, 0, 0])


# ---------------------------------------------------------------------------------------------------- G2PO §13
def test_g2po_worked_example() -> None:
    # aggregation (γ 0.95): A adds .95²·10 = 9.025 to g(s0), .95·10 = 9.5 to g(s1); B adds 0.
    # V(s0) = 9.025/2 = 4.5125, V(s1) = 9.5, V(s2) = 0. V(next) = [9.5, 10 (success), 0, 0 (failure)].
    # mean_norm: term 1 in s0 group [9.5, 0] → ±4.75; term 2 gains [4.9875, .5, −4.5125, 0] − .24375; episode ±5
    out = _run("g2po", step_mode="mean_norm")
    np.testing.assert_allclose(out.gigpo.returns, [9.5, 10, 0, 0])
    np.testing.assert_allclose(out.base_advantages, [14.49375, 5.25625, -14.50625, -5.24375])


def test_g2po_success_is_an_exact_ten_and_term1_penalty() -> None:
    # R = 9.99 is not a success upstream: the last row's next value is 0
    b = dict(TWO, rewards=[0, 9.99, 0, 0])
    assert _run("g2po", b, step_mode="mean_norm").gigpo.returns[1] == 0.0
    # term 1 subtracts 0.1 for an invalid row inside its group: s0 group [9.5 − .1, 0] → ±4.7
    out = _run("g2po", dict(TWO, valid=[False, True, True, True]), step_mode="mean_norm")
    ref = _run("g2po", step_mode="mean_norm")
    assert out.gigpo.step[0] - ref.gigpo.step[0] == pytest.approx(-0.05)


# ---------------------------------------------------------------------------------------------------- oracle §14
def test_oracle_is_episode_term_plus_true_gain() -> None:
    out = _run("oracle", dict(TWO, true_gain=[1, 1, 0, -1.0]))
    e = 5 / (math.sqrt(100 / 3) + 1e-6)
    np.testing.assert_allclose(out.base_advantages, [e + 1, e + 1, -e, -e - 1])
    with pytest.raises(ValueError, match="true_gain"):
        _run("oracle")


# ---------------------------------------------------------------------------------------------------- properties
def _random_group_batch(rng: np.random.Generator, n_groups: int = 3, g: int = 4, t_max: int = 6) -> dict:
    """Rows of each trajectory in order; states from a small set per group, success ends in a unique 'goal'."""
    rows = {k: [] for k in ("group_ids", "traj_ids", "rewards", "anchor_obs", "next_obs", "valid")}
    traj = 0
    for grp in range(n_groups):
        for _ in range(g):
            t_len = int(rng.integers(2, t_max + 1))
            states = [f"s{int(v)}" for v in rng.integers(0, 4, size=t_len)]
            won = bool(rng.random() < 0.5)
            nxt = [*states[1:], "goal" if won else f"s{int(rng.integers(0, 4))}"]
            for t in range(t_len):
                rows["group_ids"].append(grp)
                rows["traj_ids"].append(traj)
                rows["rewards"].append(10.0 if (won and t == t_len - 1) else 0.0)
                rows["anchor_obs"].append(states[t])
                rows["next_obs"].append(nxt[t])
                rows["valid"].append(bool(rng.random() < 0.9))
            traj += 1
    return rows


def _permute_trajectories(b: dict, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    trajs = np.array(b["traj_ids"])
    order = rng.permutation(np.unique(trajs))
    idx = np.concatenate([np.flatnonzero(trajs == t) for t in order])
    return {k: [v[i] for i in idx] for k, v in b.items()}, idx


@pytest.mark.parametrize("base", ["graphgpo", "hgpo", "rewardflow", "g2po"])
@pytest.mark.parametrize("seed", range(5))
def test_trajectory_order_inside_a_group_does_not_matter(base: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    b = _random_group_batch(rng)
    want = _run(base, b, invalid_penalty=0.1).base_advantages
    pb, idx = _permute_trajectories(b, rng)
    got = _run(base, pb, invalid_penalty=0.1).base_advantages
    np.testing.assert_allclose(got, want[idx], atol=1e-9)


@pytest.mark.parametrize("base", ["graphgpo", "hgpo", "rewardflow"])
def test_identical_trajectories_get_zero(base: str) -> None:
    # every trajectory visits s0, s1, s2 and wins: nothing to tell apart
    b = dict(
        group_ids=[0] * 9,
        traj_ids=[0, 0, 0, 1, 1, 1, 2, 2, 2],
        rewards=[0, 0, 10.0] * 3,
        anchor_obs=["s0", "s1", "s2"] * 3,
        next_obs=["s1", "s2", "s3"] * 3,
    )
    np.testing.assert_allclose(_run(base, b).base_advantages, 0.0, atol=1e-12)


@pytest.mark.parametrize("base", ["graphgpo", "hgpo"])
def test_std_normalised_bases_ignore_the_reward_scale(base: str) -> None:
    b = _random_group_batch(np.random.default_rng(7))
    scaled = dict(b, rewards=[3.0 * r for r in b["rewards"]])
    np.testing.assert_allclose(_run(base, scaled).base_advantages, _run(base, b).base_advantages, atol=1e-5)


@pytest.mark.parametrize("base", ["graphgpo", "rewardflow"])
def test_step_term_sums_to_zero_in_every_anchor_group(base: str) -> None:
    b = _random_group_batch(np.random.default_rng(3))
    t = _run(base, b, step_mode="mean_norm").gigpo
    np.testing.assert_allclose(np.bincount(t.step_groups, weights=t.step), 0.0, atol=1e-9)


def test_one_trajectory_groups_follow_the_upstream_rules() -> None:
    one = dict(
        group_ids=[0, 0], traj_ids=[0, 0], rewards=[0, 10.0], anchor_obs=["a", "b"], next_obs=["b", "c"]
    )
    for base in ("graphgpo", "hgpo", "rewardflow", "g2po"):
        out = _run(base, one)
        assert np.isfinite(out.base_advantages).all(), base


# ---------------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("base", ["graphgpo", "rewardflow"])
def test_graph_bases_need_next_states(base: str) -> None:
    with pytest.raises(ValueError, match="next_obs"):
        _run(base, {k: v for k, v in TWO.items() if k != "next_obs"})


@pytest.mark.parametrize("base", ["graphgpo", "hgpo", "rewardflow", "g2po"])
def test_rows_out_of_order_are_refused(base: str) -> None:
    with pytest.raises(ValueError, match="out of order"):
        _run(base, dict(TWO, step_index=[1, 0, 0, 1]))


@pytest.mark.parametrize("base", ["graphgpo", "rewardflow"])
def test_next_state_chain_is_checked(base: str) -> None:
    swapped = dict(TWO, anchor_obs=["s1", "s0", "s0", "s2"])  # A's rows swapped
    with pytest.raises(ValueError, match="next_obs"):
        _run(base, swapped)


@pytest.mark.parametrize("base", ["graphgpo", "hgpo", "rewardflow", "g2po", "oracle"])
def test_nan_rewards_are_refused(base: str) -> None:
    with pytest.raises(ValueError, match="finite"):
        _run(base, dict(TWO, rewards=[0, float("nan"), 0, 0], true_gain=[0.0] * 4))


def test_unknown_base_and_g2po_single_row_group() -> None:
    with pytest.raises(ValueError, match="base must name"):
        ShapeConfig(base="graphgp")
    # a group of one step row (what an abort can leave) has no spread: its G2PO step term is 0, never an error
    one = dict(group_ids=[0, 1], traj_ids=[0, 1], rewards=[10.0, 0], anchor_obs=["a", "a"])
    out = _run("g2po", one)
    assert np.all(np.isfinite(out.step_advantages))
    np.testing.assert_array_equal(out.gigpo.step, [0.0, 0.0])


def test_proas_composes_with_graph_bases_but_not_hgpo() -> None:
    with pytest.raises(ValueError, match="hgpo"):
        ShapeConfig(base="hgpo", proas=True)
    b = dict(TWO, reasonable=[True, True, False, False], progress=[True, True, False, False])
    for base in ("graphgpo", "rewardflow", "g2po"):
        out = shape_advantages(StepBatch(**b), ShapeConfig(base=base, proas=True))
        t = out.gigpo
        # episode term shaped, step term added untouched: on A (A^E > 0, all reasonable) nothing changes
        np.testing.assert_allclose(out.step_advantages[:2], t.episode[:2] + t.step[:2])


# ---------------------------------------------------------------------------------------------------- presets
def test_shaper_presets_carry_the_run_scripts_values() -> None:
    want = {
        "graphgpo-alfworld": 0.1,
        "graphgpo-webshop": 0.2,
        "rewardflow-alfworld": 0.9,
        "rewardflow-webshop": 0.9,
        "rewardflow-searchqa": 0.95,
        "hgpo-alfworld": 0.95,
    }
    for name, gamma in want.items():
        cfg = ShapeConfig.from_preset(name)
        assert cfg.gamma == gamma, name
    assert ShapeConfig.from_preset("graphgpo-alfworld").invalid_penalty == 0.1
    assert ShapeConfig.from_preset("g2po-searchqa").invalid_penalty == 0.0
    assert ShapeConfig.from_preset("oracle").base == "oracle"


def test_trainer_presets_for_each_env_and_method() -> None:
    from stepgym.trainers.presets import TRAINER_PRESETS

    for env in ("alfworld", "webshop", "searchqa"):
        for method in ("graphgpo", "hgpo", "rewardflow", "g2po"):
            cfg = TRAINER_PRESETS[f"{env}-{method}"][1]
            assert cfg.shaper == ShapeConfig.from_preset(f"{method}-{env}")


def test_bundled_trainer_fills_the_graph_fields() -> None:
    from stepgym import schema
    from stepgym.steps.record import step_annotations
    from stepgym.steps.row import StepRow, rows_step_batch

    def row(traj: int, t: int, a: str, n: str, r: float, won: bool) -> StepRow:
        info = {schema.WON: won, schema.VALUE_GAIN: 1.0, schema.STATE_KEY: n}
        after = {**info, schema.FORMAT_VALID: True, schema.ADMISSIBLE: True}
        return StepRow(
            group=0,
            rollout=traj,
            traj=traj,
            t=t,
            task_id="x",
            prompt="p",
            prompt_ids=[1],
            response_ids=[2, 3],
            response_text="go",
            info=info,
            record=step_annotations({schema.STATE_KEY: a}, None, r, after, terminated=won),
        )

    rows = [
        row(0, 0, "s0", "s1", 0, False),
        row(0, 1, "s1", "s3", 1, True),
        row(1, 0, "s0", "s2", 0, False),
        row(1, 1, "s2", "s2", 0, False),
    ]
    batch, _ = rows_step_batch(rows, reward_scale=10.0, invalid_rule="format_or_inadmissible", pad_id=0)
    assert batch.next_obs == ["s1", "s3", "s2", "s2"]
    np.testing.assert_array_equal(batch.success, [False, True, False, False])
    np.testing.assert_array_equal(batch.step_index, [0, 1, 0, 1])
    np.testing.assert_array_equal(batch.dones, [False, True, False, False])  # B was cut at the step limit
    np.testing.assert_array_equal(batch.true_gain, 1.0)
    out = shape_advantages(
        batch,
        ShapeConfig.from_preset(
            "graphgpo-alfworld", gamma=0.5, options={"graphgpo": {"step_mode": "mean_norm"}}
        ),
    )
    np.testing.assert_allclose(out.step_advantages, [6.875, 5, -6.875, -5])


def test_rewardflow_alfworld_cleaning_and_isolated_states() -> None:
    # one trajectory: s0 -look-> s0, s0 -go-> s1, s1 -examine-> s1x, s1x -take-> s2 (reward 10, ended); γ = 0.5
    b = dict(
        group_ids=[0] * 4,
        traj_ids=[0] * 4,
        rewards=[0, 0, 0, 10.0],
        anchor_obs=["s0", "s0", "s1", "s1x"],
        next_obs=["s0", "s1", "s1x", "s2"],
        actions=["look", "go to desk 1", "examine desk 1", "take pen 1"],
    )
    # plain: self-loop dropped; chain s0 → s1 → s1x → s2: V = 1.25, 2.5, 5, 10 → r̃ = [0, 1.25, 2.5, 5]
    np.testing.assert_allclose(_run("rewardflow", b, gamma=0.5).gigpo.returns, [0, 1.25, 2.5, 5])
    # cleaned: look and examine runs spliced: s0 → s1, s1 → s2; s1x is on no edge → V(s1x) = 0 (upstream fill)
    # V = s0 2.5, s1 5, s2 10 → r̃ = [0, 2.5, 0 − 5, 10 − 0]
    out = _run("rewardflow", b, gamma=0.5, alfworld_clean=True)
    np.testing.assert_allclose(out.gigpo.returns, [0, 2.5, -5, 10])
    with pytest.raises(ValueError, match="actions"):
        _run("rewardflow", {k: v for k, v in b.items() if k != "actions"}, alfworld_clean=True)
    # a state on no edge starts at 0, not at its reward: s0 -x-> s0 with reward 10 → r̃ = 0
    lone = dict(group_ids=[0], traj_ids=[0], rewards=[10.0], anchor_obs=["s0"], next_obs=["s0"])
    np.testing.assert_allclose(_run("rewardflow", lone).gigpo.returns, [0.0])


def test_graphgpo_similarity_canonicaliser_merges_near_identical_states() -> None:
    # B starts in "...kitchen now." (one character more than A's start): with the canonicaliser it is A's node,
    # so d(cur) of B's first row is d(s0) = 2 instead of the unreachable fill 3. normalize_distance, γ = 0.5:
    # row 2: 10·γ^(d(next) − d(cur) + 1) = 10·.5^(3 − 3 + 1) = 5 exactly keyed, 10·.5^(3 − 2 + 1) = 2.5 merged
    b = dict(
        TWO,
        anchor_obs=[
            "you are in the kitchen now",
            "a red apple",
            "you are in the kitchen now.",
            "dark hallway",
        ],
        next_obs=["a red apple", "done", "dark hallway", "dark hallway"],
    )
    exact = _run("graphgpo", b, gamma=0.5, normalize_distance=True).gigpo
    merged = _run("graphgpo", b, gamma=0.5, normalize_distance=True, similarity=True).gigpo
    assert exact.returns[2] == pytest.approx(5.0)
    assert merged.returns[2] == pytest.approx(2.5)
    # the step term still groups anchors exactly (upstream): both s0 rows stay singletons → 0
    assert merged.step[0] == merged.step[2] == 0.0


@pytest.mark.parametrize("base", ["graphgpo", "hgpo", "rewardflow", "g2po"])
def test_a_group_where_nobody_succeeded_gets_zero(base: str) -> None:
    # upstream rules: GraphGPO d = 1 everywhere; HGPO / RewardFlow / G2PO all values 0 → every term 0
    # (all actions valid: G2PO's term 1 always charges its own 0.1 to an invalid one)
    b = _random_group_batch(np.random.default_rng(11))
    n = len(b["rewards"])
    b = dict(
        b, rewards=[0.0] * n, valid=[True] * n, next_obs=[o.replace("goal", "s0") for o in b["next_obs"]]
    )
    np.testing.assert_allclose(_run(base, b).base_advantages, 0.0, atol=1e-12)


def test_rewardflow_is_linear_in_the_reward_scale() -> None:
    # mean_norm everywhere and V ← max(V, γ·V') commute with a positive scale
    b = _random_group_batch(np.random.default_rng(5))
    scaled = dict(b, rewards=[3.0 * r for r in b["rewards"]])
    np.testing.assert_allclose(
        _run("rewardflow", scaled).base_advantages, 3.0 * _run("rewardflow", b).base_advantages, atol=1e-9
    )


@pytest.mark.parametrize("base", ["graphgpo", "hgpo", "rewardflow", "g2po", "oracle"])
def test_an_empty_batch_gives_empty_advantages(base: str) -> None:
    e = np.zeros(0)
    b = dict(
        group_ids=e.astype(int), traj_ids=e.astype(int), rewards=e, anchor_obs=[], next_obs=[], true_gain=e
    )
    assert _run(base, b).base_advantages.shape == (0,)
