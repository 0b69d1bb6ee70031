// Fused attention backward with FlashAttention-2's two-dimensional warp layout (the dK/dV kernel; AttnBwdPre and
// AttnBwdDqConvert of attention_bwd.cuh run before and after it). One block per (kv tile of BN rows, kv head,
// batch), NW = (BN / 32) * (BM / 32) warps; per visible (query head of the GQA group, query tile of BM rows):
//  1. S^T = K Q^T and dP^T = V dO^T: warp (wk, wq) computes kv rows 32 wk.. x query columns 32 wq.., then
//     P^T = exp(S^T - LSE) and dS^T = P^T (dP^T - delta) go to shared memory as bf16 [kv][query] tiles;
//  2. dV += P^T dO and dK += dS^T Q: warp (wk, wq) owns kv rows 32 wk.. x head-dim columns (D / QW) wq.. (the
//     accumulators stay in registers for the whole block: dK, dV reduced over the group, written once);
//  3. dQ_accum += dS K: warp tiles of 32 query rows x (D / DW) columns (in passes of 32), 8-byte vector
//     reductions (red.v2 at one pointer per thread + immediates), each warp instruction one 256-byte 8 x 8 tile
//     of the accumulator (DqAccumOffset).
// Compared with AttnBwdKv (each warp 16 kv rows x the whole query tile), every fragment loaded from shared memory
// feeds more mma: 144 ldmatrix.x4 per warp and item instead of 184 for the same 320 mma (BN 128, BM 64).
// Who may include it: attention_kernels.cu (NVRTC). Thread-safety: n/a (device code).
#pragma once

#include "attention_bwd_items.cuh"
#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_schedule.cuh"

namespace dflash_attn {

// Phase 3's dQ reductions of one warp: acc[mi][j] is the 16 x 8 tile of query rows 16 mi.. and head-dim columns
// 8 j.. (mma accumulator layout); dst points at this thread's first element (row qr, its column pair) in the
// accumulator's 8 x 8 tiles (DqAccumOffset; qr % 8 = lane / 4): 8 rows on is the next tile row (8 D floats), 8
// columns on the next tile (64 floats), so each reduction instruction of the warp covers one 256-byte tile. CHECKED:
// rows >= seq_q are skipped (predicated reductions, which cost a branch each in SASS: only the tile that needs it).
template <int D, int DQN, bool CHECKED>
__device__ __forceinline__ void Bwd2dAddDq(float* dst, const float (&acc)[2][DQN][4], int qr, int Sq) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int j = 0; j < DQN; ++j) {
        float* p = dst + (mi * 2 + hr) * 8 * D + j * 64;
        if (CHECKED) red_global_add_v2_f32_if(p, acc[mi][j][hr * 2], acc[mi][j][hr * 2 + 1], qr + mi * 16 + hr * 8 < Sq);
        else red_global_add_v2_f32(p, acc[mi][j][hr * 2], acc[mi][j][hr * 2 + 1]);
      }
}

// Shared-memory byte address of Swz<WIDTH>(row, col + step_bytes / 2) given `addr`, that of Swz<WIDTH>(row, col), in
// a 256-byte-aligned tile, when the step's chunk index (step_bytes / 16) shares no bit with col / 8: Swz XORs the
// row into the low bits of the chunk index only (mask(WIDTH)), so the step's low chunk bits become an XOR of the
// address and its higher bits an add (rows of >= 128 bytes keep the row term above both). A compile-time step
// makes this one LOP3 per distinct low part (kept in a register) and an immediate per high part.
template <int WIDTH>
__device__ __forceinline__ unsigned Bwd2dSwzStep(unsigned addr, int step_bytes) {
  constexpr int kChunks = WIDTH / 8;
  constexpr unsigned kXorBits = static_cast<unsigned>((kChunks < 8 ? kChunks : 8) - 1) << 4;  // Swz's chunk mask, in bytes
  return (addr ^ (static_cast<unsigned>(step_bytes) & kXorBits)) + (static_cast<unsigned>(step_bytes) & ~kXorBits);
}

template <int D, int BM, int BN, int NW, int STAGES, int MASK>
__global__ void __launch_bounds__(NW * 32, 1) AttnBwdKv2d(const AttnParams p) {
  constexpr int NT = NW * 32;
  constexpr int MW = BN / 32;          // kv warp rows (phases 1, 2)
  constexpr int QW = BM / 32;          // query warp columns (phase 1) = head-dim warp columns (phase 2)
  constexpr int DN = D / QW / 8;       // phase 2: n-tiles of 8 head-dim columns per warp
  constexpr int QQ = BM / 32;          // phase 3: query warp rows
  constexpr int DW = NW / QQ;          // phase 3: head-dim warp columns
  constexpr int DQN = D / DW / 8 < 4 ? D / DW / 8 : 4;  // phase 3: n-tiles per pass (32 columns at most: registers)
  constexpr int DQP = D / DW / 8 / DQN;                    // phase 3: passes over this warp's head-dim columns
  // Phase 1 fragment addresses (WarpGemmABtXor4 for D 128, else WarpGemmABt): 4 XOR bases cost 6 registers, which
  // stages 1 (134 KiB, the only 2-D config on sm_120) can spare thanks to the [register + immediate] addresses of
  // phases 2 and 3 (NVRTC: sm_90 and sm_120 spill-free; phase 1 310 instead of 353 instructions per warp-item on
  // sm_90).
  constexpr int kXorBases = D == 128 ? 4 : 1;
  static_assert(D == 64 || D == 128, "backward head dim 64 or 128");
  static_assert(BN % 32 == 0 && BM % 32 == 0 && MW * QW == NW, "warps = (BN / 32) * (BM / 32)");
  static_assert(DN % 2 == 0 && DQN % 2 == 0 && NW % QQ == 0, "head-dim split in pairs of n-tiles");
  static_assert(BM == 32 || BM == 64 || BM == 128, "query tile rows: a power of two (swizzled [kv][query] tiles)");
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 query-tile buffers");

  // WarpGemmABt's XOR addressing: tiles 256-byte aligned. The order of this carve-up is load-bearing: phases 1-3
  // address V, dO and dS^T as K, Q and P^T plus the constants BN * D, STAGES * BM * D and BN * BM (elements).
  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + BN * D;
  bf16* sQ = sV + BN * D;
  bf16* sdO = sQ + STAGES * BM * D;
  bf16* sP = sdO + STAGES * BM * D;  // P^T  [kv][query]
  bf16* sdS = sP + BN * BM;           // dS^T [kv][query]
  RowSpan* sSpan = reinterpret_cast<RowSpan*>(sdS + BN * BM);
  float* sLse = reinterpret_cast<float*>(sSpan + STAGES * BM);
  float* sDelta = sLse + STAGES * BM;
  unsigned char* sCls = reinterpret_cast<unsigned char*>(sDelta + STAGES * BM);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % MW, wq = warp / MW;     // phases 1 and 2
  const int wqq = warp % QQ, wdd = warp / QQ;   // phase 3
  const int k0 = ScheduledTile<false>() * BN;
  MaskParams m = p.mask;
  SpecialiseMask<MASK>(m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const float scale_log2 = p.scale * kLog2e;

  BwdLoadKvAndClassify<D, BM, BN, NT>(p, m, sK, sV, sCls, k0, tid);
  float dk[2][DN][4], dv[2][DN][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int dj = 0; dj < DN; ++dj)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mi][dj][e] = dv[mi][dj][e] = 0.f;

  const BwdItemBuffers buf{sQ, sdO, sLse, sDelta, sSpan, sCls};
  BwdForEachItem<D, BM, NT, STAGES, true>(p, m, buf, tid, [&](const BwdItem& item) {
    const int h = item.h, q0 = item.q0;

    // Phase 1: this warp's 32 x 32 of S^T and dP^T, then P^T and dS^T to shared memory.
    {
      float s[2][4][4], dp[2][4][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < 4; ++nj)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][nj][e] = dp[mi][nj][e] = 0.f;
      // K and V, Q and dO sit a constant apart: one set of XOR bases, immediates for the second product.
      const unsigned ka0 = smem_addr(sK + Swz<D>(wk * 32 + (lane & 15), (lane >> 4) * 8));
      const unsigned qb0 = smem_addr(item.q + Swz<D>(wq * 32 + (lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8));
      if constexpr (kXorBases == 4) WarpGemmABtXor4<D, 2, 4>(s, ka0, 0, qb0, 0);
      else WarpGemmABt<D, 2, 4>(s, sK, wk * 32, item.q, wq * 32, lane);
      // P^T = exp(S^T - LSE); then dP^T = V dO^T (in the same basic block: ptxas overlaps the exponentials with
      // its mma); then, one uniform branch, the mask of a partial tile. No branch per element.
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const float2 ls = *reinterpret_cast<const float2*>(item.lse + wq * 32 + nj * 8 + (lane & 3) * 2);  // 8-byte aligned
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][nj][e] = ex2_approx_ftz(fmaf(s[mi][nj][e], scale_log2, -((e & 1) ? ls.y : ls.x)));
      }
      if constexpr (kXorBases == 4) WarpGemmABtXor4<D, 2, 4>(dp, ka0, BN * D * 2, qb0, STAGES * BM * D * 2);
      else WarpGemmABt<D, 2, 4>(dp, sV, wk * 32, item.dout, wq * 32, lane);
      if (!item.full) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int nj = 0; nj < 4; ++nj)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int kv = k0 + wk * 32 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
              const RowSpan sp = item.span[wq * 32 + nj * 8 + (lane & 3) * 2 + (e & 1)];
              s[mi][nj][e] = InSpan(sp, kv) ? s[mi][nj][e] : 0.f;
            }
      }
      // Every kv row this thread stores (wk*32 + mi*16 + hr*8 + lane/4) has the swizzle row bits of lane/4, so the
      // 16 stores per tile are 4 addresses (one per nj) + immediates instead of one address per store; and nj's
      // 8-column step only XORs the chunk index (its bits are disjoint from wq's), so the 4 addresses are one offset
      // XOR 8 nj instead of a whole Swz per nj.
      const int off0 = Swz<BM>(wk * 32 + (lane >> 2), wq * 32 + (lane & 3) * 2);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const int ql = wq * 32 + nj * 8 + (lane & 3) * 2;
        const int off = off0 ^ (nj * 8);  // = Swz<BM>(wk * 32 + (lane >> 2), ql)
        // Read once per nj (ql is even: 8-byte aligned): the compiler cannot tell these shared stores from the
        // delta buffer, so item.delta[ql] in the loop below would be re-read after every store (4 LDS instead of 32).
        const float2 dl = *reinterpret_cast<const float2*>(item.delta + ql);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const float ds0 = s[mi][nj][hr * 2] * (dp[mi][nj][hr * 2] - dl.x);
            const float ds1 = s[mi][nj][hr * 2 + 1] * (dp[mi][nj][hr * 2 + 1] - dl.y);
            const int o = off + (mi * 16 + hr * 8) * BM;  // = Swz<BM>(kv row + mi*16 + hr*8, ql)
            *reinterpret_cast<unsigned*>(sP + o) = pack_bf16x2(s[mi][nj][hr * 2], s[mi][nj][hr * 2 + 1]);
            *reinterpret_cast<unsigned*>(sdS + o) = pack_bf16x2(ds0, ds1);
          }
      }
    }
    __syncthreads();

    // Phase 2: dV += P^T dO, dK += dS^T Q for kv rows 32 wk.. x head-dim columns (D / QW) wq...
    // Fragment addresses as [register + immediate] (a Swz per load costs ~2-3 integer instructions each):
    // A (P^T, dS^T) at k step kk is step 0's address with the byte offset XOR / + 32 kk (Bwd2dSwzStep); mi adds
    // 16 rows, dS^T is P^T + BN * BM elements. B (Q, dO) at n-tile pair dj is dj 0's with XOR / + 16 dj; kk adds
    // 16 rows, dO is Q + STAGES * BM * D elements (the buffers' layout).
    {
      const unsigned pa = smem_addr(sP + Swz<BM>(wk * 32 + (lane & 15), (lane >> 4) * 8));
      const unsigned pb = smem_addr(item.q + Swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, wq * (D / QW) + (lane >> 4) * 8));
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        unsigned ap[2][4], as[2][4];
        const unsigned ak = Bwd2dSwzStep<BM>(pa, 32 * kk);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          ldmatrix_x4(ap[mi], ak + mi * 16 * BM * 2);
          ldmatrix_x4(as[mi], ak + mi * 16 * BM * 2 + BN * BM * 2);
        }
#pragma unroll
        for (int dj = 0; dj < DN; dj += 2) {
          unsigned bo[4], bq[4];
          const unsigned bk = Bwd2dSwzStep<D>(pb, 16 * dj) + kk * 16 * D * 2;
          ldmatrix_x4_trans(bo, bk + STAGES * BM * D * 2);
          ldmatrix_x4_trans(bq, bk);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            mma_m16n8k16_bf16(dv[mi][dj], ap[mi], bo[0], bo[1]);
            mma_m16n8k16_bf16(dv[mi][dj + 1], ap[mi], bo[2], bo[3]);
            mma_m16n8k16_bf16(dk[mi][dj], as[mi], bq[0], bq[1]);
            mma_m16n8k16_bf16(dk[mi][dj + 1], as[mi], bq[2], bq[3]);
          }
        }
      }
    }

    // Phase 3: dQ_accum[q0 + 32 wqq ..] += dS K for head-dim columns (D / DW) wdd.. in DQP passes (dS by
    // ldmatrix.trans from the [kv][query] tile, K by ldmatrix.trans from the [kv][d] tile).
#pragma unroll 1
    for (int pass = 0; pass < DQP; ++pass) {
      const int c0 = wdd * (D / DW) + pass * DQN * 8;
      float acc[2][DQN][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int j = 0; j < DQN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mi][j][e] = 0.f;
      // [register + immediate] addresses as in phase 2: mi is a 16-column step (XOR 32 bytes) of the dS^T tile, j a
      // pair of 8-column n-tiles (XOR / + 16 j bytes) of the K tile; kk adds 16 rows to both.
      const unsigned a3 = smem_addr(sdS + Swz<BM>((lane & 7) + ((lane >> 4) & 1) * 8, wqq * 32 + ((lane >> 3) & 1) * 8));
      const unsigned k3 = smem_addr(sK + Swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, c0 + (lane >> 4) * 8));
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned a[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) ldmatrix_x4_trans(a[mi], Bwd2dSwzStep<BM>(a3, 32 * mi) + kk * 16 * BM * 2);
#pragma unroll
        for (int j = 0; j < DQN; j += 2) {
          unsigned bk[4];
          ldmatrix_x4_trans(bk, Bwd2dSwzStep<D>(k3, 16 * j) + kk * 16 * D * 2);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            mma_m16n8k16_bf16(acc[mi][j], a[mi], bk[0], bk[1]);
            mma_m16n8k16_bf16(acc[mi][j + 1], a[mi], bk[2], bk[3]);
          }
        }
      }
      // 8-byte reductions at [one pointer per thread + immediates]: two per 16 x 8 tile, no shuffles or selects
      // (a 16-byte form needs a lane-pair shuffle, 6 selects and a branch per tile). A predicated
      // reduction still costs a BSSY / BRA / BSYNC in SASS, so only a tile with rows past seq_q takes that path.
      const int qr = q0 + wqq * 32 + (lane >> 2);  // this thread's first row (mi, hr add 16 mi + 8 hr)
      float* dst = p.dq_accum + (WidenNonNeg(BwdBlockBatch()) * p.heads_q + h) * DqAccumRows(Sq) * D +
                   DqAccumOffset(qr, c0 + (lane & 3) * 2, D);
      if (q0 + BM <= Sq) Bwd2dAddDq<D, DQN, false>(dst, acc, qr, Sq);
      else Bwd2dAddDq<D, DQN, true>(dst, acc, qr, Sq);
    }
  });  // the walk's barrier after each item also guards sP and sdS

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int kv = k0 + wk * 32 + mi * 16 + (lane >> 2) + hr * 8;
      if (kv >= Skv) continue;
      bf16* dKg = static_cast<bf16*>(p.dk) + BwdBlockBatch() * p.dk_batch_stride + BwdBlockHead() * p.dk_head_stride + kv * p.dk_seq_stride;
      bf16* dVg = static_cast<bf16*>(p.dv) + BwdBlockBatch() * p.dv_batch_stride + BwdBlockHead() * p.dv_head_stride + kv * p.dv_seq_stride;
#pragma unroll
      for (int dj = 0; dj < DN; ++dj) {
        const int c = wq * (D / QW) + dj * 8 + (lane & 3) * 2;
        *reinterpret_cast<unsigned*>(dKg + c) = pack_bf16x2(dk[mi][dj][hr * 2] * p.scale, dk[mi][dj][hr * 2 + 1] * p.scale);
        *reinterpret_cast<unsigned*>(dVg + c) = pack_bf16x2(dv[mi][dj][hr * 2], dv[mi][dj][hr * 2 + 1]);
      }
    }
}

}  // namespace dflash_attn
