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
// Ok when the cubin is a CUDA ELF for exactly `arch` ("sm_120"); Corruption otherwise.
Status CheckCubinForArch(std::span<const std::uint8_t> cubin, const std::string& arch);
// "sm_120" -> 120; -1 when malformed.
int ArchToSm(const std::string& arch);

}  // namespace dflash::cache
