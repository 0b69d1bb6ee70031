// The backward of the rmsnorm family's plain norm (no residual, no gate): the drafter's trained norms.
//   forward:  n = x * rstd, rstd = rsqrt(mean(x^2) + eps);  out = n * w'   (w' = w standard | 1 + w zero-centred)
//   backward: g = dy * w';  dx = rstd * g - x * rstd^3 * mean(g * x);  dw = sum over rows of dy * n
// rstd is recomputed from x (the row is in registers anyway: no saved tensor). fp32 math, dx rounded to bf16 (round to
// nearest even), dw in fp32.
// Owns: the CUDA kernel (NVRTC; free of host headers). Layout as the forward (rmsnorm.cuh): ROW_THREADS threads share
// a row, each holding VPT vectors of VEC bf16 of x and of dy; THREADS / ROW_THREADS rows per block. The block walks
// row groups blockIdx.x, blockIdx.x + gridDim.x, ... so each thread keeps its columns' dw sums in registers over
// every row it sees and writes them once, as one fp32 row of dw_partial per (block, row slot); the caller sums those
// rows (their count is gridDim.x * THREADS / ROW_THREADS). Both row sums (x^2 and g * x) go through one butterfly of
// float2 shuffles and, for rows wider than a warp, one shared-memory step with a barrier on each side.
// Thread-safety: n/a (device code).
#pragma once

#include "rmsnorm.cuh"
#include "rmsnorm_bwd_params.h"

namespace dflash_rmsnorm {

template <int COLS, int VEC, int ROW_THREADS, int THREADS, int MIN_BLOCKS, int KIND, int WEIGHT_FP32>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) rmsnorm_bwd(const RmsNormBwdParams p) {
  static_assert(COLS >= VEC && COLS % VEC == 0, "a row splits into whole vectors");
  static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 1024 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "threads per row: a power of two up to 1024");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024 && THREADS % ROW_THREADS == 0,
                "whole warps, at most 1024 threads, whole rows per block");
  static_assert(KIND == kStandard || KIND == kZeroCentred, "kind is standard (0) or zero-centred (1)");
  static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS * THREADS <= 2048, "blocks per SM: 1 up to 2048 threads");
  constexpr int NV = COLS / VEC;
  constexpr int VPT = (NV + ROW_THREADS - 1) / ROW_THREADS;
  constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS;
  constexpr int WARPS_PER_ROW = ROW_THREADS > 32 ? ROW_THREADS / 32 : 1;
  constexpr int SHUFFLE_LANES = ROW_THREADS < 32 ? ROW_THREADS : 32;
  // x, dy (packed) and the dw sums (fp32) of a thread's elements: 2 + 1 registers each.
  static_assert(VPT * VEC <= 32, "at most 32 elements of a row per thread (registers)");

  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int row_in_block = static_cast<int>(threadIdx.x) / ROW_THREADS;

  WeightVec<VEC, WEIGHT_FP32> w[VPT];
  float dw[VPT][VEC];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int c0 = (j * ROW_THREADS + lane) * VEC;
    if (c0 < COLS) w[j].load(p.weight, c0);
#pragma unroll
    for (int e = 0; e < VEC; ++e) dw[j][e] = 0.0f;
  }

  for (long long group = blockIdx.x; group * ROWS_PER_BLOCK < p.rows; group += gridDim.x) {
    const long long row = group * ROWS_PER_BLOCK + row_in_block;
    const bool row_ok = row < p.rows;
    const unsigned short* x = reinterpret_cast<const unsigned short*>(p.x) + row * p.x_stride;
    const unsigned short* dy = reinterpret_cast<const unsigned short*>(p.dy) + row * p.dy_stride;
    Pack<VEC> xv[VPT], gv[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int c0 = (j * ROW_THREADS + lane) * VEC;
      const bool in = row_ok && c0 < COLS;
      xv[j] = in ? load_readonly<VEC>(x + c0) : zero_pack<VEC>();
      gv[j] = in ? load_readonly<VEC>(dy + c0) : zero_pack<VEC>();
    }
    float2 sums = make_float2(0.0f, 0.0f);  // (sum x^2, sum g * x)
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int c0 = (j * ROW_THREADS + lane) * VEC;
      if (c0 >= COLS) continue;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float xf = xv[j].elem(e);
        const float wp = KIND == kZeroCentred ? 1.0f + w[j][e] : w[j][e];
        sums.x = fmaf(xf, xf, sums.x);
        sums.y = fmaf(gv[j].elem(e) * wp, xf, sums.y);
      }
    }
#pragma unroll
    for (int o = SHUFFLE_LANES / 2; o > 0; o >>= 1) {
      sums.x += __shfl_xor_sync(0xffffffffu, sums.x, o);
      sums.y += __shfl_xor_sync(0xffffffffu, sums.y, o);
    }
    if constexpr (WARPS_PER_ROW > 1) {
      __shared__ float2 partial[ROWS_PER_BLOCK][WARPS_PER_ROW];
      if ((lane & 31) == 0) partial[row_in_block][lane / 32] = sums;
      __syncthreads();
      sums = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < WARPS_PER_ROW; ++k) {
        sums.x += partial[row_in_block][k].x;
        sums.y += partial[row_in_block][k].y;
      }
      __syncthreads();  // every row's threads have read `partial` before the next group writes it
    }
    if (!row_ok) continue;
    const float inv_cols = 1.0f / static_cast<float>(COLS);
    const float rstd = rsqrtf(sums.x * inv_cols + p.eps);
    const float coef = rstd * rstd * rstd * sums.y * inv_cols;
    unsigned short* dx = reinterpret_cast<unsigned short*>(p.dx) + row * p.dx_stride;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int c0 = (j * ROW_THREADS + lane) * VEC;
      if (c0 >= COLS) continue;
      float d[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float xf = xv[j].elem(e), gf = gv[j].elem(e);
        const float wp = KIND == kZeroCentred ? 1.0f + w[j][e] : w[j][e];
        d[e] = fmaf(rstd, gf * wp, -xf * coef);
        dw[j][e] = fmaf(gf, xf * rstd, dw[j][e]);
      }
      store_pack<VEC>(dx + c0, round_to_bf16<VEC>(d));
    }
  }

  float* out = reinterpret_cast<float*>(p.dw_partial) +
               (static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + row_in_block) * COLS;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int c0 = (j * ROW_THREADS + lane) * VEC;
    if (c0 >= COLS) continue;
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) {
      reinterpret_cast<float4*>(out + c0)[q] = make_float4(dw[j][4 * q], dw[j][4 * q + 1], dw[j][4 * q + 2],
                                                           dw[j][4 * q + 3]);
    }
  }
}

}  // namespace dflash_rmsnorm
