// Fused attention backward of the Hopper tier (sm_90a): the dK/dV kernel (AttnBwdPre and AttnBwdDqConvert of
// attention_bwd.cuh run before and after it, as for the portable tier's dq_mode 0) with every product on wgmma.
// One block per (kv tile of BN rows, kv head, batch), one warpgroup per 64 kv rows (BN / 64 warpgroups); the walk of
// attention_bwd_items.cuh visits the non-empty (query head of the GQA group, query tile of BM rows) items with Q and
// dO in the 128-byte swizzled layout (Sw128TileCopy). Per item, each warpgroup:
//  1. S^T = K Q^T and dP^T = V dO^T (m64 n{BM}, A = its 64 K / V rows, B = the Q / dO tile, all from shared memory,
//     two commit groups: P^T = exp2(S^T - LSE) is computed while dP^T is still on the tensor cores);
//  2. dV += P^T dO (P^T as the register A operand: the accumulator layout is the A fragment's; dO MN-major), issued
//     as soon as P^T is packed at BM 64, so it runs under dP^T's tail and the dS^T arithmetic (after it at BM 128);
//  3. dS^T = P^T (dP^T - delta); dS^T (bf16) goes to shared memory as a [kv][query] tile;
//  4. after a block barrier (dS^T of every warpgroup), dQ_accum += dS K: A = dS^T read transposed (MN-major), B = K
//     MN-major, 64-column passes; warpgroup w takes query half w % (BM / 64) and its share of the head-dim columns;
//     8-byte fp32 reductions into DqAccumOffset's tiles. dK += dS^T Q (register A, Q MN-major) is issued behind the
//     first pass, so it runs under that pass's reductions and is waited for at the item's end (the walk then
//     refills Q's buffer). dK and dV stay in registers for the whole block (reduced over the GQA group, written
//     once, no atomics).
// BN 64 (one warpgroup) runs two blocks per SM, so one block's softmax and reductions overlap the other's products.
// Steps 1-4 are BwdWgmmaItem and the final dK / dV stores BwdWgmmaStoreDkDv, which the warp-specialised backward
// (attention_bwd_tma.cuh) runs too.
// Who may include it: attention_kernels_sm90a.cu (NVRTC, sm_90a only). Thread-safety: n/a (device code).
#pragma once

#include "attention_bwd_items.cuh"
#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_schedule.cuh"
#include "attention_sw128.cuh"
#include "wgmma.cuh"

namespace dflash_attn {

// dQ_accum += acc for one warpgroup's m64n64 dQ tile: dst is this thread's first element (row qr, its column pair)
// in DqAccumOffset's 8 x 8 tiles; 8 rows on is the next tile row (8 D floats), 8 columns on the next tile (64).
template <int D, bool CHECKED>
__device__ __forceinline__ void BwdWgmmaAddDq(float* dst, const float (&acc)[32], int qr, int Sq) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float* p = dst + hr * 8 * D + j * 64;
      if (CHECKED) red_global_add_v2_f32_if(p, acc[4 * j + 2 * hr], acc[4 * j + 2 * hr + 1], qr + hr * 8 < Sq);
      else red_global_add_v2_f32(p, acc[4 * j + 2 * hr], acc[4 * j + 2 * hr + 1]);
    }
}

// One item of the wgmma backward for warpgroup `wg` (steps 1-4 above), run in step by every thread of the BN / 64
// warpgroups that own the block's kv rows: Sq is seq_q, kv_row this thread's first kv row in the tile, sdS /
// ds_addr the dS^T tile the item writes, dk / dv the block's accumulators. after_issue() runs once right after S^T
// and dP^T are issued; publish_ds() must be a barrier over those warpgroups; before_dk_wait() runs once right before
// the wait for the item's last product (dK). On return every product of the item is complete, so the item's Q / dO
// buffers may be refilled.
// dq_stage: where the dQ tiles go. BwdDqReduce (the default) adds them to the accumulator with 8-byte reductions;
// a stage with kStaged (AttnBwdTma's BwdDqSmemStage) takes them as acquire(), store(acc, row, c0) per pass,
// release(), row being the thread's first row within the query tile.
struct BwdDqReduce {
  static constexpr bool kStaged = false;
  __device__ __forceinline__ void acquire() const {}
  __device__ __forceinline__ void store(const float (&)[32], int, int) const {}
  __device__ __forceinline__ void release() const {}
};
template <int D, int BM, int BN, bool EARLY_READS = false, typename AfterIssue, typename PublishDs,
          typename BeforeDkWait, typename DqStage = BwdDqReduce>
__device__ __forceinline__ void BwdWgmmaItem(const AttnParams& p, const BwdItem& item, int Sq, int wg, int warp,
                                             int lane, int k0, int kv_row, unsigned k_addr, unsigned v_addr, bf16* sdS,
                                             unsigned ds_addr, float (&dk)[D / 2], float (&dv)[D / 2],
                                             AfterIssue&& after_issue, PublishDs&& publish_ds,
                                             BeforeDkWait&& before_dk_wait, const DqStage& dq_stage = DqStage{}) {
  constexpr int NWG = BN / 64;
  constexpr int MH = BM / 64;            // dQ: query halves of 64 rows
  constexpr int DQ_COLS = D * MH / NWG;  // dQ: head-dim columns per warpgroup
  static_assert(MH <= NWG && DQ_COLS % 64 == 0, "dQ split into m64n64 tiles among the warpgroups");
  const float scale_log2 = p.scale * kLog2e;
  const unsigned q_addr = smem_addr(item.q), do_addr = smem_addr(item.dout);
  // EARLY_READS: the item's LSE at this thread's query columns read before S^T and dP^T are issued. Read after the
  // issue, the loads queued behind the products' operand reads and the first P^T element waited on them (H200 ncu:
  // ~5 % of the backward's stall samples, short scoreboard); delta is read under the products (before dP^T's wait:
  // with it here too, the DFlash kernel spilled 8 B), and a staged dQ's buffer wait (acquire) before the first dQ
  // pass's.
  [[maybe_unused]] float2 lse_early[EARLY_READS ? BM / 8 : 1];
  if constexpr (EARLY_READS) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) lse_early[j] = *reinterpret_cast<const float2*>(item.lse + j * 8 + (lane & 3) * 2);
  }
  // 1. S^T and dP^T, one commit group each.
  float s[BM / 2], dp[BM / 2];
  wgmma_fence();
  WgmmaSSKMajor<BM, BN, D / 16>(s, k_addr, wg * 64, q_addr);
  wgmma_commit_group();
  WgmmaSSKMajor<BM, BN, D / 16>(dp, v_addr, wg * 64, do_addr);
  wgmma_commit_group();
  after_issue();  // the walk's next copies (AttnBwdWgmma) or nothing (AttnBwdTma)
  wgmma_wait_group<1>();  // S^T is in; dP^T may still run
  wgmma_fence_operand(s);
  wgmma_fence_operand(dp);
  // P^T = exp2(S^T * scale_log2 - lse) (lse +inf for rows that see nothing: P 0); a partial tile's mask after.
#pragma unroll
  for (int j = 0; j < BM / 8; ++j) {
    float2 ls;
    if constexpr (EARLY_READS) ls = lse_early[j];
    else ls = *reinterpret_cast<const float2*>(item.lse + j * 8 + (lane & 3) * 2);
#pragma unroll
    for (int e = 0; e < 4; ++e) s[4 * j + e] = ex2_approx_ftz(fmaf(s[4 * j + e], scale_log2, -((e & 1) ? ls.y : ls.x)));
  }
  if (!item.full) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const RowSpan sp = item.span[j * 8 + (lane & 3) * 2 + (e & 1)];
        s[4 * j + e] = InSpan(sp, k0 + kv_row + (e >> 1) * 8) ? s[4 * j + e] : 0.f;
      }
  }
  // P^T as bf16 A fragments for dV += P^T dO (MN-major dO). At BM 64 dV is issued now, running under dP^T's tail
  // and the dS^T arithmetic; at BM 128 P^T's 32 registers beside S^T and dP^T would spill (head dim 64: 136 B),
  // so P^T is packed with dS^T and dV issued after it.
  constexpr bool kEarlyDv = BM == 64;
  unsigned pk[BM / 8][2], dsk[BM / 8][2];
  auto issue_dv = [&]() {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      const unsigned a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
      WgmmaRS<D>::template Run<1>(dv, a, wgmma_desc_mn_major<BM>(do_addr, kk), 1);
    }
    wgmma_commit_group();
  };
  [[maybe_unused]] float2 delta_early[EARLY_READS ? BM / 8 : 1];  // EARLY_READS: before dP^T's wait
  auto read_delta_early = [&]() {
    if constexpr (EARLY_READS) {
#pragma unroll
      for (int j = 0; j < BM / 8; ++j)
        delta_early[j] = *reinterpret_cast<const float2*>(item.delta + j * 8 + (lane & 3) * 2);
    }
  };
  if constexpr (kEarlyDv) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) pk[j][hr] = pack_bf16x2(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]);
    issue_dv();
    read_delta_early();
    wgmma_wait_group<1>();  // dP^T is in; dV may still run
  } else {
    read_delta_early();
    wgmma_wait_group<0>();
  }
  wgmma_fence_operand(dp);
  // 3. dS^T = P^T (dP^T - delta) as bf16 A fragments, also to shared memory (a [kv][query] tile).
#pragma unroll
  for (int j = 0; j < BM / 8; ++j) {
    const int ql = j * 8 + (lane & 3) * 2;
    float2 dl;
    if constexpr (EARLY_READS) dl = delta_early[j];
    else dl = *reinterpret_cast<const float2*>(item.delta + ql);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float ds0 = s[4 * j + 2 * hr] * (dp[4 * j + 2 * hr] - dl.x);
      const float ds1 = s[4 * j + 2 * hr + 1] * (dp[4 * j + 2 * hr + 1] - dl.y);
      if constexpr (!kEarlyDv) pk[j][hr] = pack_bf16x2(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]);
      dsk[j][hr] = pack_bf16x2(ds0, ds1);
      *reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(sdS) + Sw128Offset<BN>(kv_row + hr * 8, ql)) =
          dsk[j][hr];
    }
  }
  fence_proxy_async_shared();  // the dS^T stores (generic proxy) before the dQ product reads them (async proxy)
  if constexpr (!kEarlyDv) issue_dv();
  publish_ds();  // dS^T of every warpgroup is in shared memory
  // 4. dQ_accum += dS K in m64n64 passes.
  const int mh = wg % MH;
  const int qr = item.q0 + mh * 64 + (warp & 3) * 16 + (lane >> 2);  // this thread's first dQ row (+ 8 hr)
  float* dq_bh = p.dq_accum + (WidenNonNeg(BwdBlockBatch()) * p.heads_q + item.h) * DqAccumRows(Sq) * D;
  const int cw = (wg / MH) * DQ_COLS;  // the warpgroup's first dQ column
#pragma unroll
  for (int pass = 0; pass < DQ_COLS / 64; ++pass) {
    const int c0 = cw + pass * 64;
    float acc[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      WgmmaSS<64>::template Run<1, 1>(acc, wgmma_desc_mn_major<BN>(ds_addr + mh * BN * 128, kk),
                                      wgmma_desc_mn_major<BN>(k_addr + (c0 / 64) * BN * 128, kk), kk > 0);
    wgmma_commit_group();
    if (pass == 0) {
      // 3b. dK += dS^T Q (register A, MN-major B), issued behind the first dQ pass: it runs under its reductions.
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        const unsigned a[4] = {dsk[2 * kk][0], dsk[2 * kk][1], dsk[2 * kk + 1][0], dsk[2 * kk + 1][1]};
        WgmmaRS<D>::template Run<1>(dk, a, wgmma_desc_mn_major<BM>(q_addr, kk), 1);
      }
      wgmma_commit_group();
      if constexpr (DqStage::kStaged && EARLY_READS) dq_stage.acquire();  // its wait under the products
      wgmma_wait_group<1>();  // dV and this dQ pass are done; dK may still run
    } else {
      wgmma_wait_group<0>();
    }
    wgmma_fence_operand(acc);
    if constexpr (DqStage::kStaged) {
      if (pass == 0 && !EARLY_READS) dq_stage.acquire();
      dq_stage.store(acc, qr - item.q0, c0);
      if (pass == DQ_COLS / 64 - 1) dq_stage.release();
    } else {
      float* dst = dq_bh + DqAccumOffset(qr, c0 + (lane & 3) * 2, D);
      if (item.q0 + BM <= Sq) BwdWgmmaAddDq<D, false>(dst, acc, qr, Sq);
      else BwdWgmmaAddDq<D, true>(dst, acc, qr, Sq);
    }
  }
  // dK done before Q's buffer is refilled; pk and dsk may be reused from here.
  before_dk_wait();
  wgmma_wait_group<0>();
  wgmma_fence_operand(pk);
  wgmma_fence_operand(dsk);
  wgmma_fence_operand(dv);
  wgmma_fence_operand(dk);
}

// Writes this thread's dK (times the softmax scale) and dV rows, kv and kv + 8 (rows past seq_kv skipped), from
// the wgmma accumulators of the block's kv head (GQA group reduced: written once).
template <int D>
__device__ __forceinline__ void BwdWgmmaStoreDkDv(const AttnParams& p, const float (&dk)[D / 2],
                                                  const float (&dv)[D / 2], int kv0, int Skv, int lane) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int kv = kv0 + hr * 8;
    if (kv >= Skv) continue;
    bf16* dKg = static_cast<bf16*>(p.dk) + BwdBlockBatch() * p.dk_batch_stride + BwdBlockHead() * p.dk_head_stride +
                kv * p.dk_seq_stride;
    bf16* dVg = static_cast<bf16*>(p.dv) + BwdBlockBatch() * p.dv_batch_stride + BwdBlockHead() * p.dv_head_stride +
                kv * p.dv_seq_stride;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int c = j * 8 + (lane & 3) * 2;
      *reinterpret_cast<unsigned*>(dKg + c) =
          pack_bf16x2(dk[4 * j + 2 * hr] * p.scale, dk[4 * j + 2 * hr + 1] * p.scale);
      *reinterpret_cast<unsigned*>(dVg + c) = pack_bf16x2(dv[4 * j + 2 * hr], dv[4 * j + 2 * hr + 1]);
    }
  }
}

template <int D, int BM, int BN, int STAGES, int MASK>
__global__ void __launch_bounds__(BN / 64 * 128, BN == 64 ? 2 : 1) AttnBwdWgmma(const AttnParams p) {
  constexpr int NWG = BN / 64, NT = NWG * 128;
  static_assert(D == 64 || D == 128, "backward head dim 64 or 128");
  static_assert(BM == 64 || BM == 128, "query tile of 64 or 128 rows (the S^T product's N)");
  static_assert(BN == 64 || BN == 128, "one or two warpgroups of 64 kv rows");

  // Swizzled tiles start 1024-byte aligned: every tile size below is a multiple of 1 KiB.
  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + BN * D;
  bf16* sQ = sV + BN * D;
  bf16* sdO = sQ + STAGES * BM * D;
  bf16* sdS = sdO + STAGES * BM * D;  // dS^T [kv][query]
  RowSpan* sSpan = reinterpret_cast<RowSpan*>(sdS + BN * BM);
  float* sLse = reinterpret_cast<float*>(sSpan + STAGES * BM);
  float* sDelta = sLse + STAGES * BM;
  unsigned char* sCls = reinterpret_cast<unsigned char*>(sDelta + STAGES * BM);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // A constant with one warpgroup: a run-time 0 left the dQ passes' trip count unknown and ptxas serialised (C7518).
  const int wg = NWG == 1 ? 0 : warp >> 2;
  const int kv_row = wg * 64 + (warp & 3) * 16 + (lane >> 2);  // this thread's kv rows: kv_row, kv_row + 8
  const int k0 = ScheduledTile<false>() * BN;
  MaskParams m = p.mask;
  SpecialiseMask<MASK>(m);
  const int Skv = m.seq_kv;
  const unsigned k_addr = smem_addr(sK), v_addr = smem_addr(sV), ds_addr = smem_addr(sdS);

  BwdLoadKvAndClassify<D, BM, BN, NT, Sw128TileCopy>(p, m, sK, sV, sCls, k0, tid);
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  const BwdItemBuffers buf{sQ, sdO, sLse, sDelta, sSpan, sCls};
  // The walk's PREFETCH_IN_BODY form: with two buffers the next item's copies are issued under S^T / dP^T and the
  // walk keeps one barrier per item.
  using Prefetch = BwdPrefetch<D, BM, NT, true, Sw128TileCopy>;
  BwdForEachItem<D, BM, NT, STAGES, true, Sw128TileCopy, true>(p, m, buf, tid, [&](const BwdItem& item,
                                                                                    const Prefetch& prefetch) {
    BwdWgmmaItem<D, BM, BN>(p, item, m.seq_q, wg, warp, lane, k0, kv_row, k_addr, v_addr, sdS, ds_addr, dk, dv,
                            prefetch, [] { __syncthreads(); }, [] {});
  });  // sdS is rewritten only after the walk's next barrier, which every thread reaches after its dQ product

  BwdWgmmaStoreDkDv<D>(p, dk, dv, k0 + kv_row, Skv, lane);
}

}  // namespace dflash_attn
