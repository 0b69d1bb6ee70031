// Hopper's bulk tensor copy engine (TMA) and the pieces a warp-specialised kernel is built from (sm_90a only):
// the tensor-map parameter type, shared-memory mbarriers (init, arrive, expected transaction counts with and
// without an arrival, parity wait), the 4-D tiled tensor copy global -> shared that completes on an mbarrier (also
// under an L2 eviction policy), bulk reduce-adds shared -> global, and setmaxnreg (moving registers from a producer
// warpgroup to the consumer warpgroups). One inline-asm function per instruction form, named after it, as in ptx.cuh.
//
// TmaDescriptor is the driver's CUtensorMap (128 opaque bytes, 64-byte aligned), made on the host by
// cuTensorMapEncodeTiled and passed in a __grid_constant__ kernel parameter: the copy instruction takes the
// parameter's generic address. With CU_TENSOR_MAP_SWIZZLE_128B and a box 64 bf16 wide, a box of R rows lands as
// R rows of 128 bytes whose 16-byte chunk c sits at c ^ (row % 8): wgmma.cuh's Sw128Offset layout, one 64-column
// block per box (destinations 1024-byte aligned). Rows or columns outside the tensor are written as zeros and still
// count toward the transaction bytes, so the expected count of a box is always its full size.
//
// Ordering: a consumer that waited on the mbarrier a copy completes on sees the copied bytes (no proxy fence:
// the copy and wgmma both act in the async proxy). A producer may overwrite a buffer once every consumer has
// arrived on the buffer's "empty" mbarrier after its last wgmma_wait over it.
// Memory clobbers: every wrapper that orders memory (init, arrive, wait, copy) carries "memory".
// Who may include it: kernels compiled for sm_90a only (NVRTC). Thread-safety: n/a (device code; each wrapper says
// which threads call it).
#pragma once

#include "ptx.cuh"

namespace dflash_ptx {

// The driver's CUtensorMap, as the device sees it (the host passes CUtensorMap objects of the same size).
struct alignas(64) TmaDescriptor {
  unsigned long long opaque[16];
};

// ---- mbarriers (8 bytes of shared memory each, shared-window addresses) ----
// One thread initialises; fence_mbarrier_init() and a block barrier publish the initialisation (to the copy engine
// too) before anyone arrives or waits.
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival (release: this thread's earlier memory accesses happen before the phase completes).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` of copies completing on this barrier in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Announces `bytes` of copies completing on this barrier in the current phase, without an arrival (so that the
// copies may be issued before the thread's own arrival, which then covers its later shared-memory writes).
__device__ __forceinline__ void mbarrier_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Blocks until the phase of parity `parity` (0 or 1: the phase count's low bit) has completed (acquire).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- the tensor copy engine ----
// Brings the descriptor into the constant cache before its first use (one thread).
__device__ __forceinline__ void prefetch_tensormap(const TmaDescriptor* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}
// Copies the box at coordinates (c0 innermost .. c3) of a 4-D tensor map into shared memory at dst; completes on
// bar's transaction count (one thread issues it).
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TmaDescriptor* map, unsigned bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The L2 policy "evict last" for the whole line range a copy touches (cache_hint operands below): lines that other
// blocks read or add to soon again stay in L2 ahead of streaming ones.
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// tma_load_4d with an L2 policy (l2_policy_evict_last) for the lines it reads.
__device__ __forceinline__ void tma_load_4d_hint(unsigned dst, const TmaDescriptor* map, unsigned bar, int c0, int c1,
                                                 int c2, int c3, unsigned long long policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
      "%4, %5, %6}], [%2], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}

// ---- bulk reductions shared -> global (one thread issues them; bulk_group completion) ----
// dst[i] += src[i] for `bytes` / 4 floats (16-byte aligned addresses, bytes a multiple of 16), in L2, under an L2
// policy (l2_policy_evict_last) for the lines it adds to.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, unsigned src, unsigned bytes,
                                                    unsigned long long policy) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, %3;\n" ::"l"(
                   dst),
               "r"(src), "r"(bytes), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups are still reading their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Until at most N of this thread's bulk groups are incomplete (their global writes done).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- register reconfiguration (every thread of a warpgroup executes the same one) ----
// The split of a 384-thread block (one producer warpgroup, two consumer warpgroups; 168 registers a thread at
// launch): 128 x 24 + 256 x 240 = 168 x 384, so the consumers' increase is exactly what the producer gives away
// (asking for more than the block was launched with would block setmaxnreg.inc for ever).
// The consumers' share when the producer warpgroup keeps `producer` registers (multiples of 8).
__host__ __device__ constexpr int ConsumerRegsForProducer(int producer) {
  return (168 * 384 - 128 * producer) / 256 / 8 * 8;
}
constexpr int kProducerWarpgroupRegs = 24;
constexpr int kConsumerWarpgroupRegs = ConsumerRegsForProducer(kProducerWarpgroupRegs);
static_assert(kConsumerWarpgroupRegs == 240, "the split the attention kernels were measured with");
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// Named barriers (id 1..15; 0 is __syncthreads') of `threads` threads (a multiple of 32): sync waits until
// `threads` have arrived or synced, arrive counts this warp's threads without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace dflash_ptx
