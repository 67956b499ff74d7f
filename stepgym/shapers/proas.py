"""ProAS: progress-aware advantage shaping with MUI and APR (docs/shapers.md §3).

Paper: "ProAS: A Progress-Aware Advantage Shaping Framework for Multi-Turn Agentic Reinforcement Learning"
(no arXiv id known; docs/shapers.md "Sources"), Eq. 7. No public code exists; the labels Rea_t and PA_t come from the Agentic Reference
Graph (``stepgym.reference_graph``), Future-Drift from :func:`stepgym.labels.future_drift` (one definition, shared with the
wrappers).

Eq. 7, per trajectory i with base advantage A_i:
* A_i > 0 (MUI, "mask unreasonable interactions"): Â_t = A_i · Rea_t, no renormalisation (§8.9);
* A_i < 0 (APR, "advance progress redistribution"): Â_t = A_i · D_t / D̄, D̄ = mean_t D_t, so Σ_t Â_t = T·A_i;
* A_i = 0: unchanged.

Resolutions (docs/shapers.md §8): Rea := Rea ∨ PA is enforced (§8.7); D̄ = 0 falls back to the uniform A_i (§8.6); when the
base varies inside a trajectory (verl-agent rows differ by the invalid penalty, GiGPO's per-step terms) the branch is
taken per step on that step's own sign (§8.11), so mean preservation is exact only for a constant base; on GiGPO the
episode term only is shaped by default (``target="episode"``, §8.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.labels import future_drift
from stepgym.shapers._common import Groups, as_bool_array, as_float_array, check_same_length
from stepgym.shapers.gigpo import GiGPOTerms
from stepgym.shapers.registry import BaseAdvantage, register

__all__ = [
    "ProASOptions",
    "proas_multipliers",
    "proas_on_gigpo",
    "proas_shape",
    "proas_trajectory",
]


def proas_multipliers(advantages: Any, reasonable: Any, progress: Any, traj_ids: Any = None) -> np.ndarray:
    """The per-step ProAS multiplier m_t (Rea_t, D_t/D̄ or 1), chosen by the sign of each step's base value.

    Args:
        advantages: (N,) finite base advantage of each step row (A_i repeated, or per-step values).
        reasonable: (N,) bool Rea_t; progress: (N,) bool PA_t (Rea := Rea ∨ PA is enforced).
        traj_ids: (N,) trajectory of each row, rows of a trajectory in time order; None = one trajectory.

    Returns (N,) float64 with Â = m · A. D̄ is the mean of D over *all* steps of the trajectory (steps with no
    tokens included: they are still steps for Rea/PA/D). D̄ = 0 → multiplier 1 (uniform A, §3.5).
    """
    a = as_float_array(advantages, "advantages", ndim=1, finite=True)
    n = len(a)
    rea = as_bool_array(reasonable, "reasonable")
    pa = as_bool_array(progress, "progress")
    check_same_length(n, reasonable=rea, progress=pa, traj_ids=traj_ids)
    rea = rea | pa
    drift = np.empty(n)
    mean_drift = np.empty(n)
    tg = Groups(np.zeros(n, dtype=np.int64) if traj_ids is None else traj_ids)
    for rows in tg.segments():
        d = future_drift(pa[rows])
        drift[rows] = d
        mean_drift[rows] = d.mean()
    m = np.ones(n)
    pos = a > 0
    m[pos] = rea[pos]
    neg = (a < 0) & (mean_drift > 0)
    m[neg] = drift[neg] / mean_drift[neg]
    return m


def proas_shape(advantages: Any, reasonable: Any, progress: Any, traj_ids: Any = None) -> np.ndarray:
    """ProAS Eq. 7 on a GRPO or DAPO base (docs/shapers.md §3.3, §3.4): Â_{i,t} = m_t · A_{i,t} per step row.

    Shapes as :func:`proas_multipliers`: (N,) in, (N,) out. For a constant A_i < 0 over a trajectory:
    mean_t Â = A_i, Â ≤ 0, |Â| non-increasing in t. For A_i > 0: Â = A_i where Rea ∨ PA, else 0.
    """
    a = as_float_array(advantages, "advantages", ndim=1, finite=True)
    return proas_multipliers(a, reasonable, progress, traj_ids) * a


def proas_trajectory(advantage: float, reasonable: Any, progress: Any) -> np.ndarray:
    """Eq. 7 for one trajectory: scalar A_i and its T labels → (T,) shaped per-step advantages (T = 0 → empty)."""
    if not np.isfinite(advantage):
        raise ValueError(f"advantage must be finite, got {advantage}")
    t = len(np.asarray(reasonable))
    return proas_shape(np.full(t, float(advantage)), reasonable, progress)


def proas_on_gigpo(
    terms: GiGPOTerms,
    reasonable: Any,
    progress: Any,
    traj_ids: Any,
    *,
    step_weight: float = 1.0,
    target: Literal["episode", "combined"] = "episode",
) -> np.ndarray:
    """ProAS on GiGPO (docs/shapers.md §3.4, §8.5), per step row.

    ``target="episode"`` (default): Â = m(A^E)·A^E + w·A^S — the episode term is shaped with its own per-step
    sign, the anchor-state term is added unchanged. ``target="combined"``: Â = m(A)·A with A = A^E + w·A^S and the
    branch taken on each step's combined sign. ``terms`` from :func:`stepgym.shapers.gigpo_terms`;
    labels and ``traj_ids`` (N,) as in :func:`proas_shape`. Returns (N,).
    """
    if target == "episode":
        return proas_shape(terms.episode, reasonable, progress, traj_ids) + step_weight * terms.step
    if target == "combined":
        return proas_shape(terms.combined(step_weight), reasonable, progress, traj_ids)
    raise ValueError(f"target must be 'episode' or 'combined', got {target!r}")


@dataclass(frozen=True)
class ProASOptions:
    """ProAS's own options (``ShapeConfig.options["proas"]``; docs/shapers.md §3.4)."""

    target: Literal["episode", "combined"] = "episode"
    """On a base with (episode, step) terms (GiGPO, GraphGPO, RewardFlow, G2PO, the oracle): shape A^E and add w·A^S
    unchanged ("episode"), or shape the combined value ("combined"). On a base without terms the two coincide."""

    def __post_init__(self) -> None:
        if self.target not in ("episode", "combined"):
            raise ValueError(f"ProAS's target must be 'episode' or 'combined', got {self.target!r}")


@register(
    "proas",
    stage="step",
    summary="ProAS Eq. 7 (MUI/APR) on the base; on GiGPO's terms when it has them.",
    options=ProASOptions,
    needs=("labels",),
)
def _proas_stage(batch: Any, config: Any, base: BaseAdvantage) -> np.ndarray:
    rea, pa = _labels(batch)
    if isinstance(base.terms, GiGPOTerms):
        target = config.options_for("proas").target
        return proas_on_gigpo(
            base.terms, rea, pa, batch.traj_ids, step_weight=config.step_weight, target=target
        )
    return proas_shape(base.values, rea, pa, batch.traj_ids)


@register(
    "proas_gigpo", stage="step", summary="ProAS on GiGPO's separate terms (docs/shapers.md §3.4, §8.5)."
)
def _proas_gigpo_stage(batch: Any, config: Any, base: BaseAdvantage) -> np.ndarray:
    if not isinstance(base.terms, GiGPOTerms):
        raise ValueError("the 'proas_gigpo' step stage needs base='gigpo'")
    return _proas_stage(batch, config, base)


def _labels(batch: Any) -> tuple[Any, Any]:
    if batch.reasonable is None or batch.progress is None:
        raise ValueError("proas=True needs StepBatch.reasonable and StepBatch.progress")
    return batch.reasonable, batch.progress
