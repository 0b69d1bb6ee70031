// Fused attention backward (FlashAttention-2 structure), three kernels per call:
//  1. AttnBwdPre: delta = rowsum(dO * O) (fp32) and, for the atomic dQ mode, zeroes the fp32 dQ accumulator.
//  2. AttnBwdKv: one block per (kv tile, kv head, batch). It classifies every query tile against its kv tile,
//     then walks the visible (query head of the GQA group, query tile) pairs: recomputes P = exp(S - LSE),
//     dV += P^T dO, dP = dO V^T, dS = P * (dP - delta), dK += dS^T Q; dK/dV are reduced over the whole group in
//     registers and written once. With ATOMIC_DQ it also adds dS K into the fp32 dQ accumulator (red.global.add).
//  3a. AttnBwdDqConvert (atomic mode): dQ = scale * accumulator (DqAccumOffset's tiled layout), to bf16 with the
//      caller's strides.
//  3b. AttnBwdDq (separate-pass mode): one block per query tile, recomputes S, P, dP over its visible kv tiles and
//     accumulates dQ in registers: no atomics, no accumulator, deterministic.
// Rows whose LSE is -inf (they see nothing) get P = 0 everywhere, hence zero gradients and never NaN.
// Who may include it: attention_kernels.cu (NVRTC). Thread-safety: n/a (device code).
#pragma once

#include "attention_bwd_items.cuh"
#include "attention_kv_walk.cuh"
#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_query_block.cuh"
#include "attention_schedule.cuh"

namespace dflash_attn {

constexpr int kPreRowsPerBlock = 32;  // AttnBwdPre / AttnBwdDqConvert: 4 warps x 8 rows

// AttnBwdPre / AttnBwdDqConvert move whole rows with 16-byte accesses: D / 8 lanes a row, a warp's 8 rows in
// 8 / (256 / D) steps whose loads are all issued before the first is used (both passes are bandwidth-bound).
template <int D>
struct BwdRowPass {
  static constexpr int kLanesPerRow = D / 8, kRowsPerStep = 32 / kLanesPerRow;
  static constexpr int kSteps = kPreRowsPerBlock / 4 / kRowsPerStep;
  static_assert(D % 64 == 0 && D <= 256 && kSteps >= 1, "head dim 64, 128 or 256");
  // This thread's first column (8 of them) and its row of step 0 (step i: + i * kRowsPerStep).
  static __device__ __forceinline__ int Col() { return (threadIdx.x & 31) % kLanesPerRow * 8; }
  static __device__ __forceinline__ int Row0() {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    return blockIdx.x * kPreRowsPerBlock + warp * (kPreRowsPerBlock / 4) + lane / kLanesPerRow;
  }
};

// grid (ceil(seq_q / 32), heads_q, batch), 128 threads.
template <int D, bool ZERO_DQ_ACCUM>
__global__ void __launch_bounds__(128) AttnBwdPre(const AttnParams p) {
  using R = BwdRowPass<D>;
  const int b = blockIdx.z, h = blockIdx.y, c = R::Col(), q0 = R::Row0();
  const int Sq = p.mask.seq_q;
  uint4 o[R::kSteps], d[R::kSteps];
#pragma unroll
  for (int i = 0; i < R::kSteps; ++i) {
    const int q = q0 + i * R::kRowsPerStep;
    o[i] = d[i] = make_uint4(0, 0, 0, 0);
    if (q < Sq) {
      o[i] = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.o) + b * p.o_batch_stride +
                                             h * p.o_head_stride + q * p.o_seq_stride + c);
      d[i] = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.dout) + b * p.do_batch_stride +
                                             h * p.do_head_stride + q * p.do_seq_stride + c);
    }
  }
#pragma unroll
  for (int i = 0; i < R::kSteps; ++i) {
    const int q = q0 + i * R::kRowsPerStep;
    const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&o[i]);
    const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&d[i]);
    float acc = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 xf = __bfloat1622float2(x[e]), yf = __bfloat1622float2(y[e]);
      acc += xf.x * yf.x + xf.y * yf.y;
    }
#pragma unroll
    for (int off = R::kLanesPerRow / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (q >= Sq) continue;
    if (c == 0) p.delta[(static_cast<long long>(b) * p.heads_q + h) * Sq + q] = acc;
    if (ZERO_DQ_ACCUM) {  // 8 columns of one 8 x 8 tile row: contiguous
      float* const acc_bh = p.dq_accum + (static_cast<long long>(b) * p.heads_q + h) * DqAccumRows(Sq) * D;
      float4* z = reinterpret_cast<float4*>(acc_bh + DqAccumOffset(q, c, D));
      z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

// grid (ceil(seq_q / 32), heads_q, batch), 128 threads.
template <int D>
__global__ void __launch_bounds__(128) AttnBwdDqConvert(const AttnParams p) {
  using R = BwdRowPass<D>;
  const int b = blockIdx.z, h = blockIdx.y, c = R::Col(), q0 = R::Row0();
  const int Sq = p.mask.seq_q;
  const float* const acc_bh = p.dq_accum + (static_cast<long long>(b) * p.heads_q + h) * DqAccumRows(Sq) * D;
  float4 x[R::kSteps][2];
#pragma unroll
  for (int i = 0; i < R::kSteps; ++i) {
    const int q = q0 + i * R::kRowsPerStep;
    if (q < Sq) {
      const float4* a = reinterpret_cast<const float4*>(acc_bh + DqAccumOffset(q, c, D));
      x[i][0] = a[0];
      x[i][1] = a[1];
    }
  }
#pragma unroll
  for (int i = 0; i < R::kSteps; ++i) {
    const int q = q0 + i * R::kRowsPerStep;
    if (q >= Sq) continue;
    const float s = p.scale;
    uint4 out;
    out.x = pack_bf16x2(x[i][0].x * s, x[i][0].y * s);
    out.y = pack_bf16x2(x[i][0].z * s, x[i][0].w * s);
    out.z = pack_bf16x2(x[i][1].x * s, x[i][1].y * s);
    out.w = pack_bf16x2(x[i][1].z * s, x[i][1].w * s);
    *reinterpret_cast<uint4*>(static_cast<bf16*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride +
                              q * p.dq_seq_stride + c) = out;
  }
}

template <int D, int BM, int BN, int NW, int STAGES, int MASK, bool ATOMIC_DQ>
__global__ void __launch_bounds__(NW * 32, 1) AttnBwdKv(const AttnParams p) {
  constexpr int NT = NW * 32;
  constexpr int NJ = BM / 8;   // query columns of S^T per warp, in n-tiles of 8
  constexpr int DJ = D / 8;
  static_assert(D == 64 || D == 128, "backward head dim 64 or 128");
  static_assert(BN == 16 * NW, "each warp owns 16 kv rows");
  static_assert(BM % 16 == 0 && BM >= 16 && BM <= 128, "query tile: multiple of 16, at most 128");
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 query-tile buffers");

  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + BN * D;
  bf16* sQ = sV + BN * D;
  bf16* sdO = sQ + STAGES * BM * D;
  bf16* sdS = sdO + STAGES * BM * D;
  RowSpan* sSpan = reinterpret_cast<RowSpan*>(sdS + BM * BN);
  float* sLse = reinterpret_cast<float*>(sSpan + STAGES * BM);
  float* sDelta = sLse + STAGES * BM;
  unsigned char* sCls = reinterpret_cast<unsigned char*>(sDelta + STAGES * BM);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k0 = ScheduledTile<false>() * BN;
  MaskParams m = p.mask;
  SpecialiseMask<MASK>(m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const float scale_log2 = p.scale * kLog2e;

  BwdLoadKvAndClassify<D, BM, BN, NT>(p, m, sK, sV, sCls, k0, tid);
  float dk[DJ][4], dv[DJ][4];
#pragma unroll
  for (int dj = 0; dj < DJ; ++dj)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dj][e] = dv[dj][e] = 0.f;

  const BwdItemBuffers buf{sQ, sdO, sLse, sDelta, sSpan, sCls};
  BwdForEachItem<D, BM, NT, STAGES, false>(p, m, buf, tid, [&](const BwdItem& item) {
    const int h = item.h, q0 = item.q0;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 kv rows.
    float s[NJ][4], dp[NJ][4];
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nj][e] = dp[nj][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned ak[4], av[4];
      ldmatrix_x4(ak, smem_addr(sK + Swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
      ldmatrix_x4(av, smem_addr(sV + Swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
#pragma unroll
      for (int nj = 0; nj < NJ; nj += 2) {
        unsigned bq[4], bo[4];
        const int row = nj * 8 + (lane & 7) + (lane >> 4) * 8, col = kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(bq, smem_addr(item.q + Swz<D>(row, col)));
        ldmatrix_x4(bo, smem_addr(item.dout + Swz<D>(row, col)));
        mma_m16n8k16_bf16(s[nj], ak, bq[0], bq[1]);
        mma_m16n8k16_bf16(s[nj + 1], ak, bq[2], bq[3]);
        mma_m16n8k16_bf16(dp[nj], av, bo[0], bo[1]);
        mma_m16n8k16_bf16(dp[nj + 1], av, bo[2], bo[3]);
      }
    }

    // P^T and dS^T = P^T * (dP^T - delta): the exponentials, then (one uniform branch) the mask of a partial tile,
    // then dS: no branch per element (it would split the unrolled code into blocks ptxas cannot interleave).
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nj][e] = ex2_approx_ftz(fmaf(s[nj][e], scale_log2, -item.lse[nj * 8 + (lane & 3) * 2 + (e & 1)]));
    if (!item.full) {
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kv = k0 + warp * 16 + (lane >> 2) + (e >> 1) * 8;
          s[nj][e] = InSpan(item.span[nj * 8 + (lane & 3) * 2 + (e & 1)], kv) ? s[nj][e] : 0.f;
        }
    }
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[nj][e] = s[nj][e] * (dp[nj][e] - item.delta[nj * 8 + (lane & 3) * 2 + (e & 1)]);

    // dV += P^T dO ; dK += dS^T Q.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      unsigned ap[4], as[4];
      ap[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
      ap[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
      ap[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      ap[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      as[0] = pack_bf16x2(dp[2 * kk][0], dp[2 * kk][1]);
      as[1] = pack_bf16x2(dp[2 * kk][2], dp[2 * kk][3]);
      as[2] = pack_bf16x2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      as[3] = pack_bf16x2(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
      for (int dj = 0; dj < DJ; dj += 2) {
        unsigned bo[4], bq[4];
        const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, col = dj * 8 + (lane >> 4) * 8;
        ldmatrix_x4_trans(bo, smem_addr(item.dout + Swz<D>(row, col)));
        ldmatrix_x4_trans(bq, smem_addr(item.q + Swz<D>(row, col)));
        mma_m16n8k16_bf16(dv[dj], ap, bo[0], bo[1]);
        mma_m16n8k16_bf16(dv[dj + 1], ap, bo[2], bo[3]);
        mma_m16n8k16_bf16(dk[dj], as, bq[0], bq[1]);
        mma_m16n8k16_bf16(dk[dj + 1], as, bq[2], bq[3]);
      }
    }

    if (ATOMIC_DQ) {
      // dS (bf16) to shared memory as [query][kv], then dQ_accum[q] += dS K over this kv tile.
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kvl = warp * 16 + (lane >> 2) + (e >> 1) * 8;
          const int ql = nj * 8 + (lane & 3) * 2 + (e & 1);
          sdS[Swz<BN>(ql, kvl)] = __float2bfloat16_rn(dp[nj][e]);
        }
      __syncthreads();
      constexpr int kMt = BM / 16, kChunks = D / 64;
      for (int u = warp; u < kMt * kChunks; u += NW) {
        const int mt = u % kMt, dc = u / kMt;
        float acc[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          unsigned a[4];
          ldmatrix_x4(a, smem_addr(sdS + Swz<BN>(mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
#pragma unroll
          for (int j = 0; j < 8; j += 2) {
            unsigned bk[4];
            ldmatrix_x4_trans(bk, smem_addr(sK + Swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dc * 64 + j * 8 + (lane >> 4) * 8)));
            mma_m16n8k16_bf16(acc[j], a, bk[0], bk[1]);
            mma_m16n8k16_bf16(acc[j + 1], a, bk[2], bk[3]);
          }
        }
        // Row q0 + mt * 16 + lane / 4 (a multiple of 8 plus lane / 4): hr's 8 rows on are the next 8 x 8 tile row.
        float* const dst0 = p.dq_accum + (static_cast<long long>(BwdBlockBatch()) * p.heads_q + h) * DqAccumRows(Sq) * D +
                            DqAccumOffset(q0 + mt * 16 + (lane >> 2), dc * 64 + (lane & 3) * 2, D);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          if (q0 + mt * 16 + (lane >> 2) + hr * 8 >= Sq) continue;
          float* dst = dst0 + hr * 8 * D;
#pragma unroll
          for (int j = 0; j < 8; ++j) {  // the next 8 columns: the next 8 x 8 tile
            red_global_add_v2_f32(dst + j * 64, acc[j][hr * 2], acc[j][hr * 2 + 1]);
          }
        }
      }
    }
  });  // the walk's barrier after each item also guards sdS

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int kv = k0 + warp * 16 + (lane >> 2) + hr * 8;
    if (kv >= Skv) continue;
    bf16* dKg = static_cast<bf16*>(p.dk) + BwdBlockBatch() * p.dk_batch_stride + BwdBlockHead() * p.dk_head_stride + kv * p.dk_seq_stride;
    bf16* dVg = static_cast<bf16*>(p.dv) + BwdBlockBatch() * p.dv_batch_stride + BwdBlockHead() * p.dv_head_stride + kv * p.dv_seq_stride;
#pragma unroll
    for (int dj = 0; dj < DJ; ++dj) {
      const int c = dj * 8 + (lane & 3) * 2;
      *reinterpret_cast<unsigned*>(dKg + c) = pack_bf16x2(dk[dj][hr * 2] * p.scale, dk[dj][hr * 2 + 1] * p.scale);
      *reinterpret_cast<unsigned*>(dVg + c) = pack_bf16x2(dv[dj][hr * 2], dv[dj][hr * 2 + 1]);
    }
  }
}

// Separate-pass dQ: grid (ceil(seq_q / BM), heads_q, batch); the forward's kv-tile walk (KvTileWalk).
template <int D, int BM, int BN, int NW, int STAGES, int MASK>
__global__ void __launch_bounds__(NW * 32, 1) AttnBwdDq(const AttnParams p) {
  constexpr int NT = NW * 32;
  constexpr int MI = BM / (16 * NW);
  constexpr int NJ = BN / 8;
  constexpr int DJ = D / 8;
  static_assert(D == 64 || D == 128, "backward head dim 64 or 128");
  static_assert(BM % (16 * NW) == 0 && MI >= 1 && MI <= 2, "each warp owns 1..2 m-tiles of 16 rows");
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 128, "kv tile: multiple of 16, at most 128");
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 kv buffers");

  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sdO = sQ + BM * D;
  bf16* sK = sdO + BM * D;
  bf16* sV = sK + STAGES * BN * D;
  unsigned char* sCls = reinterpret_cast<unsigned char*>(sV + STAGES * BN * D);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int b, h, q0, hk;
  MaskParams m;
  ScheduledQueryTile<BM, MASK>(p, b, h, q0, hk, m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const float scale_log2 = p.scale * kLog2e;
  const int nkt = (Skv + BN - 1) / BN;

  LoadTileAsync<BM, D, NT>(sQ, static_cast<const bf16*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + q0 * p.q_seq_stride,
                           p.q_seq_stride, Sq - q0, tid);
  LoadTileAsync<BM, D, NT>(sdO, static_cast<const bf16*>(p.dout) + b * p.do_batch_stride + h * p.do_head_stride + q0 * p.do_seq_stride,
                           p.do_seq_stride, Sq - q0, tid);
  cp_async_commit_group();
  ClassifyKvTiles<BM, BN, NT>(m, b, q0, nkt, sCls, tid);

  RowSpan span[MI][2];
  float lse2[MI][2], delta[MI][2];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int q = q0 + (warp * MI + mi) * 16 + (lane >> 2) + hr * 8;
      span[mi][hr] = RowVisibleSpan(m, b, q);
      float lse = Inf(), dl = 0.f;
      if (q < Sq) {
        const long long row = (static_cast<long long>(b) * p.heads_q + h) * Sq + q;
        lse = p.lse[row];
        if (lse == -Inf()) lse = Inf();
        dl = p.delta[row];
      }
      lse2[mi][hr] = lse * kLog2e;
      delta[mi][hr] = dl;
    }
  float dq[MI][DJ][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int dj = 0; dj < DJ; ++dj)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[mi][dj][e] = 0.f;
  __syncthreads();

  KvTileWalk<D, BN, NT, STAGES> kv(p, b, hk, Skv, sK, sV, sCls, nkt, tid);
  while (kv.HasTile()) {
    kv.Acquire();
    const int t = kv.tile();
    const bf16 *cK = kv.k(), *cV = kv.v();
    const bool full = sCls[t] == kTileFull;

    float s[MI][NJ][4], dp[MI][NJ][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nj][e] = dp[mi][nj][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned aq[MI][4], ao[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int row = (warp * MI + mi) * 16 + (lane & 15), col = kk * 16 + (lane >> 4) * 8;
        ldmatrix_x4(aq[mi], smem_addr(sQ + Swz<D>(row, col)));
        ldmatrix_x4(ao[mi], smem_addr(sdO + Swz<D>(row, col)));
      }
#pragma unroll
      for (int nj = 0; nj < NJ; nj += 2) {
        unsigned bk[4], bv[4];
        const int row = nj * 8 + (lane & 7) + (lane >> 4) * 8, col = kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(bk, smem_addr(cK + Swz<D>(row, col)));
        ldmatrix_x4(bv, smem_addr(cV + Swz<D>(row, col)));
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma_m16n8k16_bf16(s[mi][nj], aq[mi], bk[0], bk[1]);
          mma_m16n8k16_bf16(s[mi][nj + 1], aq[mi], bk[2], bk[3]);
          mma_m16n8k16_bf16(dp[mi][nj], ao[mi], bv[0], bv[1]);
          mma_m16n8k16_bf16(dp[mi][nj + 1], ao[mi], bv[2], bv[3]);
        }
      }
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int hr = e >> 1;
          const int kv = t * BN + nj * 8 + (lane & 3) * 2 + (e & 1);
          float pv = ex2_approx_ftz(fmaf(s[mi][nj][e], scale_log2, -lse2[mi][hr]));
          if (!full && !InSpan(span[mi][hr], kv)) pv = 0.f;
          dp[mi][nj][e] = pv * (dp[mi][nj][e] - delta[mi][hr]);
        }
    // dQ += dS K.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      unsigned a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        a[mi][0] = pack_bf16x2(dp[mi][2 * kk][0], dp[mi][2 * kk][1]);
        a[mi][1] = pack_bf16x2(dp[mi][2 * kk][2], dp[mi][2 * kk][3]);
        a[mi][2] = pack_bf16x2(dp[mi][2 * kk + 1][0], dp[mi][2 * kk + 1][1]);
        a[mi][3] = pack_bf16x2(dp[mi][2 * kk + 1][2], dp[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dj = 0; dj < DJ; dj += 2) {
        unsigned bb[4];
        ldmatrix_x4_trans(bb, smem_addr(cK + Swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dj * 8 + (lane >> 4) * 8)));
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma_m16n8k16_bf16(dq[mi][dj], a[mi], bb[0], bb[1]);
          mma_m16n8k16_bf16(dq[mi][dj + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
    kv.Release();
  }
  cp_async_wait_group<0>();

#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = q0 + (warp * MI + mi) * 16 + (lane >> 2) + hr * 8;
      if (r >= Sq) continue;
      bf16* dQg = static_cast<bf16*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride + r * p.dq_seq_stride;
#pragma unroll
      for (int dj = 0; dj < DJ; ++dj)
        *reinterpret_cast<unsigned*>(dQg + dj * 8 + (lane & 3) * 2) =
            pack_bf16x2(dq[mi][dj][hr * 2] * p.scale, dq[mi][dj][hr * 2 + 1] * p.scale);
    }
}

}  // namespace dflash_attn
