// Attention mask logic, exact to the element, usable from host and device.
// Owns: which kv positions a query row sees (RowVisibleSpan: at most two intervals for every mask kind) and the
// classification of a (query tile, kv tile) pair as empty / partial / full, computed from the sorted anchors (and
// the optional per-block document starts) or cu_seqlens without any dense mask. The kernels classify tiles with
// it; the CPU tests check it against a dense mask built straight from the spec text; the host counts useful FLOPs
// with it.
// Thread-safety: pure functions of their arguments. No host headers (NVRTC compiles this file).
#pragma once

#include "attention_params.cuh"

namespace dflash_attn {

// Visible kv positions of one query row: [lo0, hi0) U [lo1, hi1) (either may be empty, lo >= hi).
struct RowSpan {
  int lo0, hi0, lo1, hi1;
};

// Branch-free (bitwise, not short-circuit): the kernels evaluate it per element inside unrolled mma code, where
// a branch per element splits the schedule into small blocks.
DFLASH_HD bool InSpan(const RowSpan& s, int kv) {
  return ((kv >= s.lo0) & (kv < s.hi0)) | ((kv >= s.lo1) & (kv < s.hi1));
}

DFLASH_HD int SpanCount(const RowSpan& s) {
  int a = s.hi0 > s.lo0 ? s.hi0 - s.lo0 : 0;
  int b = s.hi1 > s.lo1 ? s.hi1 - s.lo1 : 0;
  return a + b;
}

DFLASH_HD int MinI(int a, int b) { return a < b ? a : b; }
DFLASH_HD int MaxI(int a, int b) { return a > b ? a : b; }

// Index d of the document holding row q: the largest d in [0, num_docs) with cu[d] <= q. Needs cu[0] <= q.
DFLASH_HD int DocOf(const int* cu, int num_docs, int q) {
  int lo = 0, hi = num_docs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= q) lo = mid; else hi = mid - 1;
  }
  return lo;
}

DFLASH_HD bool DflashValid(const MaskParams& m, int b, int j) {
  return m.block_valid == nullptr || m.block_valid[(long long)b * m.num_blocks + j] != 0;
}

// The anchor of block j, clamped to [0, ctx_len] (context rows beyond ctx_len do not exist).
DFLASH_HD int DflashAnchor(const MaskParams& m, int b, int j) {
  int a = m.anchors[(long long)b * m.num_blocks + j];
  return MinI(MaxI(a, 0), m.ctx_len);
}

// Specialises a kernel's copy of the mask to its MASK template argument (attention_params.cuh, kMaskDocBound): the
// kind becomes a constant, and without the document-bound flag doc_start becomes a constant null, so every
// `doc_start != nullptr` branch below folds away.
template <int MASK>
DFLASH_HD void SpecialiseMask(MaskParams& m) {
  static_assert(IsCompiledMask(MASK), "mask template argument");
  m.kind = MASK & ~kMaskDocBound;
  if constexpr ((MASK & kMaskDocBound) == 0) m.doc_start = nullptr;
}

DFLASH_HD RowSpan RowVisibleSpan(const MaskParams& m, int b, int q) {
  RowSpan s{0, 0, 0, 0};
  if (q < 0 || q >= m.seq_q) return s;
  switch (m.kind) {
    case kMaskNone:
      s.hi0 = m.seq_kv;
      break;
    case kMaskCausal:
      s.hi0 = MinI(MaxI(q + m.seq_kv - m.seq_q + 1, 0), m.seq_kv);
      break;
    case kMaskDocCausal: {
      if (m.num_docs <= 0 || q < m.cu_seqlens[0] || q >= m.cu_seqlens[m.num_docs]) break;
      s.lo0 = m.cu_seqlens[DocOf(m.cu_seqlens, m.num_docs, q)];
      s.hi0 = MinI(q + 1, m.seq_kv);
      break;
    }
    case kMaskDflashFull:
    case kMaskDflashSliding: {
      int j = q / m.block_size;
      if (j >= m.num_blocks || !DflashValid(m, b, j)) break;
      int o = q - j * m.block_size;
      int a = DflashAnchor(m, b, j);
      int base = m.ctx_len + j * m.block_size;
      s.hi0 = a;
      s.lo1 = base;
      if (m.kind == kMaskDflashFull) {
        s.hi1 = MinI(base + m.block_size, m.seq_kv);
      } else {
        s.lo0 = MinI(MaxI(a + o - (m.window - 1), 0), a);
        s.hi1 = MinI(base + o + 1, m.seq_kv);
      }
      // Packed rows: the block's document start (not clamped: it may pass hi0 = a, then no context).
      if (m.doc_start != nullptr) s.lo0 = MaxI(s.lo0, m.doc_start[(long long)b * m.num_blocks + j]);
      break;
    }
    default:
      break;
  }
  return s;
}

DFLASH_HD bool IsVisible(const MaskParams& m, int b, int q, int kv) {
  if (kv < 0 || kv >= m.seq_kv) return false;
  return InSpan(RowVisibleSpan(m, b, q), kv);
}

enum TileClass : int { kTileEmpty = 0, kTilePartial = 1, kTileFull = 2 };

// Class of the tile rows [q0, q1) x columns [k0, k1) (rows >= seq_q are ignored; columns >= seq_kv are never
// visible): empty when no row sees any column, full when every row sees every column (then no per-element
// masking is needed), partial otherwise. Exact: it never calls a tile empty or full that is not.
DFLASH_HD int ClassifyTile(const MaskParams& m, int b, int q0, int q1, int k0, int k1) {
  q1 = MinI(q1, m.seq_q);
  int k1c = MinI(k1, m.seq_kv);
  q0 = MaxI(q0, 0);
  k0 = MaxI(k0, 0);
  if (q0 >= q1 || k0 >= k1c) return kTileEmpty;
  const bool kv_tail = k1 > m.seq_kv;
  switch (m.kind) {
    case kMaskNone:
      return kv_tail ? kTilePartial : kTileFull;
    case kMaskCausal: {
      int off = m.seq_kv - m.seq_q;
      if (k0 >= MinI(q1 + off, m.seq_kv)) return kTileEmpty;  // the last row sees [0, q1 - 1 + off]
      return (!kv_tail && k1 <= q0 + off + 1) ? kTileFull : kTilePartial;
    }
    case kMaskDocCausal: {
      if (m.num_docs <= 0) return kTileEmpty;
      const int* cu = m.cu_seqlens;
      int first = cu[0], end = cu[m.num_docs];
      int qs = MaxI(MaxI(q0, k0), first);   // the row that sees the most of [k0, k1)
      int qe = MinI(q1, end);
      if (qs >= qe || cu[DocOf(cu, m.num_docs, qs)] >= k1c) return kTileEmpty;
      bool full = !kv_tail && q0 >= first && q1 <= end && k1 <= q0 + 1 &&
                  cu[DocOf(cu, m.num_docs, q1 - 1)] <= k0;
      return full ? kTileFull : kTilePartial;
    }
    case kMaskDflashFull:
    case kMaskDflashSliding: {
      const bool sliding = m.kind == kMaskDflashSliding;
      const int bs = m.block_size;
      bool any = false, all = true;
      const int cs = k0, ce = MinI(k1c, m.ctx_len);          // context part of the tile
      const int bs_ = MaxI(k0, m.ctx_len), be = k1c;          // block part of the tile
      // This batch row's document starts, or null (hoisted out of the block loop: a per-block null test made NVRTC
      // spill).
      const int* docs = m.doc_start == nullptr ? nullptr : m.doc_start + (long long)b * m.num_blocks;
      for (int j = q0 / bs; j <= (q1 - 1) / bs; ++j) {
        if (j >= m.num_blocks || !DflashValid(m, b, j)) {
          all = false;
          continue;
        }
        int o_min = MaxI(q0, j * bs) - j * bs;
        int o_max = MinI(q1, (j + 1) * bs) - 1 - j * bs;
        int a = DflashAnchor(m, b, j);
        int base = m.ctx_len + j * bs;
        // Context lower bounds of the tile's first and last row of block j (non-decreasing in the row; the
        // document start bounds every row of the block alike).
        int clo_min = sliding ? MinI(MaxI(a + o_min - (m.window - 1), 0), a) : 0;
        int clo_max = sliding ? MinI(MaxI(a + o_max - (m.window - 1), 0), a) : 0;
        if (docs != nullptr) {
          clo_min = MaxI(clo_min, docs[j]);
          clo_max = MaxI(clo_max, docs[j]);
        }
        int bhi_min = sliding ? o_min + 1 : bs;
        int bhi_max = sliding ? o_max + 1 : bs;
        if (cs < ce && MaxI(cs, clo_min) < MinI(ce, a)) any = true;
        if (bs_ < be && MaxI(bs_, base) < MinI(be, base + bhi_max)) any = true;
        bool ctx_ok = cs >= ce || (cs >= clo_max && ce <= a);
        bool blk_ok = bs_ >= be || (bs_ >= base && be <= base + bhi_min);
        if (!(ctx_ok && blk_ok)) all = false;
      }
      if (!any) return kTileEmpty;
      return (all && !kv_tail) ? kTileFull : kTilePartial;
    }
    default:
      return kTileEmpty;
  }
}

}  // namespace dflash_attn
