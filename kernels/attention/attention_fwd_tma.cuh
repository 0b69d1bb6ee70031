// Fused attention forward of the Hopper tier, warp-specialised (sm_90a): AttnFwdWgmma's contract, walk, masks and
// softmax (one block per (query tile of 128 rows, query head, batch), empty kv tiles never touched, per-element
// masking of partial tiles only, O and the natural-log LSE written; rows that see nothing get O = 0, LSE = -inf),
// with FlashAttention-3's division of labour:
//   - warpgroup 0 is the producer: after setmaxnreg gives its registers away, one thread issues every copy, Q once
//     and the K and V tiles of each non-empty kv tile into a ring of STAGES buffers, as bulk tensor copies (TMA:
//     tensor maps made on the host, attention_api.cc) that complete on the buffer's "full" mbarrier;
//   - warpgroups 1 and 2 are the consumers (64 query rows each, 240 registers): they wait on "full", run
//     S = Q K^T and O += P V on wgmma straight from the copied tiles, and release the buffer on its "empty"
//     mbarrier; no block barrier after the start, so neither consumer ever waits for the other.
//   PIPE 0 (config kernel 3): per kv tile S, wait, softmax, PV, wait.
//   PIPE 1 (config kernel 4): the softmax of the next tile overlaps this tile's PV on the tensor cores: the
//     warpgroup issues S(t+1), then O += P(t) V(t), waits for S(t+1) only, masks and exponentiates it into a second
//     P, then waits for the PV and rescales O.
// The tiles land in the 128-byte swizzled layout of wgmma.cuh (tma.cuh says why the two agree); rows past the
// tensor's end are zero-filled by the copy engine.
// Who may include it: attention_kernels_sm90a.cu (NVRTC, sm_90a only). Thread-safety: n/a (device code).
#pragma once

#include "attention_fwd_wgmma.cuh"
#include "tma.cuh"

namespace dflash_attn {

// The tensor maps of one forward call (the host passes three CUtensorMaps in this order): 4-D views (head_dim,
// seq, heads, batch) of Q, K and V with boxes of 64 columns x 128 query rows (Q) or block_n kv rows (K, V).
struct AttnTmaMaps {
  TmaDescriptor q, k, v;
};

constexpr int kTmaFwdBlockM = 128;         // two consumer warpgroups of 64 query rows
constexpr int kTmaFwdThreads = 3 * 128;    // producer warpgroup + two consumers
constexpr int kTmaFwdProducerRegs = 24;    // setmaxnreg: 128 x 24 + 256 x 240 <= 64 K registers
constexpr int kTmaFwdConsumerRegs = 240;

template <int D, int BN, int STAGES, int PIPE, int MASK>
__global__ void __launch_bounds__(kTmaFwdThreads, 1)
    AttnFwdTma(const __grid_constant__ AttnParams p, const __grid_constant__ AttnTmaMaps maps) {
  constexpr int BM = kTmaFwdBlockM, NT = kTmaFwdThreads;
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(BN == 64 || BN == 128, "kv tile of 64 or 128 rows (the S product's N)");
  static_assert(STAGES >= 2 && STAGES <= 4, "two to four kv buffers");
  static_assert(PIPE == 0 || PIPE == 1, "PIPE 0 or 1");
  constexpr unsigned kTileBytes = BN * D * 2;

  extern __shared__ __align__(1024) unsigned char smem[];  // swizzled tiles start 1024-byte aligned
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + BM * D;
  bf16* sV = sK + STAGES * BN * D;
  RowSpan* sSpan = reinterpret_cast<RowSpan*>(sV + STAGES * BN * D);
  unsigned char* sCls = reinterpret_cast<unsigned char*>(sSpan + BM);
  // mbarriers: Q landed; per buffer "full" (its K and V landed) and "empty" (every consumer warp is done with it).
  const unsigned bar_q = smem_addr(sCls + kMaxTiles);
  auto bar_full = [&](int s) { return bar_q + 8u * (1 + s); };
  auto bar_empty = [&](int s) { return bar_q + 8u * (1 + STAGES + s); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = ScheduledBatch(), h = ScheduledHead();
  const int q0 = ScheduledTile<true>() * BM;
  MaskParams m = p.mask;
  SpecialiseMask<MASK>(m);
  const int Sq = m.seq_q, Skv = m.seq_kv;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int nkt = (Skv + BN - 1) / BN;
  const unsigned q_addr = smem_addr(sQ), k_addr = smem_addr(sK), v_addr = smem_addr(sV);

  if (tid == 0) {
    mbarrier_init(bar_q, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(bar_full(s), 1);
      mbarrier_init(bar_empty(s), 2 * 4);  // one arrival per consumer warp
    }
    fence_mbarrier_init();
  }
  ClassifyKvTiles<BM, BN, NT>(m, b, q0, nkt, sCls, tid);
  for (int r = tid; r < BM; r += NT) sSpan[r] = RowVisibleSpan(m, b, q0 + r);
  __syncthreads();  // barriers, tile classes and spans ready; no block barrier after this one

  if (warp < 4) {  // the producer warpgroup
    setmaxnreg_dec<kTmaFwdProducerRegs>();
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
    for (int t = NextNonEmpty(sCls, 0, nkt, kMaxTiles); t < nkt; t = NextNonEmpty(sCls, t + 1, nkt, kMaxTiles)) {
      if (!first_round) mbarrier_wait(bar_empty(stage), phase ^ 1);  // the consumers released the last round's tile
      mbarrier_arrive_expect_tx(bar_full(stage), 2 * kTileBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
        tma_load_4d(k_addr + stage * kTileBytes + cb * BN * 128, &maps.k, bar_full(stage), cb * 64, t * BN, hk, b);
        tma_load_4d(v_addr + stage * kTileBytes + cb * BN * 128, &maps.v, bar_full(stage), cb * 64, t * BN, hk, b);
      }
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
        first_round = false;
      }
    }
    return;
  }

  setmaxnreg_inc<kTmaFwdConsumerRegs>();
  const int cwg = (warp >> 2) - 1;                                    // rows [64 cwg, 64 cwg + 64) of the tile
  const int row_in_tile = cwg * 64 + (warp & 3) * 16 + (lane >> 2);  // + 8 hr
  const float scale_log2 = p.scale * kLog2e;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float mrow[2] = {-Inf(), -Inf()}, lrow[2] = {0.f, 0.f};
  unsigned pk[BN / 8][2];
  int t = NextNonEmpty(sCls, 0, nkt, kMaxTiles);
  int stage = 0;
  unsigned phase = 0;
  mbarrier_wait(bar_q, 0);  // always: the block must not exit with Q's copy in flight

  if constexpr (PIPE == 0) {
    while (t < nkt) {
      mbarrier_wait(bar_full(stage), phase);
      TileStep<D, BM, BN>(o, mrow, lrow, pk, q_addr, cwg, k_addr + stage * kTileBytes, v_addr + stage * kTileBytes,
                          sCls[t] != kTileFull, sSpan, row_in_tile, t, lane, scale_log2);
      wgmma_fence_operand(pk);
      if (lane == 0) mbarrier_arrive(bar_empty(stage));
      t = NextNonEmpty(sCls, t + 1, nkt, kMaxTiles);
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
      }
    }
  } else {
    float s[BN / 2];
    if (t < nkt) {  // S and P of the first tile (O is still zero: nothing to rescale)
      mbarrier_wait(bar_full(stage), phase);
      IssueQkT<D, BM, BN>(s, q_addr, cwg, k_addr + stage * kTileBytes);
      wgmma_wait_group<0>();
      wgmma_fence_operand(s);
      if (sCls[t] != kTileFull) MaskPartialTile<BN>(s, sSpan, row_in_tile, t, lane);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) SoftmaxRow<BN>(s, hr, mrow, lrow, pk, scale_log2);
    }
    // Every step issues S(tn) and PV(t) unconditionally (the last tile's PV is peeled off below), and P alternates
    // between two register arrays (the loop runs two steps a pass): with a product issued on one path only, or P
    // copied back into the array the next PV reads, ptxas serialises every wgmma of the kernel (advisories C7514,
    // C7513).
    int tn = t < nkt ? NextNonEmpty(sCls, t + 1, nkt, kMaxTiles) : nkt;
    unsigned pn[BN / 8][2];
    // One step: PV(t) from p_cur while S(tn) is exponentiated into p_next. False when tn was the last tile.
    auto step = [&](unsigned (&p_cur)[BN / 8][2], unsigned (&p_next)[BN / 8][2]) {
      const int nstage = stage + 1 == STAGES ? 0 : stage + 1;
      const unsigned nphase = nstage == 0 ? phase ^ 1 : phase;
      mbarrier_wait(bar_full(nstage), nphase);
      IssueQkT<D, BM, BN>(s, q_addr, cwg, k_addr + nstage * kTileBytes);  // S(tn) first, then this tile's PV
      IssuePv<D, BN>(o, p_cur, v_addr + stage * kTileBytes);
      wgmma_wait_group<1>();  // S(tn) is done; PV(t) may still run while it is exponentiated
      wgmma_fence_operand(s);
      if (sCls[tn] != kTileFull) MaskPartialTile<BN>(s, sSpan, row_in_tile, tn, lane);
      float alpha[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) alpha[hr] = SoftmaxRow<BN>(s, hr, mrow, lrow, p_next, scale_log2);
      wgmma_wait_group<0>();
      wgmma_fence_operand(o);
      wgmma_fence_operand(p_cur);  // PV(t) read p_cur until the wait
      if (lane == 0) mbarrier_arrive(bar_empty(stage));
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) RescaleRow<D>(o, hr, alpha[hr]);
      t = tn;
      tn = NextNonEmpty(sCls, t + 1, nkt, kMaxTiles);
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
    if (t < nkt) {  // the last tile's PV
      if (in_pk) IssuePv<D, BN>(o, pk, v_addr + stage * kTileBytes);
      else IssuePv<D, BN>(o, pn, v_addr + stage * kTileBytes);
      wgmma_wait_group<0>();
      wgmma_fence_operand(o);
      wgmma_fence_operand(pk);
      wgmma_fence_operand(pn);
    }
  }

  StoreRowsOut<D>(p, o, mrow, lrow, b, h, q0 + row_in_tile, Sq, lane);
}

}  // namespace dflash_attn
