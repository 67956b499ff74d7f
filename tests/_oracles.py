"""Reference oracles the integration tests share, written here independently of the adapters' own builders.

* :func:`oracle_step_batch`: the shapers' ``StepBatch`` built by hand from raw step records (the rule of
  ``stepgym.steps.batch``, restated: valid = format-valid and not inadmissible, anchor = the state key,
  ProAS labels when every step has them; for the graph methods the state after each step (``"<row>:<t+1>"`` where
  a record has none), termination, step index, action text and the true gain when every step has one), so a test
  compares an adapter's advantages with ``shape_advantages`` on it.
* :func:`spans_of_mask`: the runs of 1s in a mask, by a plain scan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stepgym.shapers import StepBatch, TokenLayout


def spans_of_mask(mask: Sequence[Any]) -> list[tuple[int, int]]:
    """``(start, stop)`` of every run of non-zero entries, by a plain scan."""
    arr = [bool(x) for x in np.asarray(mask).tolist()]
    starts = [i for i in range(len(arr)) if arr[i] and (i == 0 or not arr[i - 1])]
    stops = [i + 1 for i in range(len(arr)) if arr[i] and (i + 1 == len(arr) or not arr[i + 1])]
    return list(zip(starts, stops, strict=True))


def oracle_step_batch(
    records: Sequence[Sequence[Mapping[str, Any]]],
    groups: Sequence[Any],
    width: int,
    *,
    spans: Sequence[Sequence[tuple[int, int]]] | None = None,
    rewards: Sequence[Sequence[float]] | None = None,
    reward_scale: float = 10.0,
    labels: bool = True,
    **extra: Any,
) -> StepBatch:
    """``records[b]``: row b's step records; ``groups[b]`` its group; ``spans[b]`` its steps' token spans
    (default: the records' ``start``/``stop``); ``rewards[b]`` its per-step rewards (default: ``reward`` ×
    ``reward_scale``). ``labels=False`` leaves out ProAS's labels; ``extra`` sets more ``StepBatch`` fields."""
    g, tr, rw, va, an, rea, prog = [], [], [], [], [], [], []
    nxt, done, idx, act, gain = [], [], [], [], []
    for b, recs in enumerate(records):
        for t, r in enumerate(recs):
            g.append(groups[b])
            tr.append(b)
            rw.append(rewards[b][t] if rewards is not None else reward_scale * r["reward"])
            va.append(bool(r["format_valid"]) and r["admissible"] is not False)
            an.append(r["state_key"] if r["state_key"] is not None else f"{b}:{t}")
            nxt.append(r["next_state_key"] if r.get("next_state_key") is not None else f"{b}:{t + 1}")
            done.append(bool(r.get("terminated", False)))
            idx.append(t)
            act.append("" if r.get("action") is None else str(r["action"]))
            gain.append(r.get("value_gain"))
            rea.append(r.get("arg_reasonable"))
            prog.append(r.get("arg_progress"))
    if spans is None:
        spans = [[(int(r["start"]), int(r["stop"])) for r in recs] for recs in records]
    labelled = labels and all(x is not None for x in rea + prog)
    return StepBatch(
        group_ids=g,
        traj_ids=tr,
        rewards=np.asarray(rw, dtype=np.float64),
        valid=np.asarray(va),
        anchor_obs=an,
        reasonable=np.asarray(rea, dtype=bool) if labelled else None,
        progress=np.asarray(prog, dtype=bool) if labelled else None,
        layout=TokenLayout.from_spans([list(s) for s in spans], width),
        **{
            "next_obs": nxt,
            "dones": np.asarray(done, dtype=bool),
            "step_index": np.asarray(idx, dtype=np.int64),
            "actions": act,
            "true_gain": np.asarray(gain, dtype=np.float64) if gain and None not in gain else None,
            **extra,
        },
    )
