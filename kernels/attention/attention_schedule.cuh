// Which (tile, head, batch) a thread block of a tiled attention kernel works on: the block schedule.
// The GPU issues blocks in linear-index order (x fastest). Causal and DFlash masks make tile work very uneven (a
// backward block's kv tile near the start is seen by almost every query, one near the end by few; a forward query
// tile near the end sees the most kv), so the launch is grid (heads, tiles, batch): every head of one tile starts
// together and the tiles start heaviest first (longest-processing-time-first list scheduling), instead of the heavy
// tiles of the last heads starting last and running alone at the end. The coordinates are read from blockIdx
// (special registers, which ptxas can re-read at no register cost). Launch geometry: attention_config.cc
// (ForwardLaunches, BackwardLaunches) and tools/device/attention_check.py.
// Who may include it: the attention kernels (device code only). Thread-safety: n/a (device code).
#pragma once

namespace dflash_attn {

// HEAVY_LAST: the heavy tiles are the high-numbered ones (query tiles under causal and DFlash masks: later query
// rows see more kv), so they are visited in reverse; otherwise (kv tiles: early kv rows are seen by more queries)
// in order.
template <bool HEAVY_LAST>
__device__ __forceinline__ int ScheduledTile() {
  return HEAVY_LAST ? static_cast<int>(gridDim.y - 1 - blockIdx.y) : static_cast<int>(blockIdx.y);
}
__device__ __forceinline__ int ScheduledHead() { return static_cast<int>(blockIdx.x); }
__device__ __forceinline__ int ScheduledBatch() { return static_cast<int>(blockIdx.z); }

}  // namespace dflash_attn
