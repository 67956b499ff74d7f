"""Check ALFWorld's value labels on every game: exact labels against an unpruned search, the search's lower bound
against the exact values, and the text-free successors against engine steps.

For each game of the split, ``--rollouts`` (1) noisy rollouts (the expert with probability 0.5, else a uniformly
random admissible command, so the agent also takes objects the task does not need, opens and closes things and
wanders) are played under ``ValueWrapper`` (the default budget, with its cache). On every state reached:

* the transition: the true atoms after the engine's step equal :meth:`PlanView.apply` of the command's operator
  on the atoms before (the successor function the oracle searches with);
* every exact label is compared with :func:`stepgym.envs.alfworld.values.reference_cost`, a breadth-first search over
  every admissible command (no pruning, no heuristic, no cache, states told apart by all their atoms) where that
  finishes within ``--limit`` generated states (states near a win; the rest are counted as not checked);
* the search's heuristic, :class:`~stepgym.envs.alfworld.values.LowerBound`, is at most every exact value.

Any disagreement is printed and the script exits 1. Run:
``STEPGYM_DATA=../shared/data python scripts/alfworld_values_check.py`` (every valid_seen game, ~8
minutes on 2 cores; ``--split valid_unseen`` for the other eval split); ``--games 12`` for every 12th game,
``--task ID_PART`` for some. The test suite runs a sample of the same checks
(``tests/test_values_alfworld.py``).
"""

from __future__ import annotations

import argparse
import sys
import time

import gymnasium as gym
import numpy as np

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.alfworld.native.plan import PlanView
from stepgym.envs.alfworld.values import LowerBound, reference_cost
from stepgym.wrappers import ValueWrapper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=0, help="every n-th game (0: all)")
    ap.add_argument("--rollouts", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--limit", type=int, default=60_000, help="states the unpruned reference may generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--task", action="append", default=[], help="only the games whose id contains this (repeatable)"
    )
    args = ap.parse_args()
    env = ValueWrapper(gym.make("StepGym/ALFWorld-v0", split=args.split, max_steps=args.steps).unwrapped)
    base = env.unwrapped
    ids = base.task_ids if args.games <= 0 else base.task_ids[:: args.games]
    if args.task:
        ids = [t for t in ids if any(part in t for part in args.task)]
    rng = np.random.default_rng(args.seed)
    n = {"states": 0, "exact": 0, "checked": 0, "transitions": 0}
    bad: list[str] = []
    t0 = time.perf_counter()
    for task in ids:
        for _ in range(args.rollouts):
            obs, info = env.reset(options={"task_id": task})
            while True:
                view = PlanView(base.engine)
                atoms = view.atoms_of(base.get_state().engine)
                n["states"] += 1
                value = env.cache.peek(
                    (task, info[schema.STATE_KEY])
                )  # this state's label, as the wrapper keeps it
                if value is not None and value.exact:
                    _check_exact(view, atoms, value, args.limit, n, bad, task)
                if info[schema.WON]:
                    break
                acts = info[schema.ADMISSIBLE_ACTIONS]
                expert = info.get(schema.EXPERT_ACTION)
                action = expert if expert and rng.random() < 0.5 else acts[int(rng.integers(len(acts)))]
                tables = view.tables(atoms)
                op = next(op for op, command in view.options(tables) if command == action)
                obs, r, term, trunc, info = env.step(action)
                n["transitions"] += 1
                if view.apply(atoms, tables, op) != view.atoms_of(base.get_state().engine):
                    bad.append(f"{task}: {action!r}: PlanView.apply differs from the engine's step")
                if term or trunc:
                    break
    took = time.perf_counter() - t0
    print(
        f"{len(ids)} games, {n['states']} states ({n['exact'] / max(1, n['states']):.1%} labelled exact), "
        f"{n['checked']} exact labels checked against the unpruned search (limit {args.limit}), "
        f"{n['transitions']} transitions checked; {len(bad)} disagreements; {took:.0f} s"
    )
    stats = env.oracle.stats
    print(f"oracle: {stats}")
    for line in bad[:50]:
        print("DISAGREE", line)
    return 1 if bad else 0


def _check_exact(view: PlanView, atoms, value, limit: int, n: dict, bad: list[str], task: str) -> None:
    n["exact"] += 1
    cost = value.cost if value.reachable else None
    if cost is not None and LowerBound(view)(view.tables(atoms).data) > cost:
        bad.append(f"{task}: the lower bound exceeds the exact value {cost}")
    truth = reference_cost(view, atoms, limit)
    if truth == "limit":
        return
    n["checked"] += 1
    if (None if truth is None else float(truth)) != cost:
        bad.append(f"{task}: label {cost} (reachable {value.reachable}), unpruned search {truth}")


if __name__ == "__main__":
    sys.exit(main())
