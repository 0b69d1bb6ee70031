// The per-arch limits table and the pruning rule. Values from the CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability" (the max shared memory per block is the opt-in maximum, which is the
// per-SM shared memory minus the 1 KiB the system reserves per block), and the allocation rules of the CUDA
// toolkit's cuda_occupancy.h.
#include "tuner/arch_limits.h"

#include <algorithm>

#include "cache/cubin_elf.h"

namespace dflash::tuner {
namespace {

constexpr int kKiB = 1024;
constexpr int kRegistersPerSm = 64 * kKiB;   // every arch in the table
constexpr int kMaxRegistersPerThread = 255;  // every arch in the table (ptxas never allocates more)
constexpr int kWarpSize = 32;
constexpr int kRegisterAllocationUnit = 256;  // registers per warp are allocated in these units
constexpr int kSubPartitionsPerSm = 4;       // warps of a block are accounted in multiples of this

ArchLimits Row(int cc, int max_shared_per_block_kib, int shared_per_sm_kib, int max_threads_per_sm,
               bool arch_specific = false) {
  ArchLimits l;
  l.arch = "sm_" + std::to_string(cc) + (arch_specific ? "a" : "");
  l.arch_specific = arch_specific;
  l.cc = cc;
  l.max_shared_per_block = max_shared_per_block_kib * kKiB;
  l.shared_per_sm = shared_per_sm_kib * kKiB;
  l.registers_per_sm = kRegistersPerSm;
  l.max_registers_per_thread = kMaxRegistersPerThread;
  l.max_threads_per_sm = max_threads_per_sm;
  l.max_threads_per_block = 1024;
  return l;
}

std::vector<ArchLimits> MakeTable() {
  return {
      Row(75, 64, 64, 1024),     // Turing
      Row(80, 163, 164, 2048),   // A100
      Row(86, 99, 100, 1536),    // GA10x
      Row(87, 163, 164, 2048),   // Orin
      Row(89, 99, 100, 1536),    // Ada
      Row(90, 227, 228, 2048),   // Hopper
      Row(90, 227, 228, 2048, /*arch_specific=*/true),  // Hopper's own instructions (wgmma, TMA)
      Row(100, 227, 228, 2048),  // B200
      Row(103, 227, 228, 2048),  // B300
      Row(120, 99, 100, 1536),   // RTX 50 / RTX PRO 6000 Blackwell
      Row(121, 99, 100, 1536),   // DGX Spark (GB10)
  };
}

long long RoundUp(long long x, long long unit) { return (x + unit - 1) / unit * unit; }

}  // namespace

const std::vector<ArchLimits>& AllArchLimits() {
  static const std::vector<ArchLimits> table = MakeTable();  // immutable after first use
  return table;
}

std::optional<ArchLimits> LimitsFor(std::string_view arch) {
  for (const ArchLimits& l : AllArchLimits()) {
    if (l.arch == arch) return l;
  }
  return std::nullopt;
}

std::string DeviceArch(int cc) {
  for (const ArchLimits& l : AllArchLimits()) {
    if (l.cc == cc && l.arch_specific) return l.arch;
  }
  return "sm_" + std::to_string(cc);
}

bool RunsOn(std::string_view arch, int cc) { return cc > 0 && cache::ArchToSm(std::string(arch)) == cc; }

long long RegistersAllocatedPerBlock(int registers_per_thread, unsigned threads) {
  long long per_warp = RoundUp(static_cast<long long>(registers_per_thread) * kWarpSize, kRegisterAllocationUnit);
  long long warps = RoundUp(threads, kWarpSize) / kWarpSize;
  return per_warp * RoundUp(warps, kSubPartitionsPerSm);
}

std::string PruneReason(const ArchLimits& limits, const ResourceUsage& usage, unsigned threads,
                        std::size_t dynamic_shared, bool allow_spills) {
  const std::string on = " on " + limits.arch;
  if (threads == 0) return "a block of 0 threads" + on;
  if (threads > static_cast<unsigned>(limits.max_threads_per_block)) {
    return std::to_string(threads) + " threads per block > " + std::to_string(limits.max_threads_per_block) +
           " max" + on;
  }
  if (threads > static_cast<unsigned>(limits.max_threads_per_sm)) {
    return std::to_string(threads) + " threads per block > " + std::to_string(limits.max_threads_per_sm) +
           " threads per SM" + on;
  }
  if (usage.registers > limits.max_registers_per_thread) {
    return std::to_string(usage.registers) + " registers per thread > " +
           std::to_string(limits.max_registers_per_thread) + " max" + on;
  }
  long long regs = RegistersAllocatedPerBlock(usage.registers, threads);
  if (regs > limits.registers_per_sm) {
    return "registers " + std::to_string(usage.registers) + "/thread x " + std::to_string(threads) +
           " threads need " + std::to_string(regs) + " > " + std::to_string(limits.registers_per_sm) +
           " per SM" + on;
  }
  std::size_t shared = static_cast<std::size_t>(std::max(usage.shared_bytes, 0)) + dynamic_shared;
  if (shared > static_cast<std::size_t>(limits.max_shared_per_block)) {
    return "shared memory " + std::to_string(shared) + " B (" + std::to_string(usage.shared_bytes) +
           " static + " + std::to_string(dynamic_shared) + " dynamic) > " +
           std::to_string(limits.max_shared_per_block) + " B max per block" + on;
  }
  if (!allow_spills && (usage.spill_stores > 0 || usage.spill_loads > 0)) {
    return "spills registers (" + std::to_string(usage.spill_stores) + " B stores, " +
           std::to_string(usage.spill_loads) + " B loads)" + on;
  }
  return {};
}

}  // namespace dflash::tuner
