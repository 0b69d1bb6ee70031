#!/usr/bin/env bash
# Configures (once) and builds dflash-tune into ./build with Ninja and ccache. Extra arguments go to CMake's
# configure step (e.g. -DDFLASH_WITH_TORCH=ON). Quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="${DFLASH_BUILD_DIR:-build}"
jobs="${DFLASH_JOBS:-$(nproc)}"
if [ ! -f "$build_dir/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${DFLASH_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
fi
cmake --build "$build_dir" -j "$jobs"
