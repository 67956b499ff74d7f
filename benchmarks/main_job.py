"""Measure the README's main job: wall time and peak resident memory of ``stepgym train --preset alfworld-cpu``.

The README quotes the numbers this script prints. It runs the command in a child process (exactly as a user
would, through the installed ``stepgym`` entry point) and samples the resident memory of the child's whole process
tree every 0.2 s from ``/proc`` (the trainer, and any helper process it starts), so the peak is what the machine
had to hold, not only the Python process. The kernel's own high-water mark of the largest single process
(``ru_maxrss`` of the children) is printed beside it as a cross-check.

Usage::

    STEPGYM_DATA=../shared/data python benchmarks/main_job.py [--output-dir runs/main-job-bench] [-- extra train args]

Linux only (reads ``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    """All descendants of ``pid`` (through /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _sample(pid: int, peak: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        total = sum(_rss(p) for p in [pid, *_children(pid)])
        peak["tree"] = max(peak["tree"], total)
        stop.wait(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", default="runs/main-job-bench")
    ap.add_argument("--preset", default="alfworld-cpu")
    ap.add_argument("--json", help="also write the result to this file")
    ap.add_argument("extra", nargs="*", help="extra `stepgym train` arguments (after --)")
    args = ap.parse_args(argv)

    exe = shutil.which("stepgym")
    cmd = [exe] if exe else [sys.executable, "-m", "stepgym.cli"]
    cmd += ["train", "--preset", args.preset, "--run.output-dir", args.output_dir, *args.extra]
    shutil.rmtree(args.output_dir, ignore_errors=True)

    peak = {"tree": 0}
    stop = threading.Event()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    sampler = threading.Thread(target=_sample, args=(proc.pid, peak, stop), daemon=True)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()

    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    result = {
        "command": " ".join(cmd),
        "exit_code": rc,
        "wall_s": round(wall, 1),
        "peak_tree_rss_gb": round(peak["tree"] / 1e9, 2),
        "max_single_process_rss_gb": round(maxrss / 1e9, 2),
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
