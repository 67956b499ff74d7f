"""The invariants of the shaper specification (§9) as property tests, plus input validation and the forbidden
combinations of the §0 pipeline."""

from __future__ import annotations

import itertools
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stepgym import hindsight
from stepgym import shapers as S

EPS = 1e-6
# derandomize: CI sees the same examples every run (no flaky red builds); run with
# ``--hypothesis-seed=N`` after removing it, or raise max_examples, to explore further.
PROPS = settings(max_examples=80, deadline=None, derandomize=True)

finite = st.floats(
    -50, 50, allow_nan=False, allow_infinity=False, allow_subnormal=False
)  # ratios of subnormals round


@st.composite
def grouped(draw, min_groups=1, max_groups=5, max_size=8):
    """(values, group ids) with 1..max_size members per group, ids interleaved."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=min_groups, max_size=max_groups))
    ids = [g for g, n in enumerate(sizes) for _ in range(n)]
    perm = draw(st.permutations(range(len(ids))))
    ids = [ids[i] for i in perm]
    vals = draw(
        st.lists(
            st.sampled_from([0.0, 1.0, 10.0, -0.1, 0.5, 3.0]) | finite, min_size=len(ids), max_size=len(ids)
        )
    )
    return np.array(vals), np.array(ids)


# --------------------------------------------------------------------------------------------------------------
# GRPO
# --------------------------------------------------------------------------------------------------------------
@PROPS
@given(grouped())
def test_grpo_group_sums_and_singletons(data) -> None:
    r, g = data
    adv = S.grpo_advantage(r, g)
    dr = S.drgrpo_advantage(r, g)
    for gid in np.unique(g):
        sel = g == gid
        if sel.sum() >= 2:
            assert abs(adv[sel].sum()) <= 1e-9 * max(1.0, np.abs(adv[sel]).max())
            np.testing.assert_allclose(dr[sel], r[sel] - r[sel].mean(), atol=1e-9)
            if np.all(r[sel] == r[sel][0]):
                assert (adv[sel] == 0).all() and (dr[sel] == 0).all()
        else:
            np.testing.assert_allclose(adv[sel], r[sel] / (1 + EPS), rtol=1e-15)
    assert (
        S.grpo_advantage(r, g, singleton="zero")[
            np.bincount(np.unique(g, return_inverse=True)[1])[np.unique(g, return_inverse=True)[1]] == 1
        ]
        == 0
    ).all()


@PROPS
@given(grouped(max_size=6), st.integers(0, 2**32 - 1))
def test_grpo_step_rows_cross_steps(data, seed) -> None:
    r_traj, g = data
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 4, len(r_traj))
    rows_g = np.repeat(g, lens)
    rows_t = np.repeat(np.arange(len(r_traj)), lens)
    rows_r = np.repeat(r_traj, lens)
    adv = S.grpo_advantage(rows_r, rows_g, traj_ids=rows_t)  # cross_steps: sums to 0 over rows
    for gid in np.unique(rows_g):
        sel = rows_g == gid
        if sel.sum() >= 2:
            assert abs(adv[sel].sum()) <= 1e-9 * max(1.0, np.abs(adv[sel]).max())
    # without cross_steps: identical to per-trajectory GRPO broadcast to rows (no penalty)
    per_traj = S.grpo_advantage(r_traj, g)
    np.testing.assert_allclose(
        S.grpo_advantage(rows_r, rows_g, traj_ids=rows_t, cross_steps=False), per_traj[rows_t], atol=1e-12
    )


# --------------------------------------------------------------------------------------------------------------
# GiGPO
# --------------------------------------------------------------------------------------------------------------
@st.composite
def episodes(draw):
    n_groups = draw(st.integers(1, 3))
    rows = []
    for gi in range(n_groups):
        for j in range(draw(st.integers(1, 4))):
            t_len = draw(st.integers(1, 5))
            for _ in range(t_len):
                rows.append(
                    dict(
                        g=gi,
                        traj=f"{gi}/{j}",
                        r=draw(st.sampled_from([0.0, 0.0, 1.0, 10.0])),
                        v=draw(st.booleans()),
                        obs=draw(st.sampled_from(["a", "b", "c", "d"])),
                        rea=draw(st.booleans()),
                        pa=draw(st.booleans()),
                    )
                )
    return rows


def _cols(rows):
    return {k: [r[k] for r in rows] for k in rows[0]}


@PROPS
@given(episodes(), st.sampled_from(["mean_norm", "mean_std_norm"]), st.floats(0.5, 1.0))
def test_gigpo_group_sums(rows, mode, gamma) -> None:
    c = _cols(rows)
    opts, shared = S.GiGPOOptions(mode=mode), S.SharedOptions(gamma=gamma)
    t = S.gigpo_terms(c["r"], c["g"], c["traj"], c["obs"], c["v"], options=opts, shared=shared)
    g = np.array(c["g"])
    for gid in np.unique(g):
        sel = g == gid
        if sel.sum() >= 2:
            assert abs(t.episode[sel].sum()) <= 1e-9 * max(1.0, np.abs(t.episode[sel]).max())
    for sg in np.unique(t.step_groups):
        sel = t.step_groups == sg
        assert abs(t.step[sel].sum()) <= 1e-9 * max(1.0, np.abs(t.step[sel]).max())
        assert len(set(g[sel])) == 1  # never crosses episode groups
        if sel.sum() == 1:
            assert t.step[sel][0] == 0.0
    np.testing.assert_allclose(
        S.gigpo_advantage(
            c["r"], c["g"], c["traj"], c["obs"], c["v"], options=opts, shared=replace(shared, step_weight=0.7)
        ),
        t.episode + 0.7 * t.step,
    )


def test_gigpo_returns_loop_reference() -> None:
    rng = np.random.default_rng(1)
    traj = rng.integers(0, 7, 60)
    r = rng.normal(size=60)
    got = S.step_discounted_returns(r, traj, 0.9)
    for tid in np.unique(traj):
        idx = np.flatnonzero(traj == tid)
        run = 0.0
        for i in idx[::-1]:
            run = r[i] + 0.9 * run
            assert got[i] == run  # bit-exact: same recursion


# --------------------------------------------------------------------------------------------------------------
# ProAS
# --------------------------------------------------------------------------------------------------------------
@PROPS
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=30), finite)
def test_proas_properties(labels, a) -> None:
    rea = np.array([x for x, _ in labels])
    pa = np.array([y for _, y in labels])
    t_len = len(labels)
    out = S.proas_trajectory(a, rea, pa)
    d = S.proas_multipliers(np.full(t_len, -1.0), rea, pa)  # D_t/D̄ (or 1)
    if a > 0:
        np.testing.assert_array_equal(out, np.where(rea | pa, a, 0.0))
    elif a < 0:
        np.testing.assert_allclose(out.mean(), a, rtol=1e-12)
        assert (out <= 0).all()
        assert (np.diff(np.abs(out)) <= 1e-12 * abs(a)).all()  # |Â| non-increasing in t
        drift = np.cumsum((~pa)[::-1])[::-1].astype(float)
        if drift.mean() > 0:
            np.testing.assert_allclose(out, a * drift / drift.mean(), rtol=1e-12)
            np.testing.assert_allclose(d, drift / drift.mean(), rtol=1e-12)
        else:
            assert (out == a).all()
    else:
        assert (out == 0).all()


@PROPS
@given(episodes())
def test_proas_per_step_batch_matches_per_trajectory(rows) -> None:
    c = _cols(rows)
    base = S.grpo_advantage(S.episode_scores(c["r"], c["traj"]), c["g"], traj_ids=c["traj"])
    out = S.proas_shape(base, c["rea"], c["pa"], c["traj"])
    traj = np.array(c["traj"])
    for tid in np.unique(traj):
        sel = traj == tid
        a = base[sel][0]
        np.testing.assert_allclose(
            out[sel],
            S.proas_trajectory(a, np.array(c["rea"])[sel], np.array(c["pa"])[sel]),
            rtol=1e-12,
            atol=1e-15,
        )
        if a < 0:
            np.testing.assert_allclose(out[sel].mean(), a, rtol=1e-12)  # mean preserved


# --------------------------------------------------------------------------------------------------------------
# AHEAD and StepOPSD token weights
# --------------------------------------------------------------------------------------------------------------
gaps = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.floats(-2, 2)


@PROPS
@given(st.lists(st.tuples(finite, gaps), min_size=1, max_size=40), st.floats(0, 1), st.floats(0, 0.9))
def test_ahead_sign_and_bounds(pairs, lam, eps) -> None:
    a = np.array([[p[0] for p in pairs]])
    d = np.array([[p[1] for p in pairs]])
    out = S.ahead_reweight(a, d, lam, eps=eps)
    assert np.isfinite(out).all()
    assert (np.sign(out) == np.sign(a)).all()
    nz = a != 0
    ratio = out[nz] / a[nz]
    assert (ratio >= 1 - lam * eps - 1e-12).all() and (ratio <= 1 + lam * eps + 1e-12).all()
    nan = np.isnan(d)
    assert (out[nan] == a[nan]).all()  # NaN gap → w = 1 → Ã = A exactly
    assert (S.ahead_reweight(a, d, 0.0, eps=eps) == a).all()
    # ±inf saturates at the bound its sign selects
    pos_inf = np.isposinf(np.sign(a) * d) & nz
    np.testing.assert_allclose(out[pos_inf], a[pos_inf] * (1 + lam * eps), rtol=1e-12)


@PROPS
@given(
    st.lists(st.tuples(finite, gaps, st.booleans()), min_size=1, max_size=40),
    st.floats(0, 1),
    st.floats(0, 0.9),
    st.sampled_from(["sigmoid", "exp"]),
)
def test_stepopsd_sign_bounds_and_outside_spans(items, lam, alpha, fn) -> None:
    a = np.array([[x[0] for x in items]])
    d = np.array([[x[1] for x in items]])
    m = np.array([[x[2] for x in items]])
    out = S.stepopsd_reweight(a, d, lam, alpha=alpha, fn=fn, delta_mask=m)
    assert (np.sign(out) == np.sign(a)).all()
    nz = a != 0
    ratio = out[nz] / a[nz]
    assert (ratio >= 1 - lam * alpha - 1e-12).all() and (ratio <= 1 + lam * alpha + 1e-12).all()
    assert (out[~m] == a[~m]).all()  # shaping touches only the spans
    assert (S.stepopsd_reweight(a, d, 0.0, alpha=alpha, fn=fn) == a).all()


def test_schedules_monotone_and_bounded() -> None:
    ah = [S.ahead_lambda(k) for k in range(0, 60)]
    op = [S.stepopsd_lambda(k) for k in range(1, 60)]
    for seq, lam0 in ((ah, 0.5), (op, 0.2)):
        assert all(0 <= x <= lam0 for x in seq) and all(b <= a for a, b in itertools.pairwise(seq))
    assert ah[0] == 0.5 and ah[50] == 0.0
    assert abs(op[0] - 0.196) < 1e-15 and op[49] == 0.0
    cfg = S.ShapeConfig(token_reweight="stepopsd")
    assert cfg.mixing_lambda(0) == S.stepopsd_lambda(1)  # update_index 0 ↔ global_steps 1
    assert S.ShapeConfig(token_reweight="ahead").mixing_lambda(0) == 0.5
    with pytest.raises(ValueError):
        S.ahead_lambda(-1)


# --------------------------------------------------------------------------------------------------------------
# equal_step_mean_abs
# --------------------------------------------------------------------------------------------------------------
@st.composite
def span_rows(draw):
    n_rows = draw(st.integers(1, 4))
    length = 24
    spans = []
    for _ in range(n_rows):
        cuts = sorted(set(draw(st.lists(st.integers(0, length), min_size=2, max_size=10))))
        row = [(s, e) for s, e in zip(cuts[::2], cuts[1::2], strict=False) if e > s]
        spans.append(row)
    return spans, length


@PROPS
@given(span_rows(), st.integers(0, 2**32 - 1), st.sampled_from(["shaped", "modification"]))
def test_equal_step_mean_abs_equalises(layout_spec, seed, target) -> None:
    spans, length = layout_spec
    rng = np.random.default_rng(seed)
    lay = S.TokenLayout.from_spans(spans, length)
    base = np.repeat(rng.choice([-2.0, -0.5, 0.7, 1.5], size=(len(spans), 1)), length, axis=1)
    delta = rng.normal(0, 0.4, base.shape)
    shaped = S.stepopsd_reweight(base, delta, 0.2, alpha=0.2, delta_mask=lay.token_step >= 0)
    out = S.equal_step_mean_abs(shaped, lay, base=base, norm_target=target)
    assert (out[lay.token_step < 0] == shaped[lay.token_step < 0]).all()  # outside spans unchanged
    if target == "shaped":
        assert (np.sign(out) == np.sign(base)).all()
    else:  # C·λ·α = 2·0.2·0.2 < 1 keeps the sign in modification mode too
        assert (np.sign(out) == np.sign(base)).all()
    for b, row in enumerate(spans):
        if len(row) < 2:
            assert (out[b] == shaped[b]).all()
            continue
        dev = np.abs(shaped[b] - base[b]) if target == "modification" else np.abs(shaped[b])
        m = np.array([dev[s:e].mean() for s, e in row])
        c = np.clip(m.mean() / (m + 1e-6), 0.5, 2.0)
        if np.all((c > 0.5) & (c < 2.0)):  # no clamp binds → equalised to within 1e-6/m_k relative
            dev_out = np.abs(out[b] - base[b]) if target == "modification" else np.abs(out[b])
            m_out = np.array([dev_out[s:e].mean() for s, e in row])
            np.testing.assert_allclose(m_out, m.mean(), rtol=(1e-6 / m.min()) * 2 + 1e-12)
            if target == "shaped":  # Σ_k (step mean) preserved when no clamp binds (to the same rounding)
                np.testing.assert_allclose(m_out.sum(), m.sum(), rtol=(1e-6 / m.min()) * 2 + 1e-12)


def test_equal_step_mean_abs_per_step_rows_groups_by_trajectory() -> None:
    # one row per step: rows 0, 1 are trajectory A, row 2 trajectory B (a single step: unchanged)
    shaped = np.array([[2.0, 2.0, 0.0], [1.0, 1.0, 1.0], [5.0, 5.0, 5.0]])
    target = S.TokenLayout.from_spans([[(0, 2)], [(0, 3)], [(1, 3)]], 3)
    out = S.equal_step_mean_abs(shaped, target, step_group=["A", "A", "B"])
    mbar = 1.5
    np.testing.assert_allclose(out[0], [2 * mbar / (2 + 1e-6), 2 * mbar / (2 + 1e-6), 0.0])
    np.testing.assert_allclose(out[1], [mbar / (1 + 1e-6)] * 3)
    assert (out[2] == shaped[2]).all()


# --------------------------------------------------------------------------------------------------------------
# validation, NaN/inf, forbidden combinations
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rewards_raise(bad) -> None:
    with pytest.raises(ValueError, match="finite"):
        S.grpo_advantage([1.0, bad], [0, 0])
    with pytest.raises(ValueError, match="finite"):
        S.gigpo_advantage([1.0, bad], [0, 0], ["a", "a"], ["s", "t"])
    with pytest.raises(ValueError, match="finite"):
        S.shape_advantages(
            S.StepBatch(group_ids=[0, 0], traj_ids=[0, 1], rewards=[1.0, bad]), S.ShapeConfig()
        )
    with pytest.raises(ValueError, match="finite"):
        S.proas_trajectory(bad, [1], [1])
    with pytest.raises(ValueError, match="finite"):
        S.ahead_reweight([[bad]], [[0.0]], 0.5)


def test_mismatched_and_empty_inputs() -> None:
    with pytest.raises(ValueError, match="length"):
        S.grpo_advantage([1.0, 0.0], [0, 0, 0])
    with pytest.raises(ValueError, match="length"):
        S.proas_shape([1.0, 1.0], [1], [1, 0])
    with pytest.raises(ValueError, match="shape"):
        S.ahead_reweight(np.ones((2, 3)), np.ones((2, 4)), 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        S.stepopsd_reweight(np.ones((1, 2)), np.zeros((1, 2)), 1.5)
    with pytest.raises(ValueError, match="layout has"):
        S.shape_advantages(
            S.StepBatch(
                group_ids=[0, 0],
                traj_ids=[0, 1],
                rewards=[1.0, 0.0],
                layout=S.TokenLayout.from_step_rows(np.ones((3, 2))),
            ),
            S.ShapeConfig(),
        )
    with pytest.raises(ValueError, match="several trajectories"):
        S.shape_advantages(
            S.StepBatch(
                group_ids=[0, 0],
                traj_ids=[0, 1],
                rewards=[1.0, 0.0],
                layout=S.TokenLayout.from_spans([[(0, 1), (1, 2)]], 2),
                target=S.TokenLayout.from_spans([[(0, 1), (1, 2)]], 2),
            ),
            S.ShapeConfig(token_reweight="stepopsd", step_norm="equal_step_mean_abs"),
            lam=0.0,
        )
    with pytest.raises(ValueError, match=r"needs StepBatch\.delta"):
        S.shape_advantages(
            S.StepBatch(
                group_ids=[0],
                traj_ids=[0],
                rewards=[1.0],
                layout=S.TokenLayout.from_step_rows(np.ones((1, 2))),
            ),
            S.ShapeConfig(token_reweight="ahead"),
        )
    # λ = 0: the teacher need not run, no delta required, Ã = A
    out = S.shape_advantages(
        S.StepBatch(
            group_ids=[0], traj_ids=[0], rewards=[1.0], layout=S.TokenLayout.from_step_rows(np.ones((1, 2)))
        ),
        S.ShapeConfig(token_reweight="ahead"),
        update_index=50,
    )
    assert out.lam == 0.0 and (out.token_advantages == 1 / (1 + EPS)).all()
    # empty batches give empty results
    assert S.grpo_advantage([], []).shape == (0,)
    assert S.gigpo_advantage([], [], [], []).shape == (0,)
    assert hindsight.first_correct_peers([], []).shape == (0,)
    assert S.dynamic_sampling_keep([], []).shape == (0,)
    with pytest.raises(ValueError, match="episode groups"):
        S.gigpo_terms([1.0, 0.0], [0, 1], ["t", "t"], ["a", "b"])


@pytest.mark.parametrize("base", ["grpo", "drgrpo", "dapo", "gigpo"])
def test_trajectory_id_reused_across_groups_is_refused_by_every_base(base) -> None:
    # "A" and "B" are two tasks whose trajectory ids both restart at 0: keyed by id alone, trajectory 0 would merge
    # a success of task A with a failure of task B (and give all-zero advantages). One rule for every base.
    batch = S.StepBatch(["A", "A", "B", "B"], [0, 1, 0, 1], [1, 0, 0, 1], anchor_obs=["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"trajectory id 0 has rows in several episode groups"):
        S.shape_advantages(batch, S.ShapeConfig(base=base))
    # the same batch with ids unique across groups is shaped normally
    ok = S.shape_advantages(
        S.StepBatch(batch.group_ids, [0, 1, 2, 3], batch.rewards, anchor_obs=batch.anchor_obs),
        S.ShapeConfig(base=base),
    )
    assert np.all(ok.step_advantages != 0)
    if base != "gigpo":  # the standalone GRPO function follows the same rule when it is given trajectories
        with pytest.raises(ValueError, match="several episode groups"):
            S.grpo_advantage([1, 0, 0, 1], ["A", "A", "B", "B"], traj_ids=[0, 1, 0, 1])


def test_one_invalid_action_penalty_default_for_every_entry_point() -> None:
    # The batch: GiGPO called directly and through the pipeline with their defaults gave different values
    # (0.1 against 0.0). One default now, ShapeConfig's, read by every function.
    import inspect

    g, traj = [0, 0, 0, 0, 0], ["X", "X", "X", "Y", "Y"]
    r, v, obs = [0.0, 0.0, 10.0, 0.0, 0.0], [True, True, True, True, False], ["s0", "s1", "s2", "s0", "s1b"]
    direct = S.gigpo_advantage(r, g, traj, obs, v)
    piped = S.shape_advantages(S.StepBatch(g, traj, r, v, obs), S.ShapeConfig(base="gigpo")).step_advantages
    np.testing.assert_array_equal(direct, piped)
    assert S.ShapeConfig().invalid_penalty == S.DEFAULT_INVALID_PENALTY
    assert S.SharedOptions().invalid_penalty == S.DEFAULT_INVALID_PENALTY
    for fn in (S.gigpo_advantage, S.gigpo_terms):  # no shared options: SharedOptions()'s defaults
        assert inspect.signature(fn).parameters["shared"].default is None, fn.__name__
    assert (
        inspect.signature(S.apply_invalid_action_penalty).parameters["coef"].default
        == S.DEFAULT_INVALID_PENALTY
    )
    # with the recipe's penalty the two agree too, and the pipeline's row scores are the penalty function's
    cfg = S.ShapeConfig.from_preset("gigpo-webshop")
    assert cfg.invalid_penalty == S.RECIPE_INVALID_PENALTY == 0.1
    out = S.shape_advantages(S.StepBatch(g, traj, r, v, obs), cfg)
    np.testing.assert_array_equal(
        out.step_advantages,
        S.gigpo_advantage(r, g, traj, obs, v, shared=S.SharedOptions(invalid_penalty=0.1)),
    )
    np.testing.assert_array_equal(
        out.scores, S.apply_invalid_action_penalty(S.episode_scores(r, traj), v, 0.1)
    )


def test_forbidden_combinations_raise() -> None:
    with pytest.raises(ValueError, match="APR"):
        S.ShapeConfig(proas=True, token_reweight="stepopsd", step_norm="equal_step_mean_abs")
    with pytest.raises(ValueError, match="APR"):
        S.ShapeConfig.from_preset("stepopsd-alfworld", proas=True)
    with pytest.raises(ValueError, match="AHEAD and StepOPSD"):
        S.ShapeConfig(token_reweight=("ahead", "stepopsd"))
    with pytest.raises(ValueError, match="AHEAD"):
        S.ShapeConfig(token_reweight="ahead", step_norm="equal_step_mean_abs")
    with pytest.raises(ValueError, match="'proas' has no option 'targett'; its options are target"):
        S.ShapeConfig(base="grpo", options={"proas": {"targett": "combined"}})
    with pytest.raises(ValueError, match="ProAS's target must be 'episode' or 'combined'"):
        S.ShapeConfig(base="gigpo", options={"proas": {"target": "both"}})
    with pytest.raises(ValueError, match="'grpo' takes no options"):
        S.ShapeConfig(options={"grpo": {}})
    with pytest.raises(ValueError, match="no shaper named 'nope'"):
        S.ShapeConfig(options={"nope": {}})
    with pytest.raises(ValueError):
        S.ShapeConfig(base="ppo")
    S.ShapeConfig(proas=True, token_reweight="stepopsd")  # ProAS + StepOPSD weights (no step norm) is allowed
    S.ShapeConfig(proas=True, token_reweight="ahead")


def test_registry() -> None:
    assert {
        "grpo",
        "drgrpo",
        "dapo",
        "gigpo",
        "proas",
        "proas_gigpo",
        "ahead",
        "stepopsd",
        "equal_step_mean_abs",
        "policy_loss",
        "agg_loss",
        "dynamic_sampling",
        "overlong_penalty",
        "invalid_action_penalty",
        "broadcast",
    } <= set(S.available())

    # stepgym's own entries (other tests in the same process register shapers of their own)
    def builtin(stage: str) -> list[str]:
        return [n for n in S.available(stage) if S.get(n).fn.__module__.startswith("stepgym.shapers.")]

    assert builtin("token") == ["ahead", "stepopsd"]
    assert builtin("base") == [
        "dapo",
        "drgrpo",
        "g2po",
        "gigpo",
        "graphgpo",
        "grpo",
        "hgpo",
        "oracle",
        "rewardflow",
    ]
    # every pipeline entry has its stage's signature: a base stage maps (batch, config, scores) to BaseAdvantage
    batch = S.StepBatch([0, 0], [0, 1], [1.0, 0.0])
    got = S.get("grpo", "base")(batch, S.ShapeConfig(), np.array([1.0, 0.0]))
    np.testing.assert_allclose(got.values, S.grpo_advantage([1, 0], [0, 0]))
    assert S.get("ahead").schedule == "ahead_lambda" and S.get("stepopsd").schedule == "stepopsd_lambda"
    assert S.get("ahead_lambda")(S.ShapeConfig(), 0) == 0.5
    with pytest.raises(KeyError, match="no shaper"):
        S.get("nope")
    with pytest.raises(KeyError, match="not 'base'"):
        S.get("ahead", "base")
    with pytest.raises(ValueError, match="already registered"):
        S.register("grpo", stage="base")(lambda x: x)
    with pytest.raises(ValueError, match="registered 'base' stage"):
        S.ShapeConfig(base="ahead")  # a name of another stage is not a base


def test_a_registered_stage_replaces_the_builtin_in_the_pipeline() -> None:
    # compose looks every stage up in the registry: a base registered here is used by shape_advantages
    name = "test_leave_one_out"

    @S.register(name, stage="base", overwrite=True)
    def rloo(batch, config, scores):
        g = S.get("drgrpo", "base")(batch, config, scores).values  # s - mean of the group
        n = np.bincount(batch.group_ids)[batch.group_ids]
        return g * n / (n - 1)

    batch = S.StepBatch(["a", "a", "a", "b", "b"], [0, 1, 2, 3, 4], [1.0, 0.0, 0.0, 2.0, 0.0])
    out = S.shape_advantages(batch, S.ShapeConfig(base=name, proas=False))
    np.testing.assert_allclose(out.step_advantages, [1.0, -0.5, -0.5, 2.0, -2.0])
    assert name in S.available("base")


def test_import_does_not_pull_torch() -> None:
    code = "import sys, stepgym.shapers; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@PROPS
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=20))
def test_first_correct_peer_properties(items) -> None:
    g = np.array([x for x, _ in items])
    ok = np.array([y for _, y in items])
    peers = hindsight.first_correct_peers(ok, g)
    for i, p in enumerate(peers):
        sel = g == g[i]
        mixed = 0 < ok[sel].sum() < sel.sum()
        if ok[i] or not mixed:
            assert p == -1
        else:
            assert ok[p] and g[p] == g[i] and p == np.flatnonzero(sel & ok)[0]


@given(st.lists(st.floats(0, 1), min_size=2, max_size=12))
@PROPS
def test_dynamic_sampling_drops_zero_spread(vals) -> None:
    assume(len(vals) % 2 == 0)
    g = np.repeat(np.arange(len(vals) // 2), 2)
    keep = S.dynamic_sampling_keep(vals, g)
    v = np.array(vals)
    for gid in np.unique(g):
        sel = g == gid
        assert keep[sel].all() == (np.ptp(v[sel]) > 0)


def _naive_similarity_groups(groups, obs, tau):
    """verl-agent's rule, literally: ratio() against the first member of each cluster, rows in order."""
    from difflib import SequenceMatcher

    codes, nxt = {}, 0
    for g in dict.fromkeys(groups):
        clusters = []
        for i in (i for i, x in enumerate(groups) if x == g):
            for rep, code in clusters:
                if SequenceMatcher(None, obs[i], rep).ratio() >= tau:
                    codes[i] = code
                    break
            else:
                clusters.append((obs[i], nxt))
                codes[i] = nxt
                nxt += 1
    return [codes[i] for i in range(len(obs))]


@PROPS
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.text("abcde ", min_size=0, max_size=12)), min_size=1, max_size=30
    ),
    st.sampled_from([0.5, 0.7, 0.9, 0.95]),
)
def test_similarity_grouping_matches_naive_rule(items, tau) -> None:
    g = [x for x, _ in items]
    o = [y for _, y in items]
    got = S.build_step_groups(g, o, similarity=True, tau=tau)
    want = _naive_similarity_groups(g, o, tau)
    # same partition (codes may be numbered differently)
    assert (
        len({(a, b) for a, b in zip(got.tolist(), want, strict=True)})
        == len(set(want))
        == len(set(got.tolist()))
    )


def test_every_docs_citation_in_the_package_names_a_section_of_docs_shapers_md() -> None:
    # the code cites "docs/shapers.md §n" (and §8.n for item n of §8); every citation must exist in that file
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "shapers.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,3} §(\d+(?:\.\d+)?)[. ]", doc, flags=re.M))
    sections |= {f"8.{n}" for n in re.findall(r"^(\d+)\. \*\*", doc.split("## §8.", 1)[1], flags=re.M)}
    cited = set()
    for path in (root / "stepgym").rglob("*.py"):
        cited |= set(re.findall(r"docs/shapers\.md §(\d+(?:\.\d+)?)", path.read_text(encoding="utf-8")))
    assert cited, "no citation found"
    assert cited <= sections, sorted(cited - sections)
    assert not [p for p in (root / "stepgym").rglob("*.py") if "shared/docs" in p.read_text(encoding="utf-8")]
