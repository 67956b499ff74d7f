#!/usr/bin/env bash
# The NeMo Gym 0.7 resources server (stepgym.integrations.nemo_gym), run against the real nemo-gym package and its
# own gymnasium_agent: nemo-gym 0.7.0 requires Python >= 3.13.14 (stepgym's env stack runs on 3.11), so it goes into
# an isolated virtualenv made by a Python 3.13 interpreter, with stepgym's core dependencies beside it (stepgym itself
# is imported from this checkout). The envs stay with the interpreter running the tests: the test starts
# `stepgym serve` with it ($STEPGYM_MAIN_PYTHON) and NeMo Gym's servers with the 3.13 venv, as NeMo Gym's launcher
# would. ~2 min and ~0.8 GB to build on first use; the venv is reused afterwards ($STEPGYM_NEMO_GYM_VENV).
#
# The interpreter: $STEPGYM_NEMO_PYTHON, else python3.13 on PATH, else the newest pyenv 3.13. One older than 3.13.14
# (this machine's pyenv has 3.13.0) installs nemo-gym with --ignore-requires-python, and the script says so. With
# no Python 3.13 at all the tests cannot run: the script says so and fails, unless STEPGYM_NEMO_GYM_OPTIONAL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh

find_py313() {
  local c
  for c in "${STEPGYM_NEMO_PYTHON:-}" "$(command -v python3.13 || true)" \
    $(ls -d "$(pyenv root 2>/dev/null || echo "${HOME:-/root}/.pyenv")"/versions/3.13*/bin/python3.13 2>/dev/null | sort -V -r); do
    if [ -n "$c" ] && "$c" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

if ! PY313=$(find_py313); then
  echo "test_nemo_gym.sh: no Python 3.13 found (set STEPGYM_NEMO_PYTHON): the NeMo Gym tests did NOT run" >&2
  [ "${STEPGYM_NEMO_GYM_OPTIONAL:-0}" = 1 ] && exit 0
  exit 1
fi
MAIN_PY=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)')
PYTHON="$PY313" venv_for nemo-gym "${STEPGYM_NEMO_GYM_VENV:-}"
ignore=()
if ! "$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 13, 14))'; then
  echo "test_nemo_gym.sh: $("$VPY" -V) is older than nemo-gym's Requires-Python >= 3.13.14: installing it with --ignore-requires-python" >&2
  ignore=(--ignore-requires-python)
fi
pipi "${ignore[@]}" "nemo-gym==0.7.0"
pipi_keeping '^(openai|numpy|pydantic|fastapi|starlette|httpx)==' "${STEPGYM_CORE_DEPS[@]}"
venv_check  # gymnasium and stepgym import here, or a clear error
"$VPY" -c "import nemo_gym, resources_servers.gymnasium, responses_api_agents.gymnasium_agent.app"  # loudly, here
STEPGYM_NEMO_GYM_TESTS=1 STEPGYM_MAIN_PYTHON="$MAIN_PY" STEPGYM_NO_SKIPS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$VPY" -m pytest -q -p no:cacheprovider tests/test_integrations_nemo_gym.py "$@"
