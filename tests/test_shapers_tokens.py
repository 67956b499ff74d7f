"""Token alignment: a step's value lands on that step's response tokens and nowhere else (prompt, observation and
padding tokens get 0), for both storage layouts, and both layouts give the same maths end to end."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepgym import shapers as S


def test_one_row_per_trajectory_segments() -> None:
    # prompt | step 0 | obs | step 1 | obs | step 2 | padding
    segs = [
        [
            ("prompt", 0, 4),
            ("response", 4, 7),
            ("observation", 7, 10),
            ("response", 10, 12),
            ("observation", 12, 15),
            ("response", 15, 18),
            ("padding", 18, 20),
        ]
    ]
    lay = S.TokenLayout.from_segments(segs, 20)
    out = S.broadcast_to_tokens([1.0, 2.0, 3.0], lay)
    expected = np.zeros(20)
    expected[4:7], expected[10:12], expected[15:18] = 1.0, 2.0, 3.0
    assert (out[0] == expected).all()
    # the observation right after step 0 is not trained, and step 1 does not inherit step 0's value
    assert (out[0, 7:10] == 0).all() and (out[0, 10:12] == 2.0).all()
    assert S.step_token_counts(lay).tolist() == [3, 2, 3]


def test_one_row_per_step() -> None:
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    lay = S.TokenLayout.from_step_rows(mask)
    out = S.broadcast_to_tokens([0.5, -1.0, 7.0, 2.0], lay)
    assert (out == mask * np.array([[0.5], [-1.0], [7.0], [2.0]])).all()
    assert S.step_token_counts(lay).tolist() == [3, 2, 0, 5]  # a step with no tokens still exists


def test_several_trajectories_row_major_numbering() -> None:
    lay = S.TokenLayout.from_spans([[(1, 3), (5, 6)], [], [(0, 2), (2, 2), (3, 4)]], 6)
    assert lay.n_steps == 5 and lay.step_row.tolist() == [0, 0, 2, 2, 2]
    out = S.broadcast_to_tokens([1, 2, 3, 4, 5], lay)
    assert out.tolist() == [[0, 1, 1, 0, 0, 2], [0] * 6, [3, 3, 0, 5, 0, 0]]


@pytest.mark.parametrize(
    ("segments", "message"),
    [
        ([[("response", 0, 3), ("observation", 2, 5)]], "overlap"),
        ([[("response", 0, 9)]], "outside"),
        ([[("response", 3, 1)]], "outside"),
        ([[("thinking", 0, 2)]], "unknown segment kind"),
    ],
)
def test_bad_layouts_raise(segments, message) -> None:
    with pytest.raises(ValueError, match=message):
        S.TokenLayout.from_segments(segments, 6)


def test_step_count_mismatch_raises() -> None:
    lay = S.TokenLayout.from_spans([[(0, 2), (3, 4)]], 5)
    with pytest.raises(ValueError, match="2 steps"):
        S.broadcast_to_tokens([1.0, 2.0, 3.0], lay)


@st.composite
def layouts(draw):
    """Random one-row-per-trajectory layouts: alternating prompt / response / observation segments."""
    n_rows = draw(st.integers(1, 4))
    length = draw(st.integers(1, 40))
    rows = []
    for _ in range(n_rows):
        cuts = sorted(draw(st.lists(st.integers(0, length), min_size=0, max_size=8)))
        bounds = [0, *cuts, length]
        kinds = draw(
            st.lists(
                st.sampled_from(["prompt", "response", "observation", "padding"]),
                min_size=len(bounds) - 1,
                max_size=len(bounds) - 1,
            )
        )
        rows.append([(k, s, e) for k, s, e in zip(kinds, bounds[:-1], bounds[1:], strict=True)])
    return rows, length


@settings(max_examples=150, deadline=None, derandomize=True)
@given(layouts(), st.randoms(use_true_random=False))
def test_broadcast_matches_token_by_token_reference(layout_spec, rnd) -> None:
    segments, length = layout_spec
    lay = S.TokenLayout.from_segments(segments, length)
    values = np.array([rnd.uniform(-5, 5) for _ in range(lay.n_steps)])
    out = S.broadcast_to_tokens(values, lay)
    expected = np.zeros((len(segments), length))
    k = 0
    for b, row in enumerate(segments):
        for kind, s, e in row:
            if kind == "response":
                for tok in range(s, e):
                    expected[b, tok] = values[k]
                k += 1
    assert (out == expected).all()
    assert ((out != 0) <= lay.response_mask).all()


def _episode_batch(seed: int = 0):
    """Two groups × 3 trajectories, 1–4 steps each, with tokens per step, labels and per-token gaps."""
    rng = np.random.default_rng(seed)
    steps = []  # (group, traj, reward, valid, anchor, rea, pa, n_tokens)
    for g in range(2):
        for j in range(3):
            t_len = int(rng.integers(1, 5))
            won = bool(rng.random() < 0.5)
            for t in range(t_len):
                steps.append(
                    (
                        g,
                        f"{g}-{j}",
                        10.0 * won * (t == t_len - 1),
                        bool(rng.random() < 0.8),
                        f"s{int(rng.integers(0, 3))}",
                        bool(rng.random() < 0.6),
                        bool(rng.random() < 0.4),
                        int(rng.integers(0, 6)),
                    )
                )
    return steps, rng


def _both_layouts(steps, rng):
    """The same steps stored one row per step and one row per trajectory, with matching token gaps."""
    n_tok = [s[7] for s in steps]
    width_step = max(n_tok) + 2
    mask = np.zeros((len(steps), width_step), dtype=bool)
    gaps = [rng.normal(0, 0.3, n) for n in n_tok]
    delta_step = np.zeros_like(mask, dtype=float)
    for i, n in enumerate(n_tok):
        mask[i, 1 : 1 + n] = True  # one leading token that is not a response token
        delta_step[i, 1 : 1 + n] = gaps[i]
    per_step = S.TokenLayout.from_step_rows(mask)

    trajs = list(dict.fromkeys(s[1] for s in steps))
    order = [i for tr in trajs for i, s in enumerate(steps) if s[1] == tr]  # trajectory-major step order
    segs, deltas_rows, width = [], [], 0
    for tr in trajs:
        row, cursor, row_gaps = [("prompt", 0, 3)], 3, []
        for i in (i for i, s in enumerate(steps) if s[1] == tr):
            row.append(("response", cursor, cursor + n_tok[i]))
            row_gaps.append((cursor, gaps[i]))
            cursor += n_tok[i]
            row.append(("observation", cursor, cursor + 2))
            cursor += 2
        segs.append(row)
        deltas_rows.append(row_gaps)
        width = max(width, cursor)
    per_traj = S.TokenLayout.from_segments(segs, width)
    delta_traj = np.zeros(per_traj.shape)
    for b, row_gaps in enumerate(deltas_rows):
        for start, gap in row_gaps:
            delta_traj[b, start : start + len(gap)] = gap
    return per_step, delta_step, per_traj, delta_traj, order


def _token_values_per_step(tokens, layout):
    return [tokens[layout.token_step == k] for k in range(layout.n_steps)]


@pytest.mark.parametrize(
    "preset", ["grpo-alfworld", "gigpo-alfworld", "proas-gigpo", "ahead", "stepopsd-alfworld"]
)
def test_both_layouts_give_the_same_maths(preset: str) -> None:
    steps, rng = _episode_batch(3)
    per_step, d_step, per_traj, d_traj, order = _both_layouts(steps, rng)
    cfg = S.ShapeConfig.from_preset(preset)
    cols = list(zip(*steps, strict=True))

    def batch(idx, layout, delta):
        pick = lambda c: [c[i] for i in idx]  # noqa: E731
        target = layout if cfg.step_norm else None  # StepOPSD clean span = the whole turn here
        return S.StepBatch(
            group_ids=pick(cols[0]),
            traj_ids=pick(cols[1]),
            rewards=pick(cols[2]),
            valid=pick(cols[3]),
            anchor_obs=pick(cols[4]),
            reasonable=pick(cols[5]),
            progress=pick(cols[6]),
            layout=layout,
            delta=delta,
            target=target,
        )

    a = S.shape_advantages(batch(range(len(steps)), per_step, d_step), cfg, update_index=2)
    b = S.shape_advantages(batch(order, per_traj, d_traj), cfg, update_index=2)
    np.testing.assert_allclose(a.step_advantages[order], b.step_advantages, rtol=0, atol=1e-12)
    va = _token_values_per_step(a.token_advantages, per_step)
    vb = _token_values_per_step(b.token_advantages, per_traj)
    for k_traj, k_step in enumerate(order):
        np.testing.assert_allclose(va[k_step], vb[k_traj], rtol=0, atol=1e-12)
    # nothing outside response tokens
    assert (a.token_advantages[~per_step.response_mask] == 0).all()
    assert (b.token_advantages[~per_traj.response_mask] == 0).all()


def test_stepopsd_target_spans_inside_a_trajectory_row() -> None:
    # one Search-R1 row: prompt | step 0 (reason+action) | information | step 1 ; targets = the two actions
    lay = S.TokenLayout.from_segments(
        [[("prompt", 0, 2), ("response", 2, 8), ("observation", 8, 12), ("response", 12, 16)]], 16
    )
    target = S.TokenLayout.from_spans([[(5, 8), (13, 16)]], 16)
    delta, dmask = S.scatter_span_deltas([[(5, 8), (13, 16)]], [[[0.5, 0.5], [-0.5, -0.5, -0.5]]], (1, 16))
    assert (
        dmask[0].tolist() == [False] * 5 + [True, True, False] + [False] * 5 + [True] * 3
    )  # span longer than Δ
    batch = S.StepBatch(
        group_ids=[0, 0], traj_ids=["t", "t"], rewards=[0.0, 1.0], layout=lay, delta=delta, target=target
    )
    cfg = S.ShapeConfig(
        base="grpo", cross_steps=False, token_reweight="stepopsd"
    )  # Search-R1: per trajectory
    out = S.shape_advantages(batch, cfg, update_index=0).token_advantages[0]
    a = 1.0 / (1 + 1e-6)  # a group of one trajectory, R = 1: verl gives r/(1+ε)
    assert (out[:2] == 0).all() and (out[8:12] == 0).all()  # prompt and observation
    assert (out[[2, 3, 4, 7, 12]] == a).all()  # response tokens outside the gap keep A exactly
    assert (out[5:7] > a).all() and (out[13:16] < a).all()
