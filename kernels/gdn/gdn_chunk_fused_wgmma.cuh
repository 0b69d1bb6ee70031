// The fused state + output pass of the chunked gated delta rule on Hopper's wgmma (sm_90a only), with its copies
// issued by the warpgroup itself: the same results as gdn_chunk_fused, computed transposed, so that the state never
// leaves the warpgroup's registers and no product stages a fragment through shared memory:
//   [S^T | O^T] = h^T [W; q]^T (O^T's columns times fq)   A = h^T (bf16, straight from the fp32 accumulator)
//   V_new^T = U^T - S^T (token columns >= len zero)
//   O^T    += V_new^T P^T                       A = V_new^T (registers), B = P
//   h^T     = exp(gamma_last) h^T + (fk (.) V_new^T) k     A = registers, B = k (MN-major)
// qg and kd are not read: they are the raw q and k of the value head's key head scaled per row (qg_t = fq_t q_t,
// kd_t = fk_t k_t; fq, fk from gdn_chunk_prep's ROWSCALE output), so the pass reads q and k once per key head
// (shared by the HV / H value heads and both column blocks, mostly from L2) instead of qg and kd once per value
// head and column block. One warpgroup per block owns 64 state columns: h^T[col0 .. col0 + 63][0 .. 127] is the
// accumulator of an m64n128 product, 64 fp32 registers a thread, d[4 j + e] = h^T[v][k] = h[k][col0 + v],
// v = 16 warp + g + 8 (e / 2), k = 8 j + 2 c + e % 2 (g = lane / 4, c = lane % 4). W, q, k, the U slice and P of a
// chunk are loaded with cp.async into the 128-byte swizzled layout (sw128_copy.cuh), the row factors beside them,
// two stages: chunk n+1's operands are issued when chunk n starts. W and q land in one [2C x 128] tile (W's rows,
// then q's), so S^T and O^T come from one m64n(2C) product: 8 HGMMA of n = 2C a chunk, not 16 of n = C; the
// accumulator's columns C .. 2C-1 are O^T's. Every product's descriptors are stepped from its k-step 0's (one add
// a k-step, wgmma_desc_*_stepped). O^T goes through a small padded tile to row-contiguous stores.
// FOLD (beside gdn_chunk_prep_key<C, W, true>): no W and U in memory. With X = v - diag(e^gamma / |k|) k h (so that
// V_new = T diag(beta) X), the stacked tile holds the raw k of the key head instead of W, the narrow tile v's slice
// instead of U's, and prep folded T into the other operands: P T diag(beta) in P's place and K2 = (diag(fk) T
// diag(beta))^T k in k's (the update's B), so
//   [S^T | O^T] = h^T [k; q]^T,  X^T = v^T - fx (.) S^T,  O^T += X^T (P T diag(beta))^T,  h^T = e^gamma_last h^T + X^T K2
// with the row factors {fq, fx = e^gamma / |k|}: the same chain, one A operand for both products instead of two.
// h0 / ht: each thread reads and writes the same state elements (its accumulator's), so the pieces path's in-place
// h0 == ht stays correct here too.
// Who may call: hosts launching grid (128 / 64, HV, num_segments), block 128, dynamic shared
// FusedWgmmaSharedBytes(C); q, k with gdn_chunk_prep's strides (16-byte rows), the rest as gdn_chunk_fused's.
// Thread-safety: each block owns its segment's rows of o and its head's 64 state columns.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"
#include "sw128_copy.cuh"
#include "wgmma.cuh"

namespace gdn {

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

template <int C, bool FOLD = false>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gdn_chunk_fused_wgmma(const bf16* __restrict__ q, long long q_st, long long q_sh, const bf16* __restrict__ k,
                          long long k_st, long long k_sh, const bf16* __restrict__ v, long long v_st, long long v_sh,
                          int H, const bf16* __restrict__ w, const bf16* __restrict__ u,
                          const bf16* __restrict__ pmat, const float* __restrict__ gcum,
                          const float2* __restrict__ rowscale, const int4* __restrict__ segs,
                          const int* __restrict__ ht_index, int HV,
                          const float* __restrict__ h0, float* __restrict__ ht, bf16* __restrict__ o, long long o_st,
                          long long o_sh) {
  static_assert(C == 32 || C == 64, "chunks of 32 or 64 rows");
  constexpr int NT = kWgmmaThreads, BV = kWgmmaBv, LDO = PadBf16Cols(BV);
  constexpr int kKSteps = kDim / 16, kCSteps = C / 16;
  constexpr unsigned kOpBytes = C * kDim * 2, kNarrowBytes = C * 128;  // [C x 128] tiles; U, P: [C x 64]
  constexpr unsigned kStageBytes = FusedWgmmaStageBytes(C);
  extern __shared__ __align__(1024) unsigned char smem[];  // swizzled tiles start 1024-byte aligned
  const unsigned base = smem_addr(smem);
  auto w_at = [&](int s) { return base + s * kStageBytes; };
  auto q_at = [&](int s) { return base + s * kStageBytes + C * 128; };  // q's band: rows C .. 2C-1 of W's tile
  constexpr int kWqRows = 2 * C;                                          // rows of the tile W and q land in
  auto k_at = [&](int s) { return base + s * kStageBytes + 2 * kOpBytes; };
  auto u_at = [&](int s) { return base + s * kStageBytes + 3 * kOpBytes; };
  auto p_at = [&](int s) { return base + s * kStageBytes + 3 * kOpBytes + kNarrowBytes; };
  unsigned char* const stage_ptr = smem;
  bf16* const os = reinterpret_cast<bf16*>(smem + 2 * kStageBytes);  // O^T staging, [C][LDO]
  const float2* const rs = reinterpret_cast<const float2*>(smem + 2 * kStageBytes + FusedWgmmaOStageBytes(C));
  const unsigned rs_addr = base + 2 * kStageBytes + FusedWgmmaOStageBytes(C);  // [2][C] {fq, fk}

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int hv = blockIdx.y;
  const int4 seg = segs[blockIdx.z];
  const int col0 = blockIdx.x * BV;
  const long long hv_row = static_cast<long long>(HV) * kDim;  // row stride of [tokens, HV, 128]
  const int hk = hv / (HV / H);
  const bf16* const qh = q + hk * q_sh;
  const bf16* const kh = k + hk * k_sh;
  const bf16* const vh = v + hv * v_sh + col0;
  // The stacked tile's first band (W, or with FOLD the raw k), the update's B (k, or K2) and the narrow tile (the U
  // slice, or v's): row pointer and stride of each at token t.
  auto band_src = [&](long long t) { return FOLD ? kh + t * k_st : w + (t * HV + hv) * kDim; };
  const long long band_st = FOLD ? k_st : hv_row;
  auto upd_src = [&](long long t) { return FOLD ? w + (t * HV + hv) * kDim : kh + t * k_st; };
  const long long upd_st = FOLD ? hv_row : k_st;
  auto narrow_src = [&](long long t) { return FOLD ? vh + t * v_st : u + (t * HV + hv) * kDim + col0; };
  const long long narrow_st = FOLD ? v_st : hv_row;
  auto chunk_len = [&](long long t) { return static_cast<int>(seg.y - t < C ? seg.y - t : C); };
  auto issue = [&](long long t, int len, long long chunk, int s) {
    if (len == C) {
      LoadSw128AsyncFixed<C, kDim, NT, true, kWqRows>(w_at(s), band_src(t), band_st, len, tid);
      LoadSw128AsyncFixed<C, kDim, NT, true, kWqRows>(q_at(s), qh + t * q_st, q_st, len, tid);
      LoadSw128AsyncFixed<C, kDim, NT, true>(k_at(s), upd_src(t), upd_st, len, tid);
      LoadSw128AsyncFixed<C, BV, NT, true>(u_at(s), narrow_src(t), narrow_st, len, tid);
    } else {
      LoadSw128AsyncFixed<C, kDim, NT, false, kWqRows>(w_at(s), band_src(t), band_st, len, tid);
      LoadSw128AsyncFixed<C, kDim, NT, false, kWqRows>(q_at(s), qh + t * q_st, q_st, len, tid);
      LoadSw128AsyncFixed<C, kDim, NT, false>(k_at(s), upd_src(t), upd_st, len, tid);
      LoadSw128AsyncFixed<C, BV, NT, false>(u_at(s), narrow_src(t), narrow_st, len, tid);
    }
    LoadSw128AsyncFixed<C, C, NT, true>(p_at(s), pmat + (chunk * HV + hv) * C * C, C, C, tid);
    if (tid < C) {  // rows past the chunk get zero factors
      const float2* src = rowscale + (t + (tid < len ? tid : 0)) * HV + hv;
      cp_async_ca_8_zfill(rs_addr + (s * C + tid) * 8, src, tid < len ? 8 : 0);
    }
    cp_async_commit_group();
  };
  if (seg.x < seg.y) issue(seg.x, chunk_len(seg.x), seg.z, 0);

  const int v_lo = 16 * warp + g;
  float hT[kDim / 2];
  LoadStateT(hT,
             (h0 != nullptr && seg.w >= 0) ? h0 + (static_cast<long long>(seg.w) * HV + hv) * kDim * kDim + col0
                                           : nullptr,
             tid);

  long long chunk = seg.z;
  int stage = 0;
  float g_last = seg.x < seg.y ? gcum[(seg.x + chunk_len(seg.x) - 1) * HV + hv] : 0.f;
  for (long long t = seg.x; t < seg.y; t += C, ++chunk, stage ^= 1) {
    const int len = chunk_len(t);
    const float decay = __expf(g_last);
    cp_async_wait_group<0>();
    fence_proxy_async_shared();  // this thread's landed copies, before the async proxy (wgmma) reads them
    __syncthreads();             // every thread's copies; nobody reads the other stage (chunk n-1) or os any more
    if (t + C < seg.y) {
      issue(t + C, chunk_len(t + C), chunk + 1, stage ^ 1);
      g_last = gcum[((t + 2 * C < seg.y ? t + 2 * C : seg.y) - 1) * HV + hv];
    }
    // h^T as the A operand (bf16), k-step kk: the accumulator's columns 16 kk .. 16 kk + 15.
    unsigned ha[kKSteps][4];
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) ha[kk][i] = pack_bf16x2(hT[8 * kk + 2 * i], hT[8 * kk + 2 * i + 1]);
    }
    float s[C / 2], oT[C / 2];
    float so[C];  // S^T's token columns, then O^T's
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      WgmmaRS<2 * C>::template Run<0>(so, ha[kk], wgmma_desc_k_major_stepped<2 * C>(w_at(stage), 0, kk), kk > 0);
    wgmma_commit_group();
    wgmma_fence_operand(ha);
    // U^T in the accumulator layout of s (v = v_lo + 8 (e / 2), token 8 j + 2 c + e % 2): at C 32 read while the
    // products run; at C 64 after them (read early, its 32 more live registers spill: 255 used).
    const unsigned char* us = stage_ptr + stage * kStageBytes + 3 * kOpBytes;
    float uT[C / 2];
    auto read_u = [&]() {
#pragma unroll
      for (int j = 0; j < C / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uT[4 * j + e] = __bfloat162float(*reinterpret_cast<const bf16*>(
              us + dflash_ptx::Sw128Offset<C>(8 * j + 2 * c + e % 2, v_lo + 8 * (e / 2))));
        }
      }
    };
    if constexpr (C == 32) read_u();
    wgmma_wait_group<0>();
    if constexpr (C != 32) read_u();
    wgmma_fence_operand(so);
#pragma unroll
    for (int i = 0; i < C / 2; ++i) s[i] = so[i], oT[i] = so[C / 2 + i];  // d[4 j + e]: column 8 j + 2 c + e % 2
    const float2* rsc = rs + stage * C;  // this chunk's {fq, fk} by token (zero past len)
    // O^T's token column t times fq_t (the accumulator layout: token 8 j + 2 c + e % 2).
#pragma unroll
    for (int j = 0; j < C / 8; ++j) {
      const float f0 = rsc[8 * j + 2 * c].x, f1 = rsc[8 * j + 2 * c + 1].x;
#pragma unroll
      for (int e = 0; e < 4; ++e) oT[4 * j + e] *= e % 2 ? f1 : f0;
    }
    // V_new^T = U^T - S^T, zero in token columns >= len; as the A operand of the P product (va) and, times fk, of
    // the update (vk).
    // FOLD: X^T = v^T - fx (.) (k h)^T instead, the A operand of both (P and K2 carry T, beta and fk).
    unsigned va[kCSteps][4], vk[kCSteps][4];
#pragma unroll
    for (int kk = 0; kk < kCSteps; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tk = 16 * kk + 8 * (i / 2) + 2 * c, d = 8 * kk + 2 * i;
        if constexpr (FOLD) {
          const float n0 = tk < len ? uT[d] - s[d] * rsc[tk].y : 0.f;
          const float n1 = tk + 1 < len ? uT[d + 1] - s[d + 1] * rsc[tk + 1].y : 0.f;
          va[kk][i] = vk[kk][i] = pack_bf16x2(n0, n1);
        } else {
          const float n0 = tk < len ? uT[d] - s[d] : 0.f, n1 = tk + 1 < len ? uT[d + 1] - s[d + 1] : 0.f;
          va[kk][i] = pack_bf16x2(n0, n1);
          vk[kk][i] = pack_bf16x2(n0 * rsc[tk].y, n1 * rsc[tk + 1].y);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kDim / 2; ++i) hT[i] *= decay;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kCSteps; ++kk)
      WgmmaRS<C>::template Run<0>(oT, va[kk], wgmma_desc_k_major_stepped<C>(p_at(stage), 0, kk), 1);
#pragma unroll
    for (int kk = 0; kk < kCSteps; ++kk)
      WgmmaRS<kDim>::template Run<1>(hT, vk[kk], wgmma_desc_mn_major_stepped<C>(k_at(stage), kk), 1);
    wgmma_commit_group();
    wgmma_fence_operand(va);
    wgmma_fence_operand(vk);
    wgmma_wait_group<0>();
    wgmma_fence_operand(oT);
    wgmma_fence_operand(hT);
    // O^T (v, token) -> os[token][v], then rows of 64 columns to o (4-byte stores: o's strides are even only).
#pragma unroll
    for (int j = 0; j < C / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        os[(8 * j + 2 * c + e % 2) * LDO + v_lo + 8 * (e / 2)] = __float2bfloat16_rn(oT[4 * j + e]);
      }
    }
    __syncthreads();
    bf16* orow = o + t * o_st + static_cast<long long>(hv) * o_sh + col0;
#pragma unroll
    for (int e = 0; e < C * BV / 2 / NT; ++e) {
      const int i = tid + e * NT, r = i / (BV / 2), cc = (i % (BV / 2)) * 2;
      if (r < len) {
        *reinterpret_cast<unsigned*>(orow + r * o_st + cc) = *reinterpret_cast<const unsigned*>(os + r * LDO + cc);
      }
    }
  }

  const int hi = ht_index != nullptr ? ht_index[blockIdx.z] : -1;
  if (ht != nullptr && hi >= 0) {
    StoreStateT(hT, ht + (static_cast<long long>(hi) * HV + hv) * kDim * kDim + col0, tid);
  }
}

}  // namespace gdn
