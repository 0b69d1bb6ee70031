// The prologue of the kernels whose block owns one query tile (AttnFwd, AttnFwdWgmma, AttnFwdTma; AttnBwdDq for
// its coordinates): the block's tile, heads and batch from the block schedule, and the forwards' carve-up of dynamic
// shared memory in FwdSmemBytes's order (attention_params.cuh).
// Who may include it: the attention kernels (device code only). Thread-safety: n/a (device code).
#pragma once

#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"
#include "attention_schedule.cuh"

namespace dflash_attn {

// The query tile of BM rows this block owns (heaviest tiles first, attention_schedule.cuh): batch b, query head h,
// first row q0, hk, the kv head of h's GQA group, and m, the call's mask specialised for MASK (SpecialiseMask).
template <int BM, int MASK>
__device__ __forceinline__ void ScheduledQueryTile(const AttnParams& p, int& b, int& h, int& q0, int& hk,
                                                   MaskParams& m) {
  b = ScheduledBatch();
  h = ScheduledHead();
  q0 = ScheduledTile<true>() * BM;
  m = p.mask;
  SpecialiseMask<MASK>(m);
  hk = h / (p.heads_q / p.heads_kv);
}

// The forwards' shared memory (FwdSmemBytes): the Q tile, STAGES K tiles, STAGES V tiles, the query tile's row
// spans, the tile-class table (kMaxTiles bytes; AttnFwdTma's mbarriers follow it). Tile offsets are multiples of
// 1 KiB when the base is (the swizzled layouts need it).
template <int D, int BM, int BN, int STAGES>
struct FwdSmem {
  bf16* q;
  bf16* k;
  bf16* v;
  RowSpan* span;
  unsigned char* cls;
  __device__ __forceinline__ explicit FwdSmem(unsigned char* base)
      : q(reinterpret_cast<bf16*>(base)),
        k(q + BM * D),
        v(k + STAGES * BN * D),
        span(reinterpret_cast<RowSpan*>(v + STAGES * BN * D)),
        cls(reinterpret_cast<unsigned char*>(span + BM)) {}
};

}  // namespace dflash_attn
