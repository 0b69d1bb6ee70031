// Helpers shared by the cache tests: temp directories (tests/temp_dir.h), synthetic cubins (a valid CUDA ELF header
// for a given SM followed by deterministic pseudo-random bytes) and deterministic entries per key index.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cache/entry.h"
#include "tests/temp_dir.h"

namespace dflash::cache::testing {

using dflash::testing::TempDir;

// A blob that passes CheckCubinForArch for sm_<sm>: ELF64 LE, EM_CUDA, ABI v8 flags, no section headers.
inline std::vector<std::uint8_t> FakeCubin(int sm, std::size_t size, std::uint64_t seed) {
  std::vector<std::uint8_t> b(std::max<std::size_t>(size, 64));
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  std::memset(b.data(), 0, 64);
  std::memcpy(b.data(), "\x7f" "ELF", 4);
  b[4] = 2;   // ELFCLASS64
  b[5] = 1;   // little-endian
  b[6] = 1;   // EV_CURRENT
  b[7] = 65;  // ELFOSABI_CUDA
  b[8] = 8;   // ABI version 8: SM in bits 8..15 of e_flags
  const std::uint16_t machine = 190;
  std::memcpy(b.data() + 18, &machine, 2);
  const std::uint32_t flags = 0x06000002u | (static_cast<std::uint32_t>(sm) << 8);
  std::memcpy(b.data() + 48, &flags, 4);
  return b;  // e_shoff = 0, e_shnum = 0: nothing past the blob
}

inline TuningKey KeyFor(int i, const std::string& arch = "sm_120") {
  TuningKey k;
  k.family = "testfam";
  k.source_hash = "src" + std::to_string(i % 3);
  k.compile_options = "-O3";
  k.arch = arch;
  k.nvrtc_version = "13.0";
  k.signature = "{\"tokens\":" + std::to_string(1024 * (i + 1)) + "}";
  return k;
}

// The entry a builder produces for key i: deterministic, so a read-back can be compared bit for bit.
inline Entry EntryFor(int i, const std::string& arch = "sm_120", std::size_t cubin_bytes = 4096) {
  Entry e;
  e.key = KeyFor(i, arch);
  e.config = "{\"block\":" + std::to_string(64 << (i % 3)) + "}";
  e.kernel_names = "{\"k<1>\":\"_Z1kILi1EEvv\"}";
  e.cubin = FakeCubin(std::stoi(arch.substr(3)), cubin_bytes, 1000 + i);
  e.timing = {0.5 + i, 0.01, 25};
  e.provenance.host = "testhost";
  e.provenance.gpu_name = "Test GPU";
  e.provenance.sm_count = 188;
  e.provenance.driver_version = "13000";
  e.provenance.nvrtc_version = "13.0";
  e.provenance.created_at = 1700000000 + i;
  e.provenance.tuning_wall_s = 1.5;
  e.Seal();
  return e;
}

}  // namespace dflash::cache::testing
