"""Screenshot of ``stepgym view`` on a real run, for the README (docs/viewer.png).

Records a short real training run first (``stepgym train --preset credit-proas``: the tiny in-process model after a
short format warm-up, real generation on CreditToy, ProAS shaping, plain GRPO and GiGPO compared on the same
batch), or takes an existing run folder with ``--run``. Then serves the viewer on 127.0.0.1, opens a failed
episode of a mixed group in headless Chromium and saves the page as PNG.

    python scripts/viewer_screenshot.py                       # ~1 min on 2 CPU cores
    python scripts/viewer_screenshot.py --run runs/credit-proas --out /tmp/view.png
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from stepgym.cli import main as stepgym_main
from stepgym.viewer import ViewerServer, load_run


def record(out: Path) -> None:
    args = ["train", "--preset", "credit-proas", "--run.output-dir", str(out), "--run.iterations", "2"]
    args += ["--warmup.steps", "100", "--rollout.n-tasks", "4", "--eval.limit", "2"]
    args += ["--run.no-progress", "--run.no-tensorboard", "--run.no-report"]
    if stepgym_main(args) != 0:
        raise SystemExit("the training run failed")


def pick(run) -> tuple[str, int]:
    """A mixed group (some rollouts succeed) and its first failed rollout; else the first group's first rollout."""
    for s in run.index:
        if 0 < s["wins"] < s["size"]:
            eps = run.groups[s["id"]]["episodes"]
            return s["id"], next(e["rollout"] for e in eps if not e["won"])
    first = run.index[0]["id"]
    return first, run.groups[first]["episodes"][0]["rollout"]


def shrink(png: Path) -> None:
    """A 64-colour palette PNG (a third of the size, text still crisp) when Pillow is there (it comes with the
    ``train`` extra's matplotlib)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def shoot(run_dir: Path, png: Path, width: int, height: int) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from stepgym.envs.webshop.site_env import CHROMIUM_FLAGS

    run = load_run(run_dir)
    m = run.meta
    size = sum(Path(src["file"]).stat().st_size for src in m["sources"])
    print(f"recording: {m['n_groups']} groups, {m['n_steps']} steps, {size} bytes compressed")
    gid, rollout = pick(run)
    profile = tempfile.mkdtemp(prefix="stepgym-shot-")
    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=opts)
    try:
        with ViewerServer(run) as srv:
            driver.get(f"{srv.url}#group={gid}&rollout={rollout}")
            WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.ID, "episode"))
            time.sleep(0.3)  # let layout settle
            png.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(png))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    shrink(png)
    print(f"wrote {png} (group {gid}, rollout {rollout}, from {run_dir})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=None, help="an existing run folder (default: record a fresh short run)")
    ap.add_argument("--out", default="docs/viewer.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args()
    if args.run:
        shoot(Path(args.run), Path(args.out), args.width, args.height)
        return
    with tempfile.TemporaryDirectory(prefix="stepgym-view-run-") as tmp:
        record(Path(tmp) / "credit-proas")
        shoot(Path(tmp) / "credit-proas", Path(args.out), args.width, args.height)


if __name__ == "__main__":
    main()
