#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite under CTest.
# Tests labelled `gpu` skip themselves (with a reason) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/scripts/install-deps.sh
tools/scripts/build.sh
ctest --test-dir "${DFLASH_BUILD_DIR:-build}" --output-on-failure -j "${DFLASH_TEST_JOBS:-2}" "$@"
