// Per-arch hardware limits and the pruning rule built on them: a variant whose registers, shared memory or
// threads cannot run on the arch (or that spills, unless allowed) is pruned before anyone benchmarks it.
// Owns: the limits table (sm_75 … sm_121: the archs NVRTC 13.0 targets whose limits the CUDA programming guide
// documents; sm_88 and sm_110 are left out until their limits are confirmed). Pure data; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {

struct ArchLimits {
  std::string arch;                      // "sm_120"
  int cc = 0;                            // 120
  int max_shared_per_block = 0;          // opt-in maximum, bytes (sm_120: 101376 = 99 KiB)
  int shared_per_sm = 0;                 // bytes
  int registers_per_sm = 0;              // 32-bit registers (65536)
  int max_registers_per_thread = 0;      // 255
  int max_threads_per_sm = 0;            // sm_120: 1536
  int max_threads_per_block = 1024;
};

// Limits of a known arch; nullopt for an unknown one.
std::optional<ArchLimits> LimitsFor(std::string_view arch);
// Every arch in the table, oldest first.
const std::vector<ArchLimits>& AllArchLimits();

// Registers one block of `threads` threads at `registers_per_thread` occupies on an SM, as the hardware
// allocates them (per warp in units of 256, warps rounded up to the 4 SM sub-partitions; cuda_occupancy.h).
long long RegistersAllocatedPerBlock(int registers_per_thread, unsigned threads);

// Empty when a kernel with `usage`, `threads` per block and `dynamic_shared` bytes can run on `limits`;
// otherwise the reason ("shared memory 120000 B > 101376 B max per block on sm_120").
std::string PruneReason(const ArchLimits& limits, const ResourceUsage& usage, unsigned threads,
                        std::size_t dynamic_shared, bool allow_spills);

}  // namespace dflash::tuner
