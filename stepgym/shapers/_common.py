"""Shared helpers for the shapers: input validation, vectorised group-by, linear schedules.

Everything here is float64 NumPy. Group ids may be any hashable values (ints, strings, uuids, tuples); a
:class:`Groups` factorises them once into integer codes so every per-group statistic is a ``np.bincount`` and no
shaper loops over rows in Python.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np


def as_float_array(x: Any, name: str, *, ndim: int | None = None, finite: bool = False) -> np.ndarray:
    """``np.asarray(x, float64)`` with a clear error for the wrong rank, and optionally for non-finite values."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if finite and arr.size and not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))[:5].tolist()
        raise ValueError(
            f"{name} must be finite (NaN/inf found at flat positions {bad}); a non-finite reward or advantage "
            "would silently turn a whole group's advantages into NaN"
        )
    return arr


def as_bool_array(x: Any, name: str, *, ndim: int | None = 1) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != bool:
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"{name} must be boolean (or 0/1), got dtype {arr.dtype}")
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must hold only 0/1 or booleans")
        arr = arr.astype(bool)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


def check_same_length(n: int, reference: str = "", **arrays: Any) -> None:
    """Raise ``ValueError`` naming the per-row array(s) whose length differs from the others'.

    ``n`` is the length of the ``reference`` array (e.g. ``"rewards"``; unnamed: the batch's row count). The
    length most of the arrays share, the reference counted, is taken as right (the reference's on a tie), so a
    wrong reference is itself named, not every array that agrees with the rest."""
    lengths = {k: len(v) for k, v in arrays.items() if v is not None}
    if all(m == n for m in lengths.values()):
        return
    everyone = {reference or "the batch": n, **lengths}
    counts = Counter(everyone.values())
    right = max(counts, key=lambda m: (counts[m], m == n))
    odd = {k: m for k, m in everyone.items() if m != right}
    agree = len(everyone) - len(odd)
    raise ValueError(
        "per-row arrays must all have the same length: "
        + ", ".join(f"{k} has {m}" for k, m in odd.items())
        + f" where the other {agree} {'has' if agree == 1 else 'have'} {right}"
    )


def check_same_shape(shape: tuple[int, ...], **arrays: Any) -> None:
    bad = {k: np.shape(v) for k, v in arrays.items() if v is not None and np.shape(v) != shape}
    if bad:
        raise ValueError(f"token arrays must all have shape {shape}; got {bad}")


def factorize(ids: Any) -> tuple[np.ndarray, int]:
    """Integer codes (0..G-1, in order of first appearance) for a 1-D sequence of hashable ids.

    NumPy int/bool/str arrays take a vectorised ``np.unique`` path; anything else (lists, object arrays, tuples,
    mixed types) a dict, so ``1`` and ``"1"`` stay different ids.
    """
    if isinstance(ids, np.ndarray) and ids.ndim == 1 and ids.dtype.kind in "biuUS":
        uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
        rank = np.empty(len(uniq), dtype=np.int64)  # renumber by first appearance
        rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
        return rank[inv.reshape(-1)], len(uniq)
    if isinstance(ids, np.ndarray) and ids.ndim != 1:
        raise ValueError(f"ids must be 1-D, got shape {ids.shape}")
    seq = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    mapping: dict[Any, int] = {}
    codes = np.fromiter(
        (mapping.setdefault(_hashable(v), len(mapping)) for v in seq), dtype=np.int64, count=len(seq)
    )
    return codes, len(mapping)


_PRIMITIVES = (str, int, float, bool, bytes, type(None))


def _hashable(x: Any) -> Any:
    if type(x) in _PRIMITIVES:
        return x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return ("__ndarray__", x.shape, tuple(_hashable(v) for v in x.ravel().tolist()))
    if isinstance(x, list | tuple):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    if isinstance(x, set | frozenset):
        return frozenset(_hashable(v) for v in x)
    hash(x)  # raises TypeError for an unhashable id
    return x


hashable = _hashable


class Groups:
    """A group-by over N rows: integer codes plus the per-group reductions the shapers need.

    ``codes[i]`` is row i's group (0..n_groups-1, in order of first appearance); ``counts[g]`` the group size.
    """

    __slots__ = ("_order", "_starts", "codes", "counts", "n_groups")

    def __init__(
        self, ids: Any = None, *, codes: np.ndarray | None = None, n_groups: int | None = None
    ) -> None:
        if codes is None:
            codes, n_groups = factorize(ids)
        assert n_groups is not None
        self.codes = codes
        self.n_groups = n_groups
        self.counts = np.bincount(codes, minlength=n_groups).astype(np.int64)
        self._order: np.ndarray | None = None
        self._starts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.codes)

    def sum(self, x: np.ndarray) -> np.ndarray:
        return np.bincount(self.codes, weights=x, minlength=self.n_groups).astype(np.float64, copy=False)

    def mean(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sum(x) / self.counts

    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        if self._order is None:
            self._order = np.argsort(self.codes, kind="stable")
            self._starts = np.concatenate(([0], np.cumsum(self.counts)[:-1])).astype(np.int64)
        assert self._starts is not None
        return self._order, self._starts

    def is_constant(self, x: np.ndarray) -> np.ndarray:
        """Per group: all members equal (an empty group counts as constant)."""
        if len(x) == 0:
            return np.ones(self.n_groups, dtype=bool)
        order, starts = self._sorted()
        xs = x[order]
        nonempty = self.counts > 0
        out = np.ones(self.n_groups, dtype=bool)
        s = starts[nonempty]
        out[nonempty] = np.maximum.reduceat(xs, s) == np.minimum.reduceat(xs, s)
        return out

    def exact_mean(self, x: np.ndarray) -> np.ndarray:
        """Group mean, returned *exactly* as the common value for constant groups (so x - mean is exactly 0)."""
        mean = self.mean(x)
        const = self.is_constant(x) & (self.counts > 0)
        if const.any():
            order, starts = self._sorted()
            mean[const] = x[order][starts[const]]
        return mean

    def sample_std(self, x: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """Per-group sample std (divisor n-1, as ``torch.std``); NaN for groups of one."""
        dev = x - mean[self.codes]
        ss = self.sum(dev * dev)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(ss / (self.counts - 1))

    def position(self) -> np.ndarray:
        """Each row's 0-based position inside its group, in row order (time order for trajectories)."""
        order, starts = self._sorted()
        pos = np.empty(len(self.codes), dtype=np.int64)
        pos[order] = np.arange(len(self.codes)) - np.repeat(starts, self.counts)
        return pos

    def segments(self) -> list[np.ndarray]:
        """Row indices of each group, in row order."""
        order, starts = self._sorted()
        return np.split(order, starts[1:]) if self.n_groups else []


def coded_groups(codes: np.ndarray) -> Groups:
    """A :class:`Groups` over ids the pipeline already factorised to int64 codes (0..n-1)."""
    return Groups(codes=codes, n_groups=int(codes.max(initial=-1)) + 1)


def check_traj_in_one_group(groups: Groups, trajs: Groups, traj_ids: Any = None) -> None:
    """Refuse a trajectory id whose rows carry several group ids (docs/shapers.md §0, "one trajectory, one group").

    Trajectories are keyed by their id alone, so an id reused in two groups would silently merge two episodes of
    different tasks into one return. Every base refuses it the same way; make ids unique per batch (e.g. key them
    by ``(group_id, traj_id)``). ``traj_ids`` (the raw ids) only names the offender in the message.
    """
    if len(groups) == 0:
        return
    lo = np.full(trajs.n_groups, np.iinfo(np.int64).max)
    hi = np.full(trajs.n_groups, -1)
    np.minimum.at(lo, trajs.codes, groups.codes)
    np.maximum.at(hi, trajs.codes, groups.codes)
    bad = np.flatnonzero(lo != hi)
    if bad.size:
        row = int(np.flatnonzero(trajs.codes == bad[0])[0])
        name = f" {list(traj_ids)[row]!r}" if traj_ids is not None else ""
        raise ValueError(
            f"trajectory id{name} has rows in several episode groups ({bad.size} such ids): a trajectory belongs to "
            "one group, so every row of a traj_id needs the same group_id. Trajectory ids must be unique across "
            "groups; key them by (group_id, traj_id) if your ids restart in each group"
        )


def linear_decay(step: float, lam0: float, decay_steps: float) -> float:
    """``lam0 · max(0, 1 - step/decay_steps)``; ``decay_steps <= 0`` keeps ``lam0`` constant."""
    if not np.isfinite(lam0) or not np.isfinite(step):
        raise ValueError(f"schedule inputs must be finite, got lam0={lam0}, step={step}")
    if decay_steps <= 0:
        return float(lam0)
    return float(lam0) * max(0.0, 1.0 - float(step) / float(decay_steps))


def check_lambda(lam: Any, name: str = "lam") -> np.ndarray | float:
    """A mixing weight must lie in [0, 1]; it may be a scalar or an array broadcastable to the tokens."""
    arr = np.asarray(lam, dtype=np.float64)
    if not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any():
        raise ValueError(f"{name} must lie in [0, 1], got {lam!r}")
    return float(arr) if arr.ndim == 0 else arr


def check_clip(eps: float, name: str) -> float:
    eps = float(eps)
    if not (0.0 <= eps < 1.0):
        raise ValueError(f"{name} must lie in [0, 1) so the weight stays positive, got {eps}")
    return eps


def quiet() -> Any:
    """``np.errstate`` for exp of a huge gap (overflow to inf, clipped right after)."""
    return np.errstate(over="ignore")


def scatter_flat(base: np.ndarray, flat: np.ndarray, values: np.ndarray, keep: Any = None) -> np.ndarray:
    """A C-ordered copy of ``base`` with ``values`` written at the flat indices ``flat`` (AHEAD's and StepOPSD's
    masked token updates touch only those tokens). ``keep`` (bool, ``base``'s shape) zeroes the copy outside it,
    ``values`` included, in the same pass; ``values`` (a fresh array) may be scaled in place."""
    if keep is None:
        out = np.array(base, order="C")
    else:
        keep_b = np.asarray(keep, dtype=bool)
        out = np.multiply(base, keep_b, order="C")
        values *= keep_b.reshape(-1)[flat]
    out.reshape(-1)[flat] = values
    return out


def check_mode(mode: str, what: str = "step_mode") -> None:
    """``ValueError`` unless ``mode`` is one of the two normalisations every step term uses."""
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"{what} must be 'mean_norm' or 'mean_std_norm', got {mode!r}")


def episode_inputs(
    rewards: Any, group_ids: Any, traj_ids: Any, mode: str, what: str, **arrays: Any
) -> tuple[np.ndarray, Groups, Groups]:
    """A step-credit method's common inputs, checked: the rewards as a finite (N,) float array, then the episode
    groups and the trajectories as :class:`Groups`. Every array of ``arrays`` (None: absent) has N entries, ``mode``
    is one of the two normalisations (``what`` names the method in the error), each trajectory lies in one group.
    """
    r = as_float_array(rewards, "rewards", ndim=1, finite=True)
    check_same_length(len(r), group_ids=group_ids, traj_ids=traj_ids, **arrays)
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"{what} mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")
    eg, tg = Groups(group_ids), Groups(traj_ids)
    check_traj_in_one_group(eg, tg, traj_ids)
    return r, eg, tg
