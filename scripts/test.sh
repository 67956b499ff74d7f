#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, then pytest over the benchmark data in ../shared/data
# (or wherever $STEPGYM_DATA points). Missing data is a failure here, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export STEPGYM_DATA="${STEPGYM_DATA:-$(cd .. && pwd)/shared/data}"
export STEPGYM_REQUIRE_DATA=1 STEPGYM_NO_SKIPS=1  # missing data or a skipped test (but GPU ones) fails
export RAY_USAGE_STATS_ENABLED=0  # Ray (env executor tests) sends no usage statistics from CI
rc=0
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider --durations=15 "$@" || rc=$?
# The integration venvs below come from scripts/_venv.sh; tests/test_scripts_venv.py (in the run above) checks that a
# layered one sees the interpreter running the tests even when that is a virtualenv, and each script runs venv_check.
# The whole suite (no pytest arguments) also runs the vLLM backend on CPU, in a virtualenv of its own.
if [ $# -eq 0 ] && [ "${STEPGYM_SKIP_VLLM_CPU:-0}" != 1 ]; then
  bash scripts/test_vllm_cpu.sh || rc=$?
fi
# ... and the verl 0.9 integration, in a virtualenv of its own too (verl pins versions that conflict with TRL's).
if [ $# -eq 0 ] && [ "${STEPGYM_SKIP_VERL:-0}" != 1 ]; then
  bash scripts/test_verl.sh || rc=$?
fi
# ... and the verifiers 0.4 integration, in a virtualenv of its own too (verifiers pins an older openai and mcp).
if [ $# -eq 0 ] && [ "${STEPGYM_SKIP_VERIFIERS:-0}" != 1 ]; then
  bash scripts/test_verifiers.sh || rc=$?
fi
# ... and stepgym serve through OpenEnv 0.10's own client and TRL's OpenEnv path, in a virtualenv of its own too
# (openenv pulls gradio and fastmcp, whose mcp is older than the main environment's).
if [ $# -eq 0 ] && [ "${STEPGYM_SKIP_OPENENV:-0}" != 1 ]; then
  bash scripts/test_openenv.sh || rc=$?
fi
# ... and the NeMo Gym 0.7 resources server, in a Python 3.13 virtualenv of its own (nemo-gym requires Python 3.13;
# stepgym serve runs with this interpreter beside it).
if [ $# -eq 0 ] && [ "${STEPGYM_SKIP_NEMO_GYM:-0}" != 1 ]; then
  bash scripts/test_nemo_gym.sh || rc=$?
fi
exit "$rc"
