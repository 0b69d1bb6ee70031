// The walk every dK/dV kernel block does (AttnBwdKv, AttnBwdKv2d): load its K and V tiles, classify every query
// tile against its kv tile, then visit the non-empty (query head of the GQA group, query tile) items in order with
// Q, dO, LSE (log2 units, +inf for rows that see nothing), delta and row spans of each item in shared memory
// (cp.async for the tiles; STAGES = 2 prefetches the next item while the current one runs). The tile layout is the
// caller's (a TileCopy policy: SwzTileCopy, the portable kernels' XOR swizzle, or the Hopper tier's 128-byte one).
// Who may include it: the attention backward kernels (device code only). Thread-safety: n/a (device code).
#pragma once

#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_schedule.cuh"

namespace dflash_attn {

// The block's batch and kv head (attention_schedule.cuh), stored by BwdLoadKvAndClassify and read back where used
// (volatile shared loads at a fixed address), so that neither holds a register through the item walk: computed
// from blockIdx with a division they cannot be re-read for free like blockIdx itself. With this (NVRTC), sm_120's
// AttnBwdKv2d<128,64,64,4,1,*> is spill-free and sm_90's <128,64,128,8,2,*> has no 4 B spill; sm_90's
// <128,64,64,4,*,*> spill 4-8 B instead of 0. The 8 bytes cost 1 KiB of static shared memory (the dynamic array's
// 1024-byte alignment pads them), which the tuner counts.
__shared__ int gBwdBlockBatchHead[2];
__device__ __forceinline__ int BwdBlockBatch() { return *static_cast<volatile int*>(&gBwdBlockBatchHead[0]); }
__device__ __forceinline__ int BwdBlockHead() { return *static_cast<volatile int*>(&gBwdBlockBatchHead[1]); }

// Shared-memory buffers of the item walk: STAGES copies of BM rows each (cls: one byte per query tile).
struct BwdItemBuffers {
  bf16* q;
  bf16* dout;
  float* lse;
  float* delta;
  RowSpan* span;
  unsigned char* cls;
};

// One visited item, as the kernels' per-item code sees it (pointers into the current stage's buffers).
struct BwdItem {
  int h;      // query head
  int q0;     // first query row of the tile
  bool full;  // every (row, kv) pair of the tile is visible: no per-element mask
  const bf16* q;
  const bf16* dout;
  const float* lse;
  const float* delta;
  const RowSpan* span;
};

// The portable kernels' tile copies (Swz layout). A TileCopy policy supplies LoadKv (the block's K / V tiles),
// LoadQuery (the per-item Q / dO tiles; ALL_ROWS: valid_rows >= ROWS) and Landed (run by every thread after its
// copies completed, before the barrier that publishes them).
struct SwzTileCopy {
  template <int ROWS, int COLS, int NT>
  static __device__ __forceinline__ void LoadKv(bf16* smem, const bf16* gmem, long long row_stride, int valid_rows,
                                                int tid) {
    LoadTileAsync<ROWS, COLS, NT>(smem, gmem, row_stride, valid_rows, tid);
  }
  template <int ROWS, int COLS, int NT, bool ALL_ROWS>
  static __device__ __forceinline__ void LoadQuery(bf16* smem, const bf16* gmem, long long row_stride,
                                                   int valid_rows, int tid) {
    LoadTileAsyncPreferFixed<ROWS, COLS, NT, ALL_ROWS>(smem, gmem, row_stride, valid_rows, tid);
  }
  static __device__ __forceinline__ void Landed() {}
};

// Finds the block's batch and kv head hk and stores them for BwdBlockBatch / BwdBlockHead, loads its K and V
// tiles (kv rows [k0, k0 + BN) of kv head hk) and classifies every query tile; ends with a barrier (after which
// BwdBlockBatch / BwdBlockHead are valid; the K/V copies complete at the walk's first wait).
template <int D, int BM, int BN, int NT, typename TileCopy = SwzTileCopy>
__device__ __forceinline__ void BwdLoadKvAndClassify(const AttnParams& p, const MaskParams& m, bf16* sK, bf16* sV,
                                                     unsigned char* cls, int k0, int tid) {
  int b, hk;
  ScheduledGroupedHead(p.heads_kv, b, hk);
  if (tid == 0) {
    gBwdBlockBatchHead[0] = b;
    gBwdBlockBatchHead[1] = hk;
  }
  const int Skv = m.seq_kv, nqt = (m.seq_q + BM - 1) / BM;
  TileCopy::template LoadKv<BN, D, NT>(
      sK, static_cast<const bf16*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride + k0 * p.k_seq_stride,
      p.k_seq_stride, Skv - k0, tid);
  TileCopy::template LoadKv<BN, D, NT>(
      sV, static_cast<const bf16*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride + k0 * p.v_seq_stride,
      p.v_seq_stride, Skv - k0, tid);
  cp_async_commit_group();
  for (int t = tid; t < nqt; t += NT) cls[t] = static_cast<unsigned char>(ClassifyTile(m, b, t * BM, t * BM + BM, k0, k0 + BN));
  __syncthreads();
}


// Issues the cp.async loads of the item (query head h, query tile qt) into buffer `stage`: the Q and dO tiles and
// the raw per-row LSE and delta (4-byte copies; rows past seq_q get LSE -inf, delta 0), and fills that buffer's row
// spans. Nothing here waits for global memory, so with STAGES = 2 the whole load of the next item overlaps the
// current one (synchronous LSE / delta loads stall warps 0-1, and with them the whole block at the next barrier,
// for one global-memory round trip per item). BwdFinishItemRows converts the LSE once the copies have landed.
// FULL_TILE_PATH: a query tile with all its rows takes copies without the row check (one uniform branch, two copies
// of the code); the 2-D kernel's choice (with it the 1-D AttnBwdKv<128,64,64,4,1,3,true> spills 8 B on sm_120, so
// the 1-D kernel keeps the single path).
template <int D, int BM, int NT, bool FULL_TILE_PATH, typename TileCopy = SwzTileCopy>
__device__ __forceinline__ void BwdLoadItem(const AttnParams& p, const MaskParams& m, const BwdItemBuffers& buf, int h,
                                            int qt, int stage, int tid) {
  const int Sq = m.seq_q, b = BwdBlockBatch();
  const int q0 = qt * BM;
  const long long bw = WidenNonNeg(b), hw = WidenNonNeg(h), q0w = WidenNonNeg(q0);
  const bf16* gq = static_cast<const bf16*>(p.q) + bw * p.q_batch_stride + hw * p.q_head_stride + q0w * p.q_seq_stride;
  const bf16* gdo =
      static_cast<const bf16*>(p.dout) + bw * p.do_batch_stride + hw * p.do_head_stride + q0w * p.do_seq_stride;
  if (FULL_TILE_PATH && q0 + BM <= Sq) {  // uniform: every query tile but the last has all its rows
    TileCopy::template LoadQuery<BM, D, NT, true>(buf.q + stage * BM * D, gq, p.q_seq_stride, Sq - q0, tid);
    TileCopy::template LoadQuery<BM, D, NT, true>(buf.dout + stage * BM * D, gdo, p.do_seq_stride, Sq - q0, tid);
  } else {
    TileCopy::template LoadQuery<BM, D, NT, false>(buf.q + stage * BM * D, gq, p.q_seq_stride, Sq - q0, tid);
    TileCopy::template LoadQuery<BM, D, NT, false>(buf.dout + stage * BM * D, gdo, p.do_seq_stride, Sq - q0, tid);
  }
#pragma unroll
  for (int r0 = 0; r0 < BM; r0 += NT) {  // the same rows per thread as BwdFinishItemRows; a fixed trip count
    const int r = r0 + tid, q = q0 + r;
    if (BM % NT != 0 && r >= BM) break;
    if (q < Sq) {
      const long long row = (bw * p.heads_q + h) * Sq + q;
      cp_async_ca_4(smem_addr(buf.lse + stage * BM + r), p.lse + row);
      cp_async_ca_4(smem_addr(buf.delta + stage * BM + r), p.delta + row);
    } else {
      buf.lse[stage * BM + r] = -Inf();
      buf.delta[stage * BM + r] = 0.f;
    }
    buf.span[stage * BM + r] = RowVisibleSpan(m, b, q);
  }
  cp_async_commit_group();
}

// After the wait for buffer `stage`'s copies (each thread its own rows, before the barrier that publishes them):
// LSE to log2 units, +inf for rows that see nothing (LSE -inf), so that P = exp2(S * scale_log2 - lse) = 0 there.
template <int BM, int NT>
__device__ __forceinline__ void BwdFinishItemRows(const BwdItemBuffers& buf, int stage, int tid) {
#pragma unroll
  for (int r0 = 0; r0 < BM; r0 += NT) {
    const int r = r0 + tid;
    if (BM % NT != 0 && r >= BM) break;
    const float lse = buf.lse[stage * BM + r];
    buf.lse[stage * BM + r] = lse == -Inf() ? Inf() : lse * kLog2e;
  }
}

// The walk's position: query head gi of the GQA group (0..G-1; G = the end) and query tile qt.
struct BwdWalkPos {
  int gi, qt;
};

// The first non-empty position at or after (gi, qt): counters instead of a flat item index, so no division or
// modulo by the tile count per step (those cost ~60 instructions per item).
__device__ __forceinline__ BwdWalkPos BwdNextNonEmpty(const unsigned char* cls, BwdWalkPos pos, int G, int nqt) {
  while (pos.gi < G && cls[pos.qt] == 0) {
    if (++pos.qt == nqt) {
      pos.qt = 0;
      ++pos.gi;
    }
  }
  return pos;
}
// The next position; a new head starts at qt_first, the block's first non-empty query tile (the tile classes do not
// depend on the head, so the tiles before it are empty for every head; restarting at 0 the causal walk skips ~1
// empty tile per item, ~11 instructions each).
__device__ __forceinline__ BwdWalkPos BwdAdvance(BwdWalkPos pos, int nqt, int qt_first) {
  return ++pos.qt == nqt ? BwdWalkPos{pos.gi + 1, qt_first} : pos;
}

// The next item's copies, which a PREFETCH_IN_BODY body starts (see BwdForEachItem); with one buffer, or no next
// item, it does nothing.
template <int D, int BM, int NT, bool FULL_TILE_PATH, typename TileCopy>
struct BwdPrefetch {
  const AttnParams& p;
  const MaskParams& m;
  const BwdItemBuffers& buf;
  int h, qt, stage, tid;
  bool issue;
  __device__ __forceinline__ void operator()() const {
    if (issue) BwdLoadItem<D, BM, NT, FULL_TILE_PATH, TileCopy>(p, m, buf, h, qt, stage, tid);
  }
};

// Visits the block's non-empty items (the query heads of kv head BwdBlockHead()) in order: body(const BwdItem&)
// runs after a barrier that makes the item's buffers visible, and is followed by a barrier after which its buffers
// may be refilled. All threads call it, after BwdLoadKvAndClassify. FULL_TILE_PATH: see BwdLoadItem.
// PREFETCH_IN_BODY: body(item, prefetch) must call prefetch() (a BwdPrefetch) once, in every thread (the Hopper
// kernel does so right after issuing its first products, so the copies' issue runs under them). With STAGES 2 it
// starts the next item's copies into the other buffer, which the barrier before this item freed (every thread had
// finished the previous body), so the walk keeps one barrier per item instead of two; with STAGES 1 it does
// nothing and the walk is unchanged.
template <int D, int BM, int NT, int STAGES, bool FULL_TILE_PATH, typename TileCopy = SwzTileCopy,
          bool PREFETCH_IN_BODY = false, typename Body>
__device__ __forceinline__ void BwdForEachItem(const AttnParams& p, const MaskParams& m, const BwdItemBuffers& buf,
                                               int tid, Body&& body) {
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 query-tile buffers");
  constexpr bool kBodyLoads = PREFETCH_IN_BODY && STAGES == 2;  // the body issues the next item's copies
  const int nqt = (m.seq_q + BM - 1) / BM, G = p.heads_q / p.heads_kv;
  const int h0 = BwdBlockHead() * G;
  BwdWalkPos it = BwdNextNonEmpty(buf.cls, BwdWalkPos{0, 0}, G, nqt);
  const int qt_first = it.qt;  // with it.gi == 0, or no item at all
  if (it.gi < G) BwdLoadItem<D, BM, NT, FULL_TILE_PATH, TileCopy>(p, m, buf, h0 + it.gi, it.qt, 0, tid);
  int stage = 0;
  while (it.gi < G) {
    const BwdWalkPos itn = BwdNextNonEmpty(buf.cls, BwdAdvance(it, nqt, qt_first), G, nqt);
    if (!kBodyLoads && STAGES > 1 && itn.gi < G) {
      BwdLoadItem<D, BM, NT, FULL_TILE_PATH, TileCopy>(p, m, buf, h0 + itn.gi, itn.qt, stage ^ 1, tid);
      cp_async_wait_group<1>();
    } else {
      cp_async_wait_group<0>();
    }
    BwdFinishItemRows<BM, NT>(buf, stage, tid);
    TileCopy::Landed();
    __syncthreads();
    const BwdItem item{h0 + it.gi, it.qt * BM, buf.cls[it.qt] == kTileFull,
                       buf.q + stage * BM * D, buf.dout + stage * BM * D, buf.lse + stage * BM,
                       buf.delta + stage * BM, buf.span + stage * BM};
    if constexpr (PREFETCH_IN_BODY) {
      body(item, BwdPrefetch<D, BM, NT, FULL_TILE_PATH, TileCopy>{p, m, buf, h0 + itn.gi, itn.qt, stage ^ 1, tid,
                                                                  kBodyLoads && itn.gi < G});
    } else {
      body(item);
    }
    if (!kBodyLoads) {
      __syncthreads();  // this stage's buffers may be refilled now
      if (STAGES == 1 && itn.gi < G)
        BwdLoadItem<D, BM, NT, FULL_TILE_PATH, TileCopy>(p, m, buf, h0 + itn.gi, itn.qt, 0, tid);
    }
    it = itn;
    stage = STAGES > 1 ? stage ^ 1 : 0;  // 0, 1, 0, ...: no signed modulo
  }
  cp_async_wait_group<0>();
}

}  // namespace dflash_attn
