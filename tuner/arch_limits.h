// Per-arch hardware limits and the pruning rule built on them: a variant whose registers, shared memory or
// threads cannot run on the arch (or that spills, unless allowed) is pruned before anyone benchmarks it.
// Owns: the limits table (sm_75 … sm_121: the archs NVRTC 13.0 targets whose limits the CUDA programming guide
// documents; sm_88 and sm_110 are left out until their limits are confirmed), and which arch a device tunes for.
// One arch-specific target is in the table: sm_90a (Hopper's wgmma, TMA and setmaxnreg; its cubins run on CC 9.0
// devices only), the arch of the Hopper kernel tier; a CC 9.0 device tunes for it, and its search holds the
// portable variants too. Pure data; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {

struct ArchLimits {
  std::string arch;                      // "sm_120", "sm_90a"
  int cc = 0;                            // 120 (90 for sm_90a)
  bool arch_specific = false;            // an "a" target: this cc's own instructions, cubins for this cc only
  int max_shared_per_block = 0;          // opt-in maximum, bytes (sm_120: 101376 = 99 KiB)
  int shared_per_sm = 0;                 // bytes
  int registers_per_sm = 0;              // 32-bit registers (65536)
  int max_registers_per_thread = 0;      // 255
  int max_threads_per_sm = 0;            // sm_120: 1536
  int max_threads_per_block = 1024;
  // Shared memory the system keeps per resident block: the per-SM memory less the opt-in maximum (1 KiB from
  // sm_80 on).
  int shared_reserved_per_block() const { return shared_per_sm - max_shared_per_block; }
};

// Limits of a known arch; nullopt for an unknown one.
std::optional<ArchLimits> LimitsFor(std::string_view arch);
// Every arch in the table, oldest first (an arch-specific target right after its portable arch).
const std::vector<ArchLimits>& AllArchLimits();

// The arch a device of compute capability `cc` (90 for 9.0) tunes and loads kernels for: the table's
// arch-specific target of that cc where there is one (sm_90a), else "sm_<cc>".
std::string DeviceArch(int cc);
// True when cubins built for `arch` run on a device of compute capability `cc` ("sm_90" and "sm_90a" on 90).
bool RunsOn(std::string_view arch, int cc);

// Registers one block of `threads` threads at `registers_per_thread` occupies on an SM, as the hardware
// allocates them (per warp in units of 256, warps rounded up to the 4 SM sub-partitions; cuda_occupancy.h).
long long RegistersAllocatedPerBlock(int registers_per_thread, unsigned threads);

// Empty when a kernel with `usage`, `threads` per block and `dynamic_shared` bytes can run on `limits`;
// otherwise the reason ("shared memory 120000 B > 101376 B max per block on sm_120").
std::string PruneReason(const ArchLimits& limits, const ResourceUsage& usage, unsigned threads,
                        std::size_t dynamic_shared, bool allow_spills);

}  // namespace dflash::tuner
