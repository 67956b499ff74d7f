"""Property test: every registered base and stage takes whatever an abort leaves (docs/failures.md).

Random batches (seeded, many of them) with groups of one to four episodes of one to three steps, some aborted:
groups of one episode or one row, groups with no finished episode, a batch with every episode aborted, an empty
batch. For every registered base (alone and under every step / token / step-norm stage) shaping never raises, every
advantage is finite, aborted rows and groups left with fewer than two finished episodes get exactly 0, the counts
are those of the batch, and the other rows equal the batch with the aborted episodes removed.
"""

from __future__ import annotations

import numpy as np
import pytest

import stepgym.shapers as S
from stepgym.shapers import ShapeConfig, StepBatch, TokenLayout, shape_advantages
from stepgym.shapers.registry import _REGISTRY

L = 16
ACTIONS = ("look", "go to desk 1", "take mug 1", "inventory")


def _random_episodes(rng: np.random.Generator) -> list[dict]:
    eps: list[dict] = []
    for grp in range(int(rng.integers(1, 5))):
        for _ in range(int(rng.integers(1, 5))):
            t_len = int(rng.integers(1, 4))
            states = [f"s{int(v)}" for v in rng.integers(0, 3, size=t_len)]
            won = bool(rng.random() < 0.5)
            eps.append(
                dict(
                    group=grp,
                    traj=len(eps),
                    rewards=[10.0 if (won and t == t_len - 1) else 0.0 for t in range(t_len)],
                    anchor_obs=states,
                    next_obs=[*states[1:], "goal" if won else f"s{int(rng.integers(0, 3))}"],
                    valid=[bool(rng.random() < 0.8) for _ in range(t_len)],
                    reasonable=[bool(rng.random() < 0.6) for _ in range(t_len)],
                    progress=[bool(rng.random() < 0.4) for _ in range(t_len)],
                    true_gain=[float(rng.choice([-1.0, 0.0, 1.0])) for _ in range(t_len)],
                    actions=[str(rng.choice(ACTIONS)) for _ in range(t_len)],
                    won=won,
                    n_tok=[int(rng.integers(1, 4)) for _ in range(t_len)],
                    delta=rng.normal(0, 1, size=L),
                )
            )
    return eps


def _batch(eps: list[dict], aborted: set[int]) -> StepBatch:
    """One token row per step; ``aborted`` None-free (every batch carries the flag)."""
    keys = ("rewards", "anchor_obs", "next_obs", "valid", "reasonable", "progress", "true_gain", "actions")
    col: dict[str, list] = {k: [] for k in (*keys, "group_ids", "traj_ids", "success", "dones", "step_index")}
    col["aborted"] = []
    spans, deltas = [], []
    for e in eps:
        t_len = len(e["rewards"])
        for t in range(t_len):
            col["group_ids"].append(f"g{e['group']}")
            col["traj_ids"].append(e["traj"])
            for k in keys:
                col[k].append(e[k][t])
            col["success"].append(e["won"] and t == t_len - 1)
            col["dones"].append(t == t_len - 1)
            col["step_index"].append(t)
            col["aborted"].append(e["traj"] in aborted)
            spans.append([(1, 1 + e["n_tok"][t])])
            deltas.append(e["delta"])
    layout = TokenLayout.from_spans(spans, L)
    target = TokenLayout.from_spans([[(s, max(s, e - 1)) for s, e in row] for row in spans], L)
    return StepBatch(**col, layout=layout, delta=np.asarray(deltas).reshape(-1, L), target=target)


def _configs() -> list[ShapeConfig]:
    """Every registered base, alone and under each registered step / token / step-norm / reward stage."""
    bases = S.available("base")
    cfgs = [ShapeConfig(base=b) for b in bases]
    cfgs += [ShapeConfig(base=b, singleton="zero") for b in ("grpo", "gigpo")]
    cfgs += [ShapeConfig(base=b, proas=True) for b in bases if b != "hgpo"]  # hgpo refuses ProAS
    cfgs += [ShapeConfig(base=b, invalid_penalty=0.1) for b in bases]
    cfgs += [
        ShapeConfig(base=b, token_reweight=t)
        for b in ("grpo", "gigpo", "g2po")
        for t in ("ahead", "stepopsd")
    ]
    cfgs += [ShapeConfig(base="gigpo", token_reweight="stepopsd", step_norm="equal_step_mean_abs")]
    cfgs += [
        ShapeConfig(base="g2po", options={"g2po": {"step_mode": m}}) for m in ("mean_norm", "mean_std_norm")
    ]
    cfgs += [ShapeConfig(base="gigpo", proas=True, options={"proas": {"target": "combined"}})]
    return cfgs


CONFIGS = _configs()


def _name(cfg: ShapeConfig) -> str:
    return f"{cfg.base}-proas{int(cfg.proas)}-{cfg.token_reweight}-{cfg.step_norm}-p{cfg.invalid_penalty}-{cfg.singleton}-{dict(cfg.options)}"


def test_the_configs_cover_every_registered_base_and_stage() -> None:
    """A base or stage registered later is in the property test (or this fails)."""
    covered = {c.base for c in CONFIGS} | {c.token_reweight for c in CONFIGS} | {c.step_norm for c in CONFIGS}
    covered |= {"proas"} if any(c.proas for c in CONFIGS) else set()
    covered |= {"invalid_action_penalty"} if any(c.invalid_penalty for c in CONFIGS) else set()
    covered |= {"ahead_lambda", "stepopsd_lambda", "broadcast", "proas_gigpo"}  # run inside the configs above
    # batch-level stages outside shape_advantages: checked by test_the_batch_stages_take_what_an_abort_leaves
    covered |= {"dynamic_sampling", "overlong_penalty", "policy_loss", "agg_loss"}
    assert set(_REGISTRY) <= covered, sorted(set(_REGISTRY) - covered)


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_random_batches_with_aborts_never_raise(cfg: ShapeConfig) -> None:
    rng = np.random.default_rng(20261206)
    for _ in range(40):
        eps = _random_episodes(rng)
        p = float(rng.choice([0.0, 0.3, 0.6, 1.0]))
        aborted = {e["traj"] for e in eps if rng.random() < p}
        b = _batch(eps, aborted)
        out = shape_advantages(b, cfg, update_index=2)
        ab = np.asarray(b.aborted)
        assert np.isfinite(out.step_advantages).all() and np.isfinite(out.token_advantages).all()
        assert not out.step_advantages[ab].any() and np.array_equal(out.loss_mask, ~ab)
        # groups the aborts left with fewer than two finished episodes: 0, counted
        gids = np.asarray(b.group_ids)
        finished = {
            g: {e["traj"] for e in eps if f"g{e['group']}" == g and e["traj"] not in aborted}
            for g in set(gids)
        }
        hit = {f"g{e['group']}" for e in eps if e["traj"] in aborted}
        depleted = sorted(g for g in hit if len(finished[g]) < 2)
        dep_rows = np.isin(gids, depleted)
        assert not out.step_advantages[dep_rows].any()
        want_eps = sum(len(finished[g]) for g in depleted)
        if aborted:
            assert out.aborts == S.AbortCounts(len(aborted), int(ab.sum()), len(depleted), want_eps)
        else:
            assert out.aborts == S.AbortCounts()
        # the other rows: exactly the batch without the aborted episodes
        kept = [e for e in eps if e["traj"] not in aborted]
        if kept:
            ref = shape_advantages(_batch(kept, set()), cfg, update_index=2)
            live = ~ab & ~dep_rows
            ref_live = ~np.isin(np.asarray(_batch(kept, set()).group_ids), depleted)
            assert np.array_equal(out.step_advantages[live], ref.step_advantages[ref_live])


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_an_empty_batch_and_a_batch_of_one_row(cfg: ShapeConfig) -> None:
    rng = np.random.default_rng(1)
    empty = StepBatch(
        group_ids=[],
        traj_ids=[],
        rewards=[],
        anchor_obs=[],
        next_obs=[],
        valid=[],
        reasonable=[],
        progress=[],
        true_gain=[],
        actions=[],
        success=[],
        dones=[],
        step_index=[],
        aborted=[],
        layout=TokenLayout.from_spans([], L),
        delta=np.zeros((0, L)),
        target=TokenLayout.from_spans([], L),
    )
    out = shape_advantages(empty, cfg)
    assert out.step_advantages.shape == (0,) and out.aborts == S.AbortCounts()
    one = _random_episodes(rng)[:1]
    one[0].update({k: v[:1] for k, v in one[0].items() if isinstance(v, list)})
    for aborted in (set(), {0}):
        out = shape_advantages(_batch(one, aborted), cfg)
        assert np.isfinite(out.step_advantages).all() and np.isfinite(out.token_advantages).all()
        if aborted:
            assert out.step_advantages[0] == 0.0 and out.aborts.aborted_episodes == 1


def test_g2po_takes_a_group_of_one_step_row() -> None:
    """G2PO raised "a group with one step row has no std" on what an abort leaves (one short episode)."""
    rng = np.random.default_rng(2)
    eps = _random_episodes(rng)
    eps = [dict(e, group=0) for e in eps[:1]] + [dict(e, group=1, traj=i + 1) for i, e in enumerate(eps[:3])]
    eps[0].update({k: v[:1] for k, v in eps[0].items() if isinstance(v, list)})
    out = shape_advantages(_batch(eps, set()), ShapeConfig(base="g2po"))
    assert np.isfinite(out.step_advantages).all()
    # and the same group left by an abort: zeroed and counted
    eps2 = [*eps, dict(eps[0], traj=len(eps))]
    out = shape_advantages(_batch(eps2, {len(eps)}), ShapeConfig(base="g2po"))
    assert out.step_advantages[0] == 0.0 and out.aborts.zeroed_groups == 1


def test_the_batch_stages_take_what_an_abort_leaves() -> None:
    """Dynamic sampling (over finished episodes only), the overlong term and the loss aggregation on empty input."""
    assert S.dynamic_sampling_keep([], []).shape == (0,)
    # a group whose finished episodes agree is dropped though its aborted one differs; a group with no finished
    # episode is dropped; the aborted episodes follow their group
    keep = S.dynamic_sampling_keep(
        [1.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        ["a", "a", "a", "b", "b", "c"],
        aborted=[False, False, True, False, False, True],
    )
    assert keep.tolist() == [False, False, False, True, True, False]
    assert S.overlong_penalty([], 10, 4).shape == (0,)
    assert (
        S.agg_loss_np(np.zeros((2, 3)), np.ones((2, 3)), "seq-mean-token-mean", keep_rows=[False, False])
        == 0.0
    )
