"""The settings every step-credit base shares, as one small frozen dataclass (docs/shapers.md §2, §10–§13).

GiGPO, GraphGPO, HGPO, RewardFlow and G2PO each take their own options dataclass (``GiGPOOptions``, ...) plus a
:class:`SharedOptions`: the discount γ, the invalid-action penalty c, the ε added to a std, the rule for a group of
one row and the step weight w. They are :class:`~stepgym.shapers.ShapeConfig`'s shared fields of the same names;
:meth:`SharedOptions.of` reads them from a config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepgym.shapers.grpo import Singleton
from stepgym.shapers.rewards import DEFAULT_INVALID_PENALTY

__all__ = ["SharedOptions"]


@dataclass(frozen=True)
class SharedOptions:
    """What the step-credit bases share (defaults: ``ShapeConfig``'s)."""

    gamma: float = 0.95
    """The discount γ of every step return (GiGPO Eq. 5; the graph bases' step returns)."""
    invalid_penalty: float = DEFAULT_INVALID_PENALTY
    """c, subtracted from an invalid row's score and its own step return (not discounted); 0 by default,
    verl-agent's recipes use 0.1."""
    eps: float = 1e-6
    """ε added to every std."""
    singleton: Singleton = "verl"
    """An episode group of one row: "verl" → μ = 0, σ = 1; "zero" → an episode term of 0."""
    step_weight: float = 1.0
    """w in A = A^E + w·A^S (read by ``gigpo_advantage`` and ``terms.combined(shared.step_weight)``)."""

    @classmethod
    def of(cls, config: Any) -> SharedOptions:
        """The shared fields of a :class:`~stepgym.shapers.ShapeConfig` (or anything with those attributes)."""
        return cls(
            gamma=config.gamma,
            invalid_penalty=config.invalid_penalty,
            eps=config.eps,
            singleton=config.singleton,
            step_weight=config.step_weight,
        )
