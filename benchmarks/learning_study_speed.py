"""A learning-study cell beside the same cell at commit f626826, side by side on one machine.

The reference is the whole cell path as it was at f626826 (``stepgym/`` and ``benchmarks/`` of that commit,
extracted with ``git archive`` into a temporary folder); the new one is this checkout. Every run is one fresh
process (``PYTHONHASHSEED=0`` for both; the reference gets :data:`REFERENCE_PATCHES`, the goal words in word order,
so that both sum an action's features in one order and learn the same weights to the bit): it imports, plays one small untimed cell (imports, parsed games: costs
a sweep's worker pays once), then times one cell (env, method, seed; the study's default settings unless flags
say otherwise) and prints its record. Repeats are interleaved (old, new, new, old, ...) so that other load on the
machine falls on both alike; the ratio reported is median(old) / median(new) of the timed cells' wall times. The
records of every run (every field but the wall time, plus a digest of the learned weights) must be equal, or the
script stops with an error.

    python benchmarks/learning_study_speed.py --envs ALFWorld Sokoban --repeats 3 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = "f626826"
ENVS = ("ALFWorld", "Sokoban", "TextCraft", "BabyAI", "WebShop")

#: what one timed run does (in a fresh process with the tree to time first on sys.path)
_CHILD = r"""
import hashlib, json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/benchmarks"]
import learning_study as ls
argv = json.loads(sys.argv[2])
(cell,) = ls.plan(ls.parse(argv))
ls.run_cell({**cell, "args": {**cell["args"], "iterations": 1, "eval_tasks": 2}})  # untimed warm-up
last = {}
orig = ls.evaluate
def evaluate(envs, held, policy, seed, steps):
    last["w"] = policy.w.copy()
    return orig(envs, held, policy, seed, steps)
ls.evaluate = evaluate
prof = None
if len(sys.argv) > 3 and sys.argv[3] == "profile":
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
t0 = time.perf_counter()
rec = ls.run_cell(cell)
dt = time.perf_counter() - t0
parts = {}
if prof is not None:
    import pstats
    prof.disable()
    st = pstats.Stats(prof).stats
    def cum(file_end, name):
        return sum(v[3] for (f, _, fn), v in st.items() if f.endswith(file_end) and fn == name)
    parts = {
        "cell": cum("learning_study.py", "run_cell"),
        "env step": cum("envs/base.py", "step"),
        "env reset": cum("envs/base.py", "reset"),
        "value labels (ValueWrapper)": cum("values/wrapper.py", "step") + cum("values/wrapper.py", "reset"),
        "features and logits": cum("learning_study.py", "ids") + cum("learning_study.py", "context"),
        "shaping (trainer batch, shape_advantages)": cum("learning_study.py", "advantages"),
        "policy update": cum("learning_study.py", "update_steps") + cum("learning_study.py", "update"),
        "evaluation (held-out episodes, all of it)": cum("learning_study.py", "evaluate"),
        "warm start": cum("learning_study.py", "warm_start"),
    }
rec.pop("seconds")
names = {i: f for f, i in ls._IDS.items()}
w = last["w"]
items = sorted((repr(names[i]), float(w[i]).hex()) for i in range(min(len(w), len(names))) if w[i] != 0.0)
rec["weights_sha1"] = hashlib.sha1(json.dumps(items).encode()).hexdigest()
print("RESULT " + json.dumps({"seconds": dt, "record": rec, "profile": parts}))
"""


#: what the reference gets on top of f626826: the learner's goal words in word order (before 2026-12-07 both trees
#: summed an action's features in the goal set's hash order, made equal by PYTHONHASHSEED=0; this tree sorts them,
#: so the reference must too for the learned weights to agree to the bit). (file, text, replacement), each once.
REFERENCE_PATCHES = (("benchmarks/learning_study.py", "for g in ctx.goal]", "for g in sorted(ctx.goal)]"),)


def reference_tree(commit: str = REFERENCE) -> Path:
    """``stepgym/`` and ``benchmarks/`` of ``commit`` in a temporary folder, with :data:`REFERENCE_PATCHES`."""
    out = Path(tempfile.mkdtemp(prefix="ls_ref_"))
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "stepgym", "benchmarks"], capture_output=True, check=True
    ).stdout
    archive = out / "tree.tar"
    archive.write_bytes(data)
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    archive.unlink()
    for name, text, fix in REFERENCE_PATCHES:
        path = out / name
        source = path.read_text(encoding="utf-8")
        if source.count(text) != 1:
            raise SystemExit(f"the reference patch of {name} no longer applies ({text!r} is not there once)")
        path.write_text(source.replace(text, fix), encoding="utf-8")
    return out


def timed_cell(tree: Path, argv: list[str], profile: bool = False) -> tuple[float, dict, dict]:
    """One cell in a fresh process importing ``tree``'s code: (wall seconds of the cell, its record, and with
    ``profile`` the cProfile cumulative seconds of its parts)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tree), json.dumps(argv), "profile" if profile else "time"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"the cell failed under {tree}:\n{proc.stderr[-3000:]}")
    out = json.loads(line[len("RESULT ") :])
    return out["seconds"], out["record"], out["profile"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    p.add_argument("--method", default="grpo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="then one cell of each under cProfile, by part")
    p.add_argument("--out", default=None, help="write the timings here (JSON)")
    a, rest = p.parse_known_args(argv)
    trees = {"old": reference_tree(), "new": REPO}
    results = []
    for env in a.envs:
        cell_argv = [*rest, "--envs", env, "--methods", a.method, "--seeds", "1", "--first-seed", str(a.seed)]
        times: dict[str, list[float]] = {"old": [], "new": []}
        want = None
        for i in range(a.repeats):
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                dt, rec, _ = timed_cell(trees[name], cell_argv)
                want = want or rec
                if rec != want:
                    bad = [k for k in want if rec.get(k) != want[k]]
                    raise SystemExit(f"{env}: the {name} cell's record differs from the first run's: {bad}")
                times[name].append(dt)
                print(f"{env} {a.method} seed {a.seed} {name}: {dt:.2f} s", flush=True)
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        results.append(
            {"env": env, "method": a.method, "seed": a.seed, "old_s": times["old"], "new_s": times["new"],
             "median_old_s": old, "median_new_s": new, "ratio": old / new, "records_equal": True,
             "held_curve": want["held"], "weights_sha1": want["weights_sha1"]}
        )  # fmt: skip
        print(f"{env}: median {old:.2f} s → {new:.2f} s: {old / new:.2f}× (records equal)", flush=True)
        if a.profile:  # one more cell of each under cProfile (its overhead inflates Python-heavy parts)
            for name in ("old", "new"):
                dt, rec, parts = timed_cell(trees[name], cell_argv, profile=True)
                if rec != want:
                    raise SystemExit(f"{env}: the profiled {name} cell's record differs")
                results[-1][f"profile_{name}"] = parts
                print(
                    f"{env} {name} profile: " + ", ".join(f"{k} {v:.1f} s" for k, v in parts.items()),
                    flush=True,
                )
    if a.out:
        info = {
            "reference": REFERENCE,
            "measured": subprocess.run(
                ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True
            ).stdout.strip(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "load_average_at_end": os.getloadavg(),
            "cell_argv": [*rest, "--methods", a.method, "--seeds", "1", "--first-seed", str(a.seed)],
            "repeats": a.repeats,
            "results": results,
        }
        Path(a.out).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
