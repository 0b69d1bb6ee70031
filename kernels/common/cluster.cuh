// PTX wrappers for thread block clusters (sm_90+: Hopper and Blackwell, sm_120 included): the CTA's rank in its
// cluster, the cluster-wide barrier, and loads from another CTA's shared memory (distributed shared memory). One
// inline-asm function per instruction form, named after the instruction, as in ptx.cuh.
//
// Memory clobbers (the rule of ptx.cuh): the barrier halves carry "memory": arrive.release publishes this thread's
// earlier shared-memory stores to the cluster and wait.acquire is where the other CTAs' stores become visible, so the
// compiler must move no shared-memory access across either. ld.shared::cluster is volatile without a clobber: it
// reads what a barrier published, and volatile asm keeps its order relative to the barriers.
// A CTA's shared memory lives only as long as the CTA: a CTA whose shared memory others read must not exit before
// they are done (the readers arrive on a cluster barrier after their last read, the owner waits on it before exiting).
// Who may include it: kernel sources (NVRTC, device code only; a family embeds this file and ptx.cuh); the wrappers
// may only be called from code compiled for sm_90 or later (a translation unit for an older arch may include the
// header as long as nothing it compiles calls them). Thread-safety: n/a (device code; each wrapper says which threads
// call it).
#pragma once

#include "ptx.cuh"

namespace dflash_ptx {

// This CTA's rank in its cluster, 0 .. cluster size - 1 (%cluster_ctarank).
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Arrival on the cluster barrier with release semantics. Every thread of every CTA of the cluster calls it (the
// .aligned form: all threads of a warp execute the same instruction), then barrier_cluster_wait.
__device__ __forceinline__ void barrier_cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
// Arrival without ordering: for a thread that only signals that it has finished reading (nothing to publish).
__device__ __forceinline__ void barrier_cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
// Waits until every thread of the cluster has arrived at the current phase (acquire semantics).
__device__ __forceinline__ void barrier_cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The shared::cluster address of the variable at shared-window address `saddr` (smem_addr) in the CTA of rank `rank`.
__device__ __forceinline__ unsigned mapa_shared_cluster(unsigned saddr, unsigned rank) {
  unsigned out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(saddr), "r"(rank));
  return out;
}

// 32-bit loads from a shared::cluster address (mapa_shared_cluster).
__device__ __forceinline__ float ld_shared_cluster_f32(unsigned caddr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(caddr));
  return v;
}
__device__ __forceinline__ int ld_shared_cluster_s32(unsigned caddr) {
  int v;
  asm volatile("ld.shared::cluster.s32 %0, [%1];\n" : "=r"(v) : "r"(caddr));
  return v;
}

}  // namespace dflash_ptx
