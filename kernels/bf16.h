// bf16 <-> float conversions for the host side of every kernel family (inputs, references, checks).
// Round to nearest even; NaN stays a (quiet) NaN. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace dflash {

inline float Bf16ToFloat(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t FloatToBf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

}  // namespace dflash
