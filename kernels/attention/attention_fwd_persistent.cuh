// Persistent warp-specialised forward of the Hopper tier (sm_90a; forward config kernel 6): AttnFwdTma's kernel 5
// (ping-pong consumers, the softmax of the next kv tile under this one's PV; FwdTmaPipelinedTile, here with the next
// kv tile's class read under its S product) run by one block per SM that walks query tiles, so a tile's start (its
// tile classes and row spans, its Q copy, its first K / V copies) runs under the tile before it and its end (the O
// and LSE stores) under the next one's first products.
// AttnFwdTma's blocks (one per SM: 160 KiB of shared memory) expose both, ~2-4 µs a block of 16-60.
//   - tiles: the linear index i = (batch, query tile heaviest first, head), head fastest (attention_schedule.cuh's
//     order); block j takes one tile a round of gridDim.x tiles, alternately from the front and the back of the
//     round (FwdPersistentTile). The launch's grid is the tile count clamped to the device's SM count
//     (KernelLaunch::persistent; any grid is correct).
//   - the producer warpgroup (40 registers after setmaxnreg; the consumers 232): per tile, into slot n % 2 of two,
//     once the tile two back has released it ("slot empty"), warp 1 writes the tile's header and kv tile classes and
//     warp 2 its row spans, and their 64 lanes arrive on "slot full" (FwdPersistentPlan); warp 0's lane 0 waits for
//     "slot full", then for the slot's "Q empty", copies Q into the slot's Q tile ("Q full") and the tile's
//     non-empty K / V tiles into the ring (FwdTmaProduceKv; its position carries over from tile to tile), and
//     arrives on "slot empty" too. A header with head -1 ends the walk.
//   - consumers (warpgroups 1, 2): per tile, wait "slot full", read the header, wait "Q full", run
//     FwdTmaPipelinedTile (ring position carried over; it releases every K and V), release Q and the slot (one
//     arrival per warp each), store O and LSE, zero the accumulators. Between tiles the ping-pong's turn passes on
//     named barrier 2 (consumer 0 arrives, consumer 1 waits) so that consumer 1's first arrival of the next tile on
//     barrier 1 cannot land before consumer 0's last wait on it in this tile.
// Head dim 64 or 128: two Q tiles and the ring must fit 227 KiB (FwdTmaPersistentSmemBytes).
// Who may include it: attention_kernels_sm90a.cu (NVRTC, sm_90a only). Thread-safety: n/a (device code).
#pragma once

#include "attention_fwd_tma.cuh"

namespace dflash_attn {

// One slot's tile, written by the producer (h -1: the walk is over).
struct FwdTileHeader {
  int h, b, q0, pad;
};

// The producer warp classifies each tile itself (AttnFwdTma does it before the split, with every register): with
// the 24 registers of kProducerWarpgroupRegs it spilled 192 B.
constexpr int kPersistentProducerRegs = 40;
constexpr int kPersistentConsumerRegs = ConsumerRegsForProducer(kPersistentProducerRegs);

// The mbarriers of AttnFwdTmaPersistent from `bars` on: Q full / empty, slot full / empty (two each), then the kv
// ring's (FwdKvRing).
__device__ __forceinline__ unsigned FwdPersistentQFull(unsigned bars, int s) { return bars + 8u * s; }
__device__ __forceinline__ unsigned FwdPersistentQEmpty(unsigned bars, int s) { return bars + 8u * (2 + s); }
__device__ __forceinline__ unsigned FwdPersistentSlotFull(unsigned bars, int s) { return bars + 8u * (4 + s); }
__device__ __forceinline__ unsigned FwdPersistentSlotEmpty(unsigned bars, int s) { return bars + 8u * (6 + s); }

// This block's n-th tile: round n covers the tiles [n gridDim.x, (n + 1) gridDim.x) of the schedule's order
// (heaviest first), taken by the blocks in increasing order in even rounds and in decreasing order in odd ones.
// In the same order every round (block j always the round's j-th heaviest), the causal 8192 forward's busiest
// block would have 6.3 % more work than the mean (a model with a tile's work = its kv tiles, 132 blocks); with the
// alternation 0.2 %. The GPU's own block dispatch (kernel 5) balances dynamically but pays every tile's start.
__device__ __forceinline__ int FwdPersistentTile(int n) {
  const int j = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x);
  return n * g + ((n & 1) ? g - 1 - j : j);
}

// A planning warp of the persistent forward: for tile n of this block (FwdPersistentTile), once the
// tile two back has released slot n % 2, CLASSES writes the tile's header and kv tile classes, !CLASSES its row
// spans; then every lane arrives on the slot's "full". A tile past the last one ends the walk (header head -1).
// The mask and the sizes are read from the parameters (constant bank) per tile and the two parts are two warps'
// separate code: with the producer's 40 registers, a walk holding them, or both parts in one warp, spilled.
template <int BM, int BN, int MASK, bool CLASSES>
__device__ __forceinline__ void FwdPersistentPlan(const AttnParams& p, unsigned char* sCls, RowSpan* sSpan,
                                                  FwdTileHeader* sHead, unsigned bars, int lane) {
  for (int n = 0;; ++n) {
    const int slot = n & 1;
    if (n >= 2) mbarrier_wait(FwdPersistentSlotEmpty(bars, slot), ((n >> 1) - 1) & 1);
    MaskParams mt = p.mask;
    SpecialiseMask<MASK>(mt);
    const int mqt = (mt.seq_q + BM - 1) / BM, i = FwdPersistentTile(n);
    const bool done = i >= p.heads_q * mqt * p.batch;
    const int r = i / p.heads_q, b = r / mqt, q0 = (mqt - 1 - r % mqt) * BM;
    if (CLASSES) {
      if (lane == 0) sHead[slot] = FwdTileHeader{done ? -1 : i % p.heads_q, b, q0, 0};
      if (!done) ClassifyKvTiles<BM, BN, 32>(mt, b, q0, (mt.seq_kv + BN - 1) / BN, sCls + slot * kMaxTiles, lane);
    } else if (!done) {
      for (int row = lane; row < BM; row += 32) sSpan[slot * BM + row] = RowVisibleSpan(mt, b, q0 + row);
    }
    mbarrier_arrive(FwdPersistentSlotFull(bars, slot));  // every lane after its own writes
    if (done) return;
  }
}

template <int D, int BN, int STAGES, int MASK>
__global__ void __launch_bounds__(kTmaFwdThreads, 1)
    AttnFwdTmaPersistent(const __grid_constant__ AttnParams p, const __grid_constant__ AttnTmaMaps maps) {
  constexpr int BM = kTmaFwdBlockM;
  static_assert(D == 64 || D == 128, "head dim 64 or 128: two Q tiles and the kv ring within 227 KiB");
  static_assert(BN == 64 || BN == 128, "kv tile of 64 or 128 rows (the S product's N)");
  static_assert(STAGES >= 2 && STAGES <= 4, "two to four kv buffers");
  constexpr unsigned kQTileBytes = BM * D * 2, kTileBytes = BN * D * 2;

  // Layout (FwdTmaPersistentSmemBytes): Q x 2, K x STAGES, V x STAGES (1 KiB multiples: the swizzled tiles start
  // 1024-byte aligned), row spans x 2, tile classes x 2, headers x 2, mbarriers.
  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned q_addr0 = smem_addr(smem), k_addr = q_addr0 + 2 * kQTileBytes, v_addr = k_addr + STAGES * kTileBytes;
  RowSpan* const sSpan = reinterpret_cast<RowSpan*>(smem + 2 * kQTileBytes + 2 * STAGES * kTileBytes);
  unsigned char* const sCls = reinterpret_cast<unsigned char*>(sSpan + 2 * BM);
  FwdTileHeader* const sHead = reinterpret_cast<FwdTileHeader*>(sCls + 2 * kMaxTiles);
  const unsigned bars = smem_addr(sHead + 2);
  auto q_full = [&](int s) { return FwdPersistentQFull(bars, s); };
  auto q_empty = [&](int s) { return FwdPersistentQEmpty(bars, s); };
  auto slot_full = [&](int s) { return FwdPersistentSlotFull(bars, s); };
  auto slot_empty = [&](int s) { return FwdPersistentSlotEmpty(bars, s); };
  const FwdKvRing<STAGES> ring{bars + 8u * 8};

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  MaskParams m = p.mask;
  SpecialiseMask<MASK>(m);
  const int Sq = m.seq_q, nkt = (m.seq_kv + BN - 1) / BN;

  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(q_full(s), 1);
      mbarrier_init(q_empty(s), 2 * 4);  // one arrival per consumer warp
      mbarrier_init(slot_full(s), 64);   // every lane of producer warps 1 and 2
      mbarrier_init(slot_empty(s), 2 * 4 + 1);  // every consumer warp and the copying thread
    }
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(ring.full_k(s), 1);
      mbarrier_init(ring.full_v(s), 1);
      mbarrier_init(ring.empty_k(s), 2 * 4);
      mbarrier_init(ring.empty_v(s), 2 * 4);
    }
    fence_mbarrier_init();
  }
  __syncthreads();  // barriers ready; no block barrier after this one

  if (warp < 4) {  // the producer warpgroup: warps 1 and 2 plan the tiles, warp 0 copies them
    setmaxnreg_dec<kPersistentProducerRegs>();
    if (warp == 1) {
      FwdPersistentPlan<BM, BN, MASK, true>(p, sCls, sSpan, sHead, bars, lane);
      return;
    }
    if (warp == 2) {
      FwdPersistentPlan<BM, BN, MASK, false>(p, sCls, sSpan, sHead, bars, lane);
      return;
    }
    if (warp != 0 || lane != 0) return;
    prefetch_tensormap(&maps.q);
    prefetch_tensormap(&maps.k);
    prefetch_tensormap(&maps.v);
    int stage = 0;
    unsigned phase = 0;
    bool first_round = true;
    for (int n = 0;; ++n) {  // per tile: Q into the slot's Q tile, the non-empty K / V tiles into the ring
      const int slot = n & 1;
      mbarrier_wait(slot_full(slot), (n >> 1) & 1);
      const volatile FwdTileHeader* const vh = sHead + slot;
      const int h = vh->h, b = vh->b, q0 = vh->q0;
      if (h < 0) return;
      if (n >= 2) mbarrier_wait(q_empty(slot), ((n >> 1) - 1) & 1);
      const unsigned q_addr = q_addr0 + slot * kQTileBytes;
      mbarrier_arrive_expect_tx(q_full(slot), kQTileBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) tma_load_4d(q_addr + cb * BM * 128, &maps.q, q_full(slot), cb * 64, q0, h, b);
      FwdTmaProduceKv<D, BN, STAGES>(maps, ring, sCls + slot * kMaxTiles, (p.mask.seq_kv + BN - 1) / BN, k_addr,
                                     v_addr, h / (p.heads_q / p.heads_kv), b, stage, phase, first_round);
      mbarrier_arrive(slot_empty(slot));  // this warp's reads of the slot are done too
    }
  }

  setmaxnreg_inc<kPersistentConsumerRegs>();
  const int cwg = (warp >> 2) - 1;                                    // rows [64 cwg, 64 cwg + 64) of the tile
  const int row_in_tile = cwg * 64 + (warp & 3) * 16 + (lane >> 2);  // + 8 hr
  const float scale_log2 = p.scale * kLog2e;
  int stage = 0;
  unsigned phase = 0;
  for (int n = 0;; ++n) {
    const int slot = n & 1;
    const unsigned parity = (n >> 1) & 1;
    mbarrier_wait(slot_full(slot), parity);
    if (sHead[slot].h < 0) break;
    const unsigned char* const cls = sCls + slot * kMaxTiles;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float mrow[2] = {-Inf(), -Inf()}, lrow[2] = {0.f, 0.f};
    const int t = NextNonEmpty(cls, 0, nkt);
    if (n > 0) {  // consumer 0's last turn of the tile before is taken before consumer 1 hands out the first
      if (cwg == 0) named_barrier_arrive(2, 256);
      else named_barrier_sync(2, 256);
    }
    mbarrier_wait(q_full(slot), parity);
    FwdTmaPipelinedTile<D, BM, BN, STAGES, true, true, true>(o, mrow, lrow, cls, sSpan + slot * BM, nkt,
                                                              q_addr0 + slot * kQTileBytes, k_addr, v_addr, ring, cwg,
                                                              row_in_tile, lane, scale_log2, t, stage, phase);
    // The header is read again here (held across the tile, it spilled), before the slot is released.
    const volatile FwdTileHeader* const vh = sHead + slot;
    const int hb = vh->b, hh = vh->h, hq0 = vh->q0;
    __syncwarp();
    if (lane == 0) {  // every product over Q and every read of the slot are complete
      mbarrier_arrive(q_empty(slot));
      mbarrier_arrive(slot_empty(slot));
    }
    StoreRowsOut<D>(p, o, mrow, lrow, hb, hh, hq0 + row_in_tile, Sq, lane);
  }
}

}  // namespace dflash_attn
