"""What the trainer reports about a batch: rollout statistics, advantage statistics per shaper, the teacher–student
gap, and the data of the report's credit picture. Pure functions of a batch; nothing here changes training.

Metric names (one JSON line per iteration in ``metrics.jsonl``, same names in TensorBoard):

* ``rollout/*`` — success (won), episode reward (env scale), episode steps, valid-action ratio (format-valid *and*
  admissible), format-valid ratio, response / prompt length in tokens, truncated prompts, responses cut at the
  token budget, the share of groups with mixed outcomes (the groups GRPO learns from), rows, groups;
* ``adv/<method>/*`` — mean, std, |mean|, min, max and the shares of positive / negative / zero values of the
  per-step advantage (the mean over a step's tokens) under the configured shaper; ``adv/<method>_tokens/*`` the
  same over tokens; ``adv/grpo_reference/*`` plain GRPO on the same batch; ``adv/gigpo_step_term/*`` GiGPO's A^S;
* ``teacher/*`` — Std(Δ) and mean Δ of the teacher − student log-prob gap over the scored tokens (StepOPSD's
  diagnostic), split by whether the row received a hint (AHEAD) or a hindsight block (StepOPSD), λ, privileged rows,
  truncated / dropped privileged texts, scored tokens.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from stepgym.steps.advantages import Shaped, step_means
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE, valid_flags
from stepgym.trainers.collector import Rollouts

__all__ = [
    "advantage_stats",
    "credit_payload",
    "gap_stats",
    "rollout_metrics",
    "shaping_arrays",
    "shaping_metrics",
]


def advantage_stats(values: np.ndarray, prefix: str) -> dict[str, float]:
    """Summary statistics of a 1-D array of advantages for the metrics log."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {}
    return {
        f"{prefix}/mean": float(v.mean()),
        f"{prefix}/std": float(v.std()),
        f"{prefix}/abs_mean": float(np.abs(v).mean()),
        f"{prefix}/min": float(v.min()),
        f"{prefix}/max": float(v.max()),
        f"{prefix}/pos_frac": float((v > 0).mean()),
        f"{prefix}/neg_frac": float((v < 0).mean()),
        f"{prefix}/zero_frac": float((v == 0).mean()),
    }


def rollout_metrics(ro: Rollouts) -> dict[str, float]:
    """The batch's rollout figures. Success is over the finished episodes (an aborted one has no outcome); the
    abort rate and the aborted episodes per cause are ``rollout/abort_rate`` and ``rollout/aborted/<cause>``."""
    rows = ro.rows
    records = [r.record for r in rows]
    done = np.array([not t.aborted for t in ro.trajectories], dtype=bool)
    succ = np.array(ro.successes, dtype=float)
    by_group = np.where(done, succ, np.nan).reshape(len(ro.task_ids), ro.group_size)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a group with every episode aborted
        lo, hi = np.nanmin(by_group, 1), np.nanmax(by_group, 1)
        mixed = np.isfinite(lo) & (lo != hi)
    aborts = {f"rollout/aborted/{cause}": float(n) for cause, n in sorted(ro.abort_counts().items())}
    return {
        "rollout/success": float(succ[done].mean()) if done.any() else 0.0,
        "rollout/abort_rate": float(1.0 - done.mean()) if done.size else 0.0,
        "rollout/aborted_episodes": float((~done).sum()),
        **aborts,
        "rollout/episode_reward": float(np.mean([t.total_reward for t in ro.trajectories])),
        "rollout/episode_steps": float(np.mean([len(t.steps) for t in ro.trajectories])),
        "rollout/valid_action_ratio": float(np.mean(valid_flags(records, FORMAT_OR_INADMISSIBLE))),
        "rollout/format_valid_ratio": float(np.mean([bool(r["format_valid"]) for r in records])),
        "rollout/response_tokens": float(np.mean([len(r.response_ids) for r in rows])),
        "rollout/prompt_tokens": float(np.mean([len(r.prompt_ids) for r in rows])),
        "rollout/prompts_truncated": float(sum(r.prompt_truncated for r in rows)),
        "rollout/unfinished_responses": float(np.mean([not r.finished for r in rows])),
        "rollout/mixed_groups": float(np.mean(mixed)),
        "rollout/rows": float(len(rows)),
        "rollout/groups": float(len(ro.task_ids)),
    }


def method_slug(method: str) -> str:
    """``"ProAS(GRPO)"`` → ``"proas_grpo"`` (metric-name friendly)."""
    return method.lower().replace("(", "_").replace(")", "").replace(".", "")


def shaping_arrays(sh: Shaped) -> dict[str, Any]:
    """What :func:`shaping_metrics` summarises, as flat arrays (data-parallel ranks send these to be pooled)."""
    return {
        "steps": step_means(sh.token_advantages, sh.mask),
        "grpo": np.asarray(sh.grpo_steps),
        "tokens": sh.token_advantages[sh.mask],
        "gigpo": None if sh.shaped.gigpo is None else np.asarray(sh.shaped.gigpo.step),
        "lam": float(sh.shaped.lam),
    }


def shaping_metrics(sh: Shaped | list[dict[str, Any]], method: str) -> dict[str, float]:
    """Advantage statistics of one shaped batch, or of the pooled :func:`shaping_arrays` of several parts."""
    parts = [shaping_arrays(sh)] if isinstance(sh, Shaped) else sh
    name = method_slug(method)

    def pooled(key: str) -> np.ndarray:
        return np.concatenate([p[key] for p in parts])

    out = advantage_stats(pooled("steps"), f"adv/{name}")
    out.update(advantage_stats(pooled("grpo"), "adv/grpo_reference"))
    out.update(advantage_stats(pooled("tokens"), f"adv/{name}_tokens"))
    if parts[0]["gigpo"] is not None:
        out.update(advantage_stats(pooled("gigpo"), "adv/gigpo_step_term"))
    out["adv/lambda"] = parts[0]["lam"]
    return out


def credit_payload(ro: Rollouts, sh: Shaped, k: int, *, iteration: int, method: str) -> dict[str, Any]:
    """Up to ``k`` trajectories of the batch (failures first, then successes, from mixed groups when there are any)
    with each step's GRPO and shaped advantage: the data of the report's credit picture."""
    succ = ro.successes
    g_size = ro.group_size
    mixed = [g for g in range(len(ro.task_ids)) if 0 < sum(succ[g * g_size : (g + 1) * g_size]) < g_size]
    pool = [g * g_size + r for g in mixed for r in range(g_size)] or list(range(len(ro.trajectories)))
    fails = [t for t in pool if not succ[t]][: (k + 1) // 2]
    wins = [t for t in pool if succ[t]][: k - len(fails)]
    shaped_steps = step_means(sh.token_advantages, sh.mask)
    index = {(r.traj, r.t): i for i, r in enumerate(ro.rows)}
    trajs = []
    for tr in fails + wins:
        steps = []
        for t in range(len(ro.trajectories[tr].steps)):
            i = index[(tr, t)]
            r = ro.rows[i]
            steps.append(
                {
                    "t": t,
                    "action": r.record["action"],
                    "valid": bool(valid_flags([r.record], FORMAT_OR_INADMISSIBLE)[0]),
                    "reward": r.record["reward"],
                    "grpo": float(sh.grpo_steps[i]),
                    "shaped": float(shaped_steps[i]),
                }
            )
        trajs.append({"task_id": ro.trajectories[tr].task_id, "won": bool(succ[tr]), "steps": steps})
    return {"iteration": iteration, "method": method, "trajectories": trajs}


def gap_stats(
    delta: np.ndarray, rows: list[Any], flag: np.ndarray, name: str, mask: Any = None
) -> dict[str, float]:
    """Std(Δ) and mean Δ over the scored tokens, overall and split by a per-row flag (StepOPSD's diagnostic)."""
    width = delta.shape[1]
    m = np.zeros_like(delta, dtype=bool)
    for b, r in enumerate(rows):
        m[b, : min(len(r.response_ids), width)] = True
    if mask is not None:
        m &= np.asarray(mask, dtype=bool)
    out: dict[str, float] = {}
    if m.any():
        out["teacher/delta_std"] = float(delta[m].std())
        out["teacher/delta_mean"] = float(delta[m].mean())
    on = m & flag[:, None]
    off = m & ~flag[:, None]
    if on.any():
        out[f"teacher/delta_mean_{name}"] = float(delta[on].mean())
        out[f"teacher/delta_std_{name}"] = float(delta[on].std())
    if off.any():
        out[f"teacher/delta_mean_not_{name}"] = float(delta[off].mean())
    return out
