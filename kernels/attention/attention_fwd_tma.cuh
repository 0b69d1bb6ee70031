// Fused attention forward of the Hopper tier, warp-specialised (sm_90a): AttnFwdWgmma's contract, walk, masks and
// softmax (one block per (query tile of 128 rows, query head, batch), empty kv tiles never touched, per-element
// masking of partial tiles only, O and the natural-log LSE written; rows that see nothing get O = 0, LSE = -inf),
// with FlashAttention-3's division of labour:
//   - warpgroup 0 is the producer: after setmaxnreg gives its registers away, one thread issues every copy, Q once
//     and the K and V tiles of each non-empty kv tile into a ring of STAGES buffers, as bulk tensor copies (TMA:
//     tensor maps made on the host, attention_api.cc) that complete on the buffer's "full" mbarriers (K, V);
//   - warpgroups 1 and 2 are the consumers (64 query rows each, 240 registers): they wait on "full", run
//     S = Q K^T and O += P V on wgmma straight from the copied tiles, and release K and V on their "empty"
//     mbarriers; no block barrier after the start, so neither consumer ever waits for the other.
//   PIPE 0 (config kernel 3): per kv tile S, wait, softmax, PV, wait.
//   PIPE 1 (config kernel 4): the softmax of the next tile overlaps this tile's PV on the tensor cores: the
//     warpgroup issues S(t+1), rescales O while it runs (head dim <= 128), issues O += P(t) V(t), waits for S(t+1)
//     only, masks and exponentiates it into a second P (its row factor is O's next rescale), then waits for the PV.
//   PIPE 2 (config kernel 5): PIPE 1 with the two consumers issuing their products in turns (ping-pong).
// The tiles land in the 128-byte swizzled layout of wgmma.cuh (tma.cuh says why the two agree); rows past the
// tensor's end are zero-filled by the copy engine. The kv ring (FwdKvRing, FwdTmaProduceKv) and the consumers' walk
// of PIPE 1 / 2 (FwdTmaPipelinedTile) are shared with the persistent kernel 6 (attention_fwd_persistent.cuh).
// Who may include it: attention_kernels_sm90a.cu, attention_fwd_persistent.cuh (NVRTC, sm_90a only).
// Thread-safety: n/a (device code).
#pragma once

#include "attention_fwd_wgmma.cuh"
#include "tma.cuh"

namespace dflash_attn {

// The tensor maps of one forward call (the host passes three CUtensorMaps in this order): 4-D views (head_dim,
// seq, heads, batch) of Q, K and V with boxes of 64 columns x 128 query rows (Q) or block_n kv rows (K, V).
struct AttnTmaMaps {
  TmaDescriptor q, k, v;
};

// kTmaFwdBlockM, kTmaFwdThreads: attention_params.cuh (the host follows them).

// The kv ring's mbarriers (STAGES buffers) from `base` on: K and V each "full" (the copy's bytes landed) and
// "empty" (8 arrivals: every consumer warp). K and V of one buffer are released apart, K as soon as S is done
// (kernels 4-6 hold K of the next tile and V of this one at the same time, so with one barrier per buffer two
// buffers could not keep a copy in flight).
template <int STAGES>
struct FwdKvRing {
  unsigned base;
  __device__ __forceinline__ unsigned full_k(int s) const { return base + 8u * s; }
  __device__ __forceinline__ unsigned full_v(int s) const { return base + 8u * (STAGES + s); }
  __device__ __forceinline__ unsigned empty_k(int s) const { return base + 8u * (2 * STAGES + s); }
  __device__ __forceinline__ unsigned empty_v(int s) const { return base + 8u * (3 * STAGES + s); }
};

// The producer thread's copies of one query tile's non-empty kv tiles (tile classes sCls) into the ring, from
// buffer `stage` of round parity `phase` on; `first_round` while no buffer has been filled yet (nothing to wait
// for). The three positions carry over to the next query tile (the persistent kernel's).
template <int D, int BN, int STAGES>
__device__ __forceinline__ void FwdTmaProduceKv(const AttnTmaMaps& maps, const FwdKvRing<STAGES>& ring,
                                                const unsigned char* sCls, int nkt, unsigned k_addr, unsigned v_addr,
                                                int hk, int b, int& stage, unsigned& phase, bool& first_round) {
  constexpr unsigned kTileBytes = BN * D * 2;
  for (int t = NextNonEmpty(sCls, 0, nkt); t < nkt; t = NextNonEmpty(sCls, t + 1, nkt)) {
    if (!first_round) mbarrier_wait(ring.empty_k(stage), phase ^ 1);  // the consumers released the last round's K
    mbarrier_arrive_expect_tx(ring.full_k(stage), kTileBytes);
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb)
      tma_load_4d(k_addr + stage * kTileBytes + cb * BN * 128, &maps.k, ring.full_k(stage), cb * 64, t * BN, hk, b);
    if (!first_round) mbarrier_wait(ring.empty_v(stage), phase ^ 1);
    mbarrier_arrive_expect_tx(ring.full_v(stage), kTileBytes);
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb)
      tma_load_4d(v_addr + stage * kTileBytes + cb * BN * 128, &maps.v, ring.full_v(stage), cb * 64, t * BN, hk, b);
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1;
      first_round = false;
    }
  }
}

// A consumer warpgroup's walk over one query tile's non-empty kv tiles with the softmax of the next tile under this
// tile's PV (PIPE 1; PING_PONG: PIPE 2), from ring buffer `stage` of parity `phase` on (both carry over to the
// next query tile when RING_GOES_ON; otherwise the last tile's V is never released). O, mrow and lrow accumulate as
// TileStep's; t: the tile's first non-empty kv tile (nkt for none); Q must have landed.
template <int D, int BM, int BN, int STAGES, bool PING_PONG, bool RING_GOES_ON, bool CLASS_READS_UNDER_S = false>
__device__ __forceinline__ void FwdTmaPipelinedTile(float (&o)[D / 2], float (&mrow)[2], float (&lrow)[2],
                                                    const unsigned char* sCls, const RowSpan* sSpan, int nkt,
                                                    unsigned q_addr, unsigned k_addr, unsigned v_addr,
                                                    const FwdKvRing<STAGES>& ring, int cwg, int row_in_tile, int lane,
                                                    float scale_log2, int t, int& stage, unsigned& phase) {
  constexpr unsigned kTileBytes = BN * D * 2;
  unsigned pk[BN / 8][2];
  float s[BN / 2];
  if (t < nkt) {  // S and P of the first tile (O is still zero: nothing to rescale)
    mbarrier_wait(ring.full_k(stage), phase);
    IssueQkT<D, BM, BN>(s, q_addr, cwg, k_addr + stage * kTileBytes);
    wgmma_wait_group<0>();
    wgmma_fence_operand(s);
    if (lane == 0) mbarrier_arrive(ring.empty_k(stage));
    if (sCls[t] != kTileFull) MaskPartialTile<BN>(s, sSpan, row_in_tile, t, lane);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) SoftmaxRow<BN>(s, hr, mrow, lrow, pk, scale_log2);
  }
  // O's pending rescale, applied while the next S is on the tensor cores (FA3's order); at head dim 256 that
  // holds O (128 registers) live across the S issue and spilled 16 B (kernel 5), so there O is rescaled after the
  // PV's wait instead.
  constexpr bool kRescaleUnderS = D <= 128;
  float alpha[2] = {1.f, 1.f};
  // Every step issues S(tn) and PV(t) unconditionally (the last tile's PV is peeled off below), and P alternates
  // between two register arrays (the loop runs two steps a pass): with a product issued on one path only, or P
  // copied back into the array the next PV reads, ptxas serialises every wgmma of the kernel (advisories C7514,
  // C7513).
  int tn = t < nkt ? NextNonEmpty(sCls, t + 1, nkt) : nkt;
  unsigned pn[BN / 8][2];
  // PING_PONG: the two consumers take turns issuing their products (named barriers 1 and 2, 256 threads: a
  // warpgroup waits for its turn, issues, then gives the turn to the other), so one's softmax runs while the
  // other's products occupy the tensor cores. Consumer 1 gives consumer 0 the first turn; both run the same
  // number of steps, and consumer 0 takes the last turn consumer 1 hands it after the loop.
  if (PING_PONG && cwg == 1) named_barrier_arrive(1, 256);
  // One step: PV(t) from p_cur while S(tn) is exponentiated into p_next.
  auto step = [&](unsigned (&p_cur)[BN / 8][2], unsigned (&p_next)[BN / 8][2]) {
    const int nstage = stage + 1 == STAGES ? 0 : stage + 1;
    const unsigned nphase = nstage == 0 ? phase ^ 1 : phase;
    mbarrier_wait(ring.full_k(nstage), nphase);
    if (PING_PONG) named_barrier_sync(1 + cwg, 256);
    IssueQkT<D, BM, BN>(s, q_addr, cwg, k_addr + nstage * kTileBytes);  // S(tn) first, then this tile's PV
    if constexpr (kRescaleUnderS) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) RescaleRow<D>(o, hr, alpha[hr]);  // the rescale P(t) was computed against
    }
    mbarrier_wait(ring.full_v(stage), phase);
    IssuePv<D, BN>(o, p_cur, v_addr + stage * kTileBytes);
    if (PING_PONG) named_barrier_arrive(2 - cwg, 256);
    bool tn_partial = false;
    int tnn = 0;
    // CLASS_READS_UNDER_S (kernel 6): the next tile's class and the tile after it are read while S(tn) runs; after
    // the wait, the shared-memory loads queue behind the products' operand reads (H100 A/B against the reads after
    // the wait, medians of 5 rounds: causal 8192 -0.9 %, DFlash full 512 -1.1 %; kernels 4 and 5 not measured).
    if constexpr (CLASS_READS_UNDER_S) {
      tn_partial = sCls[tn] != kTileFull;
      tnn = NextNonEmpty(sCls, tn + 1, nkt);
    }
    wgmma_wait_group<1>();  // S(tn) is done; PV(t) may still run while it is exponentiated
    wgmma_fence_operand(s);
    if (lane == 0) mbarrier_arrive(ring.empty_k(nstage));
    if constexpr (!CLASS_READS_UNDER_S) tn_partial = sCls[tn] != kTileFull;
    if (tn_partial) MaskPartialTile<BN>(s, sSpan, row_in_tile, tn, lane);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) alpha[hr] = SoftmaxRow<BN>(s, hr, mrow, lrow, p_next, scale_log2);
    wgmma_wait_group<0>();
    wgmma_fence_operand(o);
    wgmma_fence_operand(p_cur);  // PV(t) read p_cur until the wait
    if (lane == 0) mbarrier_arrive(ring.empty_v(stage));
    if constexpr (!kRescaleUnderS) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) RescaleRow<D>(o, hr, alpha[hr]);
    }
    t = tn;
    tn = CLASS_READS_UNDER_S ? tnn : NextNonEmpty(sCls, t + 1, nkt);
    stage = nstage;
    phase = nphase;
  };
  bool in_pk = true;  // which array holds P(t)
  while (tn < nkt) {
    step(pk, pn);
    in_pk = false;
    if (tn >= nkt) break;
    step(pn, pk);
    in_pk = true;
  }
  if (PING_PONG && cwg == 0) named_barrier_sync(1, 256);
  if (t < nkt) {  // the last tile's PV
    mbarrier_wait(ring.full_v(stage), phase);
    if constexpr (kRescaleUnderS) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) RescaleRow<D>(o, hr, alpha[hr]);
    }
    if (in_pk) IssuePv<D, BN>(o, pk, v_addr + stage * kTileBytes);
    else IssuePv<D, BN>(o, pn, v_addr + stage * kTileBytes);
    wgmma_wait_group<0>();
    wgmma_fence_operand(o);
    wgmma_fence_operand(pk);
    wgmma_fence_operand(pn);
    if constexpr (RING_GOES_ON) {  // the next query tile's copies reuse the buffer
      if (lane == 0) mbarrier_arrive(ring.empty_v(stage));
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

template <int D, int BN, int STAGES, int PIPE, int MASK>
__global__ void __launch_bounds__(kTmaFwdThreads, 1)
    AttnFwdTma(const __grid_constant__ AttnParams p, const __grid_constant__ AttnTmaMaps maps) {
  constexpr int BM = kTmaFwdBlockM, NT = kTmaFwdThreads;
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(BN == 64 || BN == 128, "kv tile of 64 or 128 rows (the S product's N)");
  static_assert(STAGES >= 2 && STAGES <= 4, "two to four kv buffers");
  static_assert(PIPE >= 0 && PIPE <= 2, "PIPE 0, 1 or 2");
  constexpr bool kPingPong = PIPE == 2;
  constexpr unsigned kTileBytes = BN * D * 2;

  extern __shared__ __align__(1024) unsigned char smem[];  // swizzled tiles start 1024-byte aligned
  const FwdSmem<D, BM, BN, STAGES> sm(smem);
  bf16 *const sQ = sm.q, *const sK = sm.k, *const sV = sm.v;
  RowSpan* const sSpan = sm.span;
  unsigned char* const sCls = sm.cls;
  // mbarriers: Q landed, then the kv ring's (FwdKvRing).
  const unsigned bar_q = smem_addr(sCls + kMaxTiles);
  const FwdKvRing<STAGES> ring{bar_q + 8u};

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int b, h, q0, hk;
  MaskParams m;
  ScheduledQueryTile<BM, MASK>(p, b, h, q0, hk, m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const int nkt = (Skv + BN - 1) / BN;
  const unsigned q_addr = smem_addr(sQ), k_addr = smem_addr(sK), v_addr = smem_addr(sV);

  if (tid == 0) {
    mbarrier_init(bar_q, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(ring.full_k(s), 1);
      mbarrier_init(ring.full_v(s), 1);
      mbarrier_init(ring.empty_k(s), 2 * 4);  // one arrival per consumer warp
      mbarrier_init(ring.empty_v(s), 2 * 4);
    }
    fence_mbarrier_init();
  }
  ClassifyKvTiles<BM, BN, NT>(m, b, q0, nkt, sCls, tid);
  for (int r = tid; r < BM; r += NT) sSpan[r] = RowVisibleSpan(m, b, q0 + r);
  __syncthreads();  // barriers, tile classes and spans ready; no block barrier after this one

  if (warp < 4) {  // the producer warpgroup
    setmaxnreg_dec<kProducerWarpgroupRegs>();
    if (tid != 0) return;
    prefetch_tensormap(&maps.q);
    prefetch_tensormap(&maps.k);
    prefetch_tensormap(&maps.v);
    mbarrier_arrive_expect_tx(bar_q, BM * D * 2);
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) tma_load_4d(q_addr + cb * BM * 128, &maps.q, bar_q, cb * 64, q0, h, b);
    int stage = 0;
    unsigned phase = 0;  // parity of the current round of the ring
    bool first_round = true;
    FwdTmaProduceKv<D, BN, STAGES>(maps, ring, sCls, nkt, k_addr, v_addr, hk, b, stage, phase, first_round);
    return;
  }

  setmaxnreg_inc<kConsumerWarpgroupRegs>();
  const int cwg = (warp >> 2) - 1;                                    // rows [64 cwg, 64 cwg + 64) of the tile
  const int row_in_tile = cwg * 64 + (warp & 3) * 16 + (lane >> 2);  // + 8 hr
  const float scale_log2 = p.scale * kLog2e;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float mrow[2] = {-Inf(), -Inf()}, lrow[2] = {0.f, 0.f};
  unsigned pk[BN / 8][2];
  int t = NextNonEmpty(sCls, 0, nkt);
  int stage = 0;
  unsigned phase = 0;
  mbarrier_wait(bar_q, 0);  // always: the block must not exit with Q's copy in flight

  if constexpr (PIPE == 0) {
    while (t < nkt) {
      mbarrier_wait(ring.full_k(stage), phase);
      mbarrier_wait(ring.full_v(stage), phase);
      TileStep<D, BM, BN>(o, mrow, lrow, pk, q_addr, cwg, k_addr + stage * kTileBytes, v_addr + stage * kTileBytes,
                          sCls[t] != kTileFull, sSpan, row_in_tile, t, lane, scale_log2);
      wgmma_fence_operand(pk);
      if (lane == 0) {
        mbarrier_arrive(ring.empty_k(stage));
        mbarrier_arrive(ring.empty_v(stage));
      }
      t = NextNonEmpty(sCls, t + 1, nkt);
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
      }
    }
  } else {
    FwdTmaPipelinedTile<D, BM, BN, STAGES, kPingPong, false>(o, mrow, lrow, sCls, sSpan, nkt, q_addr, k_addr, v_addr,
                                                              ring, cwg, row_in_tile, lane, scale_log2, t, stage, phase);
  }

  StoreRowsOut<D>(p, o, mrow, lrow, b, h, q0 + row_in_tile, Sq, lane);
}

}  // namespace dflash_attn
