// Fused attention forward of the Hopper tier (sm_90a): AttnFwd's algorithm and contract (one block per (query
// tile, query head, batch), kv tiles classified against the mask and empty ones never touched, per-element masking
// of partial tiles only, online softmax in the log2 domain, O and the natural-log LSE written; rows that see
// nothing get O = 0, LSE = -inf) with both products on wgmma: each consumer warpgroup owns 64 query rows,
// S = Q K^T reads Q and K straight from shared memory (no fragment staging), O += P V takes P from the registers
// the softmax left it in and V from shared memory (MN-major). Tiles are in the 128-byte swizzled layout of
// kernels/common/wgmma.cuh, loaded with cp.async by all threads (attention_sw128.cuh).
//   PIPE 0 (AttnFwdWgmma, config kernel 1): per kv tile S, wait, softmax, PV, wait; STAGES = 2 prefetches the next
//     tile during this one.
//   PIPE 1 (config kernel 2, STAGES = 3): the softmax of tile t overlaps the tensor cores' S of the next tile: the
//     warpgroup issues S(t+1) = Q K(t+1)^T, then masks and exponentiates S(t), then issues O += P(t) V(t), and waits
//     for both; three kv buffers keep the copies two tiles ahead.
// Who may include it: attention_kernels_sm90a.cu (NVRTC, sm_90a only). Thread-safety: n/a (device code).
#pragma once

#include "attention_kv_walk.cuh"
#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_query_block.cuh"
#include "attention_schedule.cuh"
#include "attention_sw128.cuh"
#include "wgmma.cuh"

namespace dflash_attn {

// Per-element mask of a partial tile t for the warpgroup's S accumulators (rows row_in_tile, row_in_tile + 8).
template <int BN>
__device__ __forceinline__ void MaskPartialTile(float (&s)[BN / 2], const RowSpan* spans, int row_in_tile, int t,
                                                int lane) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const RowSpan sp = spans[row_in_tile + hr * 8];
#pragma unroll
    for (int nj = 0; nj < BN / 8; ++nj)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int kv = t * BN + nj * 8 + (lane & 3) * 2 + e;
        if (!InSpan(sp, kv)) s[nj * 4 + hr * 2 + e] = -Inf();
      }
  }
}

// One row half (hr: rows row_in_tile + 8 hr) of an online-softmax step in the log2 domain: the row's new maximum
// and sum, P as bf16 pairs in the A-fragment layout of the PV product; returns the factor O's row must be scaled by.
template <int BN>
__device__ __forceinline__ float SoftmaxRow(const float (&s)[BN / 2], int hr, float (&mrow)[2], float (&lrow)[2],
                                            unsigned (&pk)[BN / 8][2], float scale_log2) {
  float mx = -Inf();
#pragma unroll
  for (int nj = 0; nj < BN / 8; ++nj) mx = fmaxf(mx, fmaxf(s[nj * 4 + hr * 2], s[nj * 4 + hr * 2 + 1]));
  mx = WarpQuadMax(mx) * scale_log2;
  const float mnew = fmaxf(mrow[hr], mx);
  const float muse = mnew == -Inf() ? 0.f : mnew;
  const float alpha = ex2_approx_ftz(mrow[hr] - muse);
  mrow[hr] = mnew;
  float sum = 0.f;
#pragma unroll
  for (int nj = 0; nj < BN / 8; ++nj) {
    const float p0 = ex2_approx_ftz(fmaf(s[nj * 4 + hr * 2], scale_log2, -muse));
    const float p1 = ex2_approx_ftz(fmaf(s[nj * 4 + hr * 2 + 1], scale_log2, -muse));
    sum += p0 + p1;
    pk[nj][hr] = pack_bf16x2(p0, p1);
  }
  lrow[hr] = lrow[hr] * alpha + sum;
  return alpha;
}

// Scales O's row half hr by alpha (its products must be complete); skipped when no row maximum of the warp changed,
// as for most tiles.
template <int D>
__device__ __forceinline__ void RescaleRow(float (&o)[D / 2], int hr, float alpha) {
  if (__any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
    for (int dj = 0; dj < D / 8; ++dj) {
      o[dj * 4 + hr * 2] *= alpha;
      o[dj * 4 + hr * 2 + 1] *= alpha;
    }
  }
}

// One online-softmax step: SoftmaxRow and RescaleRow for both row halves (O's products must be complete).
template <int BN, int D>
__device__ __forceinline__ void SoftmaxStep(const float (&s)[BN / 2], float (&o)[D / 2], float (&mrow)[2],
                                            float (&lrow)[2], unsigned (&pk)[BN / 8][2], float scale_log2) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) RescaleRow<D>(o, hr, SoftmaxRow<BN>(s, hr, mrow, lrow, pk, scale_log2));
}

// Issues (and commits) S = Q K^T for the warpgroup's 64 rows of the swizzled Q tile (BM rows) and the kv tile at cK.
template <int D, int BM, int BN>
__device__ __forceinline__ void IssueQkT(float (&s)[BN / 2], unsigned q_addr, int wg, unsigned cK) {
  wgmma_fence();
  WgmmaSSKMajor<BN, BM, D / 16>(s, q_addr, wg * 64, cK);
  wgmma_commit_group();
}

// Issues (and commits) O += P V with P from registers and the V tile at cV (MN-major).
template <int D, int BN>
__device__ __forceinline__ void IssuePv(float (&o)[D / 2], const unsigned (&pk)[BN / 8][2], unsigned cV) {
  wgmma_fence();  // o and pk were written by ordinary instructions
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    const unsigned a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
    WgmmaRS<D>::template Run<1>(o, a, wgmma_desc_mn_major<BN>(cV, kk), 1);
  }
  wgmma_commit_group();
}

// One kv tile, products back to back: S = Q K^T, wait, mask (partial tiles), softmax with O's rescale, O += P V,
// wait. K at cK, V at cV.
template <int D, int BM, int BN>
__device__ __forceinline__ void TileStep(float (&o)[D / 2], float (&mrow)[2], float (&lrow)[2],
                                         unsigned (&pk)[BN / 8][2], unsigned q_addr, int wg, unsigned cK, unsigned cV,
                                         bool partial, const RowSpan* spans, int row_in_tile, int t, int lane,
                                         float scale_log2) {
  float s[BN / 2];
  IssueQkT<D, BM, BN>(s, q_addr, wg, cK);
  wgmma_wait_group<0>();
  if (partial) MaskPartialTile<BN>(s, spans, row_in_tile, t, lane);
  SoftmaxStep<BN, D>(s, o, mrow, lrow, pk, scale_log2);
  IssuePv<D, BN>(o, pk, cV);
  wgmma_wait_group<0>();
}

// The epilogue: O / l as bf16 and the natural-log LSE of the warpgroup's rows r0 and r0 + 8 (rows >= Sq skipped;
// rows that saw nothing get O = 0 and LSE = -inf).
template <int D>
__device__ __forceinline__ void StoreRowsOut(const AttnParams& p, const float (&o)[D / 2], const float (&mrow)[2],
                                             const float (&lrow)[2], int b, int h, int r0, int Sq, int lane) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float l = WarpQuadSum(lrow[hr]);
    const int r = r0 + hr * 8;
    if (r >= Sq) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    bf16* Og = static_cast<bf16*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + r * p.o_seq_stride;
#pragma unroll
    for (int dj = 0; dj < D / 8; ++dj) {
      *reinterpret_cast<unsigned*>(Og + dj * 8 + (lane & 3) * 2) =
          pack_bf16x2(o[dj * 4 + hr * 2] * inv, o[dj * 4 + hr * 2 + 1] * inv);
    }
    if ((lane & 3) == 0)
      p.lse[(static_cast<long long>(b) * p.heads_q + h) * Sq + r] = l > 0.f ? (mrow[hr] + log2f(l)) * kLn2 : -Inf();
  }
}

template <int D, int BM, int BN, int STAGES, int PIPE, int MASK>
__global__ void __launch_bounds__(BM / 64 * 128, 1) AttnFwdWgmma(const AttnParams p) {
  constexpr int NT = BM / 64 * 128;  // one warpgroup per 64 query rows
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(BM == 64 || BM == 128, "one or two warpgroups of 64 query rows");
  static_assert(BN == 64 || BN == 128, "kv tile of 64 or 128 rows (the S product's N)");
  static_assert((PIPE == 0 && (STAGES == 1 || STAGES == 2)) || (PIPE == 1 && STAGES == 3),
                "PIPE 0 with 1 or 2 kv buffers, PIPE 1 with 3");

  extern __shared__ __align__(1024) unsigned char smem[];  // swizzled tiles start 1024-byte aligned
  const FwdSmem<D, BM, BN, STAGES> sm(smem);
  bf16 *const sQ = sm.q, *const sK = sm.k, *const sV = sm.v;
  RowSpan* const sSpan = sm.span;
  unsigned char* const sCls = sm.cls;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2;                                          // rows [64 wg, 64 wg + 64) of the tile
  const int row_in_tile = wg * 64 + (warp & 3) * 16 + (lane >> 2);  // + 8 hr
  int b, h, q0, hk;
  MaskParams m;
  ScheduledQueryTile<BM, MASK>(p, b, h, q0, hk, m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const float scale_log2 = p.scale * kLog2e;

  const bf16* Qg = static_cast<const bf16*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + q0 * p.q_seq_stride;
  const bf16* Kg = static_cast<const bf16*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
  const bf16* Vg = static_cast<const bf16*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
  const int nkt = (Skv + BN - 1) / BN;
  const unsigned q_addr = smem_addr(sQ), k_addr = smem_addr(sK), v_addr = smem_addr(sV);
  constexpr unsigned kTileBytes = BN * D * 2;

  LoadSw128Async<BM, D, NT>(q_addr, Qg, p.q_seq_stride, Sq - q0, tid);
  cp_async_commit_group();
  ClassifyKvTiles<BM, BN, NT>(m, b, q0, nkt, sCls, tid);
  for (int r = tid; r < BM; r += NT) sSpan[r] = RowVisibleSpan(m, b, q0 + r);

  // Issues (and commits as one group) the copies of kv tile t into buffer `stage`.
  auto load_kv = [&](int t, int stage) {
    const long long k0 = static_cast<long long>(t) * BN;
    LoadSw128Async<BN, D, NT>(k_addr + stage * kTileBytes, Kg + k0 * p.k_seq_stride, p.k_seq_stride,
                              Skv - static_cast<int>(k0), tid);
    LoadSw128Async<BN, D, NT>(v_addr + stage * kTileBytes, Vg + k0 * p.v_seq_stride, p.v_seq_stride,
                              Skv - static_cast<int>(k0), tid);
    cp_async_commit_group();
  };

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float mrow[2] = {-Inf(), -Inf()}, lrow[2] = {0.f, 0.f};
  unsigned pk[BN / 8][2];
  __syncthreads();  // sCls ready

  int t = NextNonEmpty(sCls, 0, nkt);
  if constexpr (PIPE == 0) {
    if (t < nkt) load_kv(t, 0);
    int stage = 0;
    while (t < nkt) {
      const int tn = NextNonEmpty(sCls, t + 1, nkt);
      if (STAGES > 1 && tn < nkt) {
        load_kv(tn, stage ^ 1);
        cp_async_wait_group<1>();
      } else {
        cp_async_wait_group<0>();
      }
      fence_proxy_async_shared();  // the landed tiles (generic proxy) before the wgmma reads (async proxy)
      __syncthreads();
      TileStep<D, BM, BN>(o, mrow, lrow, pk, q_addr, wg, k_addr + stage * kTileBytes, v_addr + stage * kTileBytes,
                          sCls[t] != kTileFull, sSpan, row_in_tile, t, lane, scale_log2);
      __syncthreads();  // this stage's buffers may be refilled now
      if (STAGES == 1 && tn < nkt) load_kv(tn, 0);
      t = tn;
      stage = STAGES > 1 ? stage ^ 1 : 0;
    }
  } else {
    // Tiles t, tn, tnn sit in buffers stage, stage + 1, stage + 2 (mod 3); every existing one was issued in order.
    int tn = t < nkt ? NextNonEmpty(sCls, t + 1, nkt) : nkt;
    int tnn = tn < nkt ? NextNonEmpty(sCls, tn + 1, nkt) : nkt;
    if (t < nkt) load_kv(t, 0);
    if (tn < nkt) load_kv(tn, 1);
    if (tnn < nkt) load_kv(tnn, 2);
    float s[BN / 2];
    if (t < nkt) {
      if (tnn < nkt) cp_async_wait_group<2>(); else if (tn < nkt) cp_async_wait_group<1>(); else cp_async_wait_group<0>();
      fence_proxy_async_shared();
      __syncthreads();
      IssueQkT<D, BM, BN>(s, q_addr, wg, k_addr);
      wgmma_wait_group<0>();
      wgmma_fence_operand(s);
    }
    int stage = 0;
    while (t < nkt) {
      const int sn_stage = stage == 2 ? 0 : stage + 1;
      float sn[BN / 2];
      if (tn < nkt) {  // S of the next tile runs on the tensor cores during this tile's softmax
        if (tnn < nkt) cp_async_wait_group<1>(); else cp_async_wait_group<0>();
        fence_proxy_async_shared();
        __syncthreads();
        IssueQkT<D, BM, BN>(sn, q_addr, wg, k_addr + sn_stage * kTileBytes);
        wgmma_fence_operand(sn);
      }
      if (sCls[t] != kTileFull) MaskPartialTile<BN>(s, sSpan, row_in_tile, t, lane);
      SoftmaxStep<BN, D>(s, o, mrow, lrow, pk, scale_log2);
      wgmma_fence_operand(o);
      IssuePv<D, BN>(o, pk, v_addr + stage * kTileBytes);
      wgmma_wait_group<0>();
      wgmma_fence_operand(o);
      wgmma_fence_operand(sn);
      __syncthreads();  // every warpgroup is done with buffer `stage`: it takes the tile after tnn
      const int t3 = tnn < nkt ? NextNonEmpty(sCls, tnn + 1, nkt) : nkt;
      if (t3 < nkt) load_kv(t3, stage);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = sn[i];
      t = tn;
      tn = tnn;
      tnn = t3;
      stage = sn_stage;
    }
  }
  cp_async_wait_group<0>();

  StoreRowsOut<D>(p, o, mrow, lrow, b, h, q0 + row_in_tile, Sq, lane);
}

}  // namespace dflash_attn
