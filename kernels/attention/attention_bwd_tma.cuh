// Fused attention backward of the Hopper tier, warp-specialised (sm_90a; backward config kernel 2): AttnBwdWgmma's
// contract, grid, item walk and per-item products (BwdWgmmaItem), with the copies taken off the warpgroups that
// compute, as AttnFwdTma does for the forward:
//   - warpgroup 0 is the producer: after setmaxnreg gives its registers away, its first warp walks the block's
//     non-empty (query head, query tile) items; lane 0 issues K and V once and each item's Q and dO tiles as bulk
//     tensor copies (TMA, tensor maps made on the host: attention_api.cc) into a ring of STAGES buffers, and the
//     32 lanes write the item's rows (LSE in log2 units, +inf for rows that see nothing or lie past seq_q; delta;
//     the row spans) and its header (query head, first row, full) beside them, then arrive on the buffer's "full"
//     mbarrier; a header with head -1 ends the walk;
//   - warpgroups 1 and 2 (240 registers each) own 64 kv rows each: per item they wait on "full", run BwdWgmmaItem,
//     and release the buffer on its "empty" mbarrier (one arrival per consumer warp). They meet once per item, at
//     the named barrier that publishes dS^T; dS^T alternates between two tiles, so the next item's dS^T never
//     overwrites a tile the other warpgroup's dQ product may still read.
//   BULK_DQ (config kernel 3): instead of 8-byte reductions from every consumer thread, the consumers write the
//     item's 64 x D fp32 dQ tile into shared memory (BwdDqSmemStage) and warp 2 of the producer warpgroup adds it
//     to the accumulator with one bulk reduce-add (the rows are contiguous in DqAccumOffset's layout). With it,
//     BwdWgmmaItem reads the item's LSE from shared memory before it issues the products, and delta and the dQ
//     staging buffer's wait before it waits for them (EARLY_READS).
//   NEXT_WAIT (config kernel 4, with BULK_DQ): the consumers wait for the next item's "full" barrier before the
//     wait for this item's dK product, not after it.
// Block shape: kTmaBwdBlockM x kTmaBwdBlockN (attention_params.cuh), head dim 128 (at 64 the dQ split of two
// warpgroups over one 64-row query tile leaves 32 columns each, less than an m64n64 pass).
// Who may include it: attention_kernels_sm90a.cu (NVRTC, sm_90a only). Thread-safety: n/a (device code).
#pragma once

#include "attention_bwd_wgmma.cuh"
#include "tma.cuh"

namespace dflash_attn {

// The tensor maps of one backward call (the host passes four CUtensorMaps in this order): 4-D views (head_dim,
// seq, heads, batch) with boxes of 64 columns x kTmaBwdBlockM rows (Q, dO) or kTmaBwdBlockN rows (K, V).
struct AttnBwdTmaMaps {
  TmaDescriptor q, dout, k, v;
};

// BULK_DQ's dQ stage (BwdWgmmaItem's DqStage): a consumer writes its m64n64 dQ tile into the shared fp32 tile in
// the accumulator's own layout (DqAccumOffset's 8 x 8 tiles, relative to the query tile's first row) once the
// reducer has read the last item's (acquire: "dq empty", parity of its item count), then arrives on "dq full"
// (one arrival per consumer warp, after a proxy fence: the bulk reduction reads the tile in the async proxy).
template <int D>
struct BwdDqSmemStage {
  static constexpr bool kStaged = true;
  float* tile;
  unsigned bar_empty, bar_full;
  unsigned items;  // items this consumer has finished before this one
  int lane;
  __device__ __forceinline__ void acquire() const {
    if (items > 0) mbarrier_wait(bar_empty, (items - 1) & 1);
  }
  __device__ __forceinline__ void store(const float (&acc)[32], int row, int c0) const {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        *reinterpret_cast<float2*>(tile + DqAccumOffset(row + hr * 8, c0 + j * 8 + (lane & 3) * 2, D)) =
            make_float2(acc[4 * j + 2 * hr], acc[4 * j + 2 * hr + 1]);
  }
  __device__ __forceinline__ void release() const {
    fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar_full);
  }
};

// T when B, else F (NVRTC has no <type_traits>).
template <bool B, typename T, typename F>
struct BwdPick {
  using type = T;
};
template <typename T, typename F>
struct BwdPick<false, T, F> {
  using type = F;
};

// The header of one ring buffer's item, written by the producer (h -1: the walk is over).
struct BwdTmaItemHeader {
  int h, q0, full, pad;
};

template <int D, int STAGES, bool BULK_DQ, int MASK, bool NEXT_WAIT = false>
__global__ void __launch_bounds__(kTmaBwdThreads, 1)
    AttnBwdTma(const __grid_constant__ AttnParams p, const __grid_constant__ AttnBwdTmaMaps maps) {
  constexpr int BM = kTmaBwdBlockM, BN = kTmaBwdBlockN, NT = kTmaBwdThreads;
  static_assert(D == 128, "head dim 128: each consumer warpgroup takes one m64n64 dQ pass");
  static_assert(STAGES >= 2 && STAGES <= 3, "two or three query-tile buffers");
  constexpr unsigned kQueryTileBytes = BM * D * 2, kKvTileBytes = BN * D * 2;

  // Swizzled tiles start 1024-byte aligned: every tile size below is a multiple of 1 KiB (BwdTmaSmemBytes's order).
  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* const sK = reinterpret_cast<bf16*>(smem);
  bf16* const sV = sK + BN * D;
  bf16* const sQ = sV + BN * D;
  bf16* const sdO = sQ + STAGES * BM * D;
  bf16* const sdS = sdO + STAGES * BM * D;  // two dS^T tiles [kv][query]
  float* const sdQ = reinterpret_cast<float*>(sdS + 2 * BN * BM);  // BULK_DQ: the item's fp32 dQ tile
  RowSpan* const sSpan = reinterpret_cast<RowSpan*>(sdQ + (BULK_DQ ? BM * D : 0));
  float* const sLse = reinterpret_cast<float*>(sSpan + STAGES * BM);
  float* const sDelta = sLse + STAGES * BM;
  BwdTmaItemHeader* const sHead = reinterpret_cast<BwdTmaItemHeader*>(sDelta + STAGES * BM);
  int* const sWalk = reinterpret_cast<int*>(sHead + STAGES);  // the producer's walk constants (below)
  unsigned char* const sCls = reinterpret_cast<unsigned char*>(sWalk + 4);
  // mbarriers: K and V landed; per buffer "full" (the item's copies landed and its rows written: the 64 threads
  // of producer warps 0-1) and "empty" (every consumer warp is done with it); BULK_DQ's dQ tile "full" / "empty".
  const unsigned bar_kv = smem_addr(sCls + kMaxTiles);
  auto bar_full = [&](int s) { return bar_kv + 8u * (1 + s); };
  auto bar_empty = [&](int s) { return bar_kv + 8u * (1 + STAGES + s); };
  const unsigned bar_dq_full = bar_kv + 8u * (1 + 2 * STAGES), bar_dq_empty = bar_dq_full + 8;  // BULK_DQ

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k0 = ScheduledTile<false>() * BN;
  MaskParams m = p.mask;
  SpecialiseMask<MASK>(m);
  int b, hk;
  ScheduledGroupedHead(p.heads_kv, b, hk);
  const int Sq = m.seq_q, Skv = m.seq_kv, nqt = (Sq + BM - 1) / BM;
  if (tid == 0) {
    gBwdBlockBatchHead[0] = b;
    gBwdBlockBatchHead[1] = hk;
    mbarrier_init(bar_kv, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(bar_full(s), BM);
      mbarrier_init(bar_empty(s), 2 * 4);
    }
    if (BULK_DQ) {
      mbarrier_init(bar_dq_full, 2 * 4);  // one arrival per consumer warp
      mbarrier_init(bar_dq_empty, 1);     // the reducer
    }
    fence_mbarrier_init();
  }
  for (int t = tid; t < nqt; t += NT)
    sCls[t] = static_cast<unsigned char>(ClassifyTile(m, b, t * BM, t * BM + BM, k0, k0 + BN));
  __syncthreads();  // barriers, tile classes, batch / head ready; no block barrier after this one

  if (warp < 4) {  // the producer warpgroup
    setmaxnreg_dec<kProducerWarpgroupRegs>();
    constexpr int kWalkWarps = BM / 32 + (BULK_DQ ? 1 : 0);  // warps 0-1: rows of each item; 2: the dQ reducer
    if (warp >= kWalkWarps) return;
    if (tid == 0) {
      prefetch_tensormap(&maps.q);
      prefetch_tensormap(&maps.dout);
      prefetch_tensormap(&maps.k);
      prefetch_tensormap(&maps.v);
      mbarrier_arrive_expect_tx(bar_kv, 2 * kKvTileBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
        tma_load_4d(smem_addr(sK) + cb * BN * 128, &maps.k, bar_kv, cb * 64, k0, hk, b);
        tma_load_4d(smem_addr(sV) + cb * BN * 128, &maps.v, bar_kv, cb * 64, k0, hk, b);
      }
    }
    // The walk's constants go to shared memory and are read back where used (volatile), and n counts the items
    // (and the end marker) issued so far, buffer n % STAGES in round n / STAGES: with the walk's constants, the
    // batch, a stage, a parity and a first-round flag in registers the 24 the producer has spilled.
    {
      const int G = p.heads_q / p.heads_kv;
      const BwdWalkPos first = BwdNextNonEmpty(sCls, BwdWalkPos{0, 0}, G, nqt);
      if (tid == 0) {
        sWalk[0] = G;
        sWalk[1] = hk * G;
        sWalk[2] = first.qt;  // the block's first non-empty query tile (with gi 0, or no item at all)
      }
      named_barrier_sync(2, kWalkWarps * 32);  // the walking warps (barrier 1 is the consumers')
    }
    auto walk = [&](int i) { return *static_cast<volatile int*>(sWalk + i); };
    auto next = [&](BwdWalkPos pos) { return BwdNextNonEmpty(sCls, pos, walk(0), nqt); };
    BwdWalkPos it = next(BwdWalkPos{0, walk(2)});
    if (BULK_DQ && warp == BM / 32) {  // the reducer: one bulk reduce-add of each item's dQ tile
      if (lane != 0) return;
      const long long rows_per_head = DqAccumRows(Sq);
      for (unsigned n = 0; it.gi < walk(0); ++n) {
        const int h = walk(1) + it.gi, q0 = it.qt * BM;
        mbarrier_wait(bar_dq_full, n & 1);
        const int rows = rows_per_head - q0 < BM ? static_cast<int>(rows_per_head - q0) : BM;  // 8-row multiple
        bulk_reduce_add_f32(
            p.dq_accum + ((WidenNonNeg(BwdBlockBatch()) * p.heads_q + h) * rows_per_head + q0) * D, smem_addr(sdQ),
            static_cast<unsigned>(rows * D * 4), l2_policy_evict_last());
        bulk_commit_group();
        bulk_wait_group_read<0>();
        mbarrier_arrive(bar_dq_empty);
        it = next(BwdAdvance(it, nqt, walk(2)));
      }
      bulk_wait_group<0>();
      return;
    }
    for (unsigned n = 0;; ++n) {
      const int stage = n % STAGES;
      if (n >= STAGES) mbarrier_wait(bar_empty(stage), ((n / STAGES) & 1) ^ 1);  // the last round's item released
      const bool done = it.gi >= walk(0);
      const int h = walk(1) + it.gi, q0 = it.qt * BM;
      if (tid == 0) {
        sHead[stage] = BwdTmaItemHeader{done ? -1 : h, q0, !done && sCls[it.qt] == kTileFull, 0};
        if (!done) {
          mbarrier_expect_tx(bar_full(stage), 2 * kQueryTileBytes);
#pragma unroll
          for (int cb = 0; cb < D / 64; ++cb) {
            const unsigned off = stage * kQueryTileBytes + cb * BM * 128;
            tma_load_4d_hint(smem_addr(sQ) + off, &maps.q, bar_full(stage), cb * 64, q0, h, BwdBlockBatch(),
                             l2_policy_evict_last());
            tma_load_4d_hint(smem_addr(sdO) + off, &maps.dout, bar_full(stage), cb * 64, q0, h, BwdBlockBatch(),
                             l2_policy_evict_last());
          }
        }
      }
      if (!done) {
        const long long rows = (WidenNonNeg(BwdBlockBatch()) * p.heads_q + h) * Sq;
        const int r = tid, q = q0 + r;  // one row per thread of warps 0-1
        float lse = Inf(), delta = 0.f;  // rows past seq_q: P = 0 (their Q and dO tiles are zero-filled)
        if (q < Sq) {
          const float l = p.lse[rows + q];
          lse = l == -Inf() ? Inf() : l * kLog2e;  // rows that see nothing: P = 0
          delta = p.delta[rows + q];
        }
        sLse[stage * BM + r] = lse;
        sDelta[stage * BM + r] = delta;
        sSpan[stage * BM + r] = RowVisibleSpan(m, BwdBlockBatch(), q);
      }
      mbarrier_arrive(bar_full(stage));  // every thread after its row (and thread 0 after the header)
      if (done) return;
      it = next(BwdAdvance(it, nqt, walk(2)));
    }
  }

  setmaxnreg_inc<kConsumerWarpgroupRegs>();
  const int wg = (warp >> 2) - 1;                                // kv rows [64 wg, 64 wg + 64) of the tile
  const int kv_row = wg * 64 + (warp & 3) * 16 + (lane >> 2);  // this thread's kv rows: kv_row, kv_row + 8
  const unsigned k_addr = smem_addr(sK), v_addr = smem_addr(sV);
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  mbarrier_wait(bar_kv, 0);  // always: the block must not exit with K's and V's copies in flight
  int stage = 0, ds = 0;
  unsigned phase = 0, items = 0;
  if constexpr (NEXT_WAIT) mbarrier_wait(bar_full(0), 0);  // the later items' waits: before_dk_wait
  for (;; ++items) {
    if constexpr (!NEXT_WAIT) mbarrier_wait(bar_full(stage), phase);
    const BwdTmaItemHeader hd = sHead[stage];
    if (hd.h < 0) break;
    const BwdItem item{hd.h, hd.q0, hd.full != 0, sQ + stage * BM * D, sdO + stage * BM * D, sLse + stage * BM,
                       sDelta + stage * BM, sSpan + stage * BM};
    bf16* const ds_tile = sdS + ds * BN * BM;  // dS^T alternates between two tiles (ds = items & 1)
    typename BwdPick<BULK_DQ, BwdDqSmemStage<D>, BwdDqReduce>::type dq_stage{};
    if constexpr (BULK_DQ) dq_stage = BwdDqSmemStage<D>{sdQ, bar_dq_empty, bar_dq_full, items, lane};
    // NEXT_WAIT: the next item's buffer was released by the item before this one, so waiting for it under this
    // item's dK product cannot hold up its fill.
    auto before_dk_wait = [&] {
      if constexpr (NEXT_WAIT) {
        const int next = stage + 1 == STAGES ? 0 : stage + 1;
        mbarrier_wait(bar_full(next), next == 0 ? phase ^ 1 : phase);
      }
    };
    BwdWgmmaItem<D, BM, BN, BULK_DQ>(p, item, Sq, wg, warp, lane, k0, kv_row, k_addr, v_addr, ds_tile,
                                     smem_addr(ds_tile), dk, dv, [] {}, [] { named_barrier_sync(1, 2 * 128); },
                                     before_dk_wait, dq_stage);
    if (lane == 0) mbarrier_arrive(bar_empty(stage));  // every product over the buffer is complete
    ds ^= 1;
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1;
    }
  }

  BwdWgmmaStoreDkDv<D>(p, dk, dv, k0 + kv_row, Skv, lane);
}

}  // namespace dflash_attn
