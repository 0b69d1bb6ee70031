#include "cache/cubin_elf.h"

#include <cstring>

namespace dflash::cache {
namespace {

constexpr std::uint16_t kEmCuda = 190;

template <typename T>
T ReadLe(std::span<const std::uint8_t> b, std::size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;  // x86-64 and aarch64 hosts are little-endian, like the ELF we accept
}

}  // namespace

int ArchToSm(const std::string& arch) {
  if (arch.size() < 4 || arch.compare(0, 3, "sm_") != 0) return -1;
  // An arch-specific target ("sm_90a") runs on exactly the devices of its SM: its ELF names that SM.
  const std::size_t end = arch.back() == 'a' ? arch.size() - 1 : arch.size();
  if (end < 4) return -1;
  int v = 0;
  for (std::size_t i = 3; i < end; ++i) {
    if (arch[i] < '0' || arch[i] > '9') return -1;
    v = v * 10 + (arch[i] - '0');
    if (v > 10000) return -1;
  }
  return v;
}

Result<int> CubinSmVersion(std::span<const std::uint8_t> cubin) {
  if (cubin.size() < 64) return Corruption("cubin too small for an ELF header (" + std::to_string(cubin.size()) + " B)");
  if (std::memcmp(cubin.data(), "\x7f" "ELF", 4) != 0) return Corruption("cubin is not an ELF file");
  if (cubin[4] != 2 || cubin[5] != 1) return Corruption("cubin is not a 64-bit little-endian ELF");
  if (ReadLe<std::uint16_t>(cubin, 18) != kEmCuda) return Corruption("ELF machine is not EM_CUDA");
  const std::uint32_t flags = ReadLe<std::uint32_t>(cubin, 48);
  const int abi_version = cubin[8];
  // CUDA ELF ABI v8 (CUDA 12.8+) moved the SM number to bits 8..15; older ABIs keep it in bits 0..7.
  const int sm = abi_version >= 8 ? static_cast<int>((flags >> 8) & 0xff) : static_cast<int>(flags & 0xff);
  if (sm < 20) return Corruption("cubin names an implausible SM version " + std::to_string(sm));
  // Section header table must lie inside the blob (catches truncation).
  const std::uint64_t shoff = ReadLe<std::uint64_t>(cubin, 40);
  const std::uint16_t shentsize = ReadLe<std::uint16_t>(cubin, 58);
  const std::uint16_t shnum = ReadLe<std::uint16_t>(cubin, 60);
  if (shoff + static_cast<std::uint64_t>(shentsize) * shnum > cubin.size()) {
    return Corruption("cubin is truncated (section headers end past the blob)");
  }
  return sm;
}

Status CheckCubinForArch(std::span<const std::uint8_t> cubin, const std::string& arch) {
  Result<int> sm = CubinSmVersion(cubin);
  if (!sm.ok()) return sm.status();
  const int want = ArchToSm(arch);
  if (want < 0) return InvalidArgument("malformed arch '" + arch + "'");
  if (*sm != want) {
    return Corruption("cubin is built for sm_" + std::to_string(*sm) + " but its key names " + arch);
  }
  return Status::Ok();
}

}  // namespace dflash::cache
