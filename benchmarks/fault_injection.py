"""Fault injection on real envs: aborted episodes leave the others' credit exactly as it would be without them.

Groups of ALFWorld and Search-QA rollouts are played by the noisy expert through :class:`~stepgym.group.GroupEnv`
with ``GroupConfig(on_failure="abort")`` while infrastructure fails the way it does at scale:

* ``exception-5%`` / ``-10%`` / ``-15%``: env steps raise (:class:`~stepgym.wrappers.faults.FaultInjectionWrapper`,
  innermost, seeded) with the per-step probability that aborts an episode of the agent's mean length with that
  probability (the 5–15% of episodes that reports of agent-RL runs give; the achieved share is printed);
* ``killed-workers``: the copies run on a ``ProcessExecutor`` (one worker per copy) and a step kills the worker
  process holding it (``SIGKILL``; the executor restarts it), for about 10% of episodes;
* ``retriever-down`` (Search-QA): the env searches a ``stepgym retriever serve`` server over HTTP, and the server
  is killed in the middle of every other group and restarted before the next one.

Every group's steps then go through :func:`stepgym.shapers.shape_advantages` three ways, for GRPO, GiGPO and
GraphGPO (the presets of each env): with the aborted episodes flagged (``StepBatch.aborted``, stepgym's rule),
on the same batch with the aborted episodes' rows removed (the reference), and with the aborted episodes scored as
failures (reward 0, what every agent-RL stack does today). Printed per (env, fault, method): the aborted share,
the groups left with fewer than two finished episodes (zeroed), whether the surviving rows' advantages equal the
reference *exactly* (bit for bit), and beside it the bias "aborted = reward 0" would have caused on the surviving
rows (mean |Δ advantage|, the share of surviving rows whose advantage changes sign) and the mean advantage it
would have given the aborted rows (they would be trained as failures).

Last, a bundled-trainer run with injected faults (``stepgym train --preset credit-grpo`` on the process executor,
env exceptions and killed workers) must complete its iterations; its per-iteration abort rates are recorded.

    STEPGYM_DATA=... python benchmarks/fault_injection.py            # writes benchmarks/results/fault_injection_<date>.*
    STEPGYM_DATA=... python benchmarks/fault_injection.py --quick    # smoke run
    python benchmarks/fault_injection.py --counts    # the counting sweep only: benchmarks/results/fault_counts_<date>.*

The counting sweep (``--counts``) plays CreditToy through the trainer's collector on every executor (in-process,
a process pool with overlap off and on, Ray) with one kind of fault at a time (env exceptions, killed workers,
hung steps), each fault logged by the wrapper as it happens, and compares the aborted episodes per cause with the
logged faults: each must be counted once, under its own cause.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (str(REPO), str(REPO / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from credit_fidelity import SearchQANoise  # noqa: E402  (errors search only: answers=False)

import stepgym  # noqa: E402, F401  (registers the envs)
from stepgym import schema  # noqa: E402
from stepgym.agents import NoisyExpertAgent  # noqa: E402
from stepgym.group import GroupConfig, GroupEnv  # noqa: E402
from stepgym.shapers import ShapeConfig, StepBatch, shape_advantages  # noqa: E402
from stepgym.workers import ExecutorSpec  # noqa: E402
from stepgym.wrappers.faults import FaultInjectionWrapper  # noqa: E402

FAULTS = ("exception-5%", "exception-10%", "exception-15%", "killed-workers", "retriever-down")
#: Step limits of the envs here.
STEP_LIMIT = {"ALFWorld": 25, "Search-QA": 5}
#: Mean episode length of the noisy expert (error rate 0.3) here, measured without faults (ALFWorld: 764 steps in
#: 48 episodes; Search-QA: about 2.5): the per-step fault probability is derived from the per-episode one with it.
MEAN_STEPS = {"ALFWorld": 16.0, "Search-QA": 2.5}


def per_step(q: float, steps: int) -> float:
    """The per-step probability p with 1 − (1 − p)^steps = q."""
    return 1.0 - (1.0 - q) ** (1.0 / steps)


METHODS = {"GRPO": "grpo", "GiGPO": "gigpo", "GraphGPO": "graphgpo"}


# --------------------------------------------------------------------------------------------------------------
# A retrieval server we can take down
# --------------------------------------------------------------------------------------------------------------
class Retriever:
    """``stepgym retriever serve --backend bm25`` in a subprocess, on a fixed free port (so a restart keeps the URL)."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        from stepgym.envs.searchqa.client import wait_until_healthy

        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stepgym.cli", "retriever", "serve", "--backend", "bm25", "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        wait_until_healthy(self.url, deadline=300)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None


# --------------------------------------------------------------------------------------------------------------
# Playing groups
# --------------------------------------------------------------------------------------------------------------
def make_group(env: str, fault: str, g: int, seed: int, retriever: Retriever | None) -> GroupEnv:
    kwargs: dict[str, Any]
    seed = seed + FAULTS.index(fault) * 1000  # each fault its own draws
    if env == "ALFWorld":
        env_id, kwargs = "StepGym/ALFWorld-v0", {"split": "valid_seen", "max_steps": STEP_LIMIT[env]}
    else:
        env_id, kwargs = "StepGym/SearchQA-v0", {"dataset": "nq", "split": "test"}
        if retriever is not None:
            kwargs.update(retriever=retriever.url, timeout=1.0, deadline=1.0)
    wrappers: list[Any] = []
    executor: Any = "inprocess"
    if fault.startswith("exception-"):
        p = per_step(float(fault.split("-")[1].rstrip("%")) / 100, MEAN_STEPS[env])
        wrappers.append(functools.partial(FaultInjectionWrapper, exception=p, seed=seed))
    elif fault == "killed-workers":
        wrappers.append(
            functools.partial(FaultInjectionWrapper, kill=per_step(0.10, MEAN_STEPS[env]), seed=seed)
        )
        executor = ExecutorSpec("process", num_workers=g)
    return GroupEnv(
        env_id,
        g,
        kwargs,
        wrappers,
        executor=executor,
        config=GroupConfig(on_failure="abort", task_option="task_id"),
    )


def play(env: str, fault: str, n_groups: int, g: int, seed: int, retriever: Retriever | None) -> list[list]:
    """``n_groups`` groups of ``g`` noisy-expert rollouts (error rate 0.3), each a list of trajectories."""
    group = make_group(env, fault, g, seed, retriever)
    tasks = list(group.get_unwrapped_attr("task_ids") or [])
    out = []
    try:
        for k in range(n_groups):
            if retriever is not None and retriever.proc is None:
                retriever.start()
            agents = (
                [NoisyExpertAgent(0.3, seed + 100 * k + i) for i in range(g)]
                if env == "ALFWorld"
                else [SearchQANoise(0.3, seed + 100 * k + i, answers=False) for i in range(g)]
            )
            task = tasks[(k * 7919 + seed) % len(tasks)] if tasks else None
            obs, infos = group.reset(seed=seed + k, options={"task_id": task} if task else None)
            turn = 0
            while group.agents:
                if retriever is not None and k % 2 == 0 and turn == 1:
                    retriever.kill()  # taken down mid-group; the next group finds it back
                acts = {a: agents[int(a.rsplit("_", 1)[1])].act(obs[a], infos[a]) for a in group.agents}
                obs_new, _, _, _, new_infos = group.step(acts)
                obs.update(obs_new)
                infos.update(new_infos)
                turn += 1
            out.append(list(group.trajectories))
    finally:
        group.close()
        if retriever is not None:
            retriever.kill()
    return out


# --------------------------------------------------------------------------------------------------------------
# Credit three ways
# --------------------------------------------------------------------------------------------------------------
def step_batch(groups: list[list], *, drop_aborted: bool = False, zero_aborted: bool = False) -> StepBatch:
    cols: dict[str, list] = {
        k: [] for k in ("group_ids", "traj_ids", "rewards", "valid", "anchor_obs", "next_obs", "aborted")
    }
    traj = 0
    for gi, trajs in enumerate(groups):
        for t in trajs:
            traj += 1
            if drop_aborted and t.aborted:
                continue
            steps = t.steps or [
                schema.Step(t.initial_observation, "", 0.0, t.initial_observation, False, False, {})
            ]
            infos = t.infos()
            for k, s in enumerate(steps):
                before = infos[k] if k < len(infos) else {}
                after = s.info
                cols["group_ids"].append(gi)
                cols["traj_ids"].append(traj)
                cols["rewards"].append(0.0 if (zero_aborted and t.aborted) else 10.0 * float(s.reward))
                cols["valid"].append(bool(after.get(schema.ADMISSIBLE, True)))
                cols["anchor_obs"].append(str(before.get(schema.STATE_KEY, s.observation)))
                cols["next_obs"].append(str(after.get(schema.STATE_KEY, s.next_observation)))
                cols["aborted"].append(bool(t.aborted) and not zero_aborted)
    aborted = cols.pop("aborted")
    return StepBatch(**cols, aborted=np.asarray(aborted, dtype=bool) if any(aborted) else None)


def compare(groups: list[list], cfg: ShapeConfig) -> dict[str, Any]:
    flagged = step_batch(groups)
    out = shape_advantages(flagged, cfg)
    ref = shape_advantages(step_batch(groups, drop_aborted=True), cfg)
    naive = shape_advantages(step_batch(groups, zero_aborted=True), cfg)
    ab = (
        np.zeros(len(out.step_advantages), dtype=bool)
        if flagged.aborted is None
        else np.asarray(flagged.aborted)
    )
    gid = np.asarray(flagged.group_ids)
    # survivors in groups that kept two finished episodes (the others are zeroed and counted)
    finished = {
        g: len({tj for tj, a, gg in zip(flagged.traj_ids, ab, gid, strict=True) if gg == g and not a})
        for g in set(gid.tolist())
    }
    live = ~ab & np.array([finished[g] >= 2 for g in gid.tolist()])
    ref_gid = np.asarray(step_batch(groups, drop_aborted=True).group_ids)
    ref_live = np.array([finished[g] >= 2 for g in ref_gid.tolist()])
    exact = bool(np.array_equal(out.step_advantages[live], ref.step_advantages[ref_live]))
    delta = naive.step_advantages[live] - ref.step_advantages[ref_live]
    r = ref.step_advantages[ref_live]
    flips = (np.sign(naive.step_advantages[live]) != np.sign(r)) & (r != 0)
    return {
        "rows": len(ab),
        "aborted_rows": int(ab.sum()),
        "exact": exact,
        "bias_abs_mean": float(np.abs(delta).mean()) if delta.size else 0.0,
        "sign_flips": float(flips.mean()) if flips.size else 0.0,
        "naive_adv_on_aborted": float(naive.step_advantages[ab].mean()) if ab.any() else 0.0,
        "zeroed_groups": int(out.aborts.zeroed_groups),
    }


def presets(env: str) -> dict[str, ShapeConfig]:
    if env == "ALFWorld":
        names = {"GRPO": "grpo-alfworld", "GiGPO": "gigpo-alfworld", "GraphGPO": "graphgpo-alfworld"}
    else:
        names = {"GRPO": "grpo", "GiGPO": "gigpo-webshop", "GraphGPO": "graphgpo-searchqa"}
    out = {m: ShapeConfig.from_preset(p) for m, p in names.items()}
    if env != "ALFWorld":  # Search-QA's recipes use no invalid-action penalty
        out["GiGPO"] = out["GiGPO"].replace(invalid_penalty=0.0)
    return out


# --------------------------------------------------------------------------------------------------------------
# A bundled-trainer run with injected faults
# --------------------------------------------------------------------------------------------------------------
def trainer_run(iterations: int) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="stepgym-faults-"))
    argv = [
        "train", "--preset", "credit-grpo", "--run.output-dir", str(out), "--run.no-progress", "--run.no-tensorboard",
        "--run.no-report", "--rollout.backend", "scripted", "--rollout.scripted-policy", "noisy-expert:0.3",
        "--rollout.n-tasks", "4", "--rollout.group-size", "4", "--warmup.steps", "0",
        "--model.tokenizer-corpus-episodes", "8", "--eval.limit", "2", "--run.iterations", str(iterations),
        "--rollout.env-executor", "process", "--rollout.env-workers", "4",
        "--rollout.faults", "exception=0.02,kill=0.005,seed=1", "--rollout.max-abort-rate", "0.5",
    ]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stepgym.cli", *argv], capture_output=True, text=True, cwd=REPO
    )
    m = (
        [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        if (out / "metrics.jsonl").exists()
        else []
    )
    return {
        "returncode": done.returncode,
        "iterations_asked": iterations,
        "iterations_done": len(m),
        "abort_rate": [x.get("rollout/abort_rate", 0.0) for x in m],
        "aborted": {
            k.split("/", 2)[2]: sum(x.get(k, 0.0) for x in m)
            for k in sorted({k for x in m for k in x})
            if k.startswith("rollout/aborted/")
        },
        "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode else [],
        "seconds": round(time.perf_counter() - t0, 1),
    }


# --------------------------------------------------------------------------------------------------------------
# Counted right: every injected fault, logged, against the aborts per cause (``--counts``)
# --------------------------------------------------------------------------------------------------------------
#: The cause each injected fault must be counted under.
COUNT_CAUSE = {"exception": "env_exception", "kill": "worker_death", "hang": "step_timeout"}
#: Per-step probability of each fault in the counting sweep.
COUNT_P = {"exception": 0.05, "kill": 0.03, "hang": 0.02}


def faulty_credit_toy(fault: str = "exception", seed: int = 0, log: str = "", **kwargs: Any) -> Any:
    """CreditToy with one kind of fault injected (innermost) and logged: the counting sweep's env (importable by
    every worker as ``fault_injection.faulty_credit_toy``)."""
    from stepgym.envs.credit import CreditToyEnv

    env = CreditToyEnv(**kwargs)
    return FaultInjectionWrapper(env, seed=seed, log=log, **{fault: COUNT_P[fault]})


def count_cell(executor: str, overlap: str, fault: str, args: argparse.Namespace) -> dict[str, Any]:
    """Collect ``args.count_batches`` batches of CreditToy groups with one kind of fault; compare the aborted
    episodes per cause with the faults the wrapper logged. Each copy has its own worker (process / Ray), so a
    killed or hung worker cuts off exactly one episode: the counts must match one for one."""
    from fault_injection import faulty_credit_toy as factory  # by module name: workers import it

    from stepgym.trainers.backends import ScriptedBackend
    from stepgym.trainers.collector import Collector, CollectorOptions
    from stepgym.trainers.models import train_tokenizer
    from stepgym.trainers.samples import PromptEncoder
    from stepgym.wrappers.text import get_format

    n_groups, g = args.count_groups, args.group_size
    log = Path(tempfile.mkdtemp(prefix="stepgym-counts-")) / "faults.log"
    opts: dict[str, Any] = (
        {} if executor == "inprocess" else {"timeout": 5.0 if executor == "process" else 10.0}
    )
    if executor == "ray":
        opts["num_cpus"] = 0.1
    tok = train_tokenizer(["go to the room and take the key", "look around <think>ok</think>"])
    col = Collector(
        factory,
        {"fault": fault, "seed": args.seed, "log": str(log), "n_rooms": 3, "n_distractors": 1},
        get_format("alfworld"),
        history=1,
        group_size=g,
        encoder=PromptEncoder(tok, max_prompt_tokens=256),
        backend=ScriptedBackend(
            tok, "noisy-expert:0.3", render=lambda a: f"<think>ok</think><action>{a}</action>"
        ),
        options=CollectorOptions(executor=ExecutorSpec(executor, n_groups * g, opts), overlap=overlap),
    )
    counted: dict[str, int] = {}
    episodes = 0
    t0 = time.perf_counter()
    try:
        for b in range(args.count_batches):
            ro = col.collect(
                [(None, args.seed + 100 * b + k) for k in range(n_groups)], seed_rng=np.random.default_rng(b)
            )
            episodes += len(ro.trajectories)
            for c, k in ro.abort_counts().items():
                counted[c] = counted.get(c, 0) + k
    finally:
        col.close()
    logged = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    injected = {COUNT_CAUSE[fault]: len(logged)} if logged else {}
    return {
        "executor": executor, "overlap": overlap, "fault": fault, "episodes": episodes,
        "injected": injected, "counted": dict(sorted(counted.items())), "exact": injected == counted,
        "seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip


def count_sweep(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every executor × overlap × fault that can run (in-process: exceptions only; nothing may kill the driver)."""
    cells = []
    ray_up = False
    for executor, overlap in (("inprocess", "off"), ("process", "off"), ("process", "on"), ("ray", "on")):
        if executor == "ray":
            try:
                import ray
            except ImportError:
                print("ray is not installed: its cells are left out", flush=True)
                continue
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            path = os.pathsep.join([str(REPO), str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")])
            ray.init(
                include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}}
            )
            ray_up = True
        for fault in ("exception",) if executor == "inprocess" else tuple(COUNT_CAUSE):
            cell = count_cell(executor, overlap, fault, args)
            cells.append(cell)
            print(json.dumps(cell), flush=True)
    if ray_up:
        import ray

        ray.shutdown()
    return cells


def count_markdown(cells: list[dict[str, Any]]) -> str:
    lines = [
        "| executor | overlap | fault | episodes | injected (logged) | counted | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        inj = ", ".join(f"{k} {v}" for k, v in c["injected"].items()) or "none"
        got = ", ".join(f"{k} {v}" for k, v in c["counted"].items()) or "none"
        lines.append(
            f"| {c['executor']} | {c['overlap']} | {c['fault']} | {c['episodes']} | {inj} | {got} | "
            f"{'yes' if c['exact'] else 'NO'} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------
def markdown(results: dict[str, Any]) -> str:
    """The docs table (docs/failures.md's ``fault-injection`` figure) from a results file's contents."""
    lines = [
        "| env | fault | method | aborted episodes | zeroed groups | survivors = without aborted (exact) | "
        '"aborted = reward 0": mean abs. bias on survivors | survivors\' sign flips | its advantage on aborted rows |',
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["cells"]:
        for m, c in r["methods"].items():
            lines.append(
                f"| {r['env']} | {r['fault']} | {m} | {r['aborted_episodes']}/{r['episodes']} "
                f"({r['aborted_episodes'] / r['episodes']:.0%}) | {c['zeroed_groups']} | "
                f"{'yes' if c['exact'] else 'NO'} | {c['bias_abs_mean']:.3f} | {c['sign_flips']:.1%} | "
                f"{c['naive_adv_on_aborted']:+.3f} |"
            )
    t = results.get("trainer")
    if t:
        rates = ", ".join(f"{x:.0%}" for x in t["abort_rate"])
        causes = ", ".join(f"{k} {int(v)}" for k, v in t["aborted"].items()) or "none"
        lines += [
            "",
            f"Bundled trainer (`stepgym train --preset credit-grpo`, process executor, env exceptions 2% and killed "
            f"workers 0.5% per step, `--rollout.max-abort-rate 0.5`): {t['iterations_done']} of "
            f"{t['iterations_asked']} iterations completed "
            f"(exit code {t['returncode']}); abort rate per iteration {rates}; aborted episodes by cause: {causes}.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=12, help="groups per (env, fault)")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=6, help="bundled-trainer iterations")
    ap.add_argument("--envs", default="ALFWorld,Search-QA")
    ap.add_argument("--quick", action="store_true", help="3 groups, 2 trainer iterations")
    ap.add_argument(
        "--out", default=None, help="results prefix (default benchmarks/results/fault_injection_<date>)"
    )
    ap.add_argument(
        "--counts",
        action="store_true",
        help="only the counting sweep: executor × overlap × fault on CreditToy, injected faults logged and "
        "compared with the aborts per cause (writes benchmarks/results/fault_counts_<date>.*)",
    )
    ap.add_argument("--count-groups", type=int, default=3, help="counting sweep: groups per batch")
    ap.add_argument("--count-batches", type=int, default=4, help="counting sweep: batches per cell")
    args = ap.parse_args(argv)
    if args.counts:
        g = 3 if args.quick else args.group_size
        args.group_size = g
        if args.quick:
            args.count_batches = 2
        cells = count_sweep(args)
        date = dt.date.today().isoformat()
        machine = f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}"
        prefix = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"fault_counts_{date}"
        prefix.parent.mkdir(parents=True, exist_ok=True)
        out = {"date": date, "machine": machine, "groups": args.count_groups, "group_size": g, "cells": cells}
        Path(f"{prefix}.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        table = count_markdown(cells)
        Path(f"{prefix}.md").write_text(f"# Fault counts ({date}, {machine})\n\n{table}\n", encoding="utf-8")
        print(table)
        return 0 if all(c["exact"] for c in cells) else 1
    n = 3 if args.quick else args.groups
    cells = []
    for env in args.envs.split(","):
        for fault in FAULTS:
            if fault == "retriever-down" and env != "Search-QA":
                continue
            retriever = Retriever() if env == "Search-QA" and fault == "retriever-down" else None
            t0 = time.perf_counter()
            groups = play(env, fault, n, args.group_size, args.seed, retriever)
            trajs = [t for g in groups for t in g]
            causes: dict[str, int] = {}
            for t in trajs:
                if t.aborted:
                    causes[str(t.abort_cause)] = causes.get(str(t.abort_cause), 0) + 1
            cell = {
                "env": env, "fault": fault, "episodes": len(trajs), "aborted_episodes": sum(causes.values()),
                "causes": causes, "seconds": round(time.perf_counter() - t0, 1),
                "methods": {m: compare(groups, cfg) for m, cfg in presets(env).items()},
            }  # fmt: skip
            cells.append(cell)
            print(json.dumps(cell), flush=True)
    results: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "groups": n,
        "group_size": args.group_size,
        "cells": cells,
        "trainer": trainer_run(2 if args.quick else args.iterations),
    }
    print(json.dumps(results["trainer"]), flush=True)
    prefix = (
        Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"fault_injection_{results['date']}"
    )
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    table = markdown(results)
    Path(f"{prefix}.md").write_text(
        f"# Fault injection ({results['date']}, {results['machine']})\n\n{table}\n", encoding="utf-8"
    )
    print(table)
    bad = [c for c in cells for m in c["methods"].values() if not m["exact"]]
    ok = not bad and results["trainer"]["iterations_done"] == results["trainer"]["iterations_asked"]
    return 0 if ok else 1


def rewrite_markdown(results_json: Path) -> None:
    """Rewrite the ``.md`` beside a results file from it (after a change to :func:`markdown`; no rerun)."""
    results = json.loads(results_json.read_text(encoding="utf-8"))
    results_json.with_suffix(".md").write_text(
        f"# Fault injection ({results['date']}, {results['machine']})\n\n{markdown(results)}\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    raise SystemExit(main())
