"""The perfect-credit ceiling: step credit from the true step gain (analysis only; docs/shapers.md §14).

Not a published method: the upper bound the graph methods are measured against. A = A^E + w·g_t, where A^E is
GiGPO's episode term of the penalised row score (as every graph base has it) and g_t is ``ValueWrapper``'s
``schema.VALUE_GAIN`` of the step (+1 an optimal step, 0 a wasted one, < 0 a harmful one; ``StepBatch.true_gain``).
The gain is used as is (it is already centred on "no progress"), so a wasted step in a successful trajectory gets
the episode term only. A batch without value labels is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from stepgym.shapers._common import Groups, as_float_array, check_mode, check_same_length
from stepgym.shapers.gigpo import GiGPOTerms
from stepgym.shapers.grpo import Singleton, group_normalize
from stepgym.shapers.registry import BaseAdvantage, register

__all__ = [
    "OracleOptions",
    "oracle_terms",
]


def oracle_terms(
    scores: Any,
    group_ids: Any,
    true_gain: Any,
    *,
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
    singleton: Singleton = "verl",
) -> GiGPOTerms:
    """Episode term of the row ``scores`` and the true gain as the step term (docs/shapers.md §14)."""
    s = as_float_array(scores, "scores", ndim=1, finite=True)
    if true_gain is None:
        raise ValueError(
            "base='oracle' needs StepBatch.true_gain (schema.VALUE_GAIN per step, from ValueWrapper): wrap the env "
            "in stepgym.values.ValueWrapper and copy info['value_gain'] of each step into true_gain"
        )
    g = as_float_array(true_gain, "true_gain", ndim=1, finite=True)
    check_same_length(len(s), group_ids=group_ids, true_gain=g)
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"oracle mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")
    eg = Groups(group_ids)
    episode = group_normalize(s, eg, norm_by_std=mode == "mean_std_norm", eps=eps, singleton=singleton)
    return GiGPOTerms(
        episode=episode, step=g.copy(), scores=s, returns=g.copy(), step_groups=np.arange(len(s))
    )


@dataclass(frozen=True)
class OracleOptions:
    """The ceiling's own options (``ShapeConfig.options["oracle"]``; docs/shapers.md §14)."""

    step_mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"

    def __post_init__(self) -> None:
        check_mode(self.step_mode)


@register(
    "oracle",
    stage="base",
    summary="Ceiling: episode term + ValueWrapper's true step gain (§14).",
    options=OracleOptions,
    needs=("value_labels",),
)
def _oracle_stage(batch: Any, config: Any, scores: np.ndarray) -> BaseAdvantage:
    terms = oracle_terms(
        scores,
        batch.group_ids,
        batch.true_gain,
        mode=config.options_for("oracle").step_mode,
        eps=config.eps,
        singleton=config.singleton,
    )
    return BaseAdvantage(terms.combined(config.step_weight), terms)
