// One chunk step of the gdn Hopper tier's state + output pass, the stage layout it reads and the state's
// accumulator layout: what both wgmma passes (gdn_chunk_fused_wgmma.cuh: cp.async copies by the warpgroup itself,
// its loop body this step written out in place, see there; gdn_chunk_fused_wgmma_tma.cuh: tensor copies by a
// producer warp) compute once a chunk's operands sit in shared memory. Transposed, so that the
// state never leaves the warpgroup's registers and no product stages a fragment through shared memory:
//   S^T     = h^T W^T,  O^T = fq (.) h^T q^T    A = h^T (bf16, straight from the fp32 accumulator), B = W, q
//   V_new^T = U^T - S^T (token columns >= len zero)
//   O^T    += V_new^T P^T                       A = V_new^T (registers), B = P
//   h^T     = exp(gamma_last) h^T + (fk (.) V_new^T) k     A = registers, B = k (MN-major)
// with fq, fk the rows' factors of gdn_chunk_prep's ROWSCALE output (qg and kd are never materialised).
// h^T[col0 .. col0 + 63][0 .. 127] is the accumulator of an m64n128 product, 64 fp32 registers a thread:
// d[4 j + e] = h^T[v][k] = h[k][col0 + v], v = 16 warp + g + 8 (e / 2), k = 8 j + 2 c + e % 2 (g = lane / 4,
// c = lane % 4).
// Who may include it: kernels compiled for sm_90a only (NVRTC). Thread-safety: n/a (device code; every function is
// called by the 128 threads of the warpgroup together, tid = 0 .. 127).
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"
#include "wgmma.cuh"

namespace gdn {

// The shared-memory operands of one chunk: a stage of FusedWgmmaStageBytes(C, UP) holding 128-byte swizzled tiles
// (Sw128Offset) W, q, k [C x 128], then UP slices of U [C x 64] (one per warpgroup: its 64 state columns) and P
// [C x C] (rows of 128 bytes each), in this order (WgmmaStage gives their offsets); and the rows' factor pairs
// {fq, fk} [C] (zero past the chunk) beside it.
template <int C, int UP = 1>
struct WgmmaStage {
  static constexpr unsigned kOpBytes = C * kDim * 2, kNarrowBytes = C * 128;
  static constexpr unsigned kW = 0, kQ = kOpBytes, kK = 2 * kOpBytes, kU = 3 * kOpBytes, kP = kU + UP * kNarrowBytes;
  static_assert(kP + kNarrowBytes == FusedWgmmaStageBytes(C, UP), "the stage layout of gdn_layout.h");
};
struct WgmmaChunkTiles {
  const unsigned char* stage_ptr; // the stage (its shared-window address feeds the wgmma descriptors)
  const float2* rowscale;
  int u_panel;                    // which of the stage's U slices is this warpgroup's
};

// h^T from h0_slice (h0 + the value head's state + col0; null: zeros).
__device__ __forceinline__ void LoadStateT(float (&hT)[kDim / 2], const float* h0_slice, int tid) {
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4, v_lo = 16 * warp + g;
#pragma unroll
  for (int j = 0; j < kDim / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int v = v_lo + 8 * (e / 2), k = 8 * j + 2 * c + e % 2;
      hT[4 * j + e] = h0_slice != nullptr ? h0_slice[k * kDim + v] : 0.f;
    }
  }
}

// h^T to dst (ht + the value head's state + col0).
__device__ __forceinline__ void StoreStateT(const float (&hT)[kDim / 2], float* dst, int tid) {
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4, v_lo = 16 * warp + g;
#pragma unroll
  for (int j = 0; j < kDim / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[(8 * j + 2 * c + e % 2) * kDim + v_lo + 8 * (e / 2)] = hT[4 * j + e];
  }
}

// One chunk of len rows (1 .. C): the products above, then O^T through the staging tile os [C][PadBf16Cols(64)]
// to o's rows (o_rows(): the chunk's row 0 at column col0, asked for after the barrier; 4-byte stores, o's strides
// are even only).
// released(): called once every read of the chunk's tiles is complete (the update's wgmma wait), so a producer may
// refill them; o_barrier(): a barrier of the 128 threads between the staging tile's writes and its reads.
template <int C, int UP, typename ORows, typename Released, typename OBarrier>
__device__ __forceinline__ void WgmmaChunkStep(float (&hT)[kDim / 2], const WgmmaChunkTiles& tiles, int len,
                                               float decay, bf16* os, ORows&& o_rows, long long o_st, int tid,
                                               Released&& released, OBarrier&& o_barrier) {
  using namespace dflash_ptx;
  constexpr int NT = 128, BV = kWgmmaBv, LDO = PadBf16Cols(BV);
  constexpr int kKSteps = kDim / 16, kCSteps = C / 16;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4, v_lo = 16 * warp + g;
  // h^T as the A operand (bf16), k-step kk: the accumulator's columns 16 kk .. 16 kk + 15.
  unsigned ha[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) ha[kk][i] = pack_bf16x2(hT[8 * kk + 2 * i], hT[8 * kk + 2 * i + 1]);
  }
  float s[C / 2], oT[C / 2];
  using Stage = WgmmaStage<C, UP>;
  const unsigned stage = smem_addr(tiles.stage_ptr);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk)
    WgmmaRS<C>::template Run<0>(s, ha[kk], wgmma_desc_k_major<C>(stage + Stage::kW, 0, kk), kk > 0);
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk)
    WgmmaRS<C>::template Run<0>(oT, ha[kk], wgmma_desc_k_major<C>(stage + Stage::kQ, 0, kk), kk > 0);
  wgmma_commit_group();
  wgmma_fence_operand(ha);
  // U^T in the accumulator layout of s (v = v_lo + 8 (e / 2), token 8 j + 2 c + e % 2): at C 32 read while the
  // products run; at C 64 after them (read early, its 32 more live registers spill: 255 used).
  const unsigned char* const us = tiles.stage_ptr + Stage::kU + tiles.u_panel * Stage::kNarrowBytes;
  float uT[C / 2];
  auto read_u = [&]() {
#pragma unroll
    for (int j = 0; j < C / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        uT[4 * j + e] = __bfloat162float(
            *reinterpret_cast<const bf16*>(us + Sw128Offset<C>(8 * j + 2 * c + e % 2, v_lo + 8 * (e / 2))));
      }
    }
  };
  if constexpr (C == 32) read_u();
  wgmma_wait_group<0>();
  if constexpr (C != 32) read_u();
  wgmma_fence_operand(s);
  wgmma_fence_operand(oT);
  const float2* rsc = tiles.rowscale;
  // O^T's token column t times fq_t (the accumulator layout: token 8 j + 2 c + e % 2).
#pragma unroll
  for (int j = 0; j < C / 8; ++j) {
    const float f0 = rsc[8 * j + 2 * c].x, f1 = rsc[8 * j + 2 * c + 1].x;
#pragma unroll
    for (int e = 0; e < 4; ++e) oT[4 * j + e] *= e % 2 ? f1 : f0;
  }
  // V_new^T = U^T - S^T, zero in token columns >= len; as the A operand of the P product (va) and, times fk, of
  // the update (vk).
  unsigned va[kCSteps][4], vk[kCSteps][4];
#pragma unroll
  for (int kk = 0; kk < kCSteps; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tk = 16 * kk + 8 * (i / 2) + 2 * c, d = 8 * kk + 2 * i;
      const float n0 = tk < len ? uT[d] - s[d] : 0.f, n1 = tk + 1 < len ? uT[d + 1] - s[d + 1] : 0.f;
      va[kk][i] = pack_bf16x2(n0, n1);
      vk[kk][i] = pack_bf16x2(n0 * rsc[tk].y, n1 * rsc[tk + 1].y);
    }
  }
#pragma unroll
  for (int i = 0; i < kDim / 2; ++i) hT[i] *= decay;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kCSteps; ++kk)
    WgmmaRS<C>::template Run<0>(oT, va[kk], wgmma_desc_k_major<C>(stage + Stage::kP, 0, kk), 1);
#pragma unroll
  for (int kk = 0; kk < kCSteps; ++kk)
    WgmmaRS<kDim>::template Run<1>(hT, vk[kk], wgmma_desc_mn_major<C>(stage + Stage::kK, kk), 1);
  wgmma_commit_group();
  wgmma_fence_operand(va);
  wgmma_fence_operand(vk);
  wgmma_wait_group<0>();
  wgmma_fence_operand(oT);
  wgmma_fence_operand(hT);
  released();
  // O^T (v, token) -> os[token][v], then rows of 64 columns to o.
#pragma unroll
  for (int j = 0; j < C / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      os[(8 * j + 2 * c + e % 2) * LDO + v_lo + 8 * (e / 2)] = __float2bfloat16_rn(oT[4 * j + e]);
    }
  }
  o_barrier();
  bf16* const orow = o_rows();
#pragma unroll
  for (int e = 0; e < C * BV / 2 / NT; ++e) {
    const int i = tid + e * NT, r = i / (BV / 2), cc = (i % (BV / 2)) * 2;
    if (r < len) {
      *reinterpret_cast<unsigned*>(orow + r * o_st + cc) = *reinterpret_cast<const unsigned*>(os + r * LDO + cc);
    }
  }
}

}  // namespace gdn
