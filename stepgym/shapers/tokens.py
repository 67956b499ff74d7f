"""Token layouts: which step owns each token, and the per-step → per-token broadcast (docs/shapers.md §0).

The bug this module exists to prevent: frameworks that store a multi-turn trajectory as one token row have shipped
code that broadcast a step's advantage over the whole row, or shifted by one turn, so observation tokens or the
*next* step's tokens were trained with the wrong value. Here the mapping is explicit and checked:

``TokenLayout.token_step`` is a (B, L) int64 array; entry ``k >= 0`` means "this token is a generated (response)
token of step k", where k indexes the flat per-step arrays (N,) every shaper uses; ``-1`` means prompt,
observation (environment text) or padding: never trained, advantage 0.

Both storage layouts of the sources reduce to it:

* one row per step (verl-agent, GiGPO, SERL): :meth:`TokenLayout.from_step_rows` — row b is step b, its response
  tokens are those of the response mask;
* one row per trajectory (Search-R1, StepOPSD): :meth:`TokenLayout.from_segments` (prompt / response /
  observation spans per row; the row's response spans are its steps, in order) or :meth:`TokenLayout.from_spans`.

Steps are numbered row-major (all steps of row 0, then row 1, ...), which is the order the per-step arrays must
follow. A step may own no token (an empty span, or a row whose response mask is empty): it still exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from stepgym.shapers._common import as_float_array
from stepgym.shapers.registry import register

__all__ = ["SEGMENT_KINDS", "TokenLayout", "broadcast_to_tokens", "step_token_counts"]

#: Segment kinds accepted by :meth:`TokenLayout.from_segments`. Only ``response`` tokens are trained.
SEGMENT_KINDS = ("prompt", "response", "observation", "padding")


@dataclass(frozen=True)
class TokenLayout:
    """Map from a (B, L) token batch to N steps.

    Attributes:
        token_step: (B, L) int64, step index in [0, n_steps) of each response token, -1 elsewhere.
        n_steps: N, the length of the per-step arrays this layout pairs with.
        step_row: (N,) int64, the row holding each step's tokens (for a step without tokens: the row it was
            declared in).
    """

    token_step: np.ndarray
    n_steps: int
    step_row: np.ndarray

    def __post_init__(self) -> None:
        ts = self.token_step
        if ts.ndim != 2 or ts.dtype.kind not in "iu":
            raise ValueError(f"token_step must be a 2-D integer array, got {ts.dtype} {ts.shape}")
        if ts.size and (ts.min() < -1 or ts.max() >= self.n_steps):
            raise ValueError(
                f"token_step values must lie in [-1, {self.n_steps}); got [{ts.min()}, {ts.max()}]"
            )
        if self.step_row.shape != (self.n_steps,):
            raise ValueError(f"step_row must have shape ({self.n_steps},), got {self.step_row.shape}")

    @property
    def shape(self) -> tuple[int, int]:
        return self.token_step.shape  # type: ignore[return-value]

    @property
    def response_mask(self) -> np.ndarray:
        """(B, L) bool: the trained tokens (response tokens of some step)."""
        return self.token_step >= 0

    @classmethod
    def from_step_rows(cls, response_mask: Any) -> TokenLayout:
        """One row per step: row b is step b; its tokens are where ``response_mask[b]`` is true/non-zero.

        ``response_mask`` (B, L) of the *response* part of each row (verl's ``response_mask``); N = B.
        """
        m = np.asarray(response_mask)
        if m.ndim != 2:
            raise ValueError(f"response_mask must be 2-D (rows, tokens), got shape {m.shape}")
        b = m.shape[0]
        token_step = np.where(m.astype(bool), np.arange(b, dtype=np.int64)[:, None], np.int64(-1))
        return cls(token_step=token_step, n_steps=b, step_row=np.arange(b, dtype=np.int64))

    @classmethod
    def from_spans(cls, spans: Sequence[Sequence[tuple[int, int]]], length: int) -> TokenLayout:
        """One row per trajectory: ``spans[b]`` lists row b's steps as half-open token ranges ``(start, stop)``
        over a row of ``length`` tokens, in step order. Empty ranges declare steps without tokens. Overlapping
        or out-of-range spans are a ``ValueError``. Tokens in no span (prompt, observations, padding) get -1."""
        return cls.from_segments([[("response", s, e) for s, e in row] for row in spans], length)

    @classmethod
    def from_segments(cls, segments: Sequence[Sequence[tuple[str, int, int]]], length: int) -> TokenLayout:
        """One row per trajectory, described as ``(kind, start, stop)`` segments (half-open token ranges).

        ``kind`` is one of :data:`SEGMENT_KINDS`; each ``response`` segment is one step (one generated turn), in
        order. Segments may leave gaps (treated as untrained) but must not overlap or leave [0, length).
        """
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        rows, starts, stops, step_rows = [], [], [], []
        for b, row in enumerate(segments):
            occupied: list[tuple[int, int]] = []
            for seg in row:
                if len(seg) != 3:
                    raise ValueError(f"row {b}: a segment is (kind, start, stop), got {seg!r}")
                kind, s, e = seg
                if kind not in SEGMENT_KINDS:
                    raise ValueError(
                        f"row {b}: unknown segment kind {kind!r}; expected one of {SEGMENT_KINDS}"
                    )
                s, e = int(s), int(e)
                if not (0 <= s <= e <= length):
                    raise ValueError(
                        f"row {b}: segment {kind} [{s}, {e}) is outside [0, {length}) or reversed"
                    )
                if e > s:
                    occupied.append((s, e))
                if kind == "response":
                    starts.append(s)
                    stops.append(e)
                    step_rows.append(b)
            occupied.sort()
            for (s0, e0), (s1, _e1) in pairwise(occupied):
                if s1 < e0:
                    raise ValueError(f"row {b}: segments [{s0}, {e0}) and [{s1}, ...) overlap")
            rows.append(b)
        n_rows = len(rows)
        n = len(starts)
        token_step = np.full((n_rows, length), -1, dtype=np.int64)
        if n:
            st, sp, sr = (np.asarray(x, dtype=np.int64) for x in (starts, stops, step_rows))
            lens = sp - st
            step_ids = np.repeat(np.arange(n, dtype=np.int64), lens)
            cols = (
                np.arange(int(lens.sum()), dtype=np.int64)
                - np.repeat(np.cumsum(lens) - lens, lens)
                + np.repeat(st, lens)
            )
            token_step[np.repeat(sr, lens), cols] = step_ids
        return cls(token_step=token_step, n_steps=n, step_row=np.asarray(step_rows, dtype=np.int64))


def broadcast_to_tokens(step_values: Any, layout: TokenLayout | Any) -> np.ndarray:
    """Put each step's value on that step's response tokens only; prompt, observation and padding tokens get 0.

    ``step_values`` (N,) float (N = ``layout.n_steps``); ``layout`` a :class:`TokenLayout` or a raw (B, L)
    ``token_step`` array. Returns (B, L) float64. Vectorised: one gather, no loop over rows or tokens.
    """
    v = as_float_array(step_values, "step_values", ndim=1)
    token_step = layout.token_step if isinstance(layout, TokenLayout) else np.asarray(layout)
    n = layout.n_steps if isinstance(layout, TokenLayout) else len(v)
    if len(v) != n:
        raise ValueError(f"step_values has {len(v)} entries but the layout has {n} steps")
    if token_step.size and token_step.max(initial=-1) >= len(v):
        raise ValueError(
            f"token_step refers to step {token_step.max()} but only {len(v)} step values were given"
        )
    padded = np.append(v, 0.0)  # index -1 → the appended 0
    return padded[token_step]


@register(
    "broadcast", stage="broadcast", summary="Per-step values onto their steps' response tokens; 0 elsewhere."
)
def _broadcast_stage(batch: Any, config: Any, step_values: np.ndarray) -> np.ndarray:
    return broadcast_to_tokens(step_values, batch.layout)


def step_token_counts(layout: TokenLayout) -> np.ndarray:
    """(N,) number of response tokens of each step (0 for a step with no tokens)."""
    ts = layout.token_step
    return np.bincount(ts[ts >= 0], minlength=layout.n_steps).astype(np.int64)
