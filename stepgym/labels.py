"""Small pure label computations shared by the wrappers (which attach them) and the shapers (which consume them).

They live at the bottom of the dependency graph so both sides import one definition.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["future_drift", "hindsight_block"]


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


def hindsight_block(
    peer_trajectory: str | None = None,
    *,
    final_correctness: str | bool | None = None,
    golden_rollout: str | None = None,
) -> str:
    """The teacher's hindsight suffix text (docs/shapers.md §5.6; ``_build_teacher_hindsight_suffix_ids``).

    Lines joined with "\\n": "", "<hindsight>", [``final_correctness: correct|incorrect``], [
    "peer_correct_trajectory:", "<peer_correct_trajectory>", peer.rstrip(), "</peer_correct_trajectory>"], [
    "golden_rollout:", "<golden_rollout>", golden.rstrip(), "</golden_rollout>"], "</hindsight>", "" — so it starts
    and ends with a newline. Empty string when there is nothing to say. Tokenise it *without* special tokens and
    insert it right before the step's tokens (teacher context = student context ⊕ block).
    ``final_correctness``: None (the paper's configuration: no line), a bool, or "correct"/"incorrect".
    """
    lines = ["", "<hindsight>"]
    has = False
    if final_correctness is not None:
        label = (
            final_correctness
            if isinstance(final_correctness, str)
            else ("correct" if final_correctness else "incorrect")
        )
        if label not in ("correct", "incorrect"):
            raise ValueError(f"final_correctness must be 'correct' or 'incorrect', got {label!r}")
        lines.append(f"final_correctness: {label}")
        has = True
    if peer_trajectory:
        lines += [
            "peer_correct_trajectory:",
            "<peer_correct_trajectory>",
            peer_trajectory.rstrip(),
            "</peer_correct_trajectory>",
        ]
        has = True
    if golden_rollout:
        lines += ["golden_rollout:", "<golden_rollout>", golden_rollout.rstrip(), "</golden_rollout>"]
        has = True
    if not has:
        return ""
    lines += ["</hindsight>", ""]
    return "\n".join(lines)
