#!/usr/bin/env bash
# The project's venv and its locked dependencies (docs/operations.md, "Dependencies").
#
#   scripts/deps.sh install [GROUP...]  make the venv if missing; install the runtime
#                                       dependencies and the named groups (test, lint, bench,
#                                       dev = test + lint), exactly as uv.lock has them
#   scripts/deps.sh lock [--upgrade]    re-resolve uv.lock (after editing pyproject.toml;
#                                       --upgrade: every package to its newest allowed
#                                       version) and write the requirements files from it
#   scripts/deps.sh check               fail when uv.lock or a requirements file has
#                                       drifted from pyproject.toml / uv.lock
#
# VENV: the venv (default .venv). PYTHON: the interpreter a new venv is made with (the
# Makefile finds a 3.12 or newer). uv: $UV if set, else the venv's own, else the one on
# PATH, else uv $UV_VERSION installed into the venv from PyPI with pip. SENDLATER_PIP=1
# (or no uv to be had) installs with plain pip from the hashed requirements files instead.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
UV_VERSION=${UV_VERSION:-0.13.9}
# The groups `dev` stands for (pyproject.toml), for the plain-pip files.
GROUPS_OF_dev="test lint"
EXPORT_HEADER="# Generated from uv.lock by scripts/deps.sh lock (make lock); do not edit."

die() { echo "deps: $*" >&2; exit 1; }

find_uv() {
  if [ -n "${UV:-}" ]; then echo "$UV"
  elif [ -x "$VENV/bin/uv" ]; then echo "$VENV/bin/uv"
  elif command -v uv >/dev/null 2>&1; then command -v uv
  fi
}

# uv, installed into the venv (pinned, from PyPI) when there is none; empty when that fails.
ensure_uv() {
  local uv
  uv=$(find_uv)
  if [ -z "$uv" ] && [ -x "$VENV/bin/pip" ]; then
    quiet "$VENV/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION" \
      && uv="$VENV/bin/uv"
  fi
  echo "$uv"
}

# A command's output only when it fails (pip warns about this machine's missing find-links).
quiet() {
  local log rc=0
  log=$(mktemp)
  "$@" >"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || cat "$log" >&2
  rm -f "$log"
  return $rc
}

make_venv() {
  [ -x "$VENV/bin/python" ] && return 0
  [ -n "${PYTHON:-}" ] || die "Python 3.12 or newer is required (Django 6.1); none found on PATH"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 12))' \
    || die "$PYTHON is Python $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'); 3.12 or newer is required"
  local uv
  uv=$(find_uv)
  if [ -n "${SENDLATER_PIP:-}" ]; then
    "$PYTHON" -m venv "$VENV"
  elif [ -n "$uv" ]; then
    "$uv" venv --quiet --seed --python "$PYTHON" "$VENV"
  else
    # The quick way (2 s, not 4): a venv without ensurepip's pip, uv into it with the
    # interpreter's own pip (22.3 or newer: --python), then the venv's pip through uv.
    "$PYTHON" -m venv --without-pip "$VENV"
    if quiet "$PYTHON" -m pip --python "$VENV/bin/python" install --quiet \
        --disable-pip-version-check "uv==$UV_VERSION" \
      && quiet "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" pip; then
      return 0
    fi
    echo "deps: no uv from the interpreter's pip; making the venv with its own pip" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
  fi
}

# The plain-pip file of one group.
group_file() { echo "requirements/$1.txt"; }

install() {
  local groups=() g
  for g in "$@"; do
    case $g in
      dev) for g in $GROUPS_OF_dev; do groups+=("$g"); done ;;
      test|lint|bench) groups+=("$g") ;;
      *) die "unknown group '$g' (test, lint, bench or dev)" ;;
    esac
  done
  make_venv
  local uv=""
  [ -n "${SENDLATER_PIP:-}" ] || uv=$(ensure_uv)
  if [ -n "$uv" ]; then
    local args=()
    for g in "${groups[@]}"; do args+=(--group "$g"); done
    "$uv" lock --check --quiet 2>/dev/null \
      || die "uv.lock does not match pyproject.toml (edited since the last lock): run make lock"
    # --inexact: what is there stays (uv itself, a group installed before). Compiled as pip
    # does: every process of the service (and of the tests) imports faster from .pyc.
    UV_PROJECT_ENVIRONMENT="$VENV" "$uv" sync --locked --inexact --no-default-groups \
      --compile-bytecode "${args[@]}" \
      || die "uv sync failed (above; $("$uv" --version) at $uv, the lock is made with" \
        "uv $UV_VERSION): UV=path/to/uv names another, SENDLATER_PIP=1 installs with plain pip"
  else
    echo "deps: installing with pip (no uv)" >&2
    local pip=("$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes)
    "${pip[@]}" -r requirements.txt
    for g in "${groups[@]}"; do "${pip[@]}" -r "$(group_file "$g")"; done
    if [[ " ${groups[*]} " == *" test "* ]]; then
      # The client kit of this tree, editable (its dependencies come from the file above).
      "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -e ./clients/python
    fi
  fi
}

# Each requirements file and the uv export arguments it is made with.
EXPORTS=(
  "requirements.txt|--no-dev"
  "requirements/test.txt|--only-group test --no-emit-package sendlater-client"
  "requirements/lint.txt|--only-group lint"
  "requirements/bench.txt|--only-group bench"
)

# One requirements file's content, from uv.lock as it is.
export_text() {
  local uv=$1 args=$2
  echo "$EXPORT_HEADER"
  # shellcheck disable=SC2086  # the arguments are split on purpose
  "$uv" export --frozen --quiet --format requirements-txt --no-header $args
}

need_uv() {
  local uv
  make_venv >&2
  uv=$(ensure_uv)
  [ -n "$uv" ] || die "this needs uv, and uv $UV_VERSION could not be installed into $VENV"
  echo "$uv"
}

lock() {
  local uv entry file
  uv=$(need_uv)
  "$uv" lock "$@"
  mkdir -p requirements
  for entry in "${EXPORTS[@]}"; do
    file=${entry%%|*}
    export_text "$uv" "${entry#*|}" >"$file"
  done
  echo "deps: uv.lock and requirements files written"
}

check() {
  local uv entry file bad=0
  uv=$(need_uv)
  "$uv" lock --check --quiet \
    || die "uv.lock does not match pyproject.toml: run make lock"
  for entry in "${EXPORTS[@]}"; do
    file=${entry%%|*}
    if ! diff -u "$file" <(export_text "$uv" "${entry#*|}") >&2; then
      echo "deps: $file differs from uv.lock (above): run make lock" >&2
      bad=1
    fi
  done
  return $bad
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  install) install "$@" ;;
  lock) lock "$@" ;;
  check) check ;;
  *) die "usage: scripts/deps.sh install [GROUP...] | lock [--upgrade] | check" ;;
esac
