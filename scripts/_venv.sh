# Sourced by the test scripts that run an integration in a virtualenv of its own (test_vllm_cpu.sh, test_verl.sh,
# test_verifiers.sh): one place for where such a venv lives, how packages go into it, and how it sees stepgym's
# dependencies.
#
# Two kinds of integration venv, one rule each:
# * isolated (vllm-cpu, verl): nothing of the parent environment is visible; the script installs the integration
#   and then stepgym's own dependencies (STEPGYM_CORE_DEPS) into it.
# * layered (verifiers, `venv_for NAME PATH --sees-parent`): the venv sees every package of the interpreter that
#   runs the tests (${PYTHON:-python3}), whatever that is (a system Python, a virtualenv, a conda env), and its own
#   installs shadow those. `python -m venv --system-site-packages` cannot do this from inside a virtualenv: there
#   the "system" site-packages are the base interpreter's, not the virtualenv's, so stepgym's stack is invisible.
#   Instead a .pth file in the venv's own site-packages adds the parent's site directories after its own
#   (site.addsitedir, so the parent's own .pth files are honoured too). It is rewritten on every call, so a reused
#   venv follows the interpreter of the current run.
# Either way, venv_check (run by every script before its tests) fails loudly when gymnasium or stepgym does not
# import in the venv, instead of letting pytest stop at collection with a ModuleNotFoundError.

_STEPGYM_PARENT_PTH=_stepgym_parent_site.pth

# venv_for NAME [VENV_PATH] [--sees-parent] [venv options...]: create (once) the venv VENV_PATH, by default
# ${XDG_CACHE_HOME:-~/.cache}/stepgym/venv-NAME, and set VENV and VPY (its python). The venv is reused afterwards.
# --sees-parent makes it a layered venv (above) and checks at once that gymnasium and stepgym import in it.
venv_for() {
  local name=$1 path=${2:-} parent=0
  shift 2 || shift $#
  if [ "${1:-}" = --sees-parent ]; then
    parent=1
    shift
  fi
  VENV=${path:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/stepgym/venv-$name}
  if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")"
    "${PYTHON:-python3}" -m venv "$@" "$VENV" || { echo "venv_for: could not create $VENV" >&2; return 1; }
  fi
  VPY="$VENV/bin/python"
  if [ "$parent" = 1 ]; then
    _venv_link_parent || return 1
    venv_check || return 1
  fi
}

# _venv_link_parent: write the .pth file that layers VENV over the parent interpreter's site directories: its
# purelib/platlib, every site-packages directory it reads (a virtualenv with system site packages reads two) and
# the user site when enabled. Written to a temporary name and renamed, so an interrupted call leaves the old file.
_venv_link_parent() {
  local own
  own=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
  "${PYTHON:-python3}" - "$own" >"$own/$_STEPGYM_PARENT_PTH.tmp" <<'PY' || {
import os, site, sys, sysconfig
paths = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")] + list(site.getsitepackages())
if site.ENABLE_USER_SITE:
    paths.append(site.getusersitepackages())
print(f"# written by stepgym's scripts/_venv.sh: the site directories of {sys.executable}, after this venv's own")
seen = {os.path.realpath(sys.argv[1])}
for p in paths:
    if p and os.path.isdir(p) and os.path.realpath(p) not in seen:
        seen.add(os.path.realpath(p))
        print(f"import site; site.addsitedir({p!r})")
PY
    echo "venv_for: ${PYTHON:-python3} did not report its site directories" >&2
    rm -f "$own/$_STEPGYM_PARENT_PTH.tmp"
    return 1
  }
  mv "$own/$_STEPGYM_PARENT_PTH.tmp" "$own/$_STEPGYM_PARENT_PTH"
}

# venv_check: gymnasium and stepgym (from this checkout, as the tests import it) must import in VPY.
venv_check() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if ! PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$VPY" -c "import gymnasium, stepgym" 2>"$VENV/.check.err"; then
    {
      echo "venv_for: the integration venv $VENV cannot import gymnasium/stepgym:"
      tail -3 "$VENV/.check.err"
      echo "It was made by ${PYTHON:-python3} ($("${PYTHON:-python3}" -c 'import sys; print(sys.prefix)' 2>/dev/null))."
      echo "Install stepgym's dependencies there (bash scripts/setup.sh), or set PYTHON to the interpreter that has them."
    } >&2
    return 1
  fi
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
