"""The one StepBatch builder (stepgym.steps.batch) every adapter and the bundled trainer use, and the mask-run helper."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import oracle_step_batch, spans_of_mask

from stepgym.errors import StepRecordError
from stepgym.shapers import ShapeConfig, shape_advantages
from stepgym.steps import batch as st


def _rec(reward, state_key, *, fmt=True, adm=True, rea=None, prog=None, nxt=None, term=False, gain=None):
    return {
        "reward": reward,
        "action": "go",
        "format_valid": fmt,
        "admissible": adm,
        "state_key": state_key,
        "next_state_key": nxt,
        "terminated": term,
        "value_gain": gain,
        "arg_reasonable": rea,
        "arg_progress": prog,
    }


def test_mask_runs_are_the_replies() -> None:
    mask = [0, 1, 1, 0, 0, 1, 0, 1, 1, 1]
    assert st.mask_runs(mask) == spans_of_mask(mask) == [(1, 3), (5, 6), (7, 10)]
    assert st.mask_runs(np.zeros(4)) == []
    assert st.mask_runs(np.ones(3)) == [(0, 3)]


def test_the_rule_group_ids_as_text_row_trajectories_and_row_step_fallback_anchors() -> None:
    records = [[_rec(0.0, "s0"), _rec(1.0, None)], [_rec(0.0, None, adm=False)]]
    spans = [[(0, 2), (4, 6)], [(1, 3)]]
    batch = st.build_step_batch(
        spans, [3, "3"], 8, records=records, options=st.StepBatchOptions(reward_scale=10.0)
    )
    assert batch.group_ids.dtype == object and batch.group_ids.tolist() == ["3", "3", "3"]
    assert batch.traj_ids.dtype == np.int64 and batch.traj_ids.tolist() == [0, 0, 1]
    assert batch.rewards.tolist() == [0.0, 10.0, 0.0]
    assert batch.anchor_obs == ["s0", "0:1", "1:0"]  # a step without a state key shares its anchor with none
    assert batch.valid.tolist() == [True, True, False]
    assert batch.reasonable is None and batch.progress is None  # no step has ProAS labels
    fmt_only = st.build_step_batch(
        spans, [0, 0], 8, records=records, options=st.StepBatchOptions(invalid_rule="format")
    )
    assert fmt_only.valid.tolist() == [True, True, True]
    given = st.build_step_batch(spans, [0, 0], 8, rewards=[[0.5, 1.5], [2.0]])
    assert given.rewards.tolist() == [0.5, 1.5, 2.0] and given.valid is None and given.anchor_obs is None


def test_every_record_field_reaches_the_batch_and_equals_the_oracle() -> None:
    records = [
        [
            _rec(0.0, "a", rea=True, prog=False, nxt="b", gain=1.0),
            _rec(1.0, "b", rea=True, prog=True, nxt="w", term=True, gain=1.0),
        ],
        [
            _rec(0.0, "a", rea=False, prog=False, nxt="c", gain=-1.0),
            _rec(0.0, "c", fmt=False, rea=False, prog=False, nxt="c", gain=0.0),
        ],
    ]
    spans = [[(0, 2), (3, 5)], [(0, 1), (2, 4)]]
    batch = st.build_step_batch(
        spans, ["g", "g"], 6, records=records, options=st.StepBatchOptions(reward_scale=10.0)
    )
    for name in st.RECORD_FIELDS:
        assert getattr(batch, name) is not None, name
    assert batch.next_obs == ["b", "w", "c", "c"] and batch.dones.tolist() == [False, True, False, False]
    assert batch.step_index.tolist() == [0, 1, 0, 1] and batch.true_gain.tolist() == [1.0, 1.0, -1.0, 0.0]
    want = oracle_step_batch(records, ["g", "g"], 6, spans=spans)
    for preset in (
        "proas-gigpo",
        "graphgpo-alfworld",
        "hgpo-alfworld",
        "rewardflow-alfworld",
        "g2po-alfworld",
    ):
        cfg = ShapeConfig.from_preset(preset)
        got = shape_advantages(batch, cfg).token_advantages
        assert np.allclose(got, shape_advantages(want, cfg).token_advantages), preset
        assert np.abs(got).max() > 0, preset
    cfg = ShapeConfig.from_preset("oracle")
    assert np.allclose(
        shape_advantages(batch, cfg).token_advantages, shape_advantages(want, cfg).token_advantages
    )


def test_a_step_without_a_state_key_still_chains_the_graph_states() -> None:
    records = [[_rec(0.0, None), _rec(1.0, None, term=True)]]
    batch = st.build_step_batch([[(0, 1), (1, 2)]], ["g"], 2, records=records)
    assert batch.anchor_obs == ["0:0", "0:1"] and batch.next_obs == ["0:1", "0:2"]
    assert batch.true_gain is None  # no step was labelled by ValueWrapper


def test_records_that_do_not_match_the_spans_are_refused() -> None:
    with pytest.raises(StepRecordError, match="row 0: 1 records for 2 step spans"):
        st.build_step_batch([[(0, 1), (2, 3)]], [0], 4, records=[[_rec(0.0, "s")]])
    with pytest.raises(StepRecordError, match="row 0 has no step to credit"):
        st.build_step_batch([[]], [0], 4, records=[[]])
    with pytest.raises(StepRecordError, match="2 group ids for 1 rows"):
        st.build_step_batch([[(0, 1)]], [0, 1], 4, rewards=[[1.0]])
    with pytest.raises(ValueError, match="needs the step records or the per-step rewards"):
        st.build_step_batch([[(0, 1)]], [0], 4)


def test_the_step_row_layout_is_the_trainers_one_row_per_step() -> None:
    """``layout="step_rows"`` (the bundled trainer): step i's span lies in token row i, as
    ``TokenLayout.from_step_rows`` of a left-aligned reply mask."""
    from stepgym.shapers import TokenLayout

    records = [[_rec(0.0, "a"), _rec(1.0, "b")], [_rec(0.0, "a")]]
    lengths = [[3, 1], [2]]
    spans = [[(0, k) for k in row] for row in lengths]
    batch = st.build_step_batch(
        spans, [0, 0], 3, records=records, options=st.StepBatchOptions(layout="step_rows", success="won")
    )
    mask = np.zeros((3, 3), dtype=bool)
    for i, k in enumerate([3, 1, 2]):
        mask[i, :k] = True
    want = TokenLayout.from_step_rows(mask)
    np.testing.assert_array_equal(batch.layout.token_step, want.token_step)
    np.testing.assert_array_equal(batch.layout.step_row, want.step_row)
    assert batch.success is None  # no record says won: each method's own rule
    won = [[{**r, "won": i == 1} for i, r in enumerate(row)] for row in records]
    batch = st.build_step_batch(
        spans, [0, 0], 3, records=won, options=st.StepBatchOptions(layout="step_rows", success="won")
    )
    assert batch.success.tolist() == [False, True, False]


def test_a_record_says_none_for_what_the_env_did_not_annotate() -> None:
    from stepgym import schema
    from stepgym.steps.record import STEP_FIELDS, StepRecord, step_annotations

    rec = step_annotations({}, "look", 0.0, {})
    assert tuple(rec) == STEP_FIELDS == tuple(StepRecord.__annotations__)
    assert rec["won"] is None and rec["format_valid"] is None and rec["state_key"] is None
    assert step_annotations({}, "look", 1.0, {schema.WON: True})["won"] is True
