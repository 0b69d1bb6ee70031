// RmsNormParams: the one kernel argument of every rmsnorm kernel, shared verbatim by the CUDA source (NVRTC) and the
// host launcher so both sides agree on its layout. Plain C types only: no host or CUDA headers.
// Owns: the argument layout. Who may use it: rmsnorm.cuh and rmsnorm_api.cc. Thread-safety: a plain value.
#pragma once

namespace dflash_rmsnorm {

// Row i of a tensor starts at base + i * stride (elements). The columns, the kind, the residual / gate options and the
// weight's storage are template parameters of the kernel; everything that varies between launches of one variant
// is here. Addresses are device pointers; every row start is 16-byte aligned (the launcher checks it).
struct RmsNormParams {
  unsigned long long x;         // const bf16* [rows, cols]
  unsigned long long residual;  // const bf16* [rows, cols]; used by the residual kernels only
  unsigned long long gate;      // const bf16* [rows, cols]; used by the gated kernels only
  unsigned long long weight;    // const bf16* or const float* [cols], contiguous
  unsigned long long sum_out;   // bf16* [rows, cols] = bf16(x + residual), or 0 for none (residual kernels only)
  unsigned long long out;       // bf16* [rows, cols]
  long long x_stride;
  long long residual_stride;
  long long gate_stride;
  long long sum_out_stride;
  long long out_stride;
  int rows;
  float eps;
};

static_assert(sizeof(RmsNormParams) == 96, "RmsNormParams layout must match on host and device");

}  // namespace dflash_rmsnorm
