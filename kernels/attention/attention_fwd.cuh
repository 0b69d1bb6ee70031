// Fused attention forward (FlashAttention-2 structure): one block per (query tile, query head, batch); it
// classifies every kv tile of its query tile (attention_mask.cuh), never touches the empty ones, streams the rest
// through shared memory with cp.async (STAGES = 1 or 2 buffers), computes S = Q K^T with mma.sync, masks only
// partial tiles, runs the online softmax in registers and accumulates O = P V. Writes O (bf16) and the
// log-sum-exp (fp32, natural log, -inf for rows that see nothing; their O is 0).
// Who may include it: attention_kernels.cu (NVRTC). Thread-safety: n/a (device code).
#pragma once

#include "attention_kv_walk.cuh"
#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_query_block.cuh"
#include "attention_schedule.cuh"

namespace dflash_attn {

template <int D, int BM, int BN, int NW, int STAGES, int MASK>
__global__ void __launch_bounds__(NW * 32, 1) AttnFwd(const AttnParams p) {
  constexpr int NT = NW * 32;
  constexpr int MI = BM / (16 * NW);  // 16-row m-tiles per warp
  constexpr int NJ = BN / 8;
  constexpr int DJ = D / 8;
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(BM % (16 * NW) == 0 && MI >= 1 && MI <= 4, "each warp owns 1..4 m-tiles of 16 rows");
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 128, "kv tile: multiple of 16, at most 128");
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 kv buffers");

  extern __shared__ __align__(1024) unsigned char smem[];  // WarpGemmABt's XOR addressing: tiles 256-byte aligned
  const FwdSmem<D, BM, BN, STAGES> sm(smem);
  bf16 *const sQ = sm.q, *const sK = sm.k, *const sV = sm.v;
  RowSpan* const sSpan = sm.span;
  unsigned char* const sCls = sm.cls;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int b, h, q0, hk;
  MaskParams m;
  ScheduledQueryTile<BM, MASK>(p, b, h, q0, hk, m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const float scale_log2 = p.scale * kLog2e;

  const bf16* Qg = static_cast<const bf16*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + q0 * p.q_seq_stride;
  const int nkt = (Skv + BN - 1) / BN;

  LoadTileAsync<BM, D, NT>(sQ, Qg, p.q_seq_stride, Sq - q0, tid);
  cp_async_commit_group();
  ClassifyKvTiles<BM, BN, NT>(m, b, q0, nkt, sCls, tid);

  // Row spans live in shared memory (registers are for the accumulators); only partial tiles read them.
  for (int r = tid; r < BM; r += NT) sSpan[r] = RowVisibleSpan(m, b, q0 + r);

  float o[MI][DJ][4];
  float mrow[MI][2], lrow[MI][2];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int dj = 0; dj < DJ; ++dj)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mi][dj][e] = 0.f;
    mrow[mi][0] = mrow[mi][1] = -Inf();
    lrow[mi][0] = lrow[mi][1] = 0.f;
  }
  __syncthreads();  // sCls ready

  KvTileWalk<D, BN, NT, STAGES> kv(p, b, hk, Skv, sK, sV, sCls, nkt, tid);
  while (kv.HasTile()) {
    kv.Acquire();
    const int t = kv.tile();
    const bf16 *cK = kv.k(), *cV = kv.v();
    float s[MI][NJ][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nj][e] = 0.f;
    WarpGemmABt<D, MI, NJ>(s, sQ, warp * MI * 16, cK, 0, lane);  // S = Q K^T for this warp's 16 MI rows

    if (sCls[t] != kTileFull) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const RowSpan sp = sSpan[(warp * MI + mi) * 16 + (lane >> 2) + hr * 8];
#pragma unroll
          for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int kv = t * BN + nj * 8 + (lane & 3) * 2 + e;
              if (!InSpan(sp, kv)) s[mi][nj][hr * 2 + e] = -Inf();
            }
        }
    }

    // Online softmax in the log2 domain.
    unsigned pk[MI][NJ][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = -Inf();
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj) mx = fmaxf(mx, fmaxf(s[mi][nj][hr * 2], s[mi][nj][hr * 2 + 1]));
        mx = WarpQuadMax(mx) * scale_log2;
        const float mnew = fmaxf(mrow[mi][hr], mx);
        const float muse = mnew == -Inf() ? 0.f : mnew;
        const float alpha = ex2_approx_ftz(mrow[mi][hr] - muse);
        mrow[mi][hr] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj) {
          const float p0 = ex2_approx_ftz(fmaf(s[mi][nj][hr * 2], scale_log2, -muse));
          const float p1 = ex2_approx_ftz(fmaf(s[mi][nj][hr * 2 + 1], scale_log2, -muse));
          sum += p0 + p1;
          pk[mi][nj][hr] = pack_bf16x2(p0, p1);  // P in bf16 pairs at once: the fp32 S tile dies here (registers)
        }
        lrow[mi][hr] = lrow[mi][hr] * alpha + sum;
        if (__any_sync(0xffffffffu, alpha != 1.f)) {  // most tiles leave every row maximum unchanged
#pragma unroll
          for (int dj = 0; dj < DJ; ++dj) {
            o[mi][dj][hr * 2] *= alpha;
            o[mi][dj][hr * 2 + 1] *= alpha;
          }
        }
      }

    // O += P V. Chunk dj + half of a row = (half ^ row%8) ^ dj for even dj: one base address per lane, the rest by
    // XOR with a constant (as in WarpGemmABt).
    const unsigned v0 = smem_addr(cV + Swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8));
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      unsigned a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        a[mi][0] = pk[mi][2 * kk][0];
        a[mi][1] = pk[mi][2 * kk][1];
        a[mi][2] = pk[mi][2 * kk + 1][0];
        a[mi][3] = pk[mi][2 * kk + 1][1];
      }
#pragma unroll
      for (int dj = 0; dj < DJ; dj += 2) {
        unsigned bb[4];
        ldmatrix_x4_trans(bb, (v0 + kk * 16 * D * 2) ^ (dj << 4));  // = cV + Swz<D>(kk*16 + row, dj*8 + half*8)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma_m16n8k16_bf16(o[mi][dj], a[mi], bb[0], bb[1]);
          mma_m16n8k16_bf16(o[mi][dj + 1], a[mi], bb[2], bb[3]);
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
      const float l = WarpQuadSum(lrow[mi][hr]);
      const int r = q0 + (warp * MI + mi) * 16 + (lane >> 2) + hr * 8;
      if (r >= Sq) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      bf16* Og = static_cast<bf16*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + r * p.o_seq_stride;
#pragma unroll
      for (int dj = 0; dj < DJ; ++dj) {
        *reinterpret_cast<unsigned*>(Og + dj * 8 + (lane & 3) * 2) =
            pack_bf16x2(o[mi][dj][hr * 2] * inv, o[mi][dj][hr * 2 + 1] * inv);
      }
      if ((lane & 3) == 0)
        p.lse[(static_cast<long long>(b) * p.heads_q + h) * Sq + r] =
            l > 0.f ? (mrow[mi][hr] + log2f(l)) * kLn2 : -Inf();
    }
}

}  // namespace dflash_attn
