// Helpers for the trainer/checkpoint tests: a per-test temp folder (tests/temp_dir.h), deterministic random tensor
// bytes, and raw safetensors files built byte by byte (so corrupt files can be hand-made without the writer's checks).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace dflash::trainer::testing {

using dflash::testing::TempDir;

inline std::vector<std::byte> RandomBytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
  return b;
}

inline void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// 8-byte little-endian length (header.size() unless given), the header text, then `data_bytes` bytes 0,1,2,...
inline std::string RawSafetensors(const std::string& header, std::size_t data_bytes, std::uint64_t length = ~0ull) {
  const std::uint64_t n = length == ~0ull ? header.size() : length;
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  s += header;
  for (std::size_t i = 0; i < data_bytes; ++i) s.push_back(static_cast<char>(i & 0xff));
  return s;
}

}  // namespace dflash::trainer::testing
