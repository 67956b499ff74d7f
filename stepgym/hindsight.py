"""StepOPSD's peer hindsight, in one module: who gets a peer, what the teacher is shown, and how a trajectory
becomes that text (docs/shapers.md §5.6).

StepOPSD's teacher sees the student's context plus a *hindsight block*. For a failed rollout of a group that
also has a success, the block holds the **first successful peer in rollout order**, rendered as its decoded
multi-turn response; successes, and members of all-success or all-failure groups, get no peer. The rule is
:func:`first_correct_peers` (its "no peer" value is :data:`NO_PEER`); the block text is :func:`hindsight_block`.
The rest only applies them to a batch of texts (:func:`hindsight_blocks`, for trainers that work on decoded
responses) or to recorded trajectories (:func:`peer_hindsight`, which :class:`~stepgym.group.GroupEnv` writes into
``stepgym/peer_hindsight``).

"First" is resolved to rollout order (the reference code takes batch order after ``_balance_batch``; spec
§8.23). This module sits at the bottom of the import graph (NumPy and the schema only), so the env side
(``stepgym.group``) and the shapers (``stepgym.shapers``) share it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from stepgym import schema

__all__ = [
    "NO_PEER",
    "first_correct_peers",
    "hindsight_block",
    "hindsight_blocks",
    "peer_hindsight",
    "render_trajectory_text",
]

#: The peer index of a member that gets no peer.
NO_PEER = -1


def _flags(correct: Any) -> np.ndarray:
    arr = np.asarray(correct)
    if arr.dtype != bool:
        if arr.size and (arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all()):
            raise ValueError(f"correct must hold booleans or 0/1, got {arr.dtype} values")
        arr = arr.astype(bool)
    if arr.ndim != 1:
        raise ValueError(f"correct must be 1-D, got shape {arr.shape}")
    return arr


def first_correct_peers(correct: Any, group_ids: Sequence[Hashable] | np.ndarray) -> np.ndarray:
    """The peer of every trajectory of a batch (the rule): each *incorrect* member of a group that has a correct
    member gets the index of the group's **first** correct member (rollout order, i.e. batch order within the
    group); everyone else gets :data:`NO_PEER`.

    ``correct`` (N,) bool (Search-QA: score == 1.0; ALFWorld: won); ``group_ids`` (N,) hashable group labels.
    Returns (N,) int64. One group: ``first_correct_peers(ok, [0] * len(ok))``.
    """
    ok = _flags(correct)
    ids = list(group_ids.tolist() if isinstance(group_ids, np.ndarray) else group_ids)
    if len(ids) != len(ok):
        raise ValueError(f"per-row arrays must all have length {len(ok)}; got group_ids of length {len(ids)}")
    first: dict[Hashable, int] = {}
    for i, (g, c) in enumerate(zip(ids, ok.tolist(), strict=True)):
        if c:
            first.setdefault(g, i)
    return np.array(
        [NO_PEER if c else first.get(g, NO_PEER) for g, c in zip(ids, ok.tolist(), strict=True)],
        dtype=np.int64,
    )


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


def hindsight_blocks(
    texts: Sequence[str], correct: Any, group_ids: Any, *, include_final_correctness: bool = False
) -> list[str]:
    """Hindsight block of every trajectory of a batch, the paper's configuration by default (first correct peer
    for the incorrect members of mixed groups, no correctness line). ``texts`` (N,) decoded multi-turn responses.

    The text form: "" where there is nothing to insert. ``include_final_correctness`` adds the
    ``final_correctness`` line to *every* member (the reference code's option), peer or not.
    """
    ok = _flags(correct)
    if len(texts) != len(ok):
        raise ValueError(f"per-row arrays must all have length {len(ok)}; got texts of length {len(texts)}")
    peers = first_correct_peers(ok, group_ids)
    return [
        hindsight_block(
            texts[p] if p != NO_PEER else None,
            final_correctness=bool(ok[i]) if include_final_correctness else None,
        )
        for i, p in enumerate(peers.tolist())
    ]


def render_trajectory_text(trajectory: schema.Trajectory) -> str:
    """A trajectory as "the decoded multi-turn response, observations included" (§5.6).

    Each step is the model's turn followed, on the next line, by the env's answer. The turn is the raw reply
    (``schema.RAW_OUTPUT``) when a text interface recorded one — in the one-row-per-step layout that *is* the
    decoded response — else the action in TextWorld's transcript style (``"> go to desk 1"``), so actions and
    observations stay distinguishable. The prompt (first observation) is not part of a response and is left out;
    trailing whitespace is stripped.
    """
    parts: list[str] = []
    for s in trajectory.steps:
        raw = s.info.get(schema.RAW_OUTPUT)
        turn = raw.strip() if isinstance(raw, str) else f"> {s.action}"
        obs = s.next_observation.strip() if isinstance(s.next_observation, str) else repr(s.next_observation)
        parts.append(f"{turn}\n{obs}" if obs else turn)
    return "\n".join(parts).rstrip()


def peer_hindsight(
    trajectories: Sequence[schema.Trajectory],
    *,
    success_fn: Callable[[schema.Trajectory], bool] | None = None,
    render: Callable[[schema.Trajectory], str] = render_trajectory_text,
    final_correctness: bool = False,
) -> list[str | None]:
    """Peer hindsight for one group of recorded trajectories (the G rollouts of one task, in rollout order).

    Returns one entry per trajectory: the hindsight block holding the first successful peer's rendered
    trajectory for each failed member of a mixed group, ``None`` for everyone else (the info form: the key is
    there, and says "no block"). ``success_fn`` defaults to :attr:`stepgym.schema.Trajectory.success`;
    ``final_correctness=True`` adds the ``final_correctness: incorrect`` line to the blocks that are given.
    Aborted trajectories (``Trajectory.aborted``) are left out: ``None``, and never anyone's peer.
    """
    if success_fn is None:
        from stepgym.schema import is_success as success_fn
    # An aborted episode (docs/failures.md) has no outcome: it is nobody's peer and gets no block.
    live = [i for i, t in enumerate(trajectories) if not getattr(t, "aborted", False)]
    if len(live) < len(trajectories):
        sub = peer_hindsight(
            [trajectories[i] for i in live],
            success_fn=success_fn,
            render=render,
            final_correctness=final_correctness,
        )
        full: list[str | None] = [None] * len(trajectories)
        for i, h in zip(live, sub, strict=True):
            full[i] = h
        return full
    peers = first_correct_peers([bool(success_fn(t)) for t in trajectories], [0] * len(trajectories))
    rendered: dict[int, str] = {}
    out: list[str | None] = []
    for p in peers.tolist():
        if p == NO_PEER:
            out.append(None)
            continue
        if p not in rendered:
            rendered[p] = hindsight_block(
                render(trajectories[p]), final_correctness="incorrect" if final_correctness else None
            )
        out.append(rendered[p])
    return out
