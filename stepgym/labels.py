"""Small pure label computations shared by the wrappers (which attach them) and the shapers (which consume them).

They live at the bottom of the dependency graph so both sides import one definition. StepOPSD's hindsight
block is :mod:`stepgym.hindsight`'s, with the rest of StepOPSD's peer hindsight.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["future_drift"]


def future_drift(progress: Sequence[bool] | np.ndarray) -> np.ndarray:
    """ProAS Future-Drift: ``D_t = sum_{k=t}^{T} (1 - PA_k)`` (the non-advancing steps from t to the end, t included).

    ``progress`` is the length-T sequence of PA_t flags; returns a float64 array of length T (empty for T = 0).
    D is non-increasing in t and ``D_T`` is 0 or 1.
    """
    pa = np.asarray(progress, dtype=bool)
    if pa.ndim != 1:
        raise ValueError(f"progress must be 1-D, got shape {pa.shape}")
    not_adv = (~pa).astype(np.float64)
    return np.cumsum(not_adv[::-1])[::-1].copy()
