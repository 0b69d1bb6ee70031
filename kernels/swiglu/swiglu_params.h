// SwigluParams: the one kernel argument of the swiglu kernels, shared verbatim by the CUDA source (NVRTC) and the
// host launcher. Plain C types only: no host or CUDA headers.
// Owns: the argument layout. Who may use it: swiglu.cuh and its launcher. Thread-safety: a plain value.
#pragma once

namespace dflash_swiglu {

// Row r of gate / up starts at base + r * stride (elements, 16-byte aligned); out is [rows, cols] contiguous.
struct SwigluParams {
  unsigned long long gate;  // const bf16*
  unsigned long long up;    // const bf16*
  unsigned long long out;   // bf16*
  long long gate_stride;
  long long up_stride;
  long long rows;
  int cols;
  int pad;
};

static_assert(sizeof(SwigluParams) == 56, "SwigluParams layout must match on host and device");

}  // namespace dflash_swiglu
