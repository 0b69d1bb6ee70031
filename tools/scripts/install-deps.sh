#!/usr/bin/env bash
# Installs what dflash-tune needs to build and test (Debian/Ubuntu packages), only what is missing.
# Idempotent: a machine that has everything returns at once. The CUDA toolkit (NVRTC, driver API headers) is
# expected in /usr/local/cuda (CUDA_HOME overrides); it is not an apt package here.
set -euo pipefail

packages=(cmake g++ ninja-build ccache libsqlite3-dev nlohmann-json3-dev libboost-dev libssl-dev libgtest-dev
          libcli11-dev python3-venv libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  echo "install-deps: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda_home/include/nvrtc.h" ] || [ ! -f "$cuda_home/include/cuda.h" ]; then
  echo "install-deps: the CUDA toolkit (nvrtc.h, cuda.h) was not found in $cuda_home; install CUDA 12.x/13.x" \
       "there or set CUDA_HOME" >&2
  exit 1
fi

# install_wheel_venv DIR SPEC: one pinned wheel (no dependencies) into a private venv at DIR, built beside it and
# moved into place only when complete, so an interrupted install is never found.
install_wheel_venv() {
  rm -rf "$1.partial"
  python3 -m venv "$1.partial"
  "$1.partial/bin/pip" install -q --disable-pip-version-check --no-deps "$2"
  rm -rf "$1"
  mv "$1.partial" "$1"
}

# LibTorch for the trainer: the C++ headers and libraries of the torch wheel from PyPI, pinned to the GPU machine's
# version, in a private venv (no Python dependencies needed: only torch/lib and torch/include are used). Skipped with
# DFLASH_WITH_TORCH=OFF. Its CPU libraries need libcudart/libcupti 13, which the CUDA toolkit above provides.
if [ "${DFLASH_WITH_TORCH:-ON}" != OFF ]; then
  torch_version=2.11.0
  torch_home="${DFLASH_TORCH_HOME:-$HOME/.cache/dflash-tune/torch-$torch_version}"
  if ! compgen -G "$torch_home/lib/python3*/site-packages/torch/lib/libtorch_cpu.so" >/dev/null; then
    echo "install-deps: installing LibTorch (torch==$torch_version wheel, ~530 MB) into $torch_home" >&2
    install_wheel_venv "$torch_home" "torch==$torch_version"
  fi
fi

# nvdisasm, for the compile tests that check the Hopper tier's SASS holds wgmma (HGMMA): the CUDA toolkit's own
# where it has one, else NVIDIA's nvidia-cuda-nvdisasm wheel from PyPI (~4 MB; 13.2 is the oldest CUDA 13 release
# there and reads CUDA 13.0 cubins) in a private venv in the user cache, where CMake looks for it
# (tests/CMakeLists.txt).
nvdisasm_version=13.2.51
nvdisasm_home="$HOME/.cache/dflash-tune/nvdisasm-$nvdisasm_version"
if [ ! -x "$cuda_home/bin/nvdisasm" ] && ! compgen -G "$nvdisasm_home/lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm" >/dev/null; then
  echo "install-deps: installing nvdisasm (nvidia-cuda-nvdisasm==$nvdisasm_version wheel, ~4 MB) into $nvdisasm_home" >&2
  install_wheel_venv "$nvdisasm_home" "nvidia-cuda-nvdisasm==$nvdisasm_version"
fi
