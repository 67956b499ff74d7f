#!/usr/bin/env bash
# The verl 0.9 integration, run against the real verl package in a virtualenv of its own: verl 0.9.1 pins
# transformers < 5.11 and tensordict <= 0.10, which conflict with what the main environment (TRL 1.16) needs.
# Runs tests/test_integrations_verl*.py there (the agent loop against a stand-in server manager, the advantage
# estimators on verl's DataProto, the v1 trainer's overridden advantage step through a real TransferQueue).
# CPU only: verl's training needs a GPU with vLLM/SGLang and FSDP workers, so no update is run.
# The venv is reused afterwards ($STEPGYM_VERL_VENV); a cold build is a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
venv_for verl "${STEPGYM_VERL_VENV:-}"
pipi "torch==2.13.0"  # first: an unpinned torch pulls a multi-GB CUDA build
# verl itself, and four packages of its `verl-core` extra: three the agent loop module imports, and TransferQueue,
# the v1 trainer's data queue (the rest of that extra, torchcodec, qwen-vl-utils..., serves multimodal data).
pipi "verl==0.9.1" "cachetools==8.0.2" "fastapi==0.165.0" "uvicorn==0.54.0"
pipi_keeping '^(torch|verl|transformers|tensordict|numpy|tokenizers|ray)==' "transferqueue==0.1.11"
# stepgym's own dependencies, without moving what verl pinned; stepgym itself is imported from this checkout.
pipi_keeping '^(torch|verl|transformers|tensordict|numpy|tokenizers|ray)==' "${STEPGYM_CORE_DEPS[@]}"
venv_check  # gymnasium and stepgym import here, or a clear error
"$VPY" -c "import verl.experimental.agent_loop, verl.trainer.ppo.core_algos, transfer_queue"  # fail loudly, not a skip
RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled STEPGYM_NO_SKIPS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$VPY" -m pytest -q -p no:cacheprovider tests/test_integrations_verl.py tests/test_integrations_verl_train.py
