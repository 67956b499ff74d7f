#!/usr/bin/env bash
# stepgym serve through OpenEnv 0.10's own client (and TRL's OpenEnv path), run against the real openenv package:
# openenv 0.10.0 pulls gradio and fastmcp, whose mcp pin is older than the main environment's, so it goes into a
# virtualenv of its own that sees the packages of the interpreter running the tests, be it a system Python, a
# virtualenv or a conda env (a layered venv, scripts/_venv.sh: torch, transformers, TRL, alfworld... are not
# installed twice) and shadows only what openenv pins. Runs tests/test_serve_openenv.py there. ~1 min to build;
# the venv is reused afterwards ($STEPGYM_OPENENV_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
venv_for openenv "${STEPGYM_OPENENV_VENV:-}" --sees-parent
pipi "openenv==0.10.0"
venv_check  # openenv's pins must not have broken gymnasium/stepgym either
"$VPY" -c "import openenv.core"  # fail here, loudly, rather than let the test module define nothing
STEPGYM_OPENENV_TESTS=1 STEPGYM_NO_SKIPS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$VPY" -m pytest -q -p no:cacheprovider tests/test_serve_openenv.py "$@"
