// Row-wise RMS normalisation with an optional fused residual add and an optional SiLU gate, bf16 in and out, fp32
// math: the norms of Qwen3.5/3.6 (zero-centred input / post-attention / q / k norms, the gated norm after each
// gated-delta-net layer) and of the DFlash drafter (standard norms).
//   s = residual ? bf16(x + r) : x          (written to sum_out when asked: the updated residual stream)
//   n = s * rsqrt(mean(s^2) + eps)          (fp32; mean over the row's COLS elements)
//   y = n * w  (standard)  |  n * (1 + w)  (zero-centred)      (w bf16 or fp32, read as fp32)
//   y = y * silu(z)                          (gated; z bf16, silu in fp32)
//   out = bf16(y)                            (round to nearest even)
// Owns: the CUDA kernel of the rmsnorm family (compiled by NVRTC; free of host headers). One template, instantiated
// per variant: ROW_THREADS threads share a row, each holding VPT = ceil(COLS / (VEC * ROW_THREADS)) vectors of VEC
// bf16 values of s (packed, so a row costs COLS / (2 * ROW_THREADS) registers per thread), loaded once with one
// aligned VEC-wide access per vector; THREADS / ROW_THREADS rows per block. The sum of squares is reduced with warp
// shuffles (a butterfly, so every lane of a row ends with the same bits) and, for rows wider than a warp, one
// shared-memory step whose partials every thread of the row adds in the same order: all of a row's threads scale
// by the same rstd. Rows past `rows` (the last block's) load nothing and store nothing but still take part in the
// shuffles and the barrier.
// Aliasing: each element of s, sum_out and out is read and written by one thread, which reads it (x, r) before it
// writes it (sum_out, out), so sum_out may be r itself (same pointer and stride: the in-place residual update). r
// is read with plain loads (not the read-only path, which may serve stale lines of memory the kernel writes); x, z
// and w, which the launcher guarantees no output overlaps, through the read-only path.
// Thread-safety: n/a (device code).
#pragma once

#include "bf16_vec.cuh"
#include "rmsnorm_params.h"

namespace dflash_rmsnorm {

constexpr int kStandard = 0;     // KIND: n * w
constexpr int kZeroCentred = 1;  // KIND: n * (1 + w)

using dflash_bf16::load_coherent;
using dflash_bf16::load_readonly;
using dflash_bf16::Pack;
using dflash_bf16::round_to_bf16;
using dflash_bf16::store_pack;
using dflash_bf16::zero_pack;

// The weights of elements c0 .. c0 + VEC, in their storage (bf16 bits or fp32), read through the read-only path
// with 16-byte loads.
template <int VEC, int WEIGHT_FP32> struct WeightVec;
template <int VEC> struct WeightVec<VEC, 0> {
  Pack<VEC> b;
  __device__ __forceinline__ void load(unsigned long long weight, int c0) {
    b = load_readonly<VEC>(reinterpret_cast<const unsigned short*>(weight) + c0);
  }
  __device__ __forceinline__ float operator[](int e) const { return b.elem(e); }
};
template <int VEC> struct WeightVec<VEC, 1> {
  float4 f[VEC / 4];
  __device__ __forceinline__ void load(unsigned long long weight, int c0) {
    const float4* wp = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(weight) + c0);
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) f[q] = __ldg(wp + q);
  }
  __device__ __forceinline__ float operator[](int e) const {
    const float4& q = f[e / 4];
    return e % 4 == 0 ? q.x : e % 4 == 1 ? q.y : e % 4 == 2 ? q.z : q.w;
  }
};

// z * sigmoid(z) with the fast exp and division (a few ulp of fp32, far below bf16's half ulp; the IEEE division
// would cost ~10 instructions per element in a memory-bound kernel). For z < -88, 1 + exp(-z) overflows and the
// result is -0 (the exact value is below 1e-36).
__device__ __forceinline__ float silu(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

// MIN_BLOCKS (blocks per SM for __launch_bounds__) is derived from the config by the host (rmsnorm_config.h's
// MinBlocksPerSm), not tuned: it pins ptxas's register cap to 65536 / (THREADS * MIN_BLOCKS).
template <int COLS, int VEC, int ROW_THREADS, int THREADS, int MIN_BLOCKS, int KIND, int RESIDUAL, int GATE,
          int WEIGHT_FP32>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) rmsnorm_fwd(const RmsNormParams p) {
  static_assert(COLS >= VEC && COLS % VEC == 0, "a row splits into whole vectors");
  static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 1024 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "threads per row: a power of two up to 1024");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024 && THREADS % ROW_THREADS == 0,
                "whole warps, at most 1024 threads, whole rows per block");
  static_assert(KIND == kStandard || KIND == kZeroCentred, "kind is standard (0) or zero-centred (1)");
  static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS * THREADS <= 2048, "blocks per SM: 1 up to 2048 threads");
  constexpr int NV = COLS / VEC;                                 // vectors per row
  constexpr int VPT = (NV + ROW_THREADS - 1) / ROW_THREADS;      // vectors per thread
  constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS;
  constexpr int WARPS_PER_ROW = ROW_THREADS > 32 ? ROW_THREADS / 32 : 1;
  constexpr int SHUFFLE_LANES = ROW_THREADS < 32 ? ROW_THREADS : 32;
  static_assert(VPT * VEC <= 64, "at most 64 elements of a row per thread (registers)");

  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int row_in_block = static_cast<int>(threadIdx.x) / ROW_THREADS;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + row_in_block;
  const bool row_ok = row < p.rows;

  const unsigned short* x = reinterpret_cast<const unsigned short*>(p.x) + row * p.x_stride;
  const unsigned short* r = reinterpret_cast<const unsigned short*>(p.residual) + row * p.residual_stride;
  const unsigned short* z = reinterpret_cast<const unsigned short*>(p.gate) + row * p.gate_stride;

  // Every load of the row first: independent, so they are all in flight together.
  Pack<VEC> s[VPT];
  Pack<VEC> rv[RESIDUAL ? VPT : 1];
  Pack<VEC> zv[GATE ? VPT : 1];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int c0 = (j * ROW_THREADS + lane) * VEC;
    const bool in = row_ok && c0 < COLS;
    s[j] = in ? load_readonly<VEC>(x + c0) : zero_pack<VEC>();
    if constexpr (RESIDUAL != 0) rv[j] = in ? load_coherent<VEC>(r + c0) : zero_pack<VEC>();
    if constexpr (GATE != 0) zv[j] = in ? load_readonly<VEC>(z + c0) : zero_pack<VEC>();
  }

  if constexpr (RESIDUAL != 0) {
    unsigned short* sum = reinterpret_cast<unsigned short*>(p.sum_out) + row * p.sum_out_stride;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float a[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = s[j].elem(e) + rv[j].elem(e);
      s[j] = round_to_bf16<VEC>(a);
      const int c0 = (j * ROW_THREADS + lane) * VEC;
      if (p.sum_out != 0 && row_ok && c0 < COLS) store_pack<VEC>(sum + c0, s[j]);
    }
  }

  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float f = s[j].elem(e);
      ss = fmaf(f, f, ss);
    }
  }
#pragma unroll
  for (int o = SHUFFLE_LANES / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if constexpr (WARPS_PER_ROW > 1) {
    __shared__ float partial[ROWS_PER_BLOCK][WARPS_PER_ROW];
    if ((lane & 31) == 0) partial[row_in_block][lane / 32] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS_PER_ROW; ++w) ss += partial[row_in_block][w];
  }
  // The mean as LibTorch's reduction takes it (the sum times 1 / cols).
  const float rstd = rsqrtf(ss * (1.0f / static_cast<float>(COLS)) + p.eps);
  if (!row_ok) return;  // after the last barrier

  // The weights of every vector, then the outputs: all the weight loads are in flight together (the compiler may
  // not move a load across the stores to out, which it cannot prove distinct from the weight).
  WeightVec<VEC, WEIGHT_FP32> w[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int c0 = (j * ROW_THREADS + lane) * VEC;
    if (c0 < COLS) w[j].load(p.weight, c0);
  }
  unsigned short* out = reinterpret_cast<unsigned short*>(p.out) + row * p.out_stride;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int c0 = (j * ROW_THREADS + lane) * VEC;
    if (c0 >= COLS) continue;
    float y[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float n = s[j].elem(e) * rstd;
      float v = KIND == kZeroCentred ? n * (1.0f + w[j][e]) : n * w[j][e];
      if constexpr (GATE != 0) v *= silu(zv[j].elem(e));
      y[e] = v;
    }
    store_pack<VEC>(out + c0, round_to_bf16<VEC>(y));
  }
}

}  // namespace dflash_rmsnorm
