"""How long the docs' TRL example takes: the ALFWorld + ProAS block of docs/trl.md ("TRL, way 2"), run as
written except for ``max_steps`` (and the output folder), timed per optimizer step.

The docs quote this script's numbers so that a reader knows what ``trainer.train()`` will cost before starting it
(SmolLM2-135M-Instruct, 4 completions per step, up to 2,048 completion tokens, on whatever this machine is).

    STEPGYM_DATA=../shared/data python benchmarks/trl_example_time.py --steps 1
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "trl.md"
HEADING = "### TRL, way 2"


def example_code(steps: int, out_dir: Path) -> str:
    """The page's first ```python block after HEADING, with ``max_steps`` and ``output_dir`` replaced."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(HEADING)
    block = re.search(r"```python\n(.*?)```", text[start:], re.S)
    if block is None:
        raise SystemExit(f"no python block after {HEADING!r} in {PAGE}")
    code = block.group(1)
    if "max_steps=10" not in code or 'output_dir="runs/trl-alfworld-proas"' not in code:
        raise SystemExit("the docs' example changed: update benchmarks/trl_example_time.py's replacements")
    code = code.replace("max_steps=10", f"max_steps={steps}")
    return code.replace('output_dir="runs/trl-alfworld-proas"', f"output_dir={str(out_dir)!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1, help="optimizer steps to time (the docs run 10)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "example.py"
        script.write_text(example_code(args.steps, Path(tmp) / "run"), encoding="utf-8")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, str(script)], cwd=tmp)
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        print(f"the example failed (exit {done.returncode})", file=sys.stderr)
        return done.returncode
    print(
        f"docs/trl.md TRL example, max_steps={args.steps}: {wall:.0f} s wall "
        f"({wall / args.steps:.0f} s per step including model and env set-up; the docs' max_steps=10 is about "
        f"{10 * wall / args.steps / 60:.0f} min at this rate)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
