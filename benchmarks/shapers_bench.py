"""Time every shaper on a realistic batch and compare with loop-style baselines written like the public code.

Batch: 16 tasks × 8 rollouts × 50 steps = 6,400 step rows (one row per step, verl-agent layout) × 512 response
tokens (each step's response length drawn uniformly in [384, 512], the rest padding): 3.3 M token slots. The
per-token shapers therefore touch a (6400, 512) float64 grid.

Baselines (same run, same inputs, results checked equal before timing):
* GRPO / GiGPO: Python loops over rows with per-group dicts, the structure of verl's
  ``compute_grpo_outcome_advantage`` and verl-agent's ``episode_norm_reward`` / ``build_step_group`` /
  ``step_norm_reward`` / ``compute_step_discounted_returns`` (written here in NumPy, not copied);
* equal_step_mean_abs: a loop over rows and spans, the structure of the StepOPSD ``compute_advantage`` code;
* AHEAD / StepOPSD token weights: the same formula in torch float32 on CPU (one thread, tensors converted before
  timing), as the public code computes it; the DAPO loss: ``stepgym.trainers.losses`` (torch float32, one thread),
  which is what the trainer runs (on its GPU in real training).

A second table times the graph / history credit bases (GraphGPO, HGPO, RewardFlow, G2PO, the oracle ceiling)
through ``shape_advantages`` next to GiGPO on the same rows, with each one's CPU time as a multiple of GiGPO's.

Run: ``python benchmarks/shapers_bench.py [--repeats 5] [--quick]``. Prints a Markdown table: median wall time and
median CPU time of this process per call, in milliseconds.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from stepgym import shapers as S

TASKS, ROLLOUTS, STEPS, TOKENS = 16, 8, 50, 512


def make_batch(seed: int = 0, tasks: int = TASKS, steps: int = STEPS) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    n_traj = tasks * ROLLOUTS
    n = n_traj * steps
    group = np.repeat(np.arange(tasks), ROLLOUTS * steps)
    traj = np.repeat(np.arange(n_traj), steps)
    won = rng.random(n_traj) < 0.4
    rewards = np.zeros(n)
    rewards[np.arange(n_traj) * steps + steps - 1] = 10.0 * won
    valid = rng.random(n) < 0.85
    # anchors: per task a pool of 60 states; rollouts revisit states often, as ALFWorld does
    anchors = [
        f"task {g}: you are in the middle of a room. state {int(s)}"
        for g, s in zip(group, rng.integers(0, 60, n), strict=True)
    ]
    # similarity anchors: ALFWorld-like sentences with a few objects that differ between states
    objs = ["apple", "mug", "knife", "bowl", "lettuce", "tomato", "spoon", "cup", "pan", "bread"]
    anchors_sim = [
        f"You arrive at {objs[int(s) % 10]} counter {int(s) // 10}. On it you see a {objs[int(s) % 7]}, "
        f"a {objs[int(s) % 3]} and a {objs[(int(s) * 7) % 10]}."
        for s in rng.integers(0, 60, n)
    ]
    rea = rng.random(n) < 0.6
    pa = rng.random(n) < 0.3
    lengths = rng.integers(384, TOKENS + 1, n)
    mask = np.arange(TOKENS)[None, :] < lengths[:, None]
    layout = S.TokenLayout.from_step_rows(mask)
    delta = rng.normal(0, 0.3, (n, TOKENS))
    delta[rng.random((n, TOKENS)) < 1e-4] = np.nan
    # StepOPSD action_only targets: the last 12 tokens of every response
    spans = [[(int(L) - 12, int(L))] for L in lengths]
    target = S.TokenLayout.from_spans(spans, TOKENS)
    return dict(
        group=group,
        traj=traj,
        rewards=rewards,
        valid=valid,
        anchors=anchors,
        anchors_sim=anchors_sim,
        rea=rea,
        pa=pa,
        mask=mask,
        layout=layout,
        delta=delta,
        target=target,
        spans=spans,
    )


# ----------------------------------------------------------------------------------------------------------------
# loop-style baselines (the structure of the public code, in NumPy)
# ----------------------------------------------------------------------------------------------------------------
def loop_grpo(scores: np.ndarray, index: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    id2score: dict[Any, list[float]] = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2mean, id2std = {}, {}
    for k, v in id2score.items():
        if len(v) == 1:
            id2mean[k], id2std[k] = 0.0, 1.0
        else:
            id2mean[k], id2std[k] = float(np.mean(v)), float(np.std(v, ddof=1))
    out = np.empty(len(scores))
    for i in range(len(scores)):
        out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + eps)
    return out


def loop_gigpo(rewards, index, traj, anchors, valid, gamma=0.95, c=0.1, w=1.0) -> np.ndarray:
    n = len(rewards)
    ep = defaultdict(float)
    for i in range(n):
        ep[traj[i]] += rewards[i]
    scores = np.array([ep[traj[i]] - c * (not valid[i]) for i in range(n)])
    id2s: dict[Any, list[float]] = defaultdict(list)
    for i in range(n):
        id2s[index[i]].append(scores[i])
    mean = {k: (float(np.mean(v)) if len(v) > 1 else 0.0) for k, v in id2s.items()}
    a_ep = np.array([scores[i] - mean[index[i]] for i in range(n)])
    returns = np.zeros(n)
    for uid in np.unique(traj):  # upstream: np.where per trajectory
        idx = np.where(traj == uid)[0]
        run = 0.0
        for t in reversed(range(len(idx))):
            run = rewards[idx[t]] + gamma * run
            returns[idx[t]] = run
    returns -= c * (~valid)
    groups: dict[Any, list[int]] = defaultdict(list)
    for i in range(n):
        groups[(index[i], anchors[i])].append(i)
    a_st = np.zeros(n)
    for rows in groups.values():
        m = float(np.mean(returns[rows]))
        for i in rows:
            a_st[i] = returns[i] - m
    return a_ep + w * a_st


def loop_similarity_groups(index, anchors, tau=0.95) -> np.ndarray:
    """verl-agent ``build_step_group`` with ``enable_similarity``: ratio() against each cluster's first member."""
    from difflib import SequenceMatcher

    codes = np.empty(len(anchors), dtype=np.int64)
    nxt = 0
    for idx in np.unique(index):
        clusters: list[tuple[str, int]] = []
        for loc in np.where(index == idx)[0]:
            for rep, code in clusters:
                if SequenceMatcher(None, anchors[loc], rep).ratio() >= tau:
                    codes[loc] = code
                    break
            else:
                clusters.append((anchors[loc], nxt))
                codes[loc] = nxt
                nxt += 1
    return codes


def loop_equal_step(
    shaped: np.ndarray,
    mask: np.ndarray,
    units: list[list[tuple[int, int, int]]],
    clip: float = 2.0,
    eps: float = 1e-6,
) -> np.ndarray:
    """StepOPSD's loop, per normalisation unit (a trajectory: its (row, start, stop) target spans)."""
    out = shaped.copy()
    for unit in units:
        if len(unit) <= 1:
            continue
        used, means = [], []
        for b, s, e in unit:
            sel = mask[b, s:e] > 0
            if sel.any():
                used.append((b, s, e))
                means.append(np.abs(out[b, s:e][sel]).mean())
        if len(means) <= 1:
            continue
        means_a = np.array(means)
        coef = np.clip(means_a.mean() / (means_a + eps), 1 / clip, clip)
        for (b, s, e), c in zip(used, coef, strict=True):
            out[b, s:e] *= c
    return out * mask


def torch_weights(a, d, lam, clip, fn, torch):  # the public code's formula on float32 tensors (pre-converted)
    s = torch.clamp(torch.sign(a) * torch.nan_to_num(d, nan=0.0), -20, 20)
    w = torch.exp(s) if fn == "exp" else 2 * torch.sigmoid(s)
    w = w.clamp(1 - clip, 1 + clip)
    return (1 - lam) * a + lam * w * a


# ----------------------------------------------------------------------------------------------------------------
def timeit(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU time of this process (the latter is less inflated by other processes
    competing for the cores, though they still compete for memory bandwidth)."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def graph_credit_table(b: dict[str, Any], repeats: int) -> None:
    """The graph / history credit bases (docs/shapers.md §10–§14) next to GiGPO on the same rows, with the ratio.

    The benchmark's anchors become a state chain: next_obs[t] = anchor_obs[t+1] inside a trajectory; after the last
    step a won trajectory reaches "goal", a failed one a random state of its task's pool."""
    traj = b["traj"]
    last = np.r_[traj[1:] != traj[:-1], True]
    won = last & (b["rewards"] > 0)
    nxt = [*b["anchors"][1:], ""]
    nxt = [
        ("goal" if w else b["anchors"][i - 7]) if e else o
        for i, (o, e, w) in enumerate(zip(nxt, last, won, strict=True))
    ]
    batch = S.StepBatch(
        group_ids=b["group"],
        traj_ids=traj,
        rewards=b["rewards"],
        valid=b["valid"],
        anchor_obs=b["anchors"],
        next_obs=nxt,
        true_gain=np.where(b["rea"], 1.0, 0.0),
    )
    cfgs = {
        "gigpo": S.ShapeConfig.from_preset("gigpo-alfworld"),
        "graphgpo": S.ShapeConfig.from_preset("graphgpo-alfworld"),
        "hgpo": S.ShapeConfig.from_preset("hgpo-alfworld"),
        "rewardflow": S.ShapeConfig.from_preset("rewardflow-alfworld"),
        "g2po": S.ShapeConfig.from_preset("g2po-alfworld"),
        "oracle": S.ShapeConfig.from_preset("oracle"),
    }
    times = {k: timeit(lambda c=c: S.shape_advantages(batch, c), repeats) for k, c in cfgs.items()}
    print("\n| base (per-step pipeline, no tokens) | wall (ms) | CPU (ms) | CPU / GiGPO's |")
    print("|---|---:|---:|---:|")
    for k, (t, c) in times.items():
        print(f"| {k} | {t * 1e3:.1f} | {c * 1e3:.1f} | {c / times['gigpo'][1]:.2f}× |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 tasks instead of 16 (smoke test)")
    args = ap.parse_args(argv)
    tasks = 2 if args.quick else TASKS
    b = make_batch(tasks=tasks)
    n = len(b["rewards"])
    scores = S.episode_scores(b["rewards"], b["traj"]) - 0.1 * (~b["valid"])
    step_adv = S.grpo_advantage(scores, b["group"], traj_ids=b["traj"])
    tok = S.broadcast_to_tokens(step_adv, b["layout"])
    shaped = S.stepopsd_reweight(
        tok, b["delta"], 0.196, delta_mask=b["target"].token_step >= 0, response_mask=b["mask"]
    )
    np_loss = S.policy_loss_np(np.log(np.full(tok.shape, 0.9)), np.zeros(tok.shape), tok)

    # correctness of the baselines against the shapers before timing anything
    np.testing.assert_allclose(loop_grpo(scores, b["group"]), S.grpo_advantage(scores, b["group"]), atol=1e-9)
    gig = lambda: S.gigpo_advantage(  # noqa: E731
        b["rewards"],
        b["group"],
        b["traj"],
        b["anchors"],
        b["valid"],
        shared=S.SharedOptions(invalid_penalty=0.1),
    )
    np.testing.assert_allclose(
        loop_gigpo(b["rewards"], b["group"], b["traj"], b["anchors"], b["valid"]), gig(), atol=1e-9
    )
    sel = b["group"] < 2  # the reference similarity loop is quadratic: time it on 2 tasks only
    sim_g, sim_a = b["group"][sel], [a for a, k in zip(b["anchors_sim"], sel, strict=True) if k]
    np.testing.assert_array_equal(
        S.build_step_groups(sim_g, sim_a, similarity=True), loop_similarity_groups(sim_g, sim_a)
    )
    # one row per step: a trajectory's target spans live in its 50 rows
    units: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for row, (tr, sp) in enumerate(zip(b["traj"].tolist(), b["spans"], strict=True)):
        units[tr] += [(row, s, e) for s, e in sp]
    esm = lambda: S.equal_step_mean_abs(shaped, b["target"], valid_mask=b["mask"], step_group=b["traj"])  # noqa: E731
    np.testing.assert_allclose(loop_equal_step(shaped, b["mask"], list(units.values())), esm(), atol=1e-12)

    cfgs = {
        "grpo": S.ShapeConfig.from_preset("grpo-alfworld"),
        "gigpo+proas": S.ShapeConfig.from_preset("proas-gigpo"),
        "grpo+ahead": S.ShapeConfig.from_preset("ahead"),
        "grpo+stepopsd+norm": S.ShapeConfig.from_preset("stepopsd-alfworld"),
    }

    def pipeline(cfg: S.ShapeConfig) -> Callable[[], Any]:
        batch = S.StepBatch(
            group_ids=b["group"],
            traj_ids=b["traj"],
            rewards=b["rewards"],
            valid=b["valid"],
            anchor_obs=b["anchors"],
            reasonable=b["rea"],
            progress=b["pa"],
            layout=b["layout"],
            delta=b["delta"],
            target=b["target"],
        )
        return lambda: S.shape_advantages(batch, cfg, update_index=1)

    rows: list[tuple[str, Callable[[], Any], Callable[[], Any] | None, str]] = [
        (
            "grpo (step rows, cross_steps)",
            lambda: S.grpo_advantage(scores, b["group"], traj_ids=b["traj"]),
            lambda: loop_grpo(scores, b["group"]),
            "loop, per-group dicts",
        ),
        (
            "gigpo exact anchors",
            gig,
            lambda: loop_gigpo(b["rewards"], b["group"], b["traj"], b["anchors"], b["valid"]),
            "loop, verl-agent shape",
        ),
        (
            "gigpo similarity grouping (τ 0.95), 2 tasks = 800 rows",
            lambda: S.build_step_groups(sim_g, sim_a, similarity=True, tau=0.95),
            lambda: loop_similarity_groups(sim_g, sim_a),
            "loop, ratio() only",
        ),
        ("proas on grpo", lambda: S.proas_shape(step_adv, b["rea"], b["pa"], b["traj"]), None, ""),
        ("broadcast to tokens", lambda: S.broadcast_to_tokens(step_adv, b["layout"]), None, ""),
        ("ahead reweight", lambda: S.ahead_reweight(tok, b["delta"], 0.5), None, "torch f32 (same formula)"),
        (
            "stepopsd reweight",
            lambda: S.stepopsd_reweight(tok, b["delta"], 0.196, response_mask=b["mask"]),
            None,
            "torch f32 (same formula)",
        ),
        (
            "stepopsd reweight, Δ on action spans only",
            lambda: S.stepopsd_reweight(
                tok, b["delta"], 0.196, delta_mask=b["target"].token_step >= 0, response_mask=b["mask"]
            ),
            None,
            "",
        ),
        (
            "equal_step_mean_abs (per trajectory)",
            esm,
            lambda: loop_equal_step(shaped, b["mask"], list(units.values())),
            "loop over spans",
        ),
        (
            "dapo policy_loss_np + token-mean (numpy)",
            lambda: S.agg_loss_np(
                S.policy_loss_np(np.log(np.full(tok.shape, 0.9)), np.zeros(tok.shape), tok), b["mask"]
            ),
            None,
            "stepgym.trainers.losses (torch f32)",
        ),
    ]
    rows += [(f"compose: {name}", pipeline(cfg), None, "") for name, cfg in cfgs.items()]

    try:
        import torch

        torch.set_num_threads(
            1
        )  # NumPy runs on one core too; two torch threads on a shared 2-core box thrash
        tok_t = torch.as_tensor(tok, dtype=torch.float32)
        delta_t = torch.as_tensor(b["delta"], dtype=torch.float32)
        from stepgym.trainers import losses

        lp_t = torch.log(torch.full(tok.shape, 0.9, dtype=torch.float32))
        z_t, a_t = torch.zeros(tok.shape), torch.as_tensor(tok, dtype=torch.float32)
        m_t = torch.as_tensor(b["mask"], dtype=torch.float32)
        np.testing.assert_allclose(
            losses.policy_loss(lp_t.double(), z_t.double(), a_t.double())[0].numpy(),
            np_loss,
            rtol=1e-6,
            atol=1e-6,
        )
        torch_rows = {
            "ahead reweight": lambda: torch_weights(tok_t, delta_t, 0.5, 0.2, "exp", torch),
            "stepopsd reweight": lambda: torch_weights(tok_t, delta_t, 0.196, 0.2, "sigmoid", torch),
            "dapo policy_loss_np + token-mean (numpy)": lambda: losses.agg_loss(
                losses.policy_loss(lp_t, z_t, a_t, m_t)[0], m_t
            ),
        }
        rows = [(r[0], r[1], torch_rows[r[0]], r[3]) if r[0] in torch_rows else r for r in rows]
    except ImportError:
        rows = [(r[0], r[1], None, "") if "torch" in r[3] else r for r in rows]

    print(
        f"# stepgym shapers benchmark — {_dt.date.today().isoformat()}, {platform.machine()}, "
        f"{os.cpu_count()} CPU(s), {platform.processor() or platform.platform()}, numpy {np.__version__}"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at start: {load:.2f} (other processes on the machine inflate every number)")
    print(
        f"batch: {tasks} tasks × {ROLLOUTS} rollouts × {STEPS} steps = {n} step rows × {TOKENS} tokens; "
        f"median of {args.repeats} runs\n"
    )
    print(
        "| shaper | stepgym wall (ms) | stepgym CPU (ms) | baseline wall (ms) | baseline CPU (ms) | baseline "
        "| speed-up (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for name, fn, base, label in rows:
        t, c = timeit(fn, args.repeats)
        if base is not None:
            tb, cb = timeit(base, max(1, min(args.repeats, 3)))
            print(
                f"| {name} | {t * 1e3:.1f} | {c * 1e3:.1f} | {tb * 1e3:.1f} | {cb * 1e3:.1f} | {label} "
                f"| {cb / c:.1f}× |"
            )
        else:
            print(f"| {name} | {t * 1e3:.1f} | {c * 1e3:.1f} | – | – | – | – |")
    graph_credit_table(b, args.repeats)


if __name__ == "__main__":
    main()
