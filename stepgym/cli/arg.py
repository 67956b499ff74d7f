"""``stepgym arg``: build ProAS reference graphs and measure how agents' steps label against them.

* ``stepgym arg build --env StepGym/ALFWorld-v0 --split train --out arg.json`` seeds per-task graphs from the
  stored walkthroughs (``--source walkthroughs``, ALFWorld) or from the env's expert (``--source expert``).
* ``stepgym arg stats`` (default: the env's evaluation split) seeds the graphs of a split (``--source``), then plays the
  expert, a noisy expert and a random agent on every game and prints, per task type, the share of steps that
  are Reasonable and Progress-Advancing, and the share of *unreasonable* steps inside *successful* episodes
  (ProAS reports 41.6% for GRPO's successful ALFWorld trajectories).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Any

import gymnasium as gym

from stepgym import schema
from stepgym.agents import make_agent
from stepgym.cli._options import add_task_args, check_probability, check_task_args
from stepgym.data import sample_tasks
from stepgym.envs import check_split
from stepgym.graph_seeding import seed_graph_from_agent, seed_graph_from_walkthroughs
from stepgym.reference_graph import AgenticReferenceGraph
from stepgym.rollout import play_episode


def _make_env(args: argparse.Namespace) -> gym.Env:
    import stepgym  # noqa: F401 - registers the envs

    check_task_args(args)
    if args.cmd == "stats":
        check_probability("--error-rate", args.error_rate)
    args.split = check_split(args.env, args.split)
    kwargs: dict[str, Any] = {"split": args.split} if args.split else {}
    if args.data_root:
        kwargs["data_root"] = args.data_root
    return gym.make(args.env, **kwargs)


def _task_ids(env: gym.Env, args: argparse.Namespace) -> list[str]:
    return sample_tasks(env.unwrapped.task_ids, args.limit, seed=getattr(args, "seed", 0))


def _seed(arg: AgenticReferenceGraph, env: gym.Env, source: str, task_ids: list[str], seed: int = 0) -> int:
    """Seed from the stored walkthroughs, the env's expert, or both (the expert explores where a walkthrough goes
    straight to the object, so its successes add the exploration routes a learning agent also takes). Every
    episode is reset with a seed, so the graph (and the stats over it) are the same on every run."""
    added = 0
    if source in ("walkthroughs", "walkthroughs+expert"):
        added += seed_graph_from_walkthroughs(arg, env, task_ids, seed=seed)
    if source in ("expert", "walkthroughs+expert"):
        added += seed_graph_from_agent(arg, env, make_agent("expert"), task_ids, seed=seed)
    return added


def build(args: argparse.Namespace) -> int:
    env = _make_env(args)
    ids = _task_ids(env, args)
    arg = AgenticReferenceGraph()
    n = _seed(arg, env, args.source, ids, seed=getattr(args, "seed", 0))
    arg.save(args.out)
    print(
        f"seeded {n} successful trajectories over {len(ids)} tasks from {args.source}; {arg.stats()}; wrote {args.out}"
    )
    return 0


def measure(
    arg: AgenticReferenceGraph,
    env: gym.Env,
    agents: dict[str, Any],
    task_ids: list[str],
    progress: bool = True,
    seed: int = 0,
) -> dict[str, dict[str, list[float]]]:
    """For each agent and task type: [steps, reasonable, progress, steps in won episodes, unreasonable in won].

    The i-th task's episode is reset with ``seed + i`` (the same for every agent), so the table is reproducible:
    ALFWorld's expert breaks ties with the env's seeded generator."""
    table: dict[str, dict[str, list[float]]] = {name: defaultdict(lambda: [0.0] * 5) for name in agents}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(agents) * len(task_ids), desc="episodes", file=sys.stderr)
    for name, agent in agents.items():
        for i, tid in enumerate(task_ids):
            traj = play_episode(env, agent, seed=seed + i, options={"task_id": tid})
            labels = arg.label(traj)
            ttype = str(traj.initial_info.get(schema.TASK_TYPE, ""))
            for key in (ttype, "all"):
                row = table[name][key]
                row[0] += len(labels.reasonable)
                row[1] += sum(labels.reasonable)
                row[2] += sum(labels.progress)
                if traj.success:
                    row[3] += len(labels.reasonable)
                    row[4] += len(labels.reasonable) - sum(labels.reasonable)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return table


def stats(args: argparse.Namespace) -> int:
    env = _make_env(args)
    ids = _task_ids(env, args)
    arg = AgenticReferenceGraph()
    _seed(arg, env, args.source, ids, seed=args.seed)
    agents = {
        "expert": make_agent("expert"),
        f"noisy({args.error_rate:g})": make_agent("noisy", seed=args.seed, error_rate=args.error_rate),
        "random": make_agent("random", seed=args.seed),
    }
    table = measure(arg, env, agents, ids, progress=not args.no_progress, seed=args.seed)
    print(f"ARG from {args.source} of {args.env} {args.split} ({len(ids)} tasks; {arg.stats()})")
    print("| agent | task type | steps | Rea | PA | unreasonable steps in successful episodes |")
    print("|---|---|---|---|---|---|")
    for name, rows in table.items():
        for ttype in sorted(rows, key=lambda k: (k == "all", k)):
            n, rea, pa, n_won, bad_won = rows[ttype]
            won_share = f"{100 * bad_won / n_won:.1f}%" if n_won else "n/a"
            print(
                f"| {name} | {ttype} | {int(n)} | {100 * rea / max(n, 1):.1f}% | {100 * pa / max(n, 1):.1f}% | {won_share} |"
            )
    return 0


_HELP = {
    "build": "seed per-task reference graphs of a split and write them to a JSON file",
    "stats": "seed the graphs of a split, play the expert, a noisy expert and a random agent on it, and print per "
    "task type the share of Reasonable and Progress-Advancing steps (and of unreasonable steps in won episodes)",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stepgym arg", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in _HELP.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add_task_args(p, overrides=False)
        p.add_argument(
            "--source",
            choices=["walkthroughs", "expert", "walkthroughs+expert"],
            default="walkthroughs",
            help="what seeds the graphs: the stored walkthroughs (ALFWorld), the env's expert, or both",
        )
        if name == "build":
            p.add_argument("--out", required=True, help="JSON file to write")
        else:
            p.add_argument(
                "--error-rate", type=float, default=0.2, help="the noisy expert's random-action rate"
            )
            p.add_argument("--seed", type=int, default=0, help="seed of the agents' random choices")
            p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    return build(args) if args.cmd == "build" else stats(args)
