// Attention kernel parameters: the plain-data structs the host passes by value to every attention kernel.
// Owns: MaskKind, MaskParams, AttnParams (pointers + element strides + shapes + mask description).
// Who may include it: the kernels (NVRTC), the host API (g++), the CPU tests. tools/device/attention_params.py
// mirrors the structs (ctypes), the constants and the shared-memory sizes for the GPU checker;
// tests/kernels/attention/attention_params_mirror_test.cc fails when the two disagree.
// Thread-safety: plain values. No host headers: NVRTC compiles this file.
#pragma once

#if defined(__CUDACC__)
#define DFLASH_HD __host__ __device__ __forceinline__
#else
#define DFLASH_HD inline
#endif

namespace dflash_attn {

// Mask kinds (dflash-training.md section 4 for the DFlash ones).
enum MaskKind : int {
  kMaskNone = 0,           // every (q, kv) pair with q < seq_q, kv < seq_kv
  kMaskCausal = 1,         // kv <= q + (seq_kv - seq_q)   (bottom-right aligned, as FlashAttention-2)
  kMaskDocCausal = 2,      // packed documents: kv in [doc_start(q), q]; rows at or past cu_seqlens[num_docs] see nothing
  kMaskDflashFull = 3,     // block j = q / block_size: kv < anchor_j, plus all kv of its own block (bidirectional)
  kMaskDflashSliding = 4,  // as full, context kv >= anchor_j + (q mod bs) - (window - 1), own block causal
};
constexpr int kNumMaskKinds = 5;

// Both DFlash kinds take an optional per-block document start (packed rows, MaskParams::doc_start): the context
// part of block j is further restricted to kv >= doc_start_j. The bound is compiled in only where the problem asks
// for it ("doc_bound": true, a key of its own): the kernels' MASK template argument is the kind, plus kMaskDocBound
// for a DFlash kind with the bound. Without the flag the kernels drop doc_start at compile time, so unpacked rows
// run exactly the code (and registers) they had before packed rows existed.
constexpr int kMaskDocBound = 8;

// True for a valid MASK template argument (see kMaskDocBound).
DFLASH_HD constexpr bool IsCompiledMask(int mask) {
  const int kind = mask & ~kMaskDocBound;
  return kind >= 0 && kind < kNumMaskKinds &&
         ((mask & kMaskDocBound) == 0 || kind == kMaskDflashFull || kind == kMaskDflashSliding);
}

// Everything the mask needs. For the DFlash kinds the KV sequence is [ctx_len context rows | num_blocks*block_size
// block rows] and seq_q == num_blocks * block_size; anchors are sorted ascending among the valid blocks.
struct MaskParams {
  const int* cu_seqlens;              // kMaskDocCausal: num_docs + 1 row offsets (shared by all batches)
  const int* anchors;                 // DFlash: [batch, num_blocks] anchor positions
  const unsigned char* block_valid;   // DFlash: [batch, num_blocks], 0 = padding block; null = all valid
  const int* doc_start;               // DFlash: [batch, num_blocks], context kv >= doc_start; null = no bound
  int kind;
  int seq_q;
  int seq_kv;
  int num_docs;
  int num_blocks;
  int block_size;
  int ctx_len;
  int window;
};

// The fp32 dQ accumulator of dq_mode 0: per (batch, query head) DqAccumRows(seq_q) x head_dim floats in 8 x 8
// tiles, [row / 8][col / 8][row % 8][col % 8]. One warp's 8-row x 8-column mma accumulator tile (a 2-float reduction
// per lane) is then one 256-byte segment, two cache lines, where a row-major layout spreads it over 8 rows and 8
// lines (ncu of the causal backward with the row-major layout: lg_throttle stalls on those reductions were 8.5 % of
// samples, FA2's 0.2 %: its accumulator is in fragment order too). Rows past seq_q are never written nor read.
DFLASH_HD long long DqAccumRows(long long seq_q) { return (seq_q + 7) & ~7LL; }
DFLASH_HD long long DqAccumOffset(int row, int col, int head_dim) {
  return static_cast<long long>(row >> 3) * (8 * head_dim) + (col >> 3) * 64 + (row & 7) * 8 + (col & 7);
}

// One attention call. Strides are in elements; the last (head_dim) dimension is contiguous.
// Forward reads q, k, v and writes o and lse; backward reads q, k, v, o, dout, lse and writes dq, dk, dv using
// delta ([batch, heads_q, seq_q] fp32) and dq_accum (fp32, DqAccumOffset's layout) as workspace.
struct AttnParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // [batch, heads_q, seq_q], natural log; -inf for rows that see nothing
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  float* delta;
  float* dq_accum;
  long long q_batch_stride, q_head_stride, q_seq_stride;
  long long k_batch_stride, k_head_stride, k_seq_stride;
  long long v_batch_stride, v_head_stride, v_seq_stride;
  long long o_batch_stride, o_head_stride, o_seq_stride;
  long long do_batch_stride, do_head_stride, do_seq_stride;
  long long dq_batch_stride, dq_head_stride, dq_seq_stride;
  long long dk_batch_stride, dk_head_stride, dk_seq_stride;
  long long dv_batch_stride, dv_head_stride, dv_seq_stride;
  int batch;
  int heads_q;
  int heads_kv;
  int head_dim;
  float scale;  // softmax scale (usually 1/sqrt(head_dim))
  int pad0;
  MaskParams mask;
};

// Capacity of the per-block tile-class table in shared memory: a forward block classifies all kv tiles of its
// query tile, a backward block all query tiles of its kv tile, so seq_kv <= kMaxTiles * block_n (forward) and
// seq_q <= kMaxTiles * block_m (backward).
constexpr int kMaxTiles = 1024;

// Dynamic shared memory of the kernels (bytes), shared by host (pruning, launch) and device (static_assert).
// Forward: Q tile; K, V tiles per stage; the row spans of the query tile (16 B per row); the tile-class table.
DFLASH_HD constexpr int FwdSmemBytes(int d, int bm, int bn, int stages) {
  return (bm * d + 2 * stages * bn * d) * 2 + bm * 16 + kMaxTiles;
}
// The warp-specialised forward's (AttnFwdTma) fixed block shape, which the host's launch, tensor-map boxes and
// shared-memory size follow: two consumer warpgroups of 64 query rows and a producer warpgroup.
constexpr int kTmaFwdBlockM = 128;
constexpr int kTmaFwdThreads = 3 * 128;
// AttnFwdTma: FwdSmemBytes's buffers, then its mbarriers (Q; K and V full and empty per kv buffer).
DFLASH_HD constexpr int FwdTmaSmemBytes(int d, int bn, int stages) {
  return FwdSmemBytes(d, kTmaFwdBlockM, bn, stages) + 8 * (1 + 4 * stages);
}
// AttnFwdTmaPersistent (attention_fwd_persistent.cuh): two Q tiles, STAGES K and V tiles; two slots of row spans,
// tile classes and a 16-byte tile header; its mbarriers (Q full / empty and slot full / empty, two each; the kv
// ring's four per buffer).
DFLASH_HD constexpr int FwdTmaPersistentSmemBytes(int d, int bn, int stages) {
  return (2 * kTmaFwdBlockM * d + 2 * stages * bn * d) * 2 + 2 * (kTmaFwdBlockM * 16 + kMaxTiles + 16) +
         8 * (8 + 4 * stages);
}
// Backward dK/dV kernel (AttnBwdKv; AttnBwdWgmma too): K, V tiles; Q, dO tiles per stage; the dS tile; per-row
// LSE, delta, row spans.
DFLASH_HD constexpr int BwdSmemBytes(int d, int bm, int bn, int stages) {
  return (2 * bn * d + 2 * stages * bm * d + bm * bn) * 2 + stages * bm * (4 + 4 + 16) + kMaxTiles;
}
// The warp-specialised backward's (AttnBwdTma) fixed block shape, which the host's launch, tensor-map boxes and
// shared-memory size follow: two consumer warpgroups of 64 kv rows, a 64-row query tile, a producer warpgroup.
constexpr int kTmaBwdBlockM = 64;
constexpr int kTmaBwdBlockN = 128;
constexpr int kTmaBwdThreads = 3 * 128;
// AttnBwdTma: K, V tiles; Q, dO tiles per stage; two dS^T tiles; with bulk_dq the fp32 dQ tile; per-row LSE,
// delta, row spans and a 16-byte item header per stage; 16 bytes of walk constants; the tile-class table; its
// mbarriers (K/V; full and empty per stage; dQ full and empty).
DFLASH_HD constexpr int BwdTmaSmemBytes(int d, int stages, bool bulk_dq) {
  return (2 * kTmaBwdBlockN * d + 2 * stages * kTmaBwdBlockM * d + 2 * kTmaBwdBlockM * kTmaBwdBlockN) * 2 +
         (bulk_dq ? kTmaBwdBlockM * d * 4 : 0) + stages * kTmaBwdBlockM * (4 + 4 + 16) + stages * 16 + 16 +
         kMaxTiles + 8 * (1 + 2 * stages + 2);
}
// Backward 2-D kernel (attention_bwd2d.cuh): K, V tiles; Q, dO tiles per stage; the P^T and dS^T tiles; per-row
// LSE, delta, row spans.
DFLASH_HD constexpr int Bwd2dSmemBytes(int d, int bm, int bn, int stages) {
  return (2 * bn * d + 2 * stages * bm * d + 2 * bm * bn) * 2 + stages * bm * (4 + 4 + 16) + kMaxTiles;
}
// Backward dQ kernel (separate pass): Q, dO tiles; K, V tiles per stage.
DFLASH_HD constexpr int BwdDqSmemBytes(int d, int bm, int bn, int stages) {
  return (2 * bm * d + 2 * stages * bn * d) * 2 + kMaxTiles;
}

}  // namespace dflash_attn
