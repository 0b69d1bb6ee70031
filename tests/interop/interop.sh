#!/usr/bin/env bash
# The interop suite's CTest entry (tests/interop/CMakeLists.txt). It installs a ~2 GB Python environment from PyPI
# once per build tree and trains the tiny preset briefly; it runs in every full test run (CI included) unless
# DFLASH_INTEROP=0, and whenever what it needs cannot be had it exits 77 (CTest's skip) saying why. Never a silent
# pass.
#   interop.sh venv VENV                 create VENV once from requirements.txt (pinned, --no-deps)
#   interop.sh run  TRAIN RUN            dflash-train --preset tiny --output RUN (CPU, a short training)
#   interop.sh test VENV RUN ARGS...     VENV/bin/python interop_test.py ARGS... (RUN must hold the run above)
# DFLASH_INTEROP_VENV, when set, replaces VENV (one environment for several build trees).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
skip() { echo "SKIP: $*"; exit 77; }
[ "${DFLASH_INTEROP:-1}" != 0 ] ||
  skip "DFLASH_INTEROP=0 turns the interop suite (transformers + dflash from PyPI, ~2 GB) off"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
case "${1:-}" in
  venv)
    venv="${DFLASH_INTEROP_VENV:-$2}"
    cmp -s "$venv/.requirements" "$here/requirements.txt" && exit 0
    rm -rf "$venv"
    python3 -m venv "$venv" || skip "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$here/requirements.txt" ||
      skip "could not install tests/interop/requirements.txt from PyPI (offline?)"
    "$venv/bin/python" -c "import torch, transformers, dflash" ||
      skip "the installed environment does not import (torch needs the CUDA toolkit's libraries in /usr/local/cuda)"
    cp "$here/requirements.txt" "$venv/.requirements"
    ;;
  run)
    train="$2" run="$3"
    rm -rf "$run"
    # 64 steps: enough for a drafter that accepts some tokens, so tau is not trivially 1.
    "$train" --preset tiny --output "$run" --device cpu --max-steps 64 --save-every 0 || exit 1
    ;;
  test)
    venv="${DFLASH_INTEROP_VENV:-$2}" run="$3"
    shift 3
    [ -f "$venv/.requirements" ] || skip "the interop Python environment is not installed (see test interop_venv)"
    [ -f "$run/eval-trained.json" ] || skip "no tiny preset run in $run (see test interop_tiny_run)"
    exec "$venv/bin/python" "$here/interop_test.py" "$@"
    ;;
  *) echo "usage: interop.sh venv VENV | run TRAIN RUN | test VENV RUN ARGS..." >&2; exit 2 ;;
esac
