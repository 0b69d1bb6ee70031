// RmsNormBwdParams: the one kernel argument of the rmsnorm backward kernels, shared verbatim by the CUDA source
// (NVRTC) and the host launcher. Plain C types only: no host or CUDA headers.
// Owns: the argument layout. Who may use it: rmsnorm_bwd.cuh and its launcher. Thread-safety: a plain value.
#pragma once

namespace dflash_rmsnorm {

// The backward of out = norm(x) * w' (w' = w standard, 1 + w zero-centred), no residual, no gate (the drafter's
// trained norms). Row i of a tensor starts at base + i * stride (elements); row starts 16-byte aligned.
// dw_partial holds one fp32 row of COLS per (block, row slot of the block): gridDim.x * rows-per-block rows, which
// the caller sums over (column sums of dy * norm(x) of the rows that slot walked).
struct RmsNormBwdParams {
  unsigned long long x;           // const bf16* [rows, cols]: the forward's input
  unsigned long long dy;          // const bf16* [rows, cols]: the gradient of out
  unsigned long long weight;      // const bf16* or const float* [cols], contiguous
  unsigned long long dx;          // bf16* [rows, cols]
  unsigned long long dw_partial;  // float* [gridDim.x * rows per block, cols], contiguous
  long long x_stride;
  long long dy_stride;
  long long dx_stride;
  int rows;
  float eps;
};

static_assert(sizeof(RmsNormBwdParams) == 72, "RmsNormBwdParams layout must match on host and device");

}  // namespace dflash_rmsnorm
