#!/usr/bin/env bash
# The verifiers 0.4 integration, run against the real verifiers package: verifiers 0.4.0 pins openai<3 and
# mcp==2.0.0, older than what the main environment has, so it goes into a virtualenv of its own that sees the
# packages of the interpreter running the tests, be it a system Python, a virtualenv or a conda env (a layered venv,
# scripts/_venv.sh: torch, transformers, alfworld... are not installed twice) and shadows only what verifiers pins. uv comes along: verifiers' `null` chat harness is a PEP 723 script that uv
# provisions (from PyPI, cached) on first use. Runs tests/test_integrations_verifiers.py there (vf-eval against a
# local OpenAI-compatible server). ~1 min to build; the venv is reused afterwards ($STEPGYM_VERIFIERS_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
venv_for verifiers "${STEPGYM_VERIFIERS_VENV:-}" --sees-parent
pipi "verifiers==0.4.0" "uv==0.13.9"
venv_check  # verifiers' pins must not have broken gymnasium/stepgym either
"$VPY" -c "import verifiers.v1"  # fail here, loudly, rather than let the test module define nothing
STEPGYM_VERIFIERS_TESTS=1 STEPGYM_NO_SKIPS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$VPY" -m pytest -q -p no:cacheprovider tests/test_integrations_verifiers.py
