#!/usr/bin/env bash
# Fills, here on the CPU machine (network: Debian mirrors and PyPI), the git-ignored folders that the GPU machine
# cannot download itself and that tools/device/gpu_run.sh and tools/device/bench_all.sh read there:
#   .deb/     libsqlite3-dev, libcli11-dev (apt-get download): headers the GPU machine lacks; gpu_run.sh unpacks
#             them with dpkg -x (every part: the build needs them)
#   .whl/     flash-linear-attention 0.6.0 + fla-core 0.6.0 + einops 0.8.1 (parts gdn, step; python_run.sh's FLA
#             test) and scikit-build-core 1.1.2 + pathspec 0.12.1 (python_run.sh's install): pure-Python wheels for
#             python 3.12
#   .whl_py/  specforge 0.2.0 + dflash 0.1.0 wheels and a copy of the shared py_dflash_step.py (part step; the
#             shared folder beside the checkout does not travel to the GPU machine)
# Idempotent: what is there already is kept (the script copy is refreshed when the shared one changed); other
# versions of these packages are removed, since two versions of one wheel stop the install there. Prints the size
# of each folder and of what one device call of each bench_all.sh part sends (its limit: 64 MiB for the working
# tree plus the carried folders).
#   bash tools/device/prepare_carry.sh [--shared DIR]   (DIR holds bench/py_dflash_step.py; default: the first
#                                                        of ../shared and ../../shared that does)
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=""
while [ $# -gt 0 ]; do
  case "$1" in
    --shared) shared="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "prepare_carry.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$shared" ]; then
  for d in ../shared ../../shared; do
    if [ -f "$d/bench/py_dflash_step.py" ]; then shared="$d"; break; fi
  done
fi
if [ -z "$shared" ] || [ ! -f "$shared/bench/py_dflash_step.py" ]; then
  echo "prepare_carry.sh: no bench/py_dflash_step.py under ${shared:-../shared or ../../shared}; pass --shared DIR" >&2
  exit 2
fi

# Keeps exactly one file per package in folder $1: $2 is the file name glob of the wanted version, $3 the glob of
# every version of the package. Returns 1 when the wanted one is missing (the caller downloads it).
keep_only() {
  local dir=$1 want=$2 any=$3 f found=1
  for f in "$dir"/$any; do
    [ -e "$f" ] || continue
    # shellcheck disable=SC2053
    if [[ "$(basename "$f")" == $want ]]; then found=0; else echo "removing $f (another version)"; rm -f "$f"; fi
  done
  return $found
}

mkdir -p .deb .whl .whl_py
for pkg in libsqlite3-dev libcli11-dev; do
  if ! ls .deb/"${pkg}"_*.deb >/dev/null 2>&1; then
    echo "downloading $pkg into .deb/"
    (cd .deb && apt-get download "$pkg") ||
      { echo "prepare_carry.sh: apt-get download $pkg failed (try apt-get update first)" >&2; exit 1; }
  fi
done

pip_get() {  # $1 folder, then name==version pairs: pure-Python wheels for the GPU machine's python 3.12
  local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "$@"
}
wheel_once() {  # $1 folder, $2 distribution name as in the file name (flash_linear_attention), $3 version, $4 pip name
  if ! keep_only "$1" "$2-$3-*.whl" "$2-*.whl"; then
    echo "downloading $4==$3 into $1/"
    pip_get "$1" "$4==$3"
  fi
}
wheel_once .whl flash_linear_attention 0.6.0 flash-linear-attention
wheel_once .whl fla_core 0.6.0 fla-core
wheel_once .whl einops 0.8.1 einops
wheel_once .whl scikit_build_core 1.1.2 scikit-build-core
wheel_once .whl pathspec 0.12.1 pathspec
wheel_once .whl_py specforge 0.2.0 specforge
wheel_once .whl_py dflash 0.1.0 dflash
if ! cmp -s "$shared/bench/py_dflash_step.py" .whl_py/py_dflash_step.py; then
  echo "copying $shared/bench/py_dflash_step.py into .whl_py/"
  cp "$shared/bench/py_dflash_step.py" .whl_py/py_dflash_step.py
fi

# Sizes: the working tree that every call sends (tracked files and untracked ones git does not ignore) and the
# carried folders of each part.
bytes_of() { du -sb "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } |
        xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo
echo "| what | size |"
echo "|---|---|"
echo "| working tree (tracked + untracked, not ignored) | $(mib "$tree") |"
for d in .deb .whl .whl_py; do
  echo "| $d: $(cd "$d" && printf '%s ' *)| $(mib "$(bytes_of "$d")") |"
done
for part in "attention [.deb]:.deb" "gdn [.deb .whl]:.deb .whl" "step [.deb .whl .whl_py]:.deb .whl .whl_py" \
            "launch [.deb]:.deb"; do
  name=${part%%:*}
  # shellcheck disable=SC2086
  total=$(( tree + $(bytes_of ${part#*:}) ))
  flag=""
  [ "$total" -gt $((64 * 1048576)) ] && flag=" OVER THE 64 MiB LIMIT"
  echo "| one call of part $name | $(mib "$total")$flag |"
done
