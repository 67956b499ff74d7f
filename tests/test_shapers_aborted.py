"""Failure semantics in the shapers (docs/failures.md): an aborted episode changes nothing for the others.

For every registered base and every step / token stage, shaping a batch with some episodes marked aborted gives
the finished rows exactly (bit for bit) the advantages of the same batch with the aborted episodes' rows removed;
the aborted rows get 0 and loss mask 0; a group an abort left with fewer than two finished episodes gets 0, counted.
The reference batch is built independently (its layouts from the filtered specs), not by the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

import stepgym.shapers as S
from stepgym.shapers import ShapeConfig, StepBatch, TokenLayout, shape_advantages

L = 24  # token columns


def _episodes(rng: np.random.Generator, n_groups: int = 4, g: int = 4) -> list[dict]:
    eps = []
    for grp in range(n_groups):
        for _ in range(g):
            t_len = int(rng.integers(2, 5))
            states = [f"s{int(v)}" for v in rng.integers(0, 4, size=t_len)]
            won = bool(rng.random() < 0.5)
            nxt = [*states[1:], "goal" if won else f"s{int(rng.integers(0, 4))}"]
            eps.append(
                dict(
                    group=grp,
                    traj=len(eps),
                    rewards=[10.0 if (won and t == t_len - 1) else 0.0 for t in range(t_len)],
                    anchor_obs=states,
                    next_obs=nxt,
                    valid=[bool(rng.random() < 0.85) for _ in range(t_len)],
                    reasonable=[bool(rng.random() < 0.6) for _ in range(t_len)],
                    progress=[bool(rng.random() < 0.4) for _ in range(t_len)],
                    true_gain=[float(rng.choice([-1.0, 0.0, 1.0])) for _ in range(t_len)],
                    actions=[
                        str(rng.choice(["look", "go to desk 1", "take mug 1", "inventory"]))
                        for _ in range(t_len)
                    ],
                    won=won,
                    n_tok=[int(rng.integers(1, 4)) for _ in range(t_len)],
                    delta=rng.normal(0, 1, size=L),
                )
            )
    return eps


def _batch(eps: list[dict], rows: str, aborted: set[int] | None = None) -> StepBatch:
    """The StepBatch of ``eps``: one token row per step ("step") or per episode ("traj")."""
    col: dict[str, list] = {
        k: []
        for k in (
            "group_ids",
            "traj_ids",
            "rewards",
            "anchor_obs",
            "next_obs",
            "valid",
            "reasonable",
            "progress",
            "true_gain",
            "actions",
            "success",
            "dones",
            "step_index",
            "aborted",
        )
    }
    spans, deltas = [], []
    for e in eps:
        t_len = len(e["rewards"])
        for t in range(t_len):
            col["group_ids"].append(f"g{e['group']}")
            col["traj_ids"].append(e["traj"])
            for k in (
                "rewards",
                "anchor_obs",
                "next_obs",
                "valid",
                "reasonable",
                "progress",
                "true_gain",
                "actions",
            ):
                col[k].append(e[k][t])
            col["success"].append(e["won"] and t == t_len - 1)
            col["dones"].append(t == t_len - 1)
            col["step_index"].append(t)
            col["aborted"].append(aborted is not None and e["traj"] in aborted)
        if rows == "step":
            for t in range(t_len):
                spans.append([(1, 1 + e["n_tok"][t])])
                deltas.append(e["delta"])
        else:  # one row: prompt token, then (response, observation token) per step
            pos, row = 1, []
            for t in range(t_len):
                row.append((pos, pos + e["n_tok"][t]))
                pos += e["n_tok"][t] + 1
            spans.append(row)
            deltas.append(e["delta"])
    layout = TokenLayout.from_spans(spans, L)
    target = TokenLayout.from_spans([[(s, max(s, e - 1)) for s, e in row] for row in spans], L)
    if aborted is None:
        col.pop("aborted")
    return StepBatch(
        **col,
        layout=layout,
        delta=np.asarray(deltas),
        target=target,
    )


def _configs() -> list[ShapeConfig]:
    cfgs = [ShapeConfig(base=b) for b in S.available("base")]
    cfgs += [ShapeConfig(base=b, proas=True) for b in S.available("base") if b != "hgpo"]
    cfgs += [
        ShapeConfig(base="grpo", cross_steps=False),
        ShapeConfig(base="grpo", singleton="zero"),
        ShapeConfig(base="gigpo", options={"gigpo": {"similarity": True, "similarity_tau": 0.5}}),
        ShapeConfig(base="gigpo", proas=True, options={"proas": {"target": "combined"}}),
        ShapeConfig(base="graphgpo", options={"graphgpo": {"similarity": True}}),
        ShapeConfig(base="hgpo", options={"hgpo": {"base_group": True}}),
        ShapeConfig(base="rewardflow", options={"rewardflow": {"alfworld_clean": True}}),
        ShapeConfig(base="gigpo", invalid_penalty=0.1),
        ShapeConfig.from_preset("ahead"),
        ShapeConfig.from_preset("stepopsd-alfworld"),
        ShapeConfig(base="gigpo", token_reweight="stepopsd"),
        ShapeConfig(base="grpo", token_reweight="ahead", proas=True),
    ]
    return cfgs


def _name(cfg: ShapeConfig) -> str:
    opts = "-".join(
        f"{k}{sorted(dict(v).items()) if isinstance(v, dict) else v}" for k, v in dict(cfg.options).items()
    )
    return f"{cfg.base}-proas{int(cfg.proas)}-{cfg.token_reweight}-{cfg.step_norm}-{cfg.cross_steps}-{opts}"


CONFIGS = _configs()


@pytest.mark.parametrize("rows", ["step", "traj"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_an_aborted_episode_changes_nothing_for_the_others(cfg: ShapeConfig, rows: str) -> None:
    rng = np.random.default_rng(7)
    eps = _episodes(rng)
    # groups g0..g2 lose one episode (3 finished left); g3 loses three (one left: zeroed, counted)
    aborted = {0, 5, 10, 12, 13, 14}
    full = shape_advantages(_batch(eps, rows, aborted), cfg, update_index=3)
    kept_eps = [e for e in eps if e["traj"] not in aborted]
    ref = shape_advantages(_batch(kept_eps, rows), cfg, update_index=3)

    b = _batch(eps, rows, aborted)
    ab = np.asarray(b.aborted)
    depleted = np.asarray(b.group_ids) == "g3"
    live = ~ab & ~depleted
    ref_live = np.asarray(_batch(kept_eps, rows).group_ids) != "g3"
    for name in ("step_advantages", "base_advantages"):
        got, want = getattr(full, name), getattr(ref, name)
        assert np.array_equal(got[live], want[ref_live]), name  # exact, not allclose
        assert np.array_equal(got[ab | depleted], np.zeros(int((ab | depleted).sum()))), name
    assert np.array_equal(full.scores[~ab], ref.scores)
    if ref.gigpo is not None:
        assert np.array_equal(full.gigpo.episode[live], ref.gigpo.episode[ref_live])
        assert np.array_equal(full.gigpo.step[live], ref.gigpo.step[ref_live])
    assert np.array_equal(full.loss_mask, ~ab)
    assert full.aborts == S.AbortCounts(
        aborted_episodes=6, aborted_rows=int(ab.sum()), zeroed_groups=1, zeroed_episodes=1
    )
    # tokens: the kept token rows equal the reference's rows; aborted rows and the depleted group are 0
    ts = b.layout.token_step
    row_ab = np.zeros(ts.shape[0], dtype=bool)
    row_ab[b.layout.step_row[ab]] = True
    row_dep = np.zeros(ts.shape[0], dtype=bool)
    row_dep[b.layout.step_row[depleted & ~ab]] = True
    ref_ts = _batch(kept_eps, rows).layout
    ref_dep = np.zeros(ref_ts.shape[0], dtype=bool)
    ref_dep[ref_ts.step_row[~ref_live]] = True
    assert np.array_equal(full.token_advantages[~row_ab & ~row_dep], ref.token_advantages[~ref_dep])
    assert not full.token_advantages[row_ab | row_dep].any()
    assert np.array_equal(full.token_loss_mask, (ts >= 0) & ~row_ab[:, None])
    assert full.lam == ref.lam
    if (
        cfg.base in ("grpo", "gigpo", "graphgpo") and not cfg.proas
    ):  # the test can fail: "aborted = reward 0" differs
        zeroed = _batch(eps, rows)
        zeroed.rewards = [0.0 if a else r for r, a in zip(zeroed.rewards, ab, strict=True)]
        naive = shape_advantages(zeroed, cfg, update_index=3)
        assert not np.array_equal(naive.step_advantages[live], ref.step_advantages[ref_live])


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_no_abort_leaves_every_result_unchanged(cfg: ShapeConfig) -> None:
    eps = _episodes(np.random.default_rng(3))
    plain = shape_advantages(_batch(eps, "step"), cfg)
    flagged = shape_advantages(_batch(eps, "step", aborted=set()), cfg)  # an all-False aborted field
    for name in ("token_advantages", "step_advantages", "base_advantages", "scores"):
        assert np.array_equal(getattr(plain, name), getattr(flagged, name)), name
    assert plain.loss_mask.all() and flagged.aborts == S.AbortCounts()
    assert np.array_equal(plain.token_loss_mask, _batch(eps, "step").layout.response_mask)


def test_a_group_with_every_episode_aborted_and_bad_input() -> None:
    eps = _episodes(np.random.default_rng(5), n_groups=2, g=2)
    out = shape_advantages(_batch(eps, "step", {0, 1}), ShapeConfig(base="gigpo"))
    assert (
        out.aborts.zeroed_groups == 1 and out.aborts.zeroed_episodes == 0 and out.aborts.aborted_episodes == 2
    )
    assert not out.step_advantages[~out.loss_mask].any()
    everything = shape_advantages(_batch(eps, "traj", {0, 1, 2, 3}), ShapeConfig(base="grpo"))
    assert not everything.step_advantages.any() and not everything.token_loss_mask.any()
    b = _batch(eps, "step", {0})
    half = list(b.aborted)
    half[0] = False  # episode 0's first row finished, its second aborted
    with pytest.raises(ValueError, match="aborted as a whole"):
        shape_advantages(StepBatch(**{**b.__dict__, "aborted": half}), ShapeConfig())
    with pytest.raises(ValueError, match="length"):
        shape_advantages(StepBatch(**{**b.__dict__, "aborted": half[:-1]}), ShapeConfig())


@pytest.mark.parametrize("mode", S.AGG_MODES)
def test_the_numpy_policy_loss_masks_aborted_rows(mode: str) -> None:
    rng = np.random.default_rng(11)
    eps = _episodes(rng, n_groups=3, g=3)
    aborted = {1, 4}
    b = _batch(eps, "traj", aborted)
    out = shape_advantages(b, ShapeConfig(base="grpo"))
    lp, old = rng.normal(-1, 0.3, size=(2, *out.token_advantages.shape))
    keep_rows = np.array([e["traj"] not in aborted for e in eps])
    loss = S.policy_loss_np(lp, old, out.token_advantages)
    got = S.agg_loss_np(loss, out.token_loss_mask, mode, keep_rows=keep_rows)
    kept = [e for e in eps if e["traj"] not in aborted]
    ref = shape_advantages(_batch(kept, "traj"), ShapeConfig(base="grpo"))
    want = S.agg_loss_np(
        S.policy_loss_np(lp[keep_rows], old[keep_rows], ref.token_advantages), ref.token_loss_mask, mode
    )
    assert got == want


def test_every_per_row_field_is_restricted() -> None:
    """A StepBatch field added later must be listed where the aborted rows are cut out (else it would leak)."""
    from dataclasses import fields

    from stepgym.shapers import compose

    token_fields = {"layout", "delta", "delta_mask", "target", "aborted"}
    assert {f.name for f in fields(StepBatch)} == set(compose._ROW_FIELDS) | token_fields
