// Sanity check of a cubin: a 64-bit little-endian ELF for EM_CUDA (190) whose header names the SM it was built for.
// Used on every verify and before a blob is handed to the driver. Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace dflash::cache {

// The SM version the cubin targets (e.g. 120 for sm_120), or Corruption explaining what is wrong.
Result<int> CubinSmVersion(std::span<const std::uint8_t> cubin);
// Ok when the cubin is a CUDA ELF for exactly `arch`'s SM ("sm_120"; "sm_90a" and "sm_90" both name SM 90, which
// their ELF headers do not tell apart: the key keeps them apart); Corruption otherwise.
Status CheckCubinForArch(std::span<const std::uint8_t> cubin, const std::string& arch);
// "sm_120" -> 120, "sm_90a" (the arch-specific target) -> 90; -1 when malformed. The one parser of arch names.
int ArchToSm(const std::string& arch);

}  // namespace dflash::cache
