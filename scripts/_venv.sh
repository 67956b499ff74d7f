# Sourced by the test scripts that run an integration in a virtualenv of its own (test_vllm_cpu.sh, test_verl.sh,
# test_verifiers.sh): one place for where such a venv lives and how packages go into it.

# venv_for NAME [VENV_PATH] [venv options...]: create (once) the venv VENV_PATH, by default
# ${XDG_CACHE_HOME:-~/.cache}/stepgym/venv-NAME, and set VENV and VPY (its python). The venv is reused afterwards.
venv_for() {
  local name=$1 path=${2:-}
  shift 2 || shift $#
  VENV=${path:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/stepgym/venv-$name}
  if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")"
    "${PYTHON:-python3}" -m venv "$@" "$VENV"
  fi
  VPY="$VENV/bin/python"
}

# pipi ARGS...: quiet pip install into the venv.
pipi() { "$VPY" -m pip install -q --disable-pip-version-check "$@"; }

# pipi_keeping REGEX PACKAGES...: install PACKAGES without moving the versions of what the venv already has whose
# names match REGEX (e.g. '^(torch|transformers)=='): the integration's own pins win.
pipi_keeping() {
  local keep=$1 pins rc=0
  shift
  pins=$(mktemp)
  "$VPY" -m pip freeze | grep -i -E "$keep" >"$pins" || true
  pipi -c "$pins" "$@" || rc=$?
  rm -f "$pins"
  return "$rc"
}

# The dependencies stepgym's own modules need in such a venv (stepgym itself is imported from the checkout).
STEPGYM_CORE_DEPS=("gymnasium==1.4.0" "pettingzoo==1.27.0" "networkx>=3.2" "tqdm>=4.66" "tyro>=0.9"
  "safetensors>=0.4" "pytest>=8" "pytest-timeout==2.4.0")
