// Which (tile, head, batch) a thread block of a tiled attention kernel works on: the block schedule.
// The GPU issues blocks in linear-index order (x fastest). Causal and DFlash masks make tile work very uneven (a
// backward block's kv tile near the start is seen by almost every query, one near the end by few; a forward query
// tile near the end sees the most kv), so the launch is grid (heads, tiles, batch): every head of one tile starts
// together and the tiles start heaviest first (longest-processing-time-first list scheduling), instead of the heavy
// tiles of the last heads starting last and running alone at the end. The coordinates are read from blockIdx
// (special registers, which ptxas can re-read at no register cost). Launch geometry: attention_config.cc
// (ForwardLaunches, BackwardLaunches) and tools/device/attention_check.py.
// The dK/dV kernels may also be launched head-grouped (backward `head_groups` 1): grid (HG, tiles,
// NG * batch) with NG = heads / HG groups of HG heads, so the GPU runs group by group (each group's tiles heaviest
// first) and the blocks in flight share the Q / dO / dQ-accumulator rows of HG heads only, a working set sized by
// the host to fit L2 (like FlashAttention-2, whose grid keeps one head in flight), instead of all heads' at once.
// Grid (heads, tiles, batch) is the case HG = heads (NG = 1), so one kernel serves both launches.
// Who may include it: the attention kernels; the host tests (GroupedHeadOf only). Thread-safety: pure functions.
#pragma once

#include "attention_params.cuh"

namespace dflash_attn {

#ifdef __CUDACC__
// HEAVY_LAST: the heavy tiles are the high-numbered ones (query tiles under causal and DFlash masks: later query
// rows see more kv), so they are visited in reverse; otherwise (kv tiles: early kv rows are seen by more queries)
// in order.
template <bool HEAVY_LAST>
__device__ __forceinline__ int ScheduledTile() {
  return HEAVY_LAST ? static_cast<int>(gridDim.y - 1 - blockIdx.y) : static_cast<int>(blockIdx.y);
}
__device__ __forceinline__ int ScheduledHead() { return static_cast<int>(blockIdx.x); }
__device__ __forceinline__ int ScheduledBatch() { return static_cast<int>(blockIdx.z); }
#endif

// Batch and head of block (x, z) of a head-grouped grid (hg, tiles, heads / hg * batch): z = b * NG + group.
DFLASH_HD void GroupedHeadOf(int heads, int hg, int x, int z, int& b, int& h) {
  const int ng = heads / hg;
  b = z / ng;
  h = (z - b * ng) * hg + x;
}

#ifdef __CUDACC__
// Batch and head of this dK/dV block (HG = gridDim.x, dividing `heads`).
__device__ __forceinline__ void ScheduledGroupedHead(int heads, int& b, int& h) {
  GroupedHeadOf(heads, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.z), b, h);
}
#endif

}  // namespace dflash_attn
