#!/usr/bin/env bash
# The Python package's CTest entry (tests/python/CMakeLists.txt), on the CPU:
#   python_tests.sh venv VENV INTEROP_VENV   VENV once: a venv that sees INTEROP_VENV's pinned torch (a .pth file:
#                                            torch is installed once per build tree) + requirements.txt (--no-deps)
#   python_tests.sh install VENV BUILD SRC   the README's install command into VENV (the extension's CMake build
#                                            kept in BUILD: a rerun rebuilds only what changed)
#   python_tests.sh test VENV FILE           VENV/bin/python -m unittest FILE (gpu_test.py: skipped without a GPU)
# Whenever what it needs cannot be had (DFLASH_INTEROP=0, no network) it exits 77 (CTest's skip) saying why.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
skip() { echo "SKIP: $*"; exit 77; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
case "${1:-}" in
  venv)
    venv="$2" interop="${DFLASH_INTEROP_VENV:-$3}"
    [ -f "$interop/.requirements" ] || skip "the interop suite's Python environment (torch) is not installed (see test interop_venv)"
    stamp="$(cat "$here/requirements.txt" "$interop/.requirements")"
    [ -f "$venv/.requirements" ] && [ "$(cat "$venv/.requirements")" = "$stamp" ] && exit 0
    rm -rf "$venv"
    python3 -m venv "$venv" || skip "python3 -m venv failed (Debian: apt-get install python3-venv)"
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    interop_site="$("$interop/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    echo "$interop_site" > "$site/interop_venv.pth"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$here/requirements.txt" ||
      skip "could not install tests/python/requirements.txt from PyPI (offline?)"
    printf '%s' "$stamp" > "$venv/.requirements"
    ;;
  install)
    venv="$2" build="$3" src="$4"
    [ -f "$venv/.requirements" ] || skip "the package tests' Python environment is not installed (see test python_venv)"
    # The README's command; --no-deps: torch is the interop environment's, seen through the .pth file.
    cd "$src" && CMAKE_BUILD_PARALLEL_LEVEL="${DFLASH_JOBS:-$(nproc)}" \
      "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation \
      -C build-dir="$build" . || exit 1
    ;;
  test)
    venv="$2" file="$3"
    "$venv/bin/python" -c "import dflash_tune" 2>/dev/null ||
      skip "dflash_tune is not installed in $venv (see test python_install)"
    case "$file" in
      *gpu_test.py) "$venv/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
        skip "no CUDA GPU here" ;;
    esac
    cd "$(dirname "$file")" && exec "$venv/bin/python" -m unittest -v "$(basename "$file" .py)"
    ;;
  *) echo "usage: python_tests.sh venv VENV INTEROP_VENV | install VENV BUILD SRC | test VENV FILE" >&2; exit 2 ;;
esac
