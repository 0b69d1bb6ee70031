// bf16 <-> float conversions for the host side of every kernel family (inputs, references, checks), and the spacing
// of bf16 values (the unit of the checks' tolerances). Round to nearest even; NaN stays a (quiet) NaN.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
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

// The spacing of bf16 values at |v|: 2^(e - 7) for a normal |v| = 1.m * 2^e; 2^-133 (the subnormal spacing) below
// 2^-126. Read off the exponent bits (the checks call it once per output element: no frexp / ldexp); +inf for an
// infinite or NaN v.
inline double Bf16Ulp(double v) {
  const double a = std::fabs(v);
  if (a < 0x1p-126) return 0x1p-133;
  std::uint64_t u;
  std::memcpy(&u, &a, sizeof u);
  u &= 0x7ff0000000000000ull;  // 2^e (+inf for inf / NaN)
  double power;
  std::memcpy(&power, &u, sizeof power);
  return power * 0x1p-7;
}

}  // namespace dflash
