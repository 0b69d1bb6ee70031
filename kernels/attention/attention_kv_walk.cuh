// The walk every query-tile kernel block does (AttnFwd, and AttnBwdDq of the separate dQ pass): classify every kv
// tile of its query tile against the mask, then visit the non-empty ones in order with their K and V tiles in
// shared memory (cp.async; STAGES = 2 prefetches the next tile's K and V while the current one runs, STAGES = 1
// loads it after the current one is done). The kv-tile counterpart of attention_bwd_items.cuh's item walk.
// Who may include it: the attention kernels (device code only). Thread-safety: n/a (device code).
#pragma once

#include "attention_mask.cuh"
#include "attention_mma.cuh"
#include "attention_params.cuh"

namespace dflash_attn {

// Classes of the kv tiles [0, nkt) of BN rows against the query rows [q0, q0 + BM) of batch b, into cls[t]
// (attention_mask.cuh's TileClass). All NT threads call it; cls is complete after the caller's next barrier.
template <int BM, int BN, int NT>
__device__ __forceinline__ void ClassifyKvTiles(const MaskParams& m, int b, int q0, int nkt, unsigned char* cls,
                                                int tid) {
  for (int t = tid; t < nkt; t += NT) cls[t] = static_cast<unsigned char>(ClassifyTile(m, b, q0, q0 + BM, t * BN, t * BN + BN));
}

// The first index >= t in [t, n) whose tile class is not empty (n when none is left); n <= kMaxTiles. A chain of
// dependent shared loads, one per empty tile (~200 of a query tile's 256 kv tiles at 512 anchors), with nothing
// else on it: the index wrapped modulo kMaxTiles cost 6 more instructions a tile and 0.4-1.5 % of the portable
// forward's time.
__device__ __forceinline__ int NextNonEmpty(const unsigned char* cls, int t, int n) {
  while (t < n && cls[t] == 0) ++t;
  return t;
}

// The walk over the non-empty kv tiles of cls[0, nkt), as a loop object so that the loop body stays in the kernel's
// own while loop (with the body in a lambda, or the prefetch in the loop condition, NVVM orders the code
// differently: other SASS, more registers or spills in some sm_120 variants):
//   KvTileWalk<D, BN, NT, STAGES> kv(p, b, hk, Skv, sK, sV, cls, nkt, tid);
//   while (kv.HasTile()) {
//     kv.Acquire();
//     ... kv.tile(), kv.k(), kv.v() ...
//     kv.Release();
//   }
//   cp_async_wait_group<0>();
// After Acquire(), kv tile kv.tile()'s K and V rows (kv rows [t * BN, t * BN + BN) of batch b, kv head hk of p.k /
// p.v, rows >= Skv zero-filled) are visible in kv.k() / kv.v() (BN x D each,
// swizzled: Swz<D>), one of the STAGES buffers of sK / sV. Release() ends the tile with a barrier after which its
// buffers may be refilled. Copies the caller committed before the walk complete at the first Acquire(); the
// caller's final wait completes the walk's own. All NT threads construct it and call its methods together, after a
// barrier that published cls; p must outlive it (the kernel's parameter).
template <int D, int BN, int NT, int STAGES>
class KvTileWalk {
 public:
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 kv buffers");
  __device__ __forceinline__ KvTileWalk(const AttnParams& p, int b, int hk, int Skv, bf16* sK, bf16* sV,
                                        const unsigned char* cls, int nkt, int tid)
      : p_(p), sK_(sK), sV_(sV), cls_(cls), b_(b), hk_(hk), Skv_(Skv), nkt_(nkt), tid_(tid) {
    t_ = NextNonEmpty(cls_, 0, nkt_);
    if (t_ < nkt_) Load(t_, 0);
  }
  __device__ __forceinline__ bool HasTile() const { return t_ < nkt_; }
  __device__ __forceinline__ void Acquire() {
    tn_ = NextNonEmpty(cls_, t_ + 1, nkt_);
    if (STAGES > 1 && tn_ < nkt_) {  // prefetch the next tile into the other buffer, wait for this one
      Load(tn_, (stage_ + 1) % STAGES);
      cp_async_wait_group<1>();
    } else {
      cp_async_wait_group<0>();
    }
    __syncthreads();
  }
  __device__ __forceinline__ int tile() const { return t_; }
  __device__ __forceinline__ const bf16* k() const { return sK_ + stage_ * BN * D; }
  __device__ __forceinline__ const bf16* v() const { return sV_ + stage_ * BN * D; }
  __device__ __forceinline__ void Release() {
    __syncthreads();  // this stage's buffers may be refilled now
    if (STAGES == 1 && tn_ < nkt_) Load(tn_, 0);
    t_ = tn_;
    stage_ = STAGES > 1 ? (stage_ + 1) % STAGES : 0;
  }

 private:
  // Issues (and commits as one group) the copies of kv tile t's K and V rows into buffer `stage`. The rows are
  // addressed from the parameters at each tile: two 64-bit bases held across the loop spilled 12 B in sm_90's
  // AttnFwd<128, 128, 64, 4, 2, none / causal> beside the fixed-trip copy.
  __device__ __forceinline__ void Load(int t, int stage) {
    const long long k0 = static_cast<long long>(t) * BN;
    const bf16* Kg = static_cast<const bf16*>(p_.k) + b_ * p_.k_batch_stride + hk_ * p_.k_head_stride +
                     k0 * p_.k_seq_stride;
    const bf16* Vg = static_cast<const bf16*>(p_.v) + b_ * p_.v_batch_stride + hk_ * p_.v_head_stride +
                     k0 * p_.v_seq_stride;
    LoadTileAsyncPreferFixed<BN, D, NT>(sK_ + stage * BN * D, Kg, p_.k_seq_stride, Skv_ - static_cast<int>(k0), tid_);
    LoadTileAsyncPreferFixed<BN, D, NT>(sV_ + stage * BN * D, Vg, p_.v_seq_stride, Skv_ - static_cast<int>(k0), tid_);
    cp_async_commit_group();
  }
  const AttnParams& p_;  // read at each use, as the kernel reads its parameter (hoisting the strides costs SASS)
  bf16* sK_;
  bf16* sV_;
  const unsigned char* cls_;
  int b_, hk_, Skv_, nkt_, tid_;
  int t_, tn_, stage_ = 0;  // the current tile, the next non-empty one (set by Next), the current buffer
};

}  // namespace dflash_attn
